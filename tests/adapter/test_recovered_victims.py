"""A new leader reads the marks its predecessor left on the victims of a preemption
(``Pod.marked_victim``): where some of a victim's evictions went and others failed, the
evictions to send again were that leader's memory. Not a victim at its minimum, nor a
mark gone stale."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from adapter.cluster import ClusterError
from adapter.evicting import DOUBT_WAIT_S, evict_again
from adapter.gangs import Gangs
from adapter.holds import MARK_STALE_S, Hold, Holds
from adapter.loop import run_cycle
from adapter.results import CycleResult
from solver.model import ClusterState
from tests.adapter.test_preempting import PREEMPTING, GracefulCluster
from tests.builders import gang, node, pod, state

WHY = "preempted by gang ns/hi"


def _victims(now_s: float = 0.0, marked_s: float = 0.0, by: str = "") -> ClusterState:
    """a lost a-0 (made again, pending); b kept both pods; c holds minMember but a worker
    short of its task's minimum; d lost a pod, unmarked. hi is nominated to n1. The marks
    say they were made ``by`` that deployment."""
    return state(
        nodes=[node("n1"), node("n2")],
        pods=[
            pod("ns/a-1").gang("ns/a").on("n1").marked_victim(WHY, marked_s, by),
            pod("ns/b-0").gang("ns/b").on("n2").marked_victim(WHY, marked_s, by),
            pod("ns/b-1").gang("ns/b").on("n2").marked_victim(WHY, marked_s, by),
            pod("ns/c-w0").gang("ns/c").task("worker").on("n1").marked_victim(WHY, marked_s, by),
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


def test_another_deployments_marks_are_its_own_to_finish() -> None:
    # Two gangsat deployments (scheduler names a and b): a new leader of a evicts again
    # what a marked, and what no deployment's mark names (an earlier version's), never
    # what b marked.
    for by, resent in (("a", {"ns/a-1", "ns/c-w0"}), ("", {"ns/a-1", "ns/c-w0"}), ("b", set())):
        victims = _victims(by=by)
        holds = Holds(author="a")
        holds.recover(victims, Gangs.of(victims))
        assert set(holds.resend) == resent, by


def _remnant_and_replacement() -> GracefulCluster:
    """lo (minMember 2) runs lo-1 on n1, its eviction to send again (lo-0's went); its
    controller made lo-2 in lo-0's place; n0 and n2 are free, a cpu each. hi was
    nominated to n1."""
    return GracefulCluster(
        state(
            nodes=[node(n).cap(cpu=1) for n in ("n0", "n1", "n2")],
            pods=[
                pod("lo-1").req(cpu=1).gang("lo").on("n1"),
                pod("lo-2").req(cpu=1).gang("lo"),
                pod("hi-0").req(cpu=1).gang("hi").nominated("n1"),
            ],
            gangs=[gang("lo", 2), gang("hi", 1)],
        )
    )


def test_a_victim_completed_around_its_pod_to_evict_again_keeps_it() -> None:
    """The cycle binds lo-2, lo-1 counted as a member: lo is whole. Evicted right after,
    lo-1 left lo running lo-2 alone (a chaos probe)."""
    cluster = _remnant_and_replacement()
    holds = Holds(recovered=True, resend={"lo-1": (WHY, "n1")})
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in result.bound and not result.preempted and not cluster.terminating
    assert not holds.resend


def test_a_hold_waiting_on_a_pod_its_victim_was_completed_around_is_released() -> None:
    cluster = _remnant_and_replacement()
    holds = Holds(recovered=True)
    hold = Hold(gang="hi", pods={"hi-0": "n1"}, victim_nodes={"lo-1": "n1"}, since_s=0.0)
    hold.resend["lo-1"] = WHY
    holds.add(hold)
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in result.bound and not result.preempted and not cluster.terminating
    assert "hi" in result.released and not holds.held and not holds.resend


def test_a_refused_pod_of_a_broken_victim_on_no_preemptors_node_is_sent_again() -> None:
    """hi takes n0 from lo; lo-1, on n1, goes too so that lo goes whole. lo-0's eviction
    went, lo-1's was refused: no preemptor's victim by its node, it was never sent again,
    and lo ran lo-1 alone for good (a chaos probe)."""
    cluster = GracefulCluster(
        state(
            nodes=[node("n0").cap(cpu=3).label(pool="a"), node("n1").cap(cpu=1).label(pool="b")],
            pods=[
                pod("lo-0").req(cpu=1).gang("lo").on("n0"),
                pod("lo-1").req(cpu=1).gang("lo").on("n1"),
                *(pod(f"hi-{i}").req(cpu=1).gang("hi").selector(pool="a") for i in range(3)),
            ],
            gangs=[gang("lo", 2), gang("hi", 3).priority(1000)],
        ),
        refuse={"lo-1"},
    )
    holds = Holds(recovered=True)
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-0" in first.preempted and "lo-1" in first.preempt_failed
    assert "lo-1" in holds.resend
    cluster.refuse.clear()
    again = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-1" in again.preempted


def test_a_recovered_hold_waiting_on_a_pod_its_victim_was_completed_around_is_released() -> None:
    """A new leader's: the remnant it recovered waits in ``Holds.resend``, not in the
    hold's; held on, hi waited out its timeout for a pod that stays."""
    cluster = _remnant_and_replacement()
    holds = Holds(recovered=True, resend={"lo-1": (WHY, "n1")})
    holds.add(Hold(gang="hi", pods={"hi-0": "n1"}, victim_nodes={"lo-1": "n1"}, since_s=0.0))
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in result.bound and not result.preempted and not cluster.terminating
    assert "hi" in result.released and not holds.held and not holds.resend


class _UnknownOutcome(GracefulCluster):
    """The first ``doubts`` binds of lo-2 have every answer lost: the outcome of each
    unknown (``Cluster.unsettled``) until the test settles it. Meanwhile snapshots show
    lo-2 where its bind went (assumed, as the watch cache shows it), and the backend holds
    it bound nowhere (``where_bound``: the watch has not shown it)."""

    def __init__(self, base: ClusterState, doubts: int = 1) -> None:
        super().__init__(base)
        self.sent: dict[str, str] = {}
        self.doubts = doubts

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        doubted = [(p, n) for p, n in placements if p == "lo-2" and self.doubts > 0]
        failures = super().bind([pn for pn in placements if pn not in doubted])
        for pod_name, node_name in doubted:
            self.doubts -= 1
            self.sent[pod_name] = node_name
            self.in_doubt.add(pod_name)
            failures[pod_name] = ClusterError("ReadTimeoutError", "no answer", uncertain=True)
        return failures

    def snapshot(self, again: bool = False) -> ClusterState:
        state_ = super().snapshot(again)
        assumed = {p: n for p, n in self.sent.items() if p in self.in_doubt}
        return state_.with_bindings(assumed) if assumed else state_

    def where_bound(self, pods: Collection[str]) -> dict[str, str]:
        return {p: n for p, n in super().where_bound(pods).items() if p not in self.in_doubt}

    def settle(self, landed: bool) -> None:
        if landed:
            self.bound.update({p: self.sent[p] for p in self.in_doubt})
        self.in_doubt.clear()


def _held_on_remnant(cluster: GracefulCluster) -> Holds:
    holds = Holds(recovered=True)
    hold = Hold(gang="hi", pods={"hi-0": "n1"}, victim_nodes={"lo-1": "n1"}, since_s=0.0)
    hold.resend["lo-1"] = WHY
    holds.add(hold)
    return holds


def test_a_victim_maybe_completed_by_a_bind_of_unknown_outcome_keeps_its_pod_until_known() -> None:
    """The cycle binds lo-2, every answer lost. Had lo-1 been evicted at once and the
    bind landed, lo ran lo-2 alone (a chaos probe): lo-1 waits while the bind is
    unsettled (the snapshot showing lo whole, assumed), and is kept once it landed; hi,
    waiting on it, is released."""
    cluster = _UnknownOutcome(_remnant_and_replacement().base)
    holds = _held_on_remnant(cluster)
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in first.failed_binds and not first.preempted
    assert "hi" in first.released and not holds.held and "lo-1" in holds.resend
    unsettled = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-1" not in unsettled.preempted and "lo-1" in holds.resend
    cluster.settle(landed=True)
    run_cycle(cluster, PREEMPTING, None, holds)
    assert not holds.resend and not cluster.terminating
    assert cluster.where_bound(["lo-1", "lo-2"]).keys() == {"lo-1", "lo-2"}


def test_a_victim_whose_bind_of_unknown_outcome_lapsed_has_its_eviction_sent_again() -> None:
    cluster = _UnknownOutcome(_remnant_and_replacement().base)
    holds = _held_on_remnant(cluster)
    run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-1" in holds.resend and not cluster.terminating
    cluster.settle(landed=False)
    cluster.fail_binds.add("lo-2")  # and lo-2 is bound nowhere else
    lapsed = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-1" in lapsed.preempted and cluster.terminating == {"lo-1"}
    assert not holds.resend


def test_a_bind_whose_answer_failed_but_that_the_backend_shows_landed_completes_a_victim() -> None:
    """lo-2's bind answered with an error, yet the watch already shows it bound (every
    answer lost after it landed): lo is whole, and lo-1 stays."""
    cluster = _UnknownOutcome(_remnant_and_replacement().base)
    original = cluster.bind

    def landed_at_once(placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        failures = original(placements)
        if "lo-2" in failures:
            cluster.settle(landed=True)  # the watch saw it before the binder gave up
        return failures

    cluster.bind = landed_at_once  # type: ignore[method-assign]
    holds = _held_on_remnant(cluster)
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in result.failed_binds and "hi" in result.released
    assert not result.preempted and not cluster.terminating and not holds.resend


def test_an_eviction_waits_for_binds_of_unknown_outcome_for_a_while_not_for_ever() -> None:
    """Each bind of lo-2 is of unknown outcome, and lapses before the next cycle, which
    binds it again, in doubt again: lo-1 waited for good, lo below minMember (a review).
    It is sent once it has waited DOUBT_WAIT_S of the snapshot clock."""
    cluster = _UnknownOutcome(_remnant_and_replacement().base, doubts=1_000)
    holds = _held_on_remnant(cluster)
    sent_at = None
    for cycle in range(8):
        cluster.now_s = 20.0 * cycle
        result = run_cycle(cluster, PREEMPTING, None, holds)
        cluster.settle(landed=False)
        if "lo-1" in result.preempted:
            sent_at = cluster.now_s
            break
        assert "lo-2" in result.failed_binds and "lo-1" in holds.resend
    assert sent_at is not None and DOUBT_WAIT_S < sent_at <= DOUBT_WAIT_S + 20.0
    assert not holds.resend and not holds.doubt_since


class _SettledMidCycle(_UnknownOutcome):
    """lo-2's doubt lapses once the next snapshot is taken (the watch shows the bind did
    not land), before the cycle judges the evictions to send again."""

    def __init__(self, base: ClusterState) -> None:
        super().__init__(base)
        self.lapse_after_snapshot = False

    def snapshot(self, again: bool = False) -> ClusterState:
        state_ = super().snapshot(again)
        if self.lapse_after_snapshot and not again:
            self.lapse_after_snapshot = False
            self.settle(landed=False)
        return state_


def test_a_doubt_settled_after_the_snapshot_leaves_the_eviction_waiting_not_dropped() -> None:
    """The snapshot shows lo whole (lo-2 assumed); read after it, the doubts no longer
    named lo-2, lo was taken for whole, and lo-1's eviction dropped for good while lo-2
    was pending again (a review). It waits a cycle, and goes once lo is seen short."""
    cluster = _SettledMidCycle(_remnant_and_replacement().base)
    holds = _held_on_remnant(cluster)
    run_cycle(cluster, PREEMPTING, None, holds)
    cluster.lapse_after_snapshot = True
    cluster.fail_binds.add("lo-2")  # no cycle binds lo-2 again
    settling = run_cycle(cluster, PREEMPTING, None, holds)
    assert not settling.preempted and "lo-1" in holds.resend
    short = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-1" in short.preempted and not holds.resend


def test_a_victim_whole_without_its_doubted_pod_is_whole_not_waiting() -> None:
    """lo (minMember 2) runs lo-1 and lo-3, and lo-2's bind is in doubt: lo is whole
    whatever became of it, and lo-1's eviction to send again is dropped, not kept
    waiting on lo-2."""
    base = _remnant_and_replacement().base
    lo_3 = pod("lo-3").req(cpu=1).gang("lo").on("n2").build()
    cluster = _UnknownOutcome(base.model_copy(update={"pods": (*base.pods, lo_3)}))
    cluster.sent["lo-2"] = "n0"
    cluster.in_doubt.add("lo-2")
    holds = Holds(recovered=True, resend={"lo-1": (WHY, "n1")})
    snapshot = cluster.snapshot()
    result = CycleResult(scheduler="test")
    gangs = Gangs.of(snapshot)
    evict_again(cluster, holds, snapshot.pods_by_name(), result, gangs, cluster.unsettled())
    assert not holds.resend and not result.preempted and not cluster.terminating
