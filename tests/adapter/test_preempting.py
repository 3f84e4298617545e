"""Preemption through the scheduling loop: evict, hold the room, bind once victims are gone.

The fake cluster terminates evicted pods only when the test says so (a grace period),
may refuse an eviction as a PodDisruptionBudget does (429), and keeps its clock in
``now_s``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

import pytest

from adapter.cluster import ClusterError, CycleReport
from adapter.evicting import evict_again
from adapter.gangs import Gangs
from adapter.holds import Hold, Holds
from adapter.loop import LoopSettings, run_cycle
from adapter.metrics import LoopMetrics
from adapter.results import CycleResult
from solver.config import ObjectiveWeights, SolverConfig
from solver.model import ClusterState, Pod
from solver.schedulers import SCHEDULERS
from tests.adapter.test_loop import FakeCluster, sample, status_of
from tests.builders import NodeBuilder, PodBuilder, gang, node, pod, queue, state

PREEMPTING = LoopSettings(
    solver=SolverConfig(time_limit_s=2.0, deterministic=True, preemption=True)
)


def _recover(holds: Holds, snapshot: ClusterState) -> list[str]:
    """What a new leader holds at its first cycle (``Holds.recover``)."""
    return holds.recover(snapshot, Gangs.of(snapshot))


class GracefulCluster(FakeCluster):
    """``nominations``: the reports' nominations show on the pending pods, as an API
    server keeps status.nominatedNodeName (False: every such write is lost)."""

    def __init__(
        self, base: ClusterState, refuse: Iterable[str] = (), nominations: bool = True
    ) -> None:
        super().__init__(base)
        self.refuse = set(refuse)
        self.terminating: set[str] = set()
        self.gone: set[str] = set()  # evicted and terminated: pending again
        self.now_s = 0.0
        self.keeps_nominations = nominations
        self.nominations: dict[str, str] = {}

    def snapshot(self, again: bool = False) -> ClusterState:
        state_ = super().snapshot(again)
        pods = []
        for p in state_.pods:
            if p.name in self.gone:
                p = p.model_copy(update={"node_name": None})
            elif p.name in self.terminating:
                p = p.model_copy(update={"terminating": True})
            elif p.node_name is None and p.name in self.nominations:
                p = p.model_copy(update={"nominated_node": self.nominations[p.name]})
            pods.append(p)
        return state_.model_copy(update={"pods": tuple(pods), "now_s": self.now_s})

    def report(self, report: CycleReport) -> None:
        super().report(report)
        if self.keeps_nominations:
            self.nominations.update(report.nominated)
            for pod_name in report.unnominated:
                self.nominations.pop(pod_name, None)

    def preempt(self, evictions: Mapping[str, str], again: bool = False) -> dict[str, ClusterError]:
        failures = {}
        for pod_name in evictions:
            if pod_name in self.refuse:
                failures[pod_name] = ClusterError("TooManyRequests", "disruption budget")
            else:
                self.terminating.add(pod_name)
        return failures

    def where_bound(self, pods: Collection[str]) -> dict[str, str]:
        leaving = self.terminating | self.gone
        return {p: n for p, n in super().where_bound(pods).items() if p not in leaving}

    def grace_passes(self) -> None:
        self.gone |= self.terminating
        self.terminating.clear()


def _cluster() -> ClusterState:
    """Two 4-cpu nodes run a low-priority gang lo (4 x 2 cpu); hi (2 x 4 cpu, priority 10)
    waits, and so does 'late' (2 x 4 cpu, priority 20 but never preempting), which would
    take the room lo leaves, before hi, if nothing held it."""
    lo = [pod(f"lo-{i}").req(cpu=2).gang("lo").on(f"n{i // 2}") for i in range(4)]
    hi = [pod(f"hi-{i}").req(cpu=4).gang("hi") for i in range(2)]
    late = [pod(f"late-{i}").req(cpu=4).gang("late").never_preempts() for i in range(2)]
    return state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*lo, *hi, *late],
        [gang("lo", 4), gang("hi", 2).priority(10), gang("late", 2).priority(20)],
        [queue()],
    )


def test_the_preemptor_binds_only_once_its_victims_are_gone_and_no_one_takes_its_room() -> None:
    cluster = GracefulCluster(_cluster())
    holds = Holds()
    metrics = LoopMetrics()
    first = run_cycle(cluster, PREEMPTING, metrics, holds)
    assert set(first.preempted) == {f"lo-{i}" for i in range(4)}
    assert not first.bound
    assert status_of(first, "hi").reason == "Preempting"
    assert sample(metrics, "gangsat_evictions_total", reason="preempt") == 4
    disruption = sample(metrics, "gangsat_disruption_objective")
    assert disruption is not None and disruption < 0

    # The cycle that made the hold says what it waits for, as the next ones do while the
    # victims terminate.
    assert first.holding["hi"] == "preempting: waiting for 4 evicted pod(s) to terminate on n0, n1"
    waiting = run_cycle(cluster, PREEMPTING, metrics, holds)  # victims still terminating
    assert not waiting.bound and not waiting.preempted
    assert "hi" in holds.held
    assert waiting.holding["hi"] == first.holding["hi"]
    # The victim says its pods are leaving, not that they "failed or were deleted".
    gone = status_of(waiting, "lo")
    assert (gone.phase, gone.reason) == ("Pending", "NotEnoughTasks")
    assert gone.message.startswith("0 of minMember 4 pod(s) bound and 4 terminating")
    cluster.terminating.discard("lo-0")
    cluster.gone.add("lo-0")  # one victim gone, three still terminating
    fewer = run_cycle(cluster, PREEMPTING, metrics, holds)
    assert not fewer.bound
    assert fewer.holding["hi"].startswith("preempting: waiting for 3 evicted pod(s)")

    cluster.grace_passes()
    bound = run_cycle(cluster, PREEMPTING, metrics, holds)
    assert sorted(bound.bound) == ["hi-0", "hi-1"]
    assert not {"late-0", "late-1"} & set(bound.bound)  # the held room went to hi
    assert not holds.held
    assert status_of(bound, "hi").phase == "Running"


def _capped_queue() -> GracefulCluster:
    """hi2 fits on n1, where no victim runs, but only under its queue's cap once lo (on
    n0) is gone."""
    return GracefulCluster(
        state(
            [node("n0").cap(cpu=8), node("n1").cap(cpu=8).label(zone="b")],
            [
                pod("lo-0").req(cpu=8).gang("lo").on("n0"),
                pod("hi1-0").req(cpu=4).gang("hi1"),
                pod("hi2-0").req(cpu=4).gang("hi2").selector(zone="b"),
            ],
            [
                gang("lo", 1).queue("q"),
                gang("hi1", 1).queue("q").priority(10),
                gang("hi2", 1).queue("q"),
            ],
            [queue("q").capability(cpu="8")],
        )
    )


CAPPED = LoopSettings(
    solver=PREEMPTING.solver.model_copy(update={"weights": ObjectiveWeights(disruption=0)})
)


def test_a_gang_nominated_beside_the_victims_waits_for_its_queues_capability() -> None:
    """hi2's hold waits for lo too, and it binds with hi1, not before."""
    cluster = _capped_queue()
    settings = CAPPED
    holds = Holds()
    first = run_cycle(cluster, settings, None, holds)
    assert set(first.preempted) == {"lo-0"} and not first.bound
    assert set(holds.held) == {"hi1", "hi2"}
    waiting = run_cycle(cluster, settings, None, holds)  # lo still terminating
    assert not waiting.bound and not waiting.rejected
    assert set(holds.held) == {"hi1", "hi2"}
    cluster.grace_passes()
    bound = run_cycle(cluster, settings, None, holds)
    assert sorted(bound.bound) == ["hi1-0", "hi2-0"]
    assert not bound.violations and not holds.held


