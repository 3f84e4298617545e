"""Deleting bound pods is the last resort: a member that failed for a cause another node
cures is placed again, and a member someone else bound is a member, not a failure."""

from __future__ import annotations

import pytest

import adapter.repair
from adapter.kube.cluster import KubeCluster
from adapter.loop import LoopSettings, run_cycle
from adapter.metrics import LoopMetrics
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from solver.model import ClusterState
from tests.adapter.kube.manifests import (
    apply,
    bound_pods,
    gang_pods,
    live_pods,
    node,
    podgroup,
    wait_until,
)
from tests.adapter.kube.test_kube_cluster import after_first_snapshot, node_deleted, seen

FAST = LoopSettings(scheduler="cpsat", solver=SolverConfig(time_limit_s=2.0, deterministic=True))


def test_a_member_whose_node_vanished_is_bound_elsewhere_and_nothing_is_deleted(
    server: FakeApiServer,
) -> None:
    # Only n2 has room for both pods at decide time; n2 is deleted and n3 joins before
    # the binds go out. The member meant for n2 goes to n3, the gang runs whole.
    apply(server, [node("n1", cpu="1"), node("n2", cpu="8"), podgroup("g", 2)])
    apply(server, gang_pods("g", 2, cpu="2"))

    def n2_replaced(cluster: KubeCluster) -> None:
        server.delete("", "nodes", None, "n2")
        server.put(node("n3", cpu="8"))
        wait_until(
            lambda: not cluster.cache.node_exists("n2") and cluster.cache.node_exists("n3"),
            what="n2 gone, n3 there",
        )

    cluster = after_first_snapshot(n2_replaced)(server.client()).start(sync_timeout_s=10)
    metrics = LoopMetrics()
    try:
        seen(cluster, server)
        frozen: list[str] = []
        cluster.converted = lambda: frozen.append("snapshot")
        result = run_cycle(cluster, FAST, metrics)
        # The second chance's snapshot follows the decision: frozen, its CP-SAT model's
        # cyclic garbage would outlive the settle after the cycle.
        assert frozen == ["snapshot"]
        assert result.decision is not None
        assert set(result.decision.placements.values()) == {"n2"}
        assert result.rolled_back == {} and result.evicted == []
        assert bound_pods(server) == {"default/g-0": "n3", "default/g-1": "n3"}
        assert set(result.repaired) == {"default/g-0", "default/g-1"}
        assert metrics.registry.get_sample_value("gangsat_second_chance_binds_total") == 2
        # Bound at the second try: no failed binds, though each first refusal is counted.
        assert result.failed_binds == {}
        sample = metrics.registry.get_sample_value
        assert sample("gangsat_binds_total", {"result": "failed"}) in (None, 0)
        assert sample("gangsat_binds_total", {"result": "bound"}) == 2
        assert sample("gangsat_bind_failures_total", {"reason": "NodeGone"}) == 2
        assert not any(r.verb == "delete" for r in server.requests)
    finally:
        cluster.stop()


def test_a_member_bound_by_another_binder_counts_and_nothing_is_deleted(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    apply(server, [node("n1", cpu="8"), node("n2", cpu="8"), podgroup("g", 3)])
    apply(server, gang_pods("g", 3, cpu="1"))
    seen(cluster, server)
    taken: dict[str, str] = {}

    def another_binder(method: str, path: str) -> None:
        # Between our snapshot and our bind, another scheduler binds g-1 elsewhere.
        if method == "POST" and path.endswith("/pods/g-1/binding") and not taken:
            pod = server.get("", "pods", "default", "g-1")
            assert pod is not None
            ours = cluster.cache.assumed()["default/g-1"]
            taken["node"] = "n1" if ours == "n2" else "n2"
            server.put({**pod, "spec": {**pod["spec"], "nodeName": taken["node"]}})

    server.hooks.append(another_binder)
    result = run_cycle(cluster, FAST)
    assert taken
    assert "default/g-1" in result.failed_binds  # our bind of it did fail
    assert result.rolled_back == {} and result.evicted == []
    assert len(bound_pods(server)) == 3
    assert bound_pods(server)["default/g-1"] == taken["node"]


def test_a_rollback_is_counted_and_logged_with_its_cause(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # A 409 whose pod stays unbound (a namesake, a refusal): no node cures it, so the
    # pods bound this cycle are deleted, and the deletion says why.
    apply(server, [node("n1", cpu="8"), podgroup("g", 2), *gang_pods("g", 2)])
    seen(cluster, server)
    server.fail("POST", r"/pods/g-1/binding$", 409, reason="Conflict")
    metrics = LoopMetrics()
    result = run_cycle(cluster, FAST, metrics)
    assert result.evicted == ["default/g-0"]
    assert result.repaired == {}
    deleted = metrics.registry.get_sample_value(
        "gangsat_rollback_deletions_total", {"cause": "Conflict"}
    )
    assert deleted == 1


def test_a_second_chance_that_fails_to_decide_still_rolls_the_gang_back(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # g's two pods go to n1 and n2; n2 vanishes before the binds, so the pod meant for it
    # fails NodeGone and gets a second chance, whose decision raises (a solver bug).
    # What the cycle bound must still be rolled back: never a partial gang, no raise.
    def broken(state: ClusterState, config: SolverConfig) -> object:
        raise RuntimeError("a bug in the second chance's decision")

    monkeypatch.setattr(adapter.repair, "gang_greedy", broken)
    apply(server, [node("n1", cpu="2"), node("n2", cpu="2"), podgroup("g", 2)])
    apply(server, gang_pods("g", 2, cpu="2"))

    n2_gone = after_first_snapshot(node_deleted(server, "n2"))
    cluster = n2_gone(server.client()).start(sync_timeout_s=10)
    try:
        seen(cluster, server)
        result = run_cycle(cluster, FAST)
        assert result.decision is not None and len(result.decision.placements) == 2
        assert list(result.rolled_back) == ["default/g"]
        assert live_pods(server) == {}
        assert result.repaired == {}
    finally:
        cluster.stop()
