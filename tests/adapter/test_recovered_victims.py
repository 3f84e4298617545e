"""A new leader reads the marks its predecessor left on the victims of a preemption
(``Pod.marked_victim``): where some of a victim's evictions went and others failed, the
evictions to send again were that leader's memory. Not a victim at its minimum, nor a
mark gone stale."""

from __future__ import annotations

from adapter.evicting import evict_again
from adapter.gangs import Gangs
from adapter.holds import MARK_STALE_S, Hold, Holds
from adapter.loop import run_cycle
from adapter.results import CycleResult
from solver.model import ClusterState
from tests.adapter.test_preempting import PREEMPTING, GracefulCluster
from tests.builders import gang, node, pod, state

WHY = "preempted by gang ns/hi"


def _victims(now_s: float = 0.0, marked_s: float = 0.0) -> ClusterState:
    """a lost a-0 (made again, pending); b kept both pods; c holds minMember but a worker
    short of its task's minimum; d lost a pod, unmarked. hi is nominated to n1."""
    return state(
        nodes=[node("n1"), node("n2")],
        pods=[
            pod("ns/a-1").gang("ns/a").on("n1").marked_victim(WHY, marked_s),
            pod("ns/b-0").gang("ns/b").on("n2").marked_victim(WHY, marked_s),
            pod("ns/b-1").gang("ns/b").on("n2").marked_victim(WHY, marked_s),
            pod("ns/c-w0").gang("ns/c").task("worker").on("n1").marked_victim(WHY, marked_s),
            pod("ns/c-ps").gang("ns/c").task("ps").on("n2"),
            pod("ns/d-0").gang("ns/d").on("n2"),
            pod("ns/a-0").gang("ns/a"),
            pod("ns/hi-0").gang("ns/hi").nominated("n1"),
        ],
        gangs=[
            gang("ns/a", 2),
            gang("ns/b", 2),
            gang("ns/c", 2).task_minimums(worker=2),
            gang("ns/d", 2),
            gang("ns/hi", 1),
        ],
        now_s=now_s,
    )


def test_a_gang_runs_short_below_minmember_or_a_tasks_minimum() -> None:
    gangs = Gangs.of(_victims())
    short = [gangs.runs_short(g) for g in ("ns/a", "ns/b", "ns/c", "ns/d", "ns/gone")]
    assert short == [True, False, True, True, False]


def test_a_new_leader_evicts_again_the_marked_pods_of_gangs_below_their_minimum() -> None:
    cluster_state = _victims()
    cluster = GracefulCluster(cluster_state)
    gangs = Gangs.of(cluster_state)
    holds = Holds()
    assert holds.recover(cluster_state, gangs) == ["ns/hi"]
    # hi waits for them: bound at once, it would meet a node still full.
    assert holds.held["ns/hi"].victim_nodes == {"ns/a-1": "n1", "ns/c-w0": "n1"}
    result = CycleResult(scheduler="test")
    evict_again(cluster, holds, cluster_state.pods_by_name(), result, gangs)
    # c too, at minMember but a worker short (the resends once kept only gangs below
    # minMember: c's was dropped, and hi waited out its hold for it).
    assert result.preempted == {"ns/a-1": WHY, "ns/c-w0": WHY}
    assert cluster.terminating == {"ns/a-1", "ns/c-w0"}


def test_a_mark_gone_stale_is_not_acted_on() -> None:
    # kube-controller-manager turns such a mark False after two minutes; where it runs
    # no such controller, a victim that kept its pods then lost one would go whole.
    fresh = _victims(now_s=1_000.0, marked_s=1_000.0 - MARK_STALE_S)
    holds = Holds()
    holds.recover(fresh, Gangs.of(fresh))
    assert set(holds.resend) == {"ns/a-1", "ns/c-w0"}
    stale = _victims(now_s=1_000.0, marked_s=999.0 - MARK_STALE_S)
    holds = Holds()
    holds.recover(stale, Gangs.of(stale))
    assert not holds.resend and holds.held["ns/hi"].victim_nodes == {}


def test_a_victims_pod_to_evict_again_is_no_member_its_gang_may_be_completed_with() -> None:
    """lo-1's eviction failed where lo-0's went; lo's controller made lo-2 in lo-0's
    place, and n2 is free. Counted as a member, lo-1 had lo completed with lo-2 (bound
    to n2), then was evicted in the same cycle: lo ran lo-2 alone (a chaos probe). It is
    leaving: lo waits whole, lo-1 goes."""
    cluster = GracefulCluster(
        state(
            nodes=[node(n).cap(cpu=1) for n in ("n0", "n1", "n2")],
            pods=[
                pod("lo-1").req(cpu=1).gang("lo").on("n1"),
                pod("lo-2").req(cpu=1).gang("lo"),
            ],
            gangs=[gang("lo", 2)],
        )
    )
    holds = Holds(recovered=True, resend={"lo-1": (WHY, "n1")})
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" not in result.bound and not cluster.bound
    assert result.preempted == {"lo-1": WHY} and cluster.terminating == {"lo-1"}


def _remnant_and_replacements(*replacements: str) -> GracefulCluster:
    """lo (minMember 2) runs lo-1 on n1, its eviction to send again; its controller made
    ``replacements``; n0 and n2 are free, a cpu each."""
    return GracefulCluster(
        state(
            nodes=[node(n).cap(cpu=1) for n in ("n0", "n1", "n2")],
            pods=[
                pod("lo-1").req(cpu=1).gang("lo").on("n1"),
                *(pod(name).req(cpu=1).gang("lo") for name in replacements),
                pod("hi-0").req(cpu=1).gang("hi").nominated("n1"),
            ],
            gangs=[gang("lo", 2), gang("hi", 1)],
        )
    )


def test_a_pod_a_held_gang_waits_to_evict_again_is_no_member_either() -> None:
    cluster = _remnant_and_replacements("lo-2")
    holds = Holds(recovered=True)
    holds.add(
        Hold(
            gang="hi",
            pods={"hi-0": "n1"},
            victim_nodes={"lo-1": "n1"},
            since_s=0.0,
            resend={"lo-1": WHY},
        )
    )
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert not cluster.bound and result.preempted == {"lo-1": WHY}


def test_a_gang_completed_around_a_pod_to_evict_again_is_rolled_back_if_short() -> None:
    """lo-2 and lo-3 placed whole; lo-3's bind fails. Counted with lo-1, which goes, lo
    held minMember and kept lo-2 bound: it ran lo-2 alone."""
    cluster = _remnant_and_replacements("lo-2", "lo-3")
    cluster.fail_binds = {"lo-3"}
    holds = Holds(recovered=True, resend={"lo-1": (WHY, "n1")})
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo" in result.rolled_back and "lo-2" in result.evicted