def test_a_victim_that_kept_every_pod_holds_nothing_and_the_gang_is_decided_again() -> None:
    """Every eviction of lo refused (as the API server's dry runs refuse a victim whose
    budget allows none): lo runs whole, nothing is held."""
    cluster = GracefulCluster(_cluster(), refuse={f"lo-{i}" for i in range(4)})
    holds = Holds()
    metrics = LoopMetrics()
    result = run_cycle(cluster, PREEMPTING, metrics, holds)
    assert set(result.preempt_failed) == {f"lo-{i}" for i in range(4)}
    assert not holds.held
    assert sample(metrics, "gangsat_evictions_total", reason="refused") == 4


def test_a_victim_left_below_minmember_by_a_failed_eviction_is_evicted_again() -> None:
    """lo-3's eviction fails once (the API server's 5xx past the retries) where lo-0..2's
    went: lo runs below minMember whatever comes next. Not held before, hi lost the room
    lo had left to a gang of lower priority, and lo ran on below minMember; now hi is held
    and lo-3 evicted again."""
    cluster = GracefulCluster(_cluster(), refuse={"lo-3"})
    holds = Holds()
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-3" in first.preempt_failed and "hi" in holds.held
    resend = holds.held["hi"].resend
    assert list(resend) == ["lo-3"] and resend["lo-3"].startswith("preempted by gang hi")
    cluster.refuse.clear()  # the server answers again
    again = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-3" in again.preempted and not holds.held["hi"].resend
    assert not again.bound and "late-0" not in again.bound
    cluster.grace_passes()
    done = run_cycle(cluster, PREEMPTING, None, holds)
    assert set(done.bound) == {"hi-0", "hi-1"} and not done.violations


