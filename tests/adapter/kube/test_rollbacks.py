"""A gang's rollback when the API server fails it too: a delete that fails is tried
again in later cycles until its gang is whole or the pod gone, a bind of unknown
outcome is deleted only where it could leave a gang part-bound, and a gang short only of
such binds keeps its pods until the binds are settled."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from adapter.holds import Holds
from adapter.kube.cluster import KubeCluster
from adapter.loop import LoopSettings, run_cycle
from adapter.rollbacks import Stranded
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import (
    apply,
    bound_pods,
    gang_pods,
    live_pods,
    node,
    podgroup,
    refusing,
    wait_until,
)
from tests.adapter.kube.test_kube_cluster import after_first_snapshot, land_on_first_request, seen

FAST = LoopSettings(scheduler="cpsat", solver=SolverConfig(time_limit_s=2.0, deterministic=True))


def _n2_gone(server: FakeApiServer) -> Callable[[KubeCluster], None]:
    """Node n2 deleted right after the first snapshot, before the binds."""

    def gone(cluster: KubeCluster) -> None:
        server.delete("", "nodes", None, "n2")
        wait_until(lambda: not cluster.cache.node_exists("n2"))

    return gone


@dataclass
class Stranding:
    cluster: KubeCluster
    stranded: Stranded
    down: threading.Event  # set while the server refuses the pods' deletes


@pytest.fixture
def stranding(server: FakeApiServer) -> Iterator[Stranding]:
    """Gang g (3 x 1 cpu) fits only with n2, which vanishes before the binds: g-2 fails,
    finds no room, and the rollback's deletes of g-0 and g-1 fail (the server is down
    for them). After that first cycle both stay bound, stranded, the gang short."""
    apply(server, [node("n1", cpu="2"), node("n2", cpu="1"), podgroup("g", 3)])
    apply(server, gang_pods("g", 3, cpu="1"))
    down = refusing(server, "DELETE", "/pods/g-", 503, "the server is down")
    cluster = after_first_snapshot(_n2_gone(server))(server.client()).start(sync_timeout_s=10)
    cluster.binder.retry_budget_s = 0.3
    stranded = Stranded()
    try:
        seen(cluster, server)
        first = run_cycle(cluster, FAST, holds=Holds(), stranded=stranded)
        assert set(first.stranded) == {"default/g-0", "default/g-1"}
        assert set(bound_pods(server)) == {"default/g-0", "default/g-1"}
        yield Stranding(cluster, stranded, down)
    finally:
        cluster.stop()


def test_a_rollback_whose_deletes_failed_is_finished_in_a_later_cycle(
    server: FakeApiServer, stranding: Stranding
) -> None:
    # The server answers again: the next cycle deletes them, no gang left part-bound.
    stranding.down.clear()
    cluster = stranding.cluster
    wait_until(lambda: "default/g-2" in {p.name for p in cluster.snapshot().pending_pods()})
    second = run_cycle(cluster, FAST, holds=Holds(), stranded=stranding.stranded)
    assert sorted(second.evicted) == ["default/g-0", "default/g-1"]
    assert live_pods(server) == {} and not stranding.stranded


def test_a_stranded_pod_whose_gang_was_completed_is_kept(
    server: FakeApiServer, stranding: Stranding
) -> None:
    # n2 comes back before the next cycle: that cycle binds g-2 beside g-0 and g-1, the
    # gang is whole, and nothing is deleted.
    cluster = stranding.cluster
    apply(server, [node("n2", cpu="1")])
    wait_until(lambda: cluster.cache.node_exists("n2"))
    seen(cluster, server)
    second = run_cycle(cluster, FAST, holds=Holds(), stranded=stranding.stranded)
    assert second.bound == {"default/g-2": "n2"} and second.evicted == []
    assert len(bound_pods(server)) == 3 and not stranding.stranded


def test_stranded_pods_whose_node_left_are_deleted_not_forgotten(
    server: FakeApiServer, stranding: Stranding
) -> None:
    # n1, which g-0 and g-1 are bound to, is deleted (their pods are left out of the
    # snapshot) and comes back under the same name before any pod GC. Forgotten, the
    # two ran as a gang short of its third pod for good.
    cluster = stranding.cluster
    stranding.down.clear()
    server.delete("", "nodes", None, "n1")
    wait_until(lambda: not cluster.cache.node_exists("n1"))
    run_cycle(cluster, FAST, holds=Holds(), stranded=stranding.stranded)
    apply(server, [node("n1", cpu="2")])
    assert live_pods(server) == {} and not stranding.stranded


def test_a_delete_of_a_pod_gone_from_the_cache_is_done(cluster: KubeCluster) -> None:
    assert cluster.evict(["default/gone"], "gang rollback") == {}


def test_a_lone_pod_whose_bind_outcome_is_unknown_is_not_deleted(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # A pod of no PodGroup: every bind is a 503 and it cannot be read back. Bound or not,
    # it is no part-bound gang: deleted, a pod no controller recreates would be lost.
    apply(server, [node("n1", cpu="8")])
    apply(
        server,
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "solo", "namespace": "default"},
                "spec": {
                    "schedulerName": "gangsat",
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
                    ],
                },
            }
        ],
    )
    cluster.binder.retry_budget_s = 0.3
    seen(cluster, server)
    server.fail("POST", r"/pods/solo/binding", 503, times=100)
    server.fail("GET", r"/pods/solo$", 503, times=1)
    result = run_cycle(cluster, FAST, holds=Holds(), stranded=Stranded())
    assert "default/solo" in result.failed_binds
    assert result.evicted == [] and result.stranded == {}
    assert "evicted" not in result.rolled_back["pod:default/solo"]  # nothing was
    assert "default/solo" in {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in server.objects("", "pods")
    }


@pytest.fixture
def unanswered(server: FakeApiServer) -> Iterator[KubeCluster]:
    """Gang g (3 x 2 cpu, bare pods: no controller makes them again) on two 2-cpu nodes:
    every answer to g-1's Binding is lost (504), and so is every read of it back."""
    apply(server, [node("n1", "2"), node("n2", "2"), podgroup("g", 3), *gang_pods("g", 3)])
    cluster = KubeCluster(server.client()).start(sync_timeout_s=10)
    cluster.binder.retry_budget_s = 0.3
    try:
        seen(cluster, server)
        server.fail("POST", r"/pods/g-1/binding$", 504, times=1000)
        server.fail("GET", r"/namespaces/default/pods/g-1$", 503, times=1000)
        yield cluster
    finally:
        cluster.stop()


