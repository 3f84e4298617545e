"""The binder's worker pool: binds go out in order from a few workers, and a bug in one
bind leaves that pod pending without losing the others."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from adapter.kube import binder as binder_module
from adapter.kube.binder import Binder
from adapter.kube.cluster import KubeCluster
from adapter.kube.sending import POOL_CONNECT_RETRIES
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import (
    apply,
    binds,
    bound_pods,
    gang_pods,
    node,
    podgroup,
    wait_until,
)
from tests.adapter.kube.test_kube_cluster import FAST, seen


def test_every_placement_is_bound_by_fewer_workers_than_pods(
    server: FakeApiServer, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(server, [node("n1", cpu="64", memory="64Gi"), *gang_pods("solo", 40, cpu="1")])
    seen(cluster, server)
    placements = [(f"default/solo-{i}", "n1") for i in range(40)]
    original = Binder._bind_one
    threads: set[str] = set()

    def noted(self: Binder, *args: Any) -> Any:
        threads.add(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(Binder, "_bind_one", noted)
    cluster.binder.threads = 2
    assert cluster.bind(placements) == {}
    assert set(bound_pods(server)) == {p for p, _ in placements}
    assert sorted(binds(server)) == sorted(p for p, _ in placements)  # each once
    assert 1 <= len(threads) <= 2


def test_a_bug_in_one_bind_leaves_that_pod_pending_and_binds_the_rest(
    server: FakeApiServer, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(server, [node("n1", cpu="8"), *gang_pods("solo", 3, cpu="1")])
    seen(cluster, server)
    original = Binder._bind_one

    def flaky(self: Binder, pod: str, *args: Any) -> Any:
        if pod == "default/solo-1":
            raise KeyError("a bug")
        return original(self, pod, *args)

    monkeypatch.setattr(Binder, "_bind_one", flaky)
    failures = cluster.bind([(f"default/solo-{i}", "n1") for i in range(3)])
    assert set(failures) == {"default/solo-1"}
    assert not failures["default/solo-1"].uncertain  # nothing was sent: not evicted
    assert set(bound_pods(server)) == {"default/solo-0", "default/solo-2"}
    # Forgotten, not assumed: the next snapshot has it pending again.
    wait_until(lambda: "default/solo-1" not in cluster.cache.assumed())
    pending = {p.name for p in cluster.snapshot().pending_pods()}
    assert "default/solo-1" in pending


def test_a_bind_of_unknown_outcome_stays_assumed_then_lapses_to_pending(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    import time

    from adapter.kube.cache import DOUBT_TTL_S

    apply(server, [node("n1", cpu="8"), *gang_pods("solo", 1, cpu="1")])
    seen(cluster, server)
    # Every bind answer is a 503 and the pod cannot be read back: did it land?
    server.fail("POST", r"/pods/solo-0/binding$", 503, times=1000)
    server.fail("GET", r"/pods/solo-0$", 503, times=1000)
    cluster.binder.retry_budget_s, cluster.binder.backoff_s = 0.2, 0.01
    failures = cluster.bind([("default/solo-0", "n1")])
    assert failures["default/solo-0"].uncertain
    # Still assumed (a bind that landed must not be sent elsewhere)...
    assert cluster.cache.assumed() == {"default/solo-0": "n1"}
    assert cluster.lapse_doubts() == 0
    # ...until no watch event has shown it bound for DOUBT_TTL_S: then pending again,
    # and a cycle is due (the version moved), rather than the pod waiting forever.
    before = cluster.version
    assert cluster.cache.lapse(time.monotonic() + DOUBT_TTL_S + 1) == 1
    assert cluster.version != before and cluster.cache.assumed() == {}
    assert "default/solo-0" in {p.name for p in cluster.snapshot().pending_pods()}


def test_a_doubted_bind_the_watch_shows_landed_is_settled_not_lapsed(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    import time

    apply(server, [node("n1", cpu="8"), *gang_pods("solo", 1, cpu="1")])
    seen(cluster, server)
    cluster.cache.assume("default/solo-0", "n1")
    cluster.cache.doubt("default/solo-0", time.monotonic())
    from adapter.kube.binder import binding_body, post_binding
    from adapter.kube.connections import Connections

    body = binding_body("default", "solo-0", "n1")
    connections = Connections(server.client())
    try:
        post_binding(connections, "default", "solo-0", body)  # landed
    finally:
        connections.close()
    wait_until(lambda: cluster.cache.assumed() == {}, what="the bind seen")
    assert cluster.cache.sizes()["doubted"] == 0
    assert cluster.cache.lapse(time.monotonic() + 3600) == 0


def test_no_bind_or_delete_can_connect_after_the_leadership_left(
    server: FakeApiServer, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With 0.4 s of lease left, a connect of 5 s (and the pool's own connect retries)
    # could reach the server seconds after another replica took over.
    apply(server, [node("n1"), *gang_pods("solo", 1)])
    seen(cluster, server)
    left = 0.4
    binder = Binder(cluster.api, cluster.cache, fence=lambda: left, threads=1)
    pool = binder.api.rest_client.pool_manager
    sent: list[dict[str, Any]] = []
    original = pool.request
    connections = binder.connections
    posted: list[tuple[float, float, float]] = []
    original_post = connections.post

    def recorded(*args: Any, **kwargs: Any) -> Any:
        sent.append(kwargs)
        return original(*args, **kwargs)

    def post(path: str, body: bytes, connect_s: float, read_s: float, send_by: float) -> None:
        posted.append((connect_s, read_s, send_by - time.monotonic()))
        original_post(path, body, connect_s, read_s, send_by)

    monkeypatch.setattr(pool, "request", recorded)
    monkeypatch.setattr(connections, "post", post)
    try:
        assert binder.bind([("default/solo-0", "n1")]) == {}
        # One connect, never retried, the request sent while the lease lasts or not at
        # all, and the answer awaited no longer than the lease.
        [(connect_s, read_s, send_within)] = posted
        assert connect_s <= left and read_s <= left and 0 < send_within <= left
        assert not connections.via_pool and sent == []
        assert binder.delete(["default/solo-0"], "test") == {}
        mark, delete = sent  # the DisruptionTarget condition, then the delete
        # The pool may connect 1 + POOL_CONNECT_RETRIES times: all of it within ``left``.
        for request in (mark, delete):
            assert request["timeout"].connect_timeout * (1 + POOL_CONNECT_RETRIES) <= left + 1e-9
        assert mark["timeout"].connect_timeout + mark["timeout"].read_timeout <= left
    finally:
        binder.close()


class _Lease:
    def __init__(self) -> None:
        self.expires = time.monotonic() + 60.0

    def left(self) -> float:
        return self.expires - time.monotonic()


def _solo_with_a_fenced_binder(
    server: FakeApiServer, cluster: KubeCluster
) -> tuple[Binder, _Lease]:
    """Pod solo-0, pending, and a one-thread binder fenced by a lease of 60 s (tests
    shorten it), retrying for 0.1 s."""
    apply(server, [node("n1"), *gang_pods("solo", 1)])
    seen(cluster, server)
    lease = _Lease()
    binder = Binder(cluster.api, cluster.cache, fence=lease.left, threads=1, retry_budget_s=0.1)
    return binder, lease


def test_a_slow_delete_is_not_sent_again_by_the_connection_pool(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # urllib3's default Retry(3) sent a DELETE whose answer was late three times more,
    # each with a fresh read timeout: past the fence, after the lease had run out.
    binder, lease = _solo_with_a_fenced_binder(server, cluster)
    arrivals: list[float] = []

    def slow(method: str, path: str) -> None:
        if method == "DELETE" and path.endswith("/pods/solo-0"):
            arrivals.append(time.monotonic())
            time.sleep(1.2)  # longer than the read timeout the fence leaves

    try:
        assert binder.bind([("default/solo-0", "n1")]) == {}
        server.hooks.append(slow)
        lease.expires = time.monotonic() + 1.0
        failed = binder.delete(["default/solo-0"], "test")
        assert set(failed) == {"default/solo-0"}  # timed out, and not retried past the fence
        assert len(arrivals) == 1 and arrivals[0] < lease.expires  # the pool sent it once
    finally:
        server.hooks.remove(slow)
        binder.close()


def test_a_conflict_naming_the_pods_node_settles_the_bind_when_the_pod_cannot_be_read(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # Another binder (a former leader) bound both pods; this one's cache has not seen it.
    apply(server, [node("n1", cpu="8"), node("n2", cpu="8"), *gang_pods("solo", 2, cpu="1")])
    seen(cluster, server)
    uids = {}
    for name in ("solo-0", "solo-1"):
        pod: Any = server.get("", "pods", "default", name)
        uids[f"default/{name}"] = pod["metadata"]["uid"]
        server.put({**pod, "spec": {**pod["spec"], "nodeName": "n1"}})
    server.fail("GET", r"/pods/solo-[01]$", 503, times=1000)  # and the pods cannot be read
    # The 409's words say where each pod is: on the node asked for, the bind stands...
    assert cluster.binder._bind_one("default/solo-0", "n1", uids["default/solo-0"]) is None
    # ...elsewhere, it was bound by another binder: a member of the gang, not a doubt.
    error = cluster.binder._bind_one("default/solo-1", "n2", uids["default/solo-1"])
    assert error is not None and error.bound_to == "n1" and not error.uncertain
    # A conflict that names no node (a namesake's UID) stays uncertain.
    other = cluster.binder._bind_one("default/solo-1", "n2", "another-uid")
    assert other is not None and other.uncertain and other.bound_to is None


def _undeleted_then_gone(server: FakeApiServer, cluster: KubeCluster) -> Any:
    """solo-0 bound to n1, the watch has shown it; a rollback's delete of it fails, then
    it is deleted after all (by someone else, or the delete landed late). The pod as
    it was."""
    apply(server, [node("n1", cpu="8"), *gang_pods("solo", 1, cpu="1")])
    seen(cluster, server)
    assert cluster.bind([("default/solo-0", "n1")]) == {}
    wait_until(lambda: not cluster.cache.assumed(), what="the bind seen")
    cluster.binder.retry_budget_s, cluster.binder.backoff_s = 0.2, 0.01
    server.fail("DELETE", r"/pods/solo-0$", 503, times=1000)
    assert set(cluster.evict(["default/solo-0"], "rollback")) == {"default/solo-0"}
    server.clear_faults()
    old = server.get("", "pods", "default", "solo-0")
    server.delete("", "pods", "default", "solo-0")
    return old


def test_a_delete_that_failed_is_sent_again_for_the_same_pod_not_a_namesake(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # A rollback's delete of solo-0 fails; by the next attempt the watch has shown the
    # bind (the batch's UIDs forgot it) and a namesake holds the name on the same node.
    old = _undeleted_then_gone(server, cluster)
    server.put({**old, "metadata": {k: v for k, v in old["metadata"].items() if k != "uid"}})
    new: Any = server.get("", "pods", "default", "solo-0")
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and new["spec"]["nodeName"] == "n1"
    wait_until(
        lambda: (
            (cluster.cache.pod("default/solo-0") or {}).get("metadata", {}).get("uid")
            == new["metadata"]["uid"]
        ),
        what="the namesake seen",
    )
    cluster.bind([])  # a later cycle's binds
    # The pod the delete was for is gone: done, and the namesake lives, not terminating.
    assert cluster.evict(["default/solo-0"], "rollback") == {}
    after: Any = server.get("", "pods", "default", "solo-0")
    assert after["metadata"]["uid"] == new["metadata"]["uid"]
    assert "deletionTimestamp" not in after["metadata"]


def test_a_bind_that_timed_out_and_then_read_unbound_is_of_unknown_outcome(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # The server takes 1.2 s over the Binding: the client gives up at 1 s and reads
    # the pod, unbound yet; the Binding lands after.
    binder, lease = _solo_with_a_fenced_binder(server, cluster)

    def slow(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/pods/solo-0/binding"):
            time.sleep(1.2)

    server.hooks.append(slow)
    try:
        lease.expires = time.monotonic() + 1.0
        failed = binder.bind([("default/solo-0", "n1")])
        # Counted a plain failure, a gang rolled back around it kept it, pending, and
        # the late Binding left it running alone: of unknown outcome, it is evicted too.
        assert failed["default/solo-0"].uncertain
        assert "may still land" in failed["default/solo-0"].message
        wait_until(lambda: bound_pods(server) == {"default/solo-0": "n1"}, what="it landed")
    finally:
        server.hooks.remove(slow)
        binder.close()


def test_a_failed_deletes_uid_is_forgotten_once_a_namesake_is_bound(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # A rollback's delete of solo-0 fails; the pod is deleted anyway, its controller makes
    # it again, and a later cycle binds the new one. A rollback of that bind must delete
    # the new pod: sent with the old UID, it was answered 409 and counted as done, and
    # the new pod stayed bound, its gang partial.
    old = _undeleted_then_gone(server, cluster)
    metadata = {k: v for k, v in old["metadata"].items() if k != "uid"}
    spec = {k: v for k, v in old["spec"].items() if k != "nodeName"}
    server.put({**old, "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}})
    new: Any = server.get("", "pods", "default", "solo-0")

    def pending_namesake() -> bool:
        pod = cluster.cache.pod("default/solo-0") or {}
        return pod.get("metadata", {}).get("uid") == new["metadata"]["uid"] and not pod.get(
            "spec", {}
        ).get("nodeName")

    wait_until(pending_namesake, what="the namesake seen, pending")
    cluster.snapshot()
    assert cluster.bind([("default/solo-0", "n1")]) == {}
    wait_until(lambda: not cluster.cache.assumed(), what="its bind seen")
    cluster.bind([])  # a second batch of the cycle: the batch's UIDs forget the first
    assert cluster.evict(["default/solo-0"], "rollback") == {}
    after: Any = server.get("", "pods", "default", "solo-0")
    assert after is None or "deletionTimestamp" in after["metadata"]


def _raising(error: Exception) -> Any:
    def post(*args: Any) -> None:
        raise error

    return post


@pytest.mark.parametrize(
    ("error", "may_land"),
    [
        # Never sent: connection refused, a connect timeout.
        (urllib3.exceptions.NewConnectionError(None, "refused"), False),  # type: ignore[arg-type]
        (urllib3.exceptions.ConnectTimeoutError("connect timed out"), False),
        # Sent, and no answer: it may land later.
        (urllib3.exceptions.ReadTimeoutError(None, "/binding", "read timed out"), True),  # type: ignore[arg-type]
        (urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()), True),
        (urllib3.exceptions.SSLError("bad record mac"), True),
        (ApiException(status=500, reason="etcdserver: request timed out"), True),
        (ApiException(status=504, reason="Gateway Timeout"), True),
        (ApiException(status=503, reason="Service Unavailable"), False),
    ],
)
def test_a_bind_whose_pod_then_reads_unbound_is_a_doubt_only_if_it_may_land(
    error: Exception,
    may_land: bool,
    server: FakeApiServer,
    cluster: KubeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Taken for a doubt when nothing was sent, a gang rolled back around it deleted the
    # pending pod (lost, without a controller); taken for a plain failure when it was
    # sent, its bind landed later and left that member running alone.
    from adapter.kube import binder

    apply(server, [node("n1", cpu="8"), *gang_pods("g", 1, cpu="1")])
    seen(cluster, server)
    monkeypatch.setattr(binder, "post_binding", _raising(error))
    cluster.binder.retry_budget_s, cluster.binder.backoff_s = 0.05, 0.01
    failures = cluster.bind([("default/g-0", "n1")])
    assert failures["default/g-0"].uncertain is may_land


def test_a_bind_answered_too_late_is_sent_once_more_and_its_gang_is_kept(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server takes longer than the client waits to answer g-2's first Binding, which
    lands late. Read unbound after the budget, the bind was of unknown outcome, and the
    gang, pods no controller makes again, was rolled back and deleted: the bind is now
    sent once more, and lands (or meets the first one landed)."""
    monkeypatch.setattr(binder_module, "MAX_BIND_WAIT_S", 0.3)
    apply(server, [node("n1", cpu="8"), podgroup("g", 3), *gang_pods("g", 3, cpu="1")])
    slow: list[bool] = []

    def late(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/pods/g-2/binding") and not slow:
            slow.append(True)
            time.sleep(1.0)

    server.hooks.append(late)
    cluster = KubeCluster(server.client()).start(sync_timeout_s=10)
    cluster.binder.retry_budget_s = 0.3
    try:
        seen(cluster, server)
        result = run_cycle(cluster, FAST)
        assert slow
        assert result.failed_binds == {} and result.rolled_back == {} and result.evicted == []
        assert set(bound_pods(server)) == {"default/g-0", "default/g-1", "default/g-2"}
        time.sleep(1.0)  # the first attempt, answered late, changes nothing
        assert set(bound_pods(server)) == {"default/g-0", "default/g-1", "default/g-2"}
    finally:
        cluster.stop()