def test_a_victim_below_minmember_is_evicted_whole_though_its_preemptors_hold_goes() -> None:
    """lo-3's eviction fails where lo-0..2's went; then hi is deleted (its job cancelled)
    and its hold goes. The evictions to send again went with it, and lo-3 ran alone, lo
    below minMember for good; they are sent all the same."""
    cluster = GracefulCluster(_cluster(), refuse={"lo-3"})
    holds = Holds()
    run_cycle(cluster, PREEMPTING, None, holds)
    assert list(holds.held["hi"].resend) == ["lo-3"]
    base = cluster.base
    cluster.base = base.model_copy(
        update={
            "pods": tuple(p for p in base.pods if p.gang != "hi"),
            "gangs": tuple(g for g in base.gangs if g.name != "hi"),
        }
    )
    cluster.refuse.clear()
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "hi" in result.released and "lo-3" in result.preempted
    assert not holds.held and not holds.resend


def test_a_victim_broken_for_a_gang_not_held_is_evicted_again() -> None:
    """hi (2 x 4 cpu) takes n0 from lo (3 x 2 cpu) and n1 from lo and solo. lo-2's
    eviction fails where lo-0's and lo-1's go, and solo's only eviction fails: hi is not
    held (solo kept every pod), and nothing sent lo-2's eviction again, lo below
    minMember for good."""
    lo = [pod(f"lo-{i}").req(cpu=2).gang("lo").on(f"n{i // 2}") for i in range(3)]
    s = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*lo, pod("solo-0").req(cpu=2).gang("solo").on("n1")]
        + [pod(f"hi-{i}").req(cpu=4).gang("hi") for i in range(2)],
        [gang("lo", 3), gang("solo", 1), gang("hi", 2).priority(10)],
        [queue()],
    )
    cluster = GracefulCluster(s, refuse={"lo-2", "solo-0"})
    holds = Holds()
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert {"lo-2", "solo-0"} <= first.preempt_failed.keys() and "lo-0" in first.preempted
    assert "hi" not in holds.held and "lo-2" in holds.resend
    cluster.refuse.clear()
    again = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in again.preempted and "lo-2" not in holds.resend


def test_a_victim_broken_for_one_preemptor_is_evicted_again_for_another() -> None:
    """lo (3 x 1 cpu, minMember 2) runs lo-0 and lo-1 on n0 and lo-2 on n1. ha (2 x 1
    cpu) takes n0 and hb (1 x 1 cpu) n1, both from lo, whole. lo-2's eviction fails
    where lo-0's and lo-1's (for ha) go. Judged by hb's victims alone, lo was intact: hb
    was not held and lo-2 was never evicted again, lo below minMember for good (a chaos
    probe). lo is broken by the decision as a whole: hb is held and lo-2 sent again."""
    lo = [pod(f"lo-{i}").req(cpu=1).gang("lo").on("n0" if i < 2 else "n1") for i in range(3)]
    s = state(
        [node("n0").cap(cpu=2), node("n1").cap(cpu=1)],
        [
            *lo,
            *(pod(f"ha-{i}").req(cpu=1).gang("ha") for i in range(2)),
            pod("hb-0").req(cpu=1).gang("hb"),
        ],
        [gang("lo", 2), gang("ha", 2).priority(10), gang("hb", 1).priority(10)],
        [queue()],
    )
    cluster = GracefulCluster(s, refuse={"lo-2"})
    holds = Holds()
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert first.preempt_failed.keys() == {"lo-2"} and {"lo-0", "lo-1"} <= first.preempted.keys()
    assert {"ha", "hb"} <= holds.held.keys() and "lo-2" in holds.held["hb"].resend
    cluster.refuse.clear()
    again = run_cycle(cluster, PREEMPTING, None, holds)
    assert "lo-2" in again.preempted


