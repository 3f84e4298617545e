"""The upstream Workload API (KEP-4671) as gangsat's fourth dialect, against a fake API
server serving it as a kube-apiserver 1.36 does with ``GenericWorkload`` on: built-in
``scheduling.k8s.io/v1alpha2`` PodGroups with a status subresource, pods joining with
``spec.schedulingGroup``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from adapter.kube.cache import ClusterCache
from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.dialects import WORKLOAD_GROUP
from adapter.kube.resources import DIALECTS, NODES, PODS, served
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from solver.schedulers import schedule
from tests.adapter.kube.manifests import apply, bound_pods, gang_pods, node, podgroup
from tests.adapter.kube.test_kube_cluster import events, seen

FAST = LoopSettings(scheduler="cpsat", solver=SolverConfig(time_limit_s=2.0, deterministic=True))
V1ALPHA2 = f"{WORKLOAD_GROUP}/v1alpha2"


def serving(version: str, plural: str, kind: str) -> Iterator[FakeApiServer]:
    """A fake API server serving the Workload API as one Kubernetes release does."""
    fake = FakeApiServer(bookmark_interval_s=0.2)
    fake.add_resource(WORKLOAD_GROUP, version, plural, kind, namespaced=True)
    with fake:
        yield fake


@pytest.fixture
def server_136() -> Iterator[FakeApiServer]:
    yield from serving("v1alpha2", "podgroups", "PodGroup")


@pytest.fixture
def cluster_136(server_136: FakeApiServer) -> Iterator[KubeCluster]:
    kube = KubeCluster(server_136.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
    try:
        yield kube
    finally:
        kube.stop()


def workload_group(name: str, min_count: int, **extra: Any) -> dict[str, Any]:
    group = podgroup(name, min_count, group=WORKLOAD_GROUP)
    group["apiVersion"] = V1ALPHA2
    group.update(extra)
    return group


def conditions(server: FakeApiServer, name: str) -> dict[str, dict[str, Any]]:
    obj = server.get(WORKLOAD_GROUP, "podgroups", "default", name)
    assert obj is not None
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_workload_gang_is_bound_whole_and_its_condition_written(
    server_136: FakeApiServer, cluster_136: KubeCluster
) -> None:
    other = {
        "type": "DisruptionTarget",
        "status": "False",
        "reason": "Other",
        "message": "set by another component",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    apply(
        server_136,
        [
            node("n1", cpu="4"),
            node("n2", cpu="4"),
            workload_group("train", 3, status={"conditions": [other]}),
            *gang_pods("train", 3, cpu="2", dialect=WORKLOAD_GROUP),
            # Needs 3 x 3 cpu on 2 nodes of 4: never fits, and no pod of it may bind.
            workload_group("big", 3),
            *gang_pods("big", 3, cpu="3", dialect=WORKLOAD_GROUP),
        ],
    )
    watched = [r for r in cluster_136.resources if r.group == WORKLOAD_GROUP]
    assert [r.version for r in watched if r.plural == "podgroups"] == ["v1alpha2"]
    seen(cluster_136, server_136)
    result = run_cycle(cluster_136, FAST)
    assert result.admitted() == ["default/train"]
    assert set(bound_pods(server_136)) == {f"default/train-{i}" for i in range(3)}
    assert cluster_136.writer.flush()

    train = conditions(server_136, "train")
    assert train["PodGroupScheduled"]["status"] == "True"
    assert train["PodGroupScheduled"]["reason"] == "Scheduled"
    assert train["DisruptionTarget"] == other, "a strategic merge keeps others' conditions"
    big = conditions(server_136, "big")["PodGroupScheduled"]
    assert (big["status"], big["reason"]) == ("False", "Unschedulable")
    assert big["message"].startswith("3/3 tasks in gang unschedulable")
    assert any(
        e["involvedObject"]["name"] == "big" and e["involvedObject"]["apiVersion"] == V1ALPHA2
        for e in events(server_136, "Unschedulable")
    )
    # Patched through the status subresource, never on the object.
    patches = [r for r in server_136.requests if r.verb == "patch" and r.resource == "podgroups"]
    assert patches and all(r.subresource == "status" for r in patches)


def test_a_basic_policy_group_places_its_pods_one_by_one(
    server_136: FakeApiServer, cluster_136: KubeCluster
) -> None:
    basic = workload_group("web", 1)
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    apply(
        server_136,
        [node("n1", cpu="4"), basic, *gang_pods("web", 3, cpu="2", dialect=WORKLOAD_GROUP)],
    )
    seen(cluster_136, server_136)
    run_cycle(cluster_136, FAST)
    assert len(bound_pods(server_136)) == 2  # what fits, as the default scheduler would


def test_the_newest_served_version_of_a_collection_is_watched_once() -> None:
    workload = [r for r in DIALECTS if r.group == WORKLOAD_GROUP]
    all_137 = {
        (WORKLOAD_GROUP, v): {"podgroups", "podgroups/status"} for v in ("v1alpha3", "v1beta1")
    }
    [chosen] = served(workload, all_137)
    assert chosen.version == "v1beta1" and chosen.status_subresource
    [old] = served(workload, {(WORKLOAD_GROUP, "v1alpha2"): {"podgroups"}})
    assert old.version == "v1alpha2" and not old.status_subresource


@pytest.mark.parametrize("dialect", sorted({r.group for r in DIALECTS if r.kind == "PodGroup"}))
def test_a_pod_being_deleted_is_a_terminating_member_in_any_dialect(dialect: str) -> None:
    """A pod being deleted still holds its node, and names its gang (already losing pods,
    no victim meanwhile), but is terminating: it no longer counts towards minMember."""
    cache = ClusterCache()
    [pod] = gang_pods("g", 1, dialect=dialect)
    pod["metadata"]["uid"] = "u"
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    cache.replace(PODS, [pod])
    cache.replace(NODES, [node("n1")])
    state = convert(cache.objects(), ("gangsat",)).state
    (converted,) = state.pods
    assert converted.terminating and converted.node_name == "n1"
    assert converted.gang is not None and converted.gang.endswith("/g")


# --- 1.35: v1alpha1 Workloads, pods pointing at one of its pod groups ---------------------


def workload_135(name: str, groups: dict[str, int | None]) -> dict[str, Any]:
    """A v1alpha1 Workload; a pod group of minCount None has the basic policy."""
    return {
        "apiVersion": f"{WORKLOAD_GROUP}/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "podGroups": [
                {
                    "name": group,
                    "policy": {"basic": {}} if n is None else {"gang": {"minCount": n}},
                }
                for group, n in groups.items()
            ]
        },
    }


def referring_pods(
    workload: str, group: str, n: int, cpu: str, replica: str = ""
) -> list[dict[str, Any]]:
    pods = gang_pods(f"{workload}-{group}{replica}", n, cpu=cpu, dialect=WORKLOAD_GROUP)
    for p in pods:
        del p["spec"]["schedulingGroup"]  # 1.35 pods point at the Workload instead
        ref = {"name": workload, "podGroup": group}
        if replica:
            ref["podGroupReplicaKey"] = replica
        p["spec"]["workloadRef"] = ref
    return pods


def test_135_workload_pod_groups_are_gangs_one_per_replica_key() -> None:
    objects = [
        node("n1", cpu="8", memory="16Gi"),
        workload_135("train", {"workers": 2, "loader": None}),
        *referring_pods("train", "workers", 2, "1", replica="a"),
        *referring_pods("train", "workers", 2, "1", replica="b"),
        *referring_pods("train", "loader", 1, "1"),
        *referring_pods("train", "nosuch", 1, "1"),
        {**workload_135("empty", {}), "spec": {"podGroups": []}},
    ]
    c = convert(objects)
    gangs = {g.name: g.min_member for g in c.state.gangs}
    assert gangs == {
        "default/train/workers/a": 2,
        "default/train/workers/b": 2,
        "default/train/loader": 1,
    }
    assert [(f.kind, f.name) for f in c.findings] == [("Workload", "default/empty")]
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=2.0))
    assert "default/train-nosuch-0" in decision.waiting_pods  # its pod group is not there
    assert len(decision.placements) == 5


@pytest.fixture
def server_135() -> Iterator[FakeApiServer]:
    yield from serving("v1alpha1", "workloads", "Workload")


def test_135_a_workload_gang_binds_whole_and_its_pods_say_why_they_wait(
    server_135: FakeApiServer,
) -> None:
    apply(
        server_135,
        [
            node("n1", cpu="4"),
            workload_135("job", {"workers": 2, "huge": 2}),
            *referring_pods("job", "workers", 2, "1"),
            *referring_pods("job", "huge", 2, "3"),  # 2 x 3 cpu on a node of 4 - 2
        ],
    )
    cluster = KubeCluster(server_135.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
    try:
        seen(cluster, server_135)
        result = run_cycle(cluster, FAST)
        assert result.admitted() == ["default/job/workers"]
        assert set(bound_pods(server_135)) == {"default/job-workers-0", "default/job-workers-1"}
        assert cluster.writer.flush()
    finally:
        cluster.stop()
    waiting = {e["involvedObject"]["name"] for e in events(server_135, "FailedScheduling")}
    assert waiting == {"job-huge-0", "job-huge-1"}
    pod = server_135.get("", "pods", "default", "job-huge-0")
    assert pod is not None
    [condition] = pod["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("PodScheduled", "Unschedulable")
    assert not [r for r in server_135.requests if r.verb == "patch" and r.group == WORKLOAD_GROUP]
