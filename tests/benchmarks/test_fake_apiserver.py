"""The fake API server, driven through the official kubernetes client's real code paths."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from benchmarks.fake_apiserver import BindingRecord, FakeApiError, FakeApiServer, RequestRecord
from benchmarks.fake_apiserver.costs import burn_cpu

NS = "default"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.example.dev"},
    "spec": {
        "group": "scheduling.example.dev",
        "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup",
                  "shortNames": ["pg"]},
        "versions": [
            {"name": "v1alpha1", "served": True, "storage": True,
             "subresources": {"status": {}},
             "schema": {"openAPIV3Schema": {"type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True}}},
        ],
    },
}
GROUP, VERSION, PLURAL = "scheduling.example.dev", "v1alpha1", "podgroups"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval_s=0.1) as fake:
        yield fake


@pytest.fixture
def api(server: FakeApiServer) -> Iterator[Any]:
    with server.client() as api_client:
        yield api_client


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def names(items: list[Any]) -> list[str]:
    return [i["metadata"]["name"] if isinstance(i, dict) else i.metadata.name for i in items]


def raw(response: Any) -> Any:
    return json.loads(response.data)


def bind(core: client.CoreV1Api, name: str, node_name: str) -> Any:
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
    # The client cannot decode the Status a binding answers with into a V1Binding.
    return core.create_namespaced_pod_binding(name, NS, body, _preload_content=False)


def get_path(api: Any, path: str) -> tuple[int, Any]:
    """A GET the typed API has no method for (RESTResponse does not raise on errors)."""
    response = api.call_api(*api.param_serialize("GET", path))
    response.read()
    return response.status, json.loads(response.data)


def events(response: Any) -> Iterator[dict[str, Any]]:
    for line in iter_resp_lines(response):
        if line:
            yield json.loads(line)


# --- CRUD and resource versions ----------------------------------------------------


def test_create_get_list_carry_resource_versions(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    before = server.resource_version
    created = core.create_namespaced_pod(NS, pod("a"))
    assert int(created.metadata.resource_version) == before + 1 == server.resource_version
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending"
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.spec.priority == 0

    generated = core.create_namespaced_pod(
        NS, {"metadata": {"generateName": "worker-"}, "spec": pod("x")["spec"]})
    assert generated.metadata.name.startswith("worker-") and len(generated.metadata.name) == 12

    got = core.read_namespaced_pod("a", NS)
    assert got.metadata.resource_version == created.metadata.resource_version

    listed = raw(core.list_namespaced_pod(NS, _preload_content=False))
    assert listed["kind"] == "PodList" and listed["apiVersion"] == "v1"
    assert listed["metadata"]["resourceVersion"] == str(server.resource_version)
    assert names(listed["items"]) == ["a", generated.metadata.name]
    assert all("kind" not in i and "apiVersion" not in i for i in listed["items"])

    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", NS)
    status = json.loads(missing.value.body)
    assert missing.value.status == 404
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["details"] == {"name": "nope", "kind": "pods"}

    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_pod(NS, pod("a"))
    assert duplicate.value.status == 409
    assert json.loads(duplicate.value.body)["reason"] == "AlreadyExists"

    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_pod(NS, pod("Upper_Case"))
    assert invalid.value.status == 422


def test_http_create_resets_pod_status_but_put_seeds_it(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    running = {**pod("r", nodeName="n1"), "status": {"phase": "Running"}}
    assert core.create_namespaced_pod(NS, running).status.phase == "Pending"
    seeded = server.put({**running, "metadata": {"name": "s", "namespace": NS}})
    assert seeded["status"]["phase"] == "Running"
    assert core.read_namespaced_pod("s", NS).spec.node_name == "n1"
    # put() of an existing object replaces it (MODIFIED), keeping its identity.
    again = server.put({**running, "status": {"phase": "Succeeded"},
                        "metadata": {"name": "s", "namespace": NS}})
    assert again["metadata"]["uid"] == seeded["metadata"]["uid"]
    assert int(again["metadata"]["resourceVersion"]) > int(seeded["metadata"]["resourceVersion"])
    assert server.get("", "pods", NS, "s")["status"]["phase"] == "Succeeded"  # type: ignore[index]


def test_priority_admission(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "high"}, "value": 1000})
    assert core.create_namespaced_pod(NS, pod("a", priorityClassName="high")).spec.priority == 1000
    with pytest.raises(ApiException) as unknown:
        core.create_namespaced_pod(NS, pod("b", priorityClassName="nope"))
    assert unknown.value.status == 403
    with pytest.raises(ApiException) as hand_set:
        core.create_namespaced_pod(NS, pod("c", priority=5))
    assert hand_set.value.status == 403
    with pytest.raises(FakeApiError):
        server.put(pod("d", priorityClassName="nope"))


def test_label_selectors(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a", {"app": "x", "tier": "1"}))
    server.put(pod("b", {"app": "y", "tier": "2"}))
    server.put(pod("c", {"app": "z"}))
    server.put(pod("d"))
    cases = {
        "app=x": ["a"],
        "app==y": ["b"],
        "app!=x": ["b", "c", "d"],
        "tier": ["a", "b"],
        "!tier": ["c", "d"],
        "app in (x, z)": ["a", "c"],
        "app notin (x,z)": ["b", "d"],
        "app in (x,y),tier=2": ["b"],
        "tier>1": ["b"],
    }
    for selector, want in cases.items():
        got = raw(core.list_namespaced_pod(NS, label_selector=selector, _preload_content=False))
        assert names(got["items"]) == want, selector
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(NS, label_selector="app in x")
    assert bad.value.status == 400


def test_field_selectors(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("bound", nodeName="n1"))
    server.put(pod("free"))
    server.put(pod("mine", schedulerName="gangsat"))
    server.put({**pod("done", nodeName="n1"), "status": {"phase": "Succeeded"}})
    cases = {
        "spec.nodeName=": ["free", "mine"],
        "spec.nodeName!=": ["bound", "done"],
        "spec.nodeName==n1,status.phase!=Succeeded": ["bound"],
        "spec.schedulerName=gangsat": ["mine"],
        "status.phase=Pending": ["bound", "free", "mine"],
        "metadata.name=free": ["free"],
        "metadata.namespace=other": [],
    }
    for selector, want in cases.items():
        got = raw(core.list_pod_for_all_namespaces(field_selector=selector,
                                                   _preload_content=False))
        assert names(got["items"]) == want, selector
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(NS, field_selector="spec.priority=3")
    assert bad.value.status == 400


def test_paging_is_consistent_at_the_first_page(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    for i in range(7):
        server.put(pod(f"p{i}"))
    first = raw(core.list_namespaced_pod(NS, limit=3, _preload_content=False))
    version = first["metadata"]["resourceVersion"]
    assert names(first["items"]) == ["p0", "p1", "p2"]
    assert first["metadata"]["remainingItemCount"] == 4
    server.delete("", "pods", NS, "p5")  # neither change shows in the later pages
    server.put(pod("p9"))
    second = raw(core.list_namespaced_pod(NS, limit=3, _continue=first["metadata"]["continue"],
                                          _preload_content=False))
    third = raw(core.list_namespaced_pod(NS, limit=3, _continue=second["metadata"]["continue"],
                                         _preload_content=False))
    assert names(second["items"]) == ["p3", "p4", "p5"]
    assert names(third["items"]) == ["p6"] and "continue" not in third["metadata"]
    assert third["metadata"]["resourceVersion"] == version

    server.expire_history()
    with pytest.raises(ApiException) as expired:
        core.list_namespaced_pod(NS, limit=3, _continue=first["metadata"]["continue"])
    assert expired.value.status == 410


def test_listing_thousands_is_fast(server: FakeApiServer, api: Any) -> None:
    for i in range(3000):
        server.put(pod(f"p{i:04}", nodeName=f"n{i % 100}"))
    started = time.perf_counter()
    listed = raw(client.CoreV1Api(api).list_pod_for_all_namespaces(_preload_content=False))
    assert len(listed["items"]) == 3000
    assert time.perf_counter() - started < 1.0


# --- watch -------------------------------------------------------------------------


def test_watch_from_a_version_replays_only_later_events(server: FakeApiServer,
                                                        api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    since = server.put(pod("b"))["metadata"]["resourceVersion"]
    server.put({**pod("a"), "metadata": {"name": "a", "namespace": NS, "labels": {"v": "2"}}})
    server.delete("", "pods", NS, "b")
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_pod, NS, resource_version=since)
    modified, deleted = next(stream), next(stream)
    w.stop()
    assert (modified["type"], modified["object"].metadata.name) == ("MODIFIED", "a")
    assert modified["raw_object"]["kind"] == "Pod"
    assert modified["raw_object"]["apiVersion"] == "v1"
    assert (deleted["type"], deleted["object"].metadata.name) == ("DELETED", "b")
    assert int(deleted["object"].metadata.resource_version) == server.resource_version


def test_watch_from_a_version_the_server_never_reached_is_a_504(
    server: FakeApiServer, api: Any
) -> None:
    # As kube-apiserver's watch cache: no event of another history, a 504 whose cause says
    # why (client-go's reflector, and gangsat's, list afresh on it).
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    ahead = server.resource_version + 1000
    with pytest.raises(ApiException) as refused:
        core.list_namespaced_pod(NS, watch=True, resource_version=str(ahead))
    assert refused.value.status == 504
    assert "ResourceVersionTooLarge" in refused.value.body


def test_watch_from_nothing_lists_then_streams(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    server.put({**pod("other"), "metadata": {"name": "other", "namespace": "kube-system"}})
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_pod, NS)
    first = next(stream)
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "a")
    server.put(pod("b"))
    live = next(stream)
    w.stop()
    assert (live["type"], live["object"].metadata.name) == ("ADDED", "b")


def test_watch_sees_objects_leave_and_enter_its_selector(server: FakeApiServer,
                                                         api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    response = core.list_namespaced_pod(NS, watch=True, field_selector="spec.nodeName=",
                                        _preload_content=False)
    stream = events(response)
    assert next(stream)["type"] == "ADDED"
    assert bind(core, "a", "n1").status == 201
    left = next(stream)
    # As the watch cache does: the last matching state, at the binding's version.
    assert left["type"] == "DELETED"
    assert "nodeName" not in left["object"]["spec"]
    assert left["object"]["metadata"]["resourceVersion"] == str(server.resource_version)
    server.put(pod("b", nodeName="n1"))  # never matches: not seen
    server.put(pod("c"))
    assert next(stream)["object"]["metadata"]["name"] == "c"
    response.close()


def test_expired_version_is_a_410_error_event(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    old = server.put(pod("a"))["metadata"]["resourceVersion"]
    server.put(pod("b"))
    server.expire_history()
    response = core.list_namespaced_pod(NS, watch=True, resource_version=old,
                                        _preload_content=False)
    assert response.status == 200
    lines = list(events(response))  # then the server ends the stream
    assert len(lines) == 1 and lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {old} (")

    # Watch().stream retries a 410 once from the same version, then raises.
    with pytest.raises(ApiException) as gone:
        list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=old))
    assert gone.value.status == 410
    # From the current version nothing was lost: the watch is accepted.
    current = str(server.resource_version)
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_pod, NS, resource_version=current)
    server.put(pod("c"))
    assert next(stream)["object"].metadata.name == "c"
    w.stop()


def test_history_window_expires_old_versions(api: Any) -> None:
    with FakeApiServer(history=3) as small, small.client() as small_api:
        core: Any = client.CoreV1Api(small_api)
        first = small.put(pod("p0"))["metadata"]["resourceVersion"]
        for i in range(1, 5):
            small.put(pod(f"p{i}"))
        response = core.list_namespaced_pod(NS, watch=True, resource_version=first,
                                            _preload_content=False)
        assert [e["type"] for e in events(response)] == ["ERROR"]
        recent = str(small.resource_version - 2)
        response = core.list_namespaced_pod(NS, watch=True, resource_version=recent,
                                            _preload_content=False)
        stream = events(response)
        assert [next(stream)["object"]["metadata"]["name"] for _ in range(2)] == ["p3", "p4"]
        response.close()


def test_bookmarks_carry_the_current_version(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    response = core.list_namespaced_pod(NS, watch=True, allow_watch_bookmarks=True,
                                        resource_version=str(server.resource_version),
                                        _preload_content=False)
    stream = events(response)
    server.put(pod("a"))
    added = next(stream)
    assert added["type"] == "ADDED"
    bookmark = next(stream)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["kind"] == "Pod" and bookmark["object"]["apiVersion"] == "v1"
    assert bookmark["object"]["metadata"]["resourceVersion"] == str(server.resource_version)
    response.close()


def test_timeout_ends_the_stream_cleanly(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    started = time.monotonic()
    seen = list(watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=1))
    assert 0.9 < time.monotonic() - started < 3
    assert [e["type"] for e in seen] == ["ADDED"]
    # The connection survived the stream's end and serves the next request.
    assert names(core.list_namespaced_pod(NS).items) == ["a"]


def test_drop_watches_breaks_the_connection(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    stream = watch.Watch().stream(core.list_namespaced_pod, NS)
    assert next(stream)["type"] == "ADDED"
    server.drop_watches()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        next(stream)


# --- binding, updates, patches, deletes -------------------------------------------


def test_binding(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    response = bind(core, "a", "node-1")  # the node need not exist
    assert response.status == 201
    assert raw(response) == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success", "code": 201}
    bound = core.read_namespaced_pod("a", NS)
    assert bound.spec.node_name == "node-1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]

    with pytest.raises(ApiException) as again:
        bind(core, "a", "node-2")
    assert again.value.status == 409
    assert 'pod a is already assigned to node "node-1"' in json.loads(again.value.body)["message"]
    with pytest.raises(ApiException) as gone:
        bind(core, "missing", "node-1")
    assert gone.value.status == 404

    server.put(pod("b"))
    via_collection = core.create_namespaced_binding(
        NS, {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "node-3"}},
        _preload_content=False)
    assert via_collection.status == 201
    assert server.get("", "pods", NS, "b")["spec"]["nodeName"] == "node-3"  # type: ignore[index]

    assert RequestRecord("create", "", "pods", "binding", NS, "a") in server.requests
    assert RequestRecord("create", "", "bindings", None, NS, None) in server.requests
    # Every Binding, with its answer.
    assert server.bindings == [
        BindingRecord(f"{NS}/a", "node-1", 201),
        BindingRecord(f"{NS}/a", "node-2", 409),
        BindingRecord(f"{NS}/missing", "node-1", 404),
        BindingRecord(f"{NS}/b", "node-3", 201),
    ]


def test_a_gated_pod_or_one_being_deleted_is_never_bound(
    server: FakeApiServer, api: Any
) -> None:
    """As kube-apiserver's pod registry: each a 409 Conflict on pods/binding (gangsat reads
    the pod then, and counts the bind failed), never bound."""
    core: Any = client.CoreV1Api(api)
    gated = pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "kueue"}]
    server.put(gated)
    # Held by a Job's tracking finalizer, as a deleted one is stored (a put replaces the
    # stored object whole; a create would drop the deletionTimestamp).
    leaving = server.put(pod("leaving"))
    leaving["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    server.put(leaving)
    for name, why in (
        ("gated", "pod gated has non-empty .spec.schedulingGates"),
        ("leaving", "pod leaving is being deleted, cannot be assigned to a host"),
    ):
        with pytest.raises(ApiException) as refused:
            bind(core, name, "node-1")
        assert refused.value.status == 409
        message = json.loads(refused.value.body)["message"]
        assert message == f'Operation cannot be fulfilled on pods/binding "{name}": {why}'
        assert not (server.get("", "pods", NS, name) or {})["spec"].get("nodeName")


def test_pod_updates_cannot_bind(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    with pytest.raises(ApiException) as forbidden:
        core.patch_namespaced_pod("a", NS, {"spec": {"nodeName": "n1"}})
    assert forbidden.value.status == 422
    # The main resource ignores status; labels still change.
    current = core.read_namespaced_pod("a", NS)
    current.metadata.labels = {"x": "y"}
    current.status.phase = "Running"
    updated = core.replace_namespaced_pod("a", NS, current)
    assert updated.metadata.labels == {"x": "y"} and updated.status.phase == "Pending"


def test_lease_update_with_a_stale_version_conflicts(server: FakeApiServer, api: Any) -> None:
    leases: Any = client.CoordinationV1Api(api)
    created = leases.create_namespaced_lease(
        NS, {"metadata": {"name": "gangsat"}, "spec": {"holderIdentity": "a"}})
    stale = created.metadata.resource_version
    created.spec.holder_identity = "b"
    renewed = leases.replace_namespaced_lease("gangsat", NS, created)
    assert renewed.spec.holder_identity == "b"
    assert int(renewed.metadata.resource_version) > int(stale)

    # Writing back exactly what is stored is no write: same version, no event.
    same = leases.replace_namespaced_lease("gangsat", NS, renewed)
    assert same.metadata.resource_version == renewed.metadata.resource_version

    created.spec.holder_identity = "c"
    with pytest.raises(ApiException) as conflict:
        leases.replace_namespaced_lease("gangsat", NS, created)  # still at the stale version
    status = json.loads(conflict.value.body)
    assert conflict.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "gangsat": the object '
        "has been modified; please apply your changes to the latest version and try again")


def test_concurrent_lease_updates_have_one_winner_per_version(server: FakeApiServer,
                                                              api: Any) -> None:
    leases: Any = client.CoordinationV1Api(api)
    leases.create_namespaced_lease(NS, {"metadata": {"name": "l"}, "spec": {}})
    rounds = 20
    barrier = threading.Barrier(2)
    wins: dict[str, list[str]] = {"a": [], "b": []}

    def contend(identity: str) -> None:
        for n in range(rounds):
            barrier.wait()
            lease = leases.read_namespaced_lease("l", NS)
            barrier.wait()  # both now hold the same version
            # A change each time: an update that changes nothing succeeds without a write.
            lease.spec.holder_identity = f"{identity}-{n}"
            try:
                wins[identity].append(
                    leases.replace_namespaced_lease("l", NS, lease).metadata.resource_version)
            except ApiException as e:
                assert e.status == 409

    threads = [threading.Thread(target=contend, args=(i,)) for i in wins]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(wins["a"]) + len(wins["b"]) == rounds
    assert not set(wins["a"]) & set(wins["b"])


def test_patch_content_types(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put({**pod("a"), "status": {"phase": "Pending", "conditions": [
        {"type": "Ready", "status": "False"}]}})
    # A dict body: the client sends a strategic merge patch, which merges conditions by type.
    core.patch_namespaced_pod_status("a", NS, {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}})
    assert server.requests[-1].content_type == "application/strategic-merge-patch+json"
    conditions = server.get("", "pods", NS, "a")["status"]["conditions"]  # type: ignore[index]
    assert [(c["type"], c["status"]) for c in conditions] == [
        ("Ready", "False"), ("PodScheduled", "False")]

    # A list body: the client sends a JSON patch.
    core.patch_namespaced_pod("a", NS, [{"op": "add", "path": "/metadata/labels/k", "value": "v"}])
    assert server.requests[-1].content_type == "application/json-patch+json"
    assert core.read_namespaced_pod("a", NS).metadata.labels == {"k": "v"}
    with pytest.raises(ApiException) as failed_test:
        core.patch_namespaced_pod("a", NS, [{"op": "test", "path": "/metadata/name",
                                             "value": "b"}])
    assert failed_test.value.status == 422

    # A plain merge patch replaces lists whole.
    core.patch_namespaced_pod_status(
        "a", NS, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        _content_type="application/merge-patch+json")
    conditions = server.get("", "pods", NS, "a")["status"]["conditions"]  # type: ignore[index]
    assert [(c["type"], c["status"]) for c in conditions] == [("Ready", "True")]


def test_malformed_json_is_a_400(server: FakeApiServer) -> None:
    server.put(pod("a"))
    request = urllib.request.Request(
        f"{server.url}/api/v1/namespaces/default/pods/a", data=b"{not json", method="PATCH",
        headers={"Content-Type": "application/merge-patch+json"})
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(request, timeout=5)
    assert bad.value.code == 400
    assert json.loads(bad.value.read())["reason"] == "BadRequest"


def test_delete(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    uid = server.put(pod("a"))["metadata"]["uid"]
    with pytest.raises(ApiException) as precondition:
        core.delete_namespaced_pod("a", NS, body={"preconditions": {"uid": "other"}})
    assert precondition.value.status == 409
    deleted = raw(core.delete_namespaced_pod("a", NS, body={"preconditions": {"uid": uid}},
                                             _preload_content=False))
    assert deleted["kind"] == "Pod" and deleted["metadata"]["name"] == "a"  # pods return it
    assert server.get("", "pods", NS, "a") is None
    with pytest.raises(ApiException) as missing:
        core.delete_namespaced_pod("a", NS)
    assert missing.value.status == 404

    leases: Any = client.CoordinationV1Api(api)
    leases.create_namespaced_lease(NS, {"metadata": {"name": "l"}, "spec": {}})
    status = raw(leases.delete_namespaced_lease("l", NS, _preload_content=False))
    assert (status["kind"], status["status"]) == ("Status", "Success")  # the others a Status


# --- custom resources --------------------------------------------------------------


def test_crd_registration_and_custom_objects(server: FakeApiServer, api: Any) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    groups = {g.name: [v.version for v in g.versions]
              for g in client.ApisApi(api).get_api_versions().groups}
    assert groups[GROUP] == [VERSION]
    _, resources = get_path(api, f"/apis/{GROUP}/{VERSION}")
    assert {r["name"] for r in resources["resources"]} == {"podgroups", "podgroups/status"}

    custom: Any = client.CustomObjectsApi(api)
    w = watch.Watch()
    stream = w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                      resource_version=str(server.resource_version))
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
            "metadata": {"name": "g"}, "spec": {"minMember": 2}, "status": {"phase": "X"}}
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert "status" not in created  # a status subresource: create drops status
    assert created["metadata"]["generation"] == 1
    added = next(stream)
    w.stop()
    assert added["type"] == "ADDED" and added["object"]["kind"] == "PodGroup"

    listed = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert listed["kind"] == "PodGroupList"
    assert listed["items"][0]["kind"] == "PodGroup"  # custom list items keep their type
    assert listed["items"][0]["apiVersion"] == f"{GROUP}/{VERSION}"

    with_status = {**created, "status": {"phase": "Pending"}}
    put = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "g",
                                                         with_status)
    assert put["status"] == {"phase": "Pending"} and put["metadata"]["generation"] == 1
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "g", {"status": {"phase": "Running"}})
    assert server.requests[-1].content_type == "application/merge-patch+json"
    assert patched["status"] == {"phase": "Running"}

    # The main resource ignores status and counts spec changes in generation.
    main = {**patched, "spec": {"minMember": 3}, "status": {"phase": "Lost"}}
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "g", main)
    assert replaced["status"] == {"phase": "Running"}
    assert replaced["metadata"]["generation"] == 2

    with pytest.raises(ApiException) as unconditional:
        custom.replace_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "g", {**body, "metadata": {"name": "g"}})
    assert unconditional.value.status == 422  # custom resources need a resourceVersion
    with pytest.raises(ApiException) as strategic:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "g", {"spec": {}},
            _content_type="application/strategic-merge-patch+json")
    assert strategic.value.status == 415


# --- controls and plumbing ---------------------------------------------------------


def test_fail_injection(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.fail("GET", r"^/api/v1/nodes$", 500, times=2)
    server.fail("POST", r"/binding$", 429, reason="TooManyRequests")
    for _ in range(2):
        with pytest.raises(ApiException) as failed:
            core.list_node()
        assert failed.value.status == 500
        assert json.loads(failed.value.body)["reason"] == "InternalError"
    assert core.list_node().items == []
    server.put(pod("a"))
    with pytest.raises(ApiException) as throttled:
        bind(core, "a", "n1")
    assert throttled.value.status == 429
    assert throttled.value.headers["Retry-After"] == "1"
    assert bind(core, "a", "n1").status == 201


def test_requests_record_kubernetes_verbs(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_node(node("n1"))
    core.read_node("n1")
    core.list_node()
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    core.replace_node_status("n1", core.read_node("n1"))
    core.delete_node("n1")
    response = core.list_pod_for_all_namespaces(watch=True, timeout_seconds=1,
                                                _preload_content=False)
    response.close()
    verbs = [(r.verb, r.group, r.resource, r.subresource, r.namespace, r.name)
             for r in server.requests]
    assert verbs == [
        ("create", "", "nodes", None, None, None),
        ("get", "", "nodes", None, None, "n1"),
        ("list", "", "nodes", None, None, None),
        ("patch", "", "nodes", None, None, "n1"),
        ("get", "", "nodes", None, None, "n1"),
        ("update", "", "nodes", "status", None, "n1"),
        ("delete", "", "nodes", None, None, "n1"),
        ("watch", "", "pods", None, None, None),
    ]


def test_hooks_run_before_each_request(server: FakeApiServer, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(pod("a"))
    seen: list[tuple[str, str]] = []

    def delete_first(method: str, path: str) -> None:
        seen.append((method, path))
        if path.endswith("/binding") and server.get("", "pods", NS, "a"):
            server.delete("", "pods", NS, "a")  # the pod vanishes mid-cycle

    server.hooks.append(delete_first)
    with pytest.raises(ApiException) as gone:
        bind(core, "a", "n1")
    assert gone.value.status == 404
    assert seen == [("POST", "/api/v1/namespaces/default/pods/a/binding")]


def test_discovery(server: FakeApiServer, api: Any) -> None:
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    core = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "pods/binding", "pods/eviction", "pods/status", "nodes", "namespaces",
            "events", "bindings"} <= set(core)
    assert core["pods"].namespaced and not core["nodes"].namespaced
    assert core["pods"].short_names == ["po"] and "watch" in core["pods"].verbs
    assert core["pods/binding"].verbs == ["create"]
    groups = client.ApisApi(api).get_api_versions().groups
    assert {g.name for g in groups} == {"events.k8s.io", "coordination.k8s.io", "policy",
                                       "scheduling.k8s.io", "apiextensions.k8s.io",
                                       "storage.k8s.io"}
    assert all(g.preferred_version.version == "v1" for g in groups)
    leases: Any = client.CoordinationV1Api(api).get_api_resources().resources
    assert [(r.name, r.kind) for r in leases] == [("leases", "Lease")]
    assert client.VersionApi(api).get_code().major == "1"
    for path in ("/apis/nope.example.dev", "/apis/coordination.k8s.io/v9",
                 "/api/v1/widgets", "/apis/coordination.k8s.io/v1/namespaces/x/widgets"):
        code, status = get_path(api, path)
        assert (code, status["reason"]) == (404, "NotFound"), path


def test_write_kubeconfig(server: FakeApiServer, tmp_path: Path) -> None:
    server.put(node("n1"))
    path = server.write_kubeconfig(tmp_path / "kube" / "config", namespace="team-a")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == server.url
    with config.new_client_from_config(config_file=str(path)) as api_client:
        assert names(client.CoreV1Api(api_client).list_node().items) == ["n1"]
    _, context = config.list_kube_config_contexts(config_file=str(path))
    assert context["context"]["namespace"] == "team-a"


def test_command_line_runs_in_the_foreground(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fake_apiserver", "--port", "0",
         "--kubeconfig-out", str(kubeconfig), "--latency-ms", "1", "--cpu-ms", "1"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/version", timeout=5) as response:
            assert json.loads(response.read())["major"] == "1"
        assert json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"] == url
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


# --- request costs -----------------------------------------------------------------


def test_cpu_cost_is_burnt_in_every_non_watch_request() -> None:
    with FakeApiServer(cpu_ms_per_request=20) as fake, fake.client() as api_client:
        core: Any = client.CoreV1Api(api_client)
        before = time.process_time()  # the fake's handler threads are this process's
        core.list_node()
        core.create_node(node("n1"))
        core.read_node("n1")
        with urllib.request.urlopen(f"{fake.url}/version", timeout=10) as response:
            assert json.loads(response.read())["major"] == "1"
        spent = time.process_time() - before
    assert spent >= 4 * 0.015


def test_a_watch_costs_no_cpu() -> None:
    with FakeApiServer(cpu_ms_per_request=3000) as fake:
        before = time.process_time()
        url = f"{fake.url}/api/v1/pods?watch=true&timeoutSeconds=0.2"
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()  # the initial ADDED events (none), then the end of the stream
        spent = time.process_time() - before
    assert spent < 1.0


def test_the_cpu_burn_lets_go_of_the_gil() -> None:
    """Another thread runs Python all through a burn: the burn takes a core of its own, as a
    separate API server would, rather than taking turns with the fake's threads. The switch
    interval is raised so that a burn holding the GIL would hold it to its end."""
    done = threading.Event()

    def burn() -> None:
        burn_cpu(0.3)
        done.set()

    burner = threading.Thread(target=burn)
    rounds = 0
    interval = sys.getswitchinterval()
    before = time.process_time()
    sys.setswitchinterval(5.0)
    try:
        burner.start()
        while not done.wait(0.001):
            rounds += 1
        burner.join()
    finally:
        sys.setswitchinterval(interval)
    assert time.process_time() - before >= 0.3
    assert rounds >= 20


def test_an_event_is_serialised_once_for_every_watch_that_sends_it_unchanged() -> None:
    from benchmarks.fake_apiserver.objects import _Resource
    from benchmarks.fake_apiserver.selectors import _Selector
    from benchmarks.fake_apiserver.watch import _Event, _Watcher

    pods = _Resource("", ["v1"], "pods", "Pod", True, True, ("po",), "pod", "PodList", {})
    labelled = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"x": "1"}}}
    event = _Event("MODIFIED", 7, labelled, {**labelled, "metadata": {"name": "a"}})
    everyone = [_Watcher(pods, None, _Selector(), "v1", None) for _ in range(3)]
    sent = {w.encode(event) for w in everyone}
    assert len(sent) == 1 and list(event.encoded) == ["v1"]  # one encoding, shared
    # A watch with a selector sees the transition as its own event: not the shared bytes.
    selective = _Watcher(pods, None, _Selector(labels=(("=", "x", "1"),)), "v1", None)
    added = json.loads(selective.encode(event))
    assert added["type"] == "ADDED" and sent != {selective.encode(event)}


def test_the_eviction_budget_check_is_kube_apiservers(server: FakeApiServer, api: Any) -> None:
    """Pending pods skip the budget; maxUnavailable and percentages count; unready pods
    are not healthy; two budgets over one pod are a Status of code 500, which the create
    handler sends with its HTTP 201 (pkg/registry/core/pod/storage/eviction.go returns it
    as its result), the pod left in place."""
    server.put(node("n1"))
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    for i in range(3):
        server.put({**pod(f"r-{i}", {"app": "r"}, nodeName="n1"), "status": ready})
    server.put({**pod("p-0", {"app": "r"}, nodeName="n1"), "status": {"phase": "Pending"}})

    def budget(name: str, **spec: Any) -> None:
        selector = {"matchLabels": {"app": "r"}}
        server.put(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": NS},
                "spec": {**spec, "selector": selector},
            }
        )

    budget("b", maxUnavailable=0)
    _evict(api, "p-0")  # Pending: evicted without the budget
    with pytest.raises(ApiException) as none_allowed:
        _evict(api, "r-0")
    assert none_allowed.value.status == 429
    budget("b", minAvailable="67%")  # of 3: 2.01, rounded up to 3
    with pytest.raises(ApiException):
        _evict(api, "r-0")
    budget("b", minAvailable="50%")  # 2 of 3 must stay: one may go
    budget("c", maxUnavailable=1)
    options = client.V1DeleteOptions()
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name="r-0", namespace=NS), delete_options=options
    )
    two = client.CoreV1Api(api).create_namespaced_pod_eviction(
        "r-0", NS, body, _preload_content=False
    )
    assert two.status == 201
    answer = json.loads(two.data)
    assert (answer["kind"], answer["status"], answer["code"]) == ("Status", "Failure", 500)
    assert "more than one PodDisruptionBudget" in answer["message"]
    assert server.get("", "pods", NS, "r-0") is not None  # not evicted
    server.delete("policy", "poddisruptionbudgets", NS, "c")
    unready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    server.put({**pod("r-2", {"app": "r"}, nodeName="n1"), "status": unready})
    with pytest.raises(ApiException):  # 2 healthy, 2 must stay
        _evict(api, "r-0")


def _evict(api: Any, name: str, uid: str | None = None, dry_run: bool = False) -> None:
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=NS), delete_options=options
    )
    extra = {"dry_run": "All"} if dry_run else {}
    client.CoreV1Api(api).create_namespaced_pod_eviction(name, NS, body, **extra)


def test_a_dry_run_eviction_checks_as_an_eviction_and_changes_nothing(
    server: FakeApiServer, api: Any
) -> None:
    server.put(node("n1"))
    for i in range(2):
        server.put({**pod(f"d-{i}", {"app": "d"}, nodeName="n1"), "status": {"phase": "Running"}})
    server.put(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "d", "namespace": NS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "d"}}},
        }
    )
    before = server.get("", "pods", NS, "d-0")
    _evict(api, "d-0", dry_run=True)  # one of two may go
    assert server.get("", "pods", NS, "d-0") == before  # ... but nothing went
    _evict(api, "d-1", dry_run=True)  # the dry run spent nothing of the budget
    with pytest.raises(ApiException) as stale:
        _evict(api, "d-0", uid="not-its-uid", dry_run=True)
    assert stale.value.status == 409
    with pytest.raises(ApiException) as missing:
        _evict(api, "nope", dry_run=True)
    assert missing.value.status == 404
    _evict(api, "d-0")
    with pytest.raises(ApiException) as budget:
        _evict(api, "d-1", dry_run=True)  # d-0 terminating: the budget says no
    assert budget.value.status == 429
    with pytest.raises(ApiException) as other:  # other dry runs are not faked
        client.CoreV1Api(api).delete_namespaced_pod("d-1", NS, dry_run="All")
    assert other.value.status == 400
    assert server.get("", "pods", NS, "d-1") is not None


def test_eviction_is_graceful_budgeted_and_preconditioned(server: FakeApiServer, api: Any) -> None:
    server.put(node("n1"))
    for i in range(3):
        running = pod(f"w-{i}", {"app": "w"}, nodeName="n1", terminationGracePeriodSeconds=1)
        server.put({**running, "status": {"phase": "Running"}})
    server.put(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "w", "namespace": NS},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "w"}}},
        }
    )
    with pytest.raises(ApiException) as missing:
        _evict(api, "nope")
    assert missing.value.status == 404
    with pytest.raises(ApiException) as stale:
        _evict(api, "w-0", uid="not-its-uid")
    assert stale.value.status == 409
    _evict(api, "w-0")  # 3 running, 2 must stay: allowed
    evicted = server.get("", "pods", NS, "w-0")
    assert evicted is not None and evicted["metadata"]["deletionTimestamp"]
    assert evicted["spec"]["nodeName"] == "n1"  # holds its node while it terminates
    with pytest.raises(ApiException) as budget:
        _evict(api, "w-1")  # w-0 terminating: only 2 running, the budget says no
    assert budget.value.status == 429
    deadline = time.monotonic() + 5
    while server.get("", "pods", NS, "w-0") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.get("", "pods", NS, "w-0") is None  # deleted once its grace ended


def test_a_bound_pods_delete_is_graceful_an_unbound_ones_immediate(
    server: FakeApiServer, api: Any
) -> None:
    core: Any = client.CoreV1Api(api)
    server.put(node("n1"))
    server.put(pod("bound", nodeName="n1", terminationGracePeriodSeconds=1))
    server.put(pod("pending"))
    core.delete_namespaced_pod("bound", NS)
    leaving = server.get("", "pods", NS, "bound")
    assert leaving is not None and leaving["metadata"]["deletionTimestamp"]
    assert leaving["spec"]["nodeName"] == "n1"  # holds its node until its kubelet is done
    core.delete_namespaced_pod("pending", NS)
    assert server.get("", "pods", NS, "pending") is None
    deadline = time.monotonic() + 5
    while server.get("", "pods", NS, "bound") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.get("", "pods", NS, "bound") is None


def test_a_delete_with_grace_zero_in_the_query_is_immediate(
    server: FakeApiServer, api: Any
) -> None:
    # As the client sends it (grace_period_seconds): a job's finished pods, deleted at once.
    server.put(node("n1"))
    server.put(pod("done", nodeName="n1", terminationGracePeriodSeconds=30))
    client.CoreV1Api(api).delete_namespaced_pod("done", NS, grace_period_seconds=0)
    assert server.get("", "pods", NS, "done") is None