def test_an_eviction_no_hold_waits_on_is_dropped_once_its_gang_is_whole_again() -> None:
    """lo-3's eviction is left to send again with no hold; lo's controller made lo-0..2
    again and a cycle bound them: lo runs at minMember, and lo-3 stays."""
    cluster = GracefulCluster(_cluster())
    holds = Holds(resend={"lo-3": ("preempted by gang hi", "n1")})
    s = cluster.snapshot()
    result = CycleResult(scheduler="cpsat")
    evict_again(cluster, holds, s.pods_by_name(), result, Gangs.of(s))
    assert not holds.resend and not result.preempted and not cluster.terminating
    holds.resend["lo-3"] = ("preempted by gang hi", "n1")
    evict_again(cluster, holds, s.pods_by_name(), result)  # no snapshot gangs: sent
    assert result.preempted == {"lo-3": "preempted by gang hi"}


def test_an_eviction_to_send_again_of_a_pod_the_snapshot_lacks_is_sent_not_dropped() -> None:
    """lo-3's eviction is left to send again; its node n1 left the snapshot (its Node
    deleted, lo-3 still bound to it). Dropped as gone, lo-3 ran below minMember once n1
    was back (a chaos probe): it is sent where the backend still holds it bound there
    (``Cluster.where_bound``); lo-1, gone, is not."""
    cluster = GracefulCluster(_cluster())
    # lo-1 is gone: deleted meanwhile, in no snapshot, and the backend has it nowhere.
    cluster.base = cluster.base.model_copy(
        update={"pods": tuple(p for p in cluster.base.pods if p.name != "lo-1")}
    )
    why = "preempted by gang hi"
    holds = Holds(resend={"lo-3": (why, "n1"), "lo-1": (why, "n0")})
    s = cluster.snapshot()
    without_n1 = {name: p for name, p in s.pods_by_name().items() if p.node_name != "n1"}
    result = CycleResult(scheduler="cpsat")
    evict_again(cluster, holds, without_n1, result)
    assert result.preempted == {"lo-3": why} and cluster.terminating == {"lo-3"}
    assert not holds.resend


def test_a_hold_whose_victims_never_go_is_released_and_its_nominations_cleared() -> None:
    cluster = GracefulCluster(_cluster())
    holds = Holds(timeout_s=60)
    run_cycle(cluster, PREEMPTING, None, holds)
    assert "hi" in holds.held
    assert cluster.nominations == {"hi-0": "n0", "hi-1": "n1"}
    cluster.now_s = 61
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "hi" in result.released
    assert "victims still running" in result.released["hi"]
    # Stale, a nomination would have the next leader hold the room again.
    assert cluster.nominations == {}
    assert not _recover(Holds(), cluster.snapshot())


def test_a_hold_on_a_node_tainted_since_is_released_before_its_bind() -> None:
    """Held, then its node tainted while the victims terminate: bound, the validator
    refused the gang as a solver's broken rule; now the hold goes, its nominations are
    cleared, and the gang is decided afresh."""
    cluster = GracefulCluster(_cluster())
    holds = Holds()
    run_cycle(cluster, PREEMPTING, None, holds)
    assert cluster.nominations == {"hi-0": "n0", "hi-1": "n1"}
    tainted = node("n0").cap(cpu=4).taint("maintenance").build()
    nodes = tuple(tainted if n.name == "n0" else n for n in cluster.base.nodes)
    cluster.base = cluster.base.model_copy(update={"nodes": nodes})
    cluster.grace_passes()
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert "may no longer use node n0" in result.released["hi"]
    assert not any(p.startswith("hi-") for p in result.bound)
    assert cluster.nominations == {}
    assert not result.rejected


def test_without_holds_no_eviction_is_sent() -> None:
    cluster = GracefulCluster(_cluster())
    result = run_cycle(cluster, PREEMPTING)
    assert not result.preempted and not cluster.terminating


def test_evictions_the_validator_rejects_are_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    def rogue(s: ClusterState, config: SolverConfig):  # type: ignore[no-untyped-def]
        decision = SCHEDULERS["cpsat"](s, config)
        # Evict one pod too few: lo would keep 1 of its minMember 4.
        evictions = dict(list(decision.evictions.items())[:3])
        return decision.model_copy(update={"evictions": evictions})

    monkeypatch.setitem(SCHEDULERS, "rogue", rogue)
    cluster = GracefulCluster(_cluster())
    settings = PREEMPTING.model_copy(update={"scheduler": "rogue"})
    result = run_cycle(cluster, settings, None, Holds())
    assert result.preemption_rejected.startswith("eviction")
    assert not cluster.terminating


