"""A pod replaced by a namesake (its Job deleted and recreated) while the solver decides
is neither bound nor evicted in place of the pod the decision was about."""

from __future__ import annotations

from typing import Any

from adapter.holds import Holds
from adapter.kube.cluster import KubeCluster
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import apply, bound_pods, gang_pods, node, podgroup, wait_until
from tests.adapter.kube.test_kube_cluster import after_first_snapshot, seen
from tests.adapter.kube.test_preemption import SETTINGS, _evictions, _objects


def _replaced_after_snapshot(server: FakeApiServer, pod: dict[str, Any]) -> type[KubeCluster]:
    """A cluster whose first snapshot is followed, before any write, by ``pod`` (same
    name, new UID) replacing the one that snapshot read."""
    name = pod["metadata"]["name"]

    def replace(cluster: KubeCluster) -> None:
        old = server.get("", "pods", "default", name)
        assert old is not None
        server.delete("", "pods", "default", name)
        apply(server, [pod])

        def replaced() -> bool:
            now = cluster.cache.pod(f"default/{name}") or {}
            return now.get("metadata", {}).get("uid") not in (None, old["metadata"]["uid"])

        wait_until(replaced, what=f"{name} replaced")

    return after_first_snapshot(replace)


def test_a_pod_replaced_while_deciding_is_not_bound_in_its_place(server: FakeApiServer) -> None:
    apply(server, [node("n1", cpu="8"), podgroup("g", 1), *gang_pods("g", 1, cpu="1")])
    (bigger,) = gang_pods("g", 1, cpu="64")  # would never fit n1's 8 cpu
    cluster = _replaced_after_snapshot(server, bigger)(server.client()).start(sync_timeout_s=10)
    try:
        seen(cluster, server)
        result = run_cycle(cluster, LoopSettings(solver=SolverConfig(time_limit_s=1.0)))
        assert result.bound == {}
        assert "namesake" in result.failed_binds["default/g-0"]
        assert bound_pods(server) == {}
    finally:
        cluster.stop()


def test_a_victim_replaced_while_deciding_is_not_evicted_in_its_place(
    server: FakeApiServer,
) -> None:
    objects = _objects()
    apply(server, objects)
    (low0,) = [o for o in objects if o.get("metadata", {}).get("name") == "low-0"]
    cluster = _replaced_after_snapshot(server, low0)(server.client()).start(sync_timeout_s=10)
    try:
        seen(cluster, server)
        result = run_cycle(cluster, SETTINGS, None, Holds())
        # Sent with the old pod's UID as precondition: the server refuses it (409, the
        # pod the decision chose is gone), and the namesake keeps running.
        assert sorted(_evictions(server)) == ["default/low-0", "default/low-1"]
        namesake = server.get("", "pods", "default", "low-0")
        assert namesake is not None and namesake["spec"].get("nodeName") == "n1"
        assert server.get("", "pods", "default", "low-1") is None
        assert "default/low-1" in result.preempted
    finally:
        cluster.stop()


def test_a_second_view_within_the_cycle_keeps_the_pods_its_evictions_are_for(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # The second chance takes a second view before the cycle's evictions go out: a victim
    # replaced by a namesake in between is not evicted in its place.
    objects = _objects()
    apply(server, objects)
    seen(cluster, server)
    cluster.snapshot()
    (low0,) = [o for o in objects if o.get("metadata", {}).get("name") == "low-0"]
    old: Any = server.get("", "pods", "default", "low-0")
    server.delete("", "pods", "default", "low-0")
    apply(server, [low0])
    new: Any = server.get("", "pods", "default", "low-0")
    seen(cluster, server)
    cluster.snapshot(again=True)
    assert cluster.preempt({"default/low-0": "for gang high"}) == {}  # 409: gone
    namesake: Any = server.get("", "pods", "default", "low-0")
    assert namesake is not None and namesake["metadata"]["uid"] == new["metadata"]["uid"]
    assert "deletionTimestamp" not in namesake["metadata"]
    assert cluster.seen_uids["default/low-0"] == old["metadata"]["uid"]
    # The next cycle's view is about the namesake.
    cluster.snapshot()
    assert cluster.seen_uids["default/low-0"] == new["metadata"]["uid"]