def _kept_in_doubt(cluster: KubeCluster, stranded: Stranded) -> None:
    """A cycle whose bind of g-1 is of unknown outcome: g-0 and g-2 stay bound."""
    first = run_cycle(cluster, FAST, holds=Holds(), stranded=stranded)
    assert first.evicted == [] and set(first.bound) == {"default/g-0", "default/g-2"}
    assert set(first.in_doubt) == {"default/g"} and first.rolled_back == {}
    [status] = [s for s in first.statuses if s.gang == "default/g"]
    assert status.reason == "BindFailed" and "may still land" in status.message
    assert "default/g" not in first.admitted()


def test_a_gang_whose_bind_of_unknown_outcome_landed_is_kept_whole(
    server: FakeApiServer, unanswered: KubeCluster
) -> None:
    """g-1's Binding commits, its answers lost. Rolled back at once, the gang was deleted,
    g-1 with it: three pods no controller makes again, lost though the gang was whole.
    Kept, the watch shows g-1 bound, and the next cycle forgets them."""
    cluster = unanswered
    landed = land_on_first_request(server, cluster, "g-1")
    stranded = Stranded()
    _kept_in_doubt(cluster, stranded)
    assert landed and len(bound_pods(server)) == 3
    wait_until(lambda: "default/g-1" not in cluster.unsettled())
    second = run_cycle(cluster, FAST, holds=Holds(), stranded=stranded)
    assert second.evicted == [] and not stranded and not stranded.doubts
    assert len(live_pods(server)) == 3 and len(bound_pods(server)) == 3


def test_a_bind_of_unknown_outcome_that_lapsed_is_sent_again_to_complete_its_gang(
    server: FakeApiServer, unanswered: KubeCluster
) -> None:
    """g-1's Binding never lands. While its outcome is unknown, no cycle deletes or
    forgets g-0 and g-2; once the doubt lapses, g-1 is pending again and the next cycle
    binds it: the gang whole, nothing deleted."""
    cluster = unanswered
    stranded = Stranded()
    _kept_in_doubt(cluster, stranded)
    assert cluster.unsettled() == {"default/g-1"}
    waiting = run_cycle(cluster, FAST, holds=Holds(), stranded=stranded)
    assert waiting.evicted == [] and set(stranded.pods) == {"default/g-0", "default/g-2"}
    server.clear_faults()
    assert cluster.cache.lapse(time.monotonic() + 3600) == 1
    third = run_cycle(cluster, FAST, holds=Holds(), stranded=stranded)
    assert set(third.bound) == {"default/g-1"} and third.evicted == []
    assert len(bound_pods(server)) == 3 and not stranded and not stranded.doubts


def test_a_gang_still_short_once_its_doubted_bind_lapsed_is_rolled_back(
    server: FakeApiServer, unanswered: KubeCluster
) -> None:
    """As above, but g-1's bind is then refused for good: g-0 and g-2 are deleted, no gang
    left part-bound."""
    cluster = unanswered
    stranded = Stranded()
    _kept_in_doubt(cluster, stranded)
    server.clear_faults()
    server.fail("POST", r"/pods/g-1/binding$", 403, times=1000)
    cluster.cache.lapse(time.monotonic() + 3600)
    last = run_cycle(cluster, FAST, holds=Holds(), stranded=stranded)
    assert sorted(last.evicted) == ["default/g-0", "default/g-2"]
    assert live_pods(server) == {} and not stranded and not stranded.doubts