def test_a_new_leader_keeps_the_room_nominated_before_it() -> None:
    """A failover between the evictions and the bind: the new leader holds the room its
    predecessor nominated (status.nominatedNodeName), so 'late', of higher priority,
    does not take it once the victims are gone; hi binds whole where it was nominated."""
    cluster = GracefulCluster(_cluster())
    run_cycle(cluster, PREEMPTING, None, Holds())  # the old leader evicts, then is gone
    new_leader = Holds()
    waiting = run_cycle(cluster, PREEMPTING, None, new_leader)
    assert not waiting.preempted and not waiting.bound
    assert set(new_leader.held) == {"hi"}
    assert new_leader.held["hi"].victim_nodes == {f"lo-{i}": f"n{i // 2}" for i in range(4)}
    assert waiting.holding["hi"].startswith("preempting: waiting for 4 evicted pod(s)")
    cluster.grace_passes()
    after = run_cycle(cluster, PREEMPTING, None, new_leader)
    assert after.bound == {"hi-0": "n0", "hi-1": "n1"}
    assert not new_leader.held


def test_a_new_leader_keeps_a_gang_waiting_for_its_queues_capability_waiting() -> None:
    cluster = _capped_queue()
    run_cycle(cluster, CAPPED, None, Holds())  # the old leader evicts lo, then is gone
    new_leader = Holds()
    waiting = run_cycle(cluster, CAPPED, None, new_leader)
    assert not waiting.bound and not waiting.rejected
    assert new_leader.held["hi2"].victim_nodes == {"lo-0": "n0"}  # its queue's, on n0
    cluster.grace_passes()
    bound = run_cycle(cluster, CAPPED, None, new_leader)
    assert sorted(bound.bound) == ["hi1-0", "hi2-0"]
    assert not bound.violations and not new_leader.held


def test_a_held_gang_whose_bind_fails_has_its_nominations_cleared() -> None:
    cluster = GracefulCluster(_cluster())
    holds = Holds()
    run_cycle(cluster, PREEMPTING, None, holds)
    cluster.grace_passes()
    cluster.fail_binds = {"hi-0"}
    failed = run_cycle(cluster, PREEMPTING, None, holds)
    assert "hi" in failed.rolled_back and not holds.held
    # Else the next leader would hold the room again for a hold that already failed.
    assert cluster.nominations == {}
    assert not _recover(Holds(), cluster.snapshot())


def test_a_nomination_of_a_gang_whose_podgroup_is_gone_holds_nothing() -> None:
    base = state(
        [node("n0").cap(cpu=4)],
        [
            pod("x-0").req(cpu=4).gang("ghost").nominated("n0"),
            pod("v-0").req(cpu=4).gang("v").on("n0").terminating(),
        ],
        [gang("v", 1)],
        [queue()],
    )
    holds = Holds()
    assert _recover(holds, base) == []
    assert holds.take_cleared(base) == ("x-0",)


def test_a_stale_nomination_is_cleared_until_the_snapshot_shows_it_gone() -> None:
    shown = state(
        [node("n0").cap(cpu=4)],
        [pod("hi-0").req(cpu=4).gang("hi").nominated("n0")],
        [gang("hi", 1)],
        [queue()],
    )
    holds = Holds()
    holds.add(Hold("hi", {"hi-0": "n0"}, {}, 0.0))
    holds.drop("hi", "released")
    # A clear that failed goes out again: asked for while the nomination shows.
    assert holds.take_cleared(shown) == ("hi-0",)
    assert holds.take_cleared(shown) == ("hi-0",)
    gone = shown.model_copy(
        update={"pods": tuple(p.model_copy(update={"nominated_node": None}) for p in shown.pods)}
    )
    assert holds.take_cleared(gone) == ("hi-0",)  # once more: a write may be in flight
    assert holds.take_cleared(gone) == ()


@pytest.mark.parametrize(
    ("n0", "queue_state"),
    [
        (None, "Open"),  # gone
        # A taint since the previous leader nominated: held, the validator refused the
        # bind as a broken rule (logged as a solver's bug would be) and every member was
        # told "predicate".
        (node("n0").cap(cpu=4).taint("maintenance"), "Open"),
        # A node whose object gangsat cannot read (``kube.unusable``: no pod slot), which
        # the pods, tolerating every taint, pass: the validator refused it on capacity.
        (node("n0").cap(cpu=4, pods=0).cordon(), "Open"),
        (node("n0").cap(cpu=4), "Closed"),  # its queue closed since: no new pods
    ],
    ids=["gone", "tainted", "no-room", "queue-closed"],
)
def test_a_nomination_the_gang_can_no_longer_use_holds_nothing_and_is_cleared(
    n0: NodeBuilder | None, queue_state: str
) -> None:
    hi = [pod(f"hi-{i}").req(cpu=4).gang("hi").nominated(f"n{i}") for i in range(2)]
    if n0 is not None and n0.build().unschedulable:
        hi = [p.tolerate(op="Exists") for p in hi]
    base = state(
        [node("n1").cap(cpu=4), *([n0] if n0 is not None else [])],
        hi,
        [gang("hi", 2)],
        [queue().state(queue_state)],
    )
    holds = Holds()
    assert _recover(holds, base) == []
    assert not holds.held
    assert holds.take_cleared(base) == ("hi-0", "hi-1")
    assert _recover(holds, base) == []  # once, at the first cycle
    # And a hold of this leader's term is released so too, before its bind.
    holds.add(Hold("hi", {"hi-0": "n0", "hi-1": "n1"}, {}, 0.0))
    assert "hi" in holds.refresh(base, Holds.by_name(base))
    assert not holds.held


def test_a_new_leader_without_the_nominations_binds_the_preemptor_whole_once_room_is_free() -> None:
    """As above, with the nominations lost (their writes failed): the new leader starts
    with no holds. While the victims terminate it evicts nothing more (they are no victims
    any more) and binds nothing partial; once they are gone the gang is placed as any
    other."""
    cluster = GracefulCluster(_cluster(), nominations=False)
    run_cycle(cluster, PREEMPTING, None, Holds())  # the old leader evicts, then is gone
    new_leader = Holds()
    waiting = run_cycle(cluster, PREEMPTING, None, new_leader)
    assert not waiting.preempted and not waiting.bound
    cluster.grace_passes()
    after = run_cycle(cluster, PREEMPTING, None, new_leader)
    bound_gangs = {p.rsplit("-", 1)[0] for p in after.bound}
    for gang_name in bound_gangs:  # whatever wins the freed room, whole gangs only
        members = [p for p in after.bound if p.startswith(gang_name + "-")]
        assert len(members) == 2
    assert bound_gangs


def test_a_backend_failing_to_evict_stops_nothing_and_holds_nothing() -> None:
    class Broken(GracefulCluster):
        def preempt(
            self, evictions: Mapping[str, str], again: bool = False
        ) -> dict[str, ClusterError]:
            raise RuntimeError("backend bug")

    cluster = Broken(_cluster())
    holds = Holds()
    result = run_cycle(cluster, PREEMPTING, None, holds)
    assert result.error is None
    assert set(result.preempt_failed) == {f"lo-{i}" for i in range(4)}
    assert not holds.held and not result.bound


def test_a_gang_waiting_for_its_victims_gets_none_of_its_other_pods_bound() -> None:
    """hi (6 pods, minMember 4, priority 10) evicts lo from n0 and holds 4 pods' room
    there; n1 has room for its other 2. While lo terminates, hi's held pods look bound to
    the solver: binding the 2 then would run them alone, below minMember."""
    lo = [pod(f"lo-{i}").req(cpu=1).gang("lo").on("n0") for i in range(4)]
    hi = [pod(f"hi-{i}").req(cpu=1).gang("hi") for i in range(6)]
    # n1 is taken (x) until hi's hold exists: hi goes through n0's victims.
    x = [pod(f"x-{i}").req(cpu=1).on("n1") for i in range(2)]
    cluster = GracefulCluster(
        state(
            [node("n0").cap(cpu=4), node("n1").cap(cpu=2)],
            [*lo, *hi, *x],
            [gang("lo", 4), gang("hi", 4).priority(10)],
            [queue()],
        )
    )
    holds = Holds()
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert set(first.preempted) == {f"lo-{i}" for i in range(4)}
    cluster.base = cluster.base.model_copy(
        update={"pods": tuple(p for p in cluster.base.pods if not p.name.startswith("x-"))}
    )
    waiting = run_cycle(cluster, PREEMPTING, None, holds)  # n1 free now, lo terminating
    assert not {p for p in waiting.bound if p.startswith("hi-")}
    assert "hi" in holds.held
    cluster.grace_passes()
    done = run_cycle(cluster, PREEMPTING, None, holds)
    assert len([p for p in done.bound if p.startswith("hi-")]) >= 4


def test_a_gang_whose_running_pods_all_terminate_is_not_topped_up() -> None:
    """g (minMember 4) has its 4 pods terminating (evicted) and 2 pending, with room for
    them: counted as members, the terminating 4 made the 2 look like a running gang's
    extras, and they were bound below minMember."""
    pods = [pod(f"g-{i}").req(cpu=1).gang("g").on("n0").terminating() for i in range(4)]
    pods += [pod(f"g-{i}").req(cpu=1).gang("g") for i in range(4, 6)]
    cluster = FakeCluster(
        state([node("n0").cap(cpu=4), node("n1").cap(cpu=2)], pods, [gang("g", 4)], [queue()])
    )
    result = run_cycle(cluster, PREEMPTING, None, Holds())
    assert result.bound == {}


class _NodeRefusesOnce(GracefulCluster):
    """The first bind of each pod in ``refuse_once`` fails for a cause another node cures."""

    def __init__(self, base: ClusterState, refuse_once: Iterable[str]) -> None:
        super().__init__(base)
        self.refuse_once = set(refuse_once)

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        refused = {p for p, _ in placements if p in self.refuse_once}
        self.refuse_once -= refused
        failures = super().bind([(p, n) for p, n in placements if p not in refused])
        for p in refused:
            failures[p] = ClusterError("NodeGone", "refused once", retry_elsewhere=True)
        return failures


def test_a_second_chance_does_not_take_the_room_held_for_a_preemptor() -> None:
    """H holds n1 and n2 (v-0 gone from n1, v-1 still terminating on n2). G's first bind
    of g-1 fails and gets a second chance: n1's free room is H's, so g-1 goes to n3,
    and H binds whole once v-1 is gone."""
    cluster = _NodeRefusesOnce(
        state(
            [node("n1").cap(cpu=2), node("n2").cap(cpu=2), node("n3").cap(cpu=2)],
            [
                pod("h-0").req(cpu=2).gang("H"),
                pod("h-1").req(cpu=2).gang("H"),
                pod("v-1").req(cpu=2).gang("V").on("n2").terminating(),
                pod("g-0").req(cpu=1).gang("G"),
                pod("g-1").req(cpu=1).gang("G"),
            ],
            [gang("H", 2).priority(10), gang("V", 2), gang("G", 2)],
            [queue()],
        ),
        refuse_once=["g-1"],
    )
    holds = Holds()
    holds.add(
        Hold(
            gang="H",
            pods={"h-0": "n1", "h-1": "n2"},
            victim_nodes={"v-0": "n1", "v-1": "n2"},
            since_s=0.0,
        )
    )
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert first.repaired == {"g-1": "n3"}
    assert first.bound["g-0"] == "n3"
    cluster.base = cluster.base.model_copy(
        update={"pods": tuple(p for p in cluster.base.pods if p.name != "v-1")}
    )
    second = run_cycle(cluster, PREEMPTING, None, holds)
    assert second.bound == {"h-0": "n1", "h-1": "n2"}
    assert not holds.held


def test_a_hold_whose_pod_is_being_deleted_is_released() -> None:
    # The room was held for hi-1, which its owner deleted while it waited: the hold goes
    # (else the room stays held, and is bound, for a pod that is going away).
    base = state(
        [node("n0").cap(cpu=4)],
        [pod("hi-0").req(cpu=4).gang("hi"), pod("hi-1").req(cpu=4).gang("hi").terminating()],
        [gang("hi", 2)],
        [queue()],
    )
    holds = Holds()
    holds.add(Hold("hi", {"hi-0": "n0", "hi-1": "n0"}, {}, 0.0))
    dropped = holds.refresh(base, {p.name: p for p in base.pods})
    assert dropped == {"hi": "pod hi-1 is no longer pending"}
    assert not holds.held


def test_a_recovered_hold_does_not_wait_for_pods_that_were_never_its_victims() -> None:
    # Its victims on n0 are gone already; a pod of its queue (no capability) terminates
    # elsewhere for another reason: the hold binds at once, as the old leader's would.
    base = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [
            pod("hi-0").req(cpu=4).gang("hi").nominated("n0"),
            pod("other-0").req(cpu=1).gang("other").on("n1").terminating(),
            pod("loose").req(cpu=1).on("n1").terminating(),  # no PodGroup: no queue's
        ],
        [gang("hi", 1).queue("b"), gang("other", 1).queue("b")],
        [queue("a"), queue("b")],
    )
    holds = Holds()
    assert _recover(holds, base) == ["hi"]
    assert holds.held["hi"].victim_nodes == {}
    ready, waiting = holds.split(holds.by_name(base))
    assert [h.gang for h in ready] == ["hi"] and not waiting


def test_a_victim_replaced_by_a_namesake_on_its_node_is_gone() -> None:
    """A Volcano job recreates its evicted pods under their names: lo-0's namesake,
    created after the eviction and placed on n0 again, is not the victim the hold waits
    for (it waited out its timeout, then let the preemptor go)."""
    hold = Hold(gang="hi", pods={"hi-0": "n0"}, victim_nodes={"lo-0": "n0"}, since_s=100.0)

    def pods(*p: PodBuilder) -> dict[str, Pod]:
        return {b.build().name: b.build() for b in p}

    victim = pod("lo-0").req(cpu=2).gang("lo").created(50.0)
    assert Holds.victims_left(hold, pods(victim.on("n0"))) == ["lo-0"]
    namesake = pod("lo-0").req(cpu=2).gang("lo").created(130.0).on("n0")
    assert Holds.victims_gone(hold, pods(namesake))
    assert Holds.victims_gone(hold, pods(pod("lo-0").created(50.0).on("n1")))
    assert Holds.victims_gone(hold, pods())


def test_a_preemptor_that_needs_its_queues_capability_waits_for_those_victims_too() -> None:
    """Queue q is capped at 4 cpu: filler holds 2 on n3, lo one pod on n1 and one on n2.
    hi (2 x 1 cpu) may only use n1, and needs both n1's room and the capability all of lo
    gives back. Held for lo-0 alone (the victim on its node), it was bound while lo-1 still
    ran, over the cap: the validator refused it, the hold was released, and another gang
    could take the room lo had left."""
    nodes = [
        node("n1").cap(cpu=2).label(zone="a"),
        node("n2").cap(cpu=2).label(zone="b"),
        node("n3").cap(cpu=2).label(zone="b"),
    ]
    pods = [
        pod("filler-0").req(cpu=1).gang("filler").on("n3"),
        pod("filler-1").req(cpu=1).gang("filler").on("n3"),
        pod("lo-0").req(cpu=1).gang("lo").on("n1"),
        pod("lo-1").req(cpu=1).gang("lo").on("n2"),
        *(pod(f"hi-{i}").req(cpu=1).gang("hi").selector(zone="a") for i in range(2)),
    ]
    gangs = [
        gang("filler", 2).queue("q").priority(2000),
        gang("lo", 2).queue("q"),
        gang("hi", 2).queue("q").priority(1000),
    ]
    cluster = GracefulCluster(state(nodes, pods, gangs, [queue("q").capability(cpu=4)]))
    holds = Holds()
    first = run_cycle(cluster, PREEMPTING, None, holds)
    assert set(first.preempted) == {"lo-0", "lo-1"}
    assert holds.held["hi"].victim_nodes == {"lo-0": "n1", "lo-1": "n2"}
    cluster.gone.add("lo-0")  # n1's victim gone, n2's still terminating
    cluster.terminating.discard("lo-0")
    waiting = run_cycle(cluster, PREEMPTING, None, holds)
    assert not waiting.bound and not waiting.violations and "hi" in holds.held
    assert waiting.holding["hi"] == "preempting: waiting for 1 evicted pod(s) to terminate on n2"
    cluster.grace_passes()
    done = run_cycle(cluster, PREEMPTING, None, holds)
    assert set(done.bound) == {"hi-0", "hi-1"} and not done.violations


def test_a_hold_waits_while_a_gang_mate_is_gated_and_ends_at_its_timeout() -> None:
    """Its victims gone, a held pod's gang-mate (not nominated: made again since, say) is
    gated: bound without it, the gang was short; so the hold waits, and ends past its
    timeout."""
    held = pod("g-0").req(cpu=1).gang("g").build()
    mate = pod("g-1").req(cpu=1).gang("g").build().model_copy(update={"gates": ("x/y",)})
    snapshot = state(
        nodes=[node("n0").cap(cpu=4, pods=110)], pods=[held, mate], gangs=[gang("g", 2)]
    )
    holds = Holds(timeout_s=60)
    holds.add(Hold("g", {"g-0": "n0"}, {}, 0.0, volumes=True))
    pods = holds.by_name(snapshot)
    assert holds.split(pods) == ([], [holds.held["g"]])
    assert holds.refresh(snapshot.model_copy(update={"now_s": 30.0}), pods) == {}
    late = holds.refresh(snapshot.model_copy(update={"now_s": 61.0}), pods)
    assert "volumes still being made" in late["g"] and not holds.held
