"""Which stranded pods a cycle deletes again (``rollbacks.Stranded``)."""

from __future__ import annotations

from collections.abc import Sequence

from adapter.cluster import ClusterError
from adapter.gangs import Gangs
from adapter.holds import Holds
from adapter.loop import LoopSettings, run_cycle
from adapter.rollbacks import Stranded
from solver.config import SolverConfig
from solver.model import ClusterState
from tests.adapter.test_loop import FakeCluster
from tests.adapter.test_preempting import PREEMPTING, GracefulCluster
from tests.builders import gang, node, pod, queue, state

SETTINGS = LoopSettings(solver=SolverConfig(time_limit_s=2.0, deterministic=True))


def test_only_pods_still_where_the_rollback_left_them_of_a_gang_still_short_are_due() -> None:
    """Gang g needs 4: g-0 and g-1 stayed bound on n1 after a rollback, g-2 was
    recreated (a namesake) and bound to n2, g-3 is being deleted after all."""
    s = state(
        nodes=[node("n1").cap(cpu=8), node("n2").cap(cpu=8)],
        pods=[
            pod("g-0").req(cpu=1).gang("g").on("n1"),
            pod("g-1").req(cpu=1).gang("g").on("n1"),
            pod("g-2").req(cpu=1).gang("g").on("n2"),
            pod("g-3").req(cpu=1).gang("g").on("n1").terminating(),
            pod("g-4").req(cpu=1).gang("g"),
        ],
        gangs=[gang("g", 4)],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(
        ["g-0", "g-1", "g-2", "g-3"], gangs, dict.fromkeys(["g-0", "g-1", "g-2", "g-3"], "n1")
    )
    # Three bound (g-0, g-1, the namesake g-2): short of 4, the rollback's two are due.
    assert stranded.due(s, gangs, bound={}) == ["g-0", "g-1"]
    assert set(stranded.pods) == {"g-0", "g-1"}
    # A cycle that binds g-4 makes the gang whole: nothing is due, nothing remembered.
    assert stranded.due(s, gangs, bound={"g-4": "n2"}) == [] and not stranded


def test_a_stranded_pod_the_snapshot_lacks_is_judged_not_forgotten() -> None:
    """g-1 is bound to n2, which left the snapshot (its Node deleted; it may come back,
    g-1 still bound to it). Forgotten, g-1 ran alone once n2 was back and g-0 deleted:
    both are due while g is short."""
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[pod("g-0").req(cpu=1).gang("g").on("n1"), pod("g-2").req(cpu=1).gang("g")],
        gangs=[gang("g", 3)],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(["g-0"], gangs, {"g-0": "n1"})
    stranded.pods["g-1"] = ("g", "n2")
    assert stranded.due(s, gangs, bound={}) == ["g-0", "g-1"]


def _stranded_gang() -> tuple[ClusterState, Stranded]:
    """Gang g needs 3: g-0 and g-1 stayed bound on n0 after a rollback (remembered as
    stranded), g-2 waits; n1 is free."""
    s = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [
            pod("g-0").req(cpu=1).gang("g").on("n0"),
            pod("g-1").req(cpu=1).gang("g").on("n0"),
            pod("g-2").req(cpu=1).gang("g"),
        ],
        [gang("g", 3)],
        [queue()],
    )
    stranded = Stranded()
    stranded.add(["g-0", "g-1"], Gangs.of(s), {"g-0": "n0", "g-1": "n0"})
    return s, stranded


class _Unanswered(FakeCluster):
    """g-2's bind lands, its answer lost: of unknown outcome."""

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        failures = super().bind(placements)
        if any(p == "g-2" for p, _ in placements):
            failures["g-2"] = ClusterError("ReadTimeoutError", "no answer", uncertain=True)
        return failures


def test_stranded_pods_wait_for_a_bind_of_unknown_outcome_that_would_make_their_gang_whole() -> (
    None
):
    """The cycle completes g with g-2, whose outcome is unknown. Stranded pods are
    deleted once their gang is known to be short: with g-2 landed it is whole, so they
    and g-2 wait until that is known (deleted at once, they left g with g-2 alone had it
    landed); it landed, and all three are kept."""
    s, stranded = _stranded_gang()
    cluster = _Unanswered(s)
    cluster.bound.update({"g-0": "n0", "g-1": "n0"})
    cluster.in_doubt.add("g-2")
    result = run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert result.evicted == [] and set(result.in_doubt) == {"g"}
    assert set(stranded.pods) == {"g-0", "g-1"} and stranded.doubts == {"g": {"g-2"}}
    cluster.in_doubt.clear()  # settled: it landed
    run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert set(cluster.bound) == {"g-0", "g-1", "g-2"} and not stranded


def test_stranded_pods_of_a_gang_nominated_to_preempt_wait_for_its_hold() -> None:
    """g (priority 10) is completed by evicting gang lo from n1: its stranded pods are
    kept while the hold waits for the victims, not deleted in the cycle that evicts for
    them."""
    lo = [pod(f"lo-{i}").req(cpu=2).gang("lo").on("n1") for i in range(2)]
    g = [
        pod("g-0").req(cpu=2).gang("g").on("n0"),
        pod("g-1").req(cpu=2).gang("g").on("n0"),
        pod("g-2").req(cpu=4).gang("g"),
    ]
    s = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*lo, *g],
        [gang("lo", 2), gang("g", 3).priority(10)],
        [queue()],
    )
    _kept_while_held(s, "g")


def _kept_while_held(s: ClusterState, held: str) -> None:
    """g-0 and g-1, stranded on n0, are kept while gang ``held`` waits for lo's pods,
    evicted for it, to leave n1."""
    cluster = GracefulCluster(s)
    cluster.bound.update({"g-0": "n0", "g-1": "n0"})
    stranded = Stranded()
    stranded.add(["g-0", "g-1"], Gangs.of(s), {"g-0": "n0", "g-1": "n0"})
    holds = Holds()
    result = run_cycle(cluster, PREEMPTING, None, holds, stranded)
    assert sorted(result.preempted) == ["lo-0", "lo-1"] and held in holds.held
    assert result.evicted == [] and set(stranded.pods) == {"g-0", "g-1"}


def test_a_stranded_gang_at_minmember_but_short_of_a_task_is_still_due() -> None:
    """Gang g needs 2, one ps and one worker. Its rollback left both workers bound (the
    ps's bind failed): two members, minMember met, but no ps. Counted by minMember
    alone they were forgotten, bound for good without their ps; they stay due until a
    cycle binds the ps."""
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[
            pod("g-w0").req(cpu=1).gang("g").task("worker").on("n1"),
            pod("g-w1").req(cpu=1).gang("g").task("worker").on("n1"),
            pod("g-ps").req(cpu=1).gang("g").task("ps"),
        ],
        gangs=[gang("g", 2).task_minimums(ps=1, worker=1)],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(["g-w0", "g-w1"], gangs, {"g-w0": "n1", "g-w1": "n1"})
    assert stranded.due(s, gangs, bound={}) == ["g-w0", "g-w1"]
    assert stranded.due(s, gangs, bound={"g-ps": "n1"}) == [] and not stranded


def test_a_stranded_pod_of_a_gang_that_ran_without_it_is_not_due() -> None:
    """Gang g (minMember 2, one ps) ran with g-ps and g-w0 before a cycle's extra worker
    g-w1 was stranded: the gang held minMember without it, so, as the rollback judges a
    running gang, it is whole: g-w1 is not deleted for a third worker it never had."""
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[
            pod("g-ps").req(cpu=1).gang("g").task("ps").on("n1"),
            pod("g-w0").req(cpu=1).gang("g").task("worker").on("n1"),
            pod("g-w1").req(cpu=1).gang("g").task("worker").on("n1"),
        ],
        gangs=[gang("g", 2).task_minimums(ps=1, worker=3)],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(["g-w1"], gangs, {"g-w1": "n1"})
    assert stranded.due(s, gangs, bound={}) == [] and not stranded


def test_a_gang_groups_stranded_pods_are_remembered_by_their_own_gang() -> None:
    """Master a (minMember 1) and worker b (1) start as one merged gang; b's bind fails and
    a's pod, bound, could not be deleted. At the next snapshot a holds its minimum with
    that pod, so the group is no longer merged: remembered by the merged name, which is
    gone, a's pod was deleted while b, then alone, was bound (a partial job). By a's own
    name, it is a's: whole, forgotten, kept."""
    merged = gang("gang-group:a,b", 2).task_minimums(a=1, b=1).build()
    merged = merged.model_copy(update={"members": ("a", "b")})
    s = state(
        [node("n0").cap(cpu=4)],
        [pod("a-0").req(cpu=1).gang("gang-group:a,b").task("a").on("n0")],
        [merged],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(["a-0"], gangs, {"a-0": "n0"})
    assert stranded.pods == {"a-0": ("a", "n0")}
    apart = state(
        [node("n0").cap(cpu=4)],
        [pod("a-0").req(cpu=1).gang("a").on("n0"), pod("b-0").req(cpu=1).gang("b")],
        [gang("a", 1), gang("b", 1)],
    )
    assert stranded.due(apart, Gangs.of(apart), bound={"b-0": "n1"}) == [] and not stranded


def _awaiting(bound: int) -> tuple[ClusterState, Gangs, Stranded]:
    """Gang g of 3 on n1 with its first ``bound`` pods bound; g-0 and g-1, bound by a
    cycle whose bind of g-2 was of unknown outcome, wait for it."""
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[
            pod(f"g-{i}").req(cpu=1).gang("g").on("n1")
            if i < bound
            else pod(f"g-{i}").req(cpu=1).gang("g")
            for i in range(3)
        ],
        gangs=[gang("g", 3)],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.await_doubts(["g-0", "g-1"], gangs, {"g-0": "n1", "g-1": "n1"}, ["g-2"])
    return s, gangs, stranded


def test_pods_kept_for_a_bind_of_unknown_outcome_wait_for_it_then_are_judged() -> None:
    """While g-2's bind is unsettled (the snapshot shows it bound where it was sent,
    assumed) nothing is due or forgotten, though the gang looks whole; settled and not
    landed (g-2 pending), g-0 and g-1 are due."""
    assumed, gangs, stranded = _awaiting(bound=3)
    assert stranded.doubts == {"g": {"g-2"}}
    assert stranded.due(assumed, gangs, bound={}, unsettled={"g-2"}) == []
    assert set(stranded.pods) == {"g-0", "g-1"} and stranded.doubts == {"g": {"g-2"}}
    lapsed, gangs, _ = _awaiting(bound=2)
    assert stranded.due(lapsed, gangs, bound={}) == ["g-0", "g-1"]
    assert not stranded.doubts


def test_pods_kept_for_a_bind_that_landed_are_forgotten() -> None:
    landed, gangs, stranded = _awaiting(bound=3)
    assert stranded.due(landed, gangs, bound={}, unsettled=set()) == []
    assert not stranded and not stranded.doubts


def _gang_of_three(on: dict[str, str]) -> tuple[ClusterState, Gangs]:
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[
            pod(f"g-{i}").req(cpu=1).gang("g").on(on[f"g-{i}"])
            if f"g-{i}" in on
            else pod(f"g-{i}").req(cpu=1).gang("g")
            for i in range(3)
        ],
        gangs=[gang("g", 3)],
    )
    return s, Gangs.of(s)


def test_a_bind_in_doubt_that_landed_is_deleted_with_the_rest_of_a_gang_still_short() -> None:
    """g-0 bound, g-1 and g-2 in doubt. g-1 landed, g-2 did not (its doubt lapsed, its
    next bind refused): the gang is short, and g-1 goes with g-0. Only g-0 was
    remembered, and g-1 ran alone."""
    _, gangs = _gang_of_three({"g-0": "n1", "g-1": "n1", "g-2": "n1"})
    stranded = Stranded()
    stranded.await_doubts(["g-0"], gangs, {"g-0": "n1"}, ["g-1", "g-2"])
    settled, gangs = _gang_of_three({"g-0": "n1", "g-1": "n1"})
    assert stranded.due(settled, gangs, bound={}) == ["g-0", "g-1"]


def test_a_doubt_that_landed_on_a_node_the_snapshot_lacks_is_judged_not_forgotten() -> None:
    """g-0 and g-2 kept, g-1 in doubt; it landed on n2, whose Node was deleted then (g-1
    still bound to it): g-1 is in no snapshot, and g is short. Forgotten, g-1 ran alone
    once n2 was back, g-0 and g-2 deleted (a chaos probe): it goes with them."""
    _, gangs = _gang_of_three({"g-0": "n1", "g-2": "n1"})
    stranded = Stranded()
    stranded.await_doubts(["g-0", "g-2"], gangs, {"g-0": "n1", "g-2": "n1"}, ["g-1"])
    without_n2 = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[pod(f"g-{i}").req(cpu=1).gang("g").on("n1") for i in (0, 2)],
        gangs=[gang("g", 3)],
    )
    gangs = Gangs.of(without_n2)
    # Where it did not land (deleted, or pending but in no snapshot), it is not judged.
    kept = Stranded(pods=dict(stranded.pods), doubts={"g": {"g-1"}})
    assert kept.due(without_n2, gangs, bound={}, where_bound=lambda pods: {}) == ["g-0", "g-2"]
    bound_on_n2 = {"g-1": "n2"}
    due = stranded.due(without_n2, gangs, bound={}, where_bound=lambda pods: bound_on_n2)
    assert due == ["g-0", "g-1", "g-2"]


def test_a_pod_bound_while_its_gang_waits_for_a_doubt_is_judged_with_it() -> None:
    """While g-2's bind is in doubt, a cycle binds g-1 (its own doubt lapsed): g-2 never
    landed, and g-1 goes with g-0. Not remembered, it ran alone."""
    assumed, gangs = _gang_of_three({"g-0": "n1", "g-2": "n1"})
    stranded = Stranded()
    stranded.await_doubts(["g-0"], gangs, {"g-0": "n1"}, ["g-1", "g-2"])
    assert stranded.due(assumed, gangs, bound={"g-1": "n1"}, unsettled={"g-2"}) == []
    lapsed, gangs = _gang_of_three({"g-0": "n1", "g-1": "n1"})
    assert stranded.due(lapsed, gangs, bound={}) == ["g-0", "g-1"]


def test_a_waiting_gang_waits_for_a_later_bind_of_unknown_outcome_too() -> None:
    """g waits for g-2; a cycle meanwhile binds g-3 (an extra), of unknown outcome too
    (the gang was not short then: g-2 showed bound). g-2 lapses while g-3 is unsettled,
    shown bound: judged then, the gang looked whole and was forgotten, and g-3 could
    lapse after; it waits for g-3, then is judged with it."""
    waiting = state(
        [node("n1").cap(cpu=8)],
        [pod(f"g-{i}").req(cpu=1).gang("g").on("n1") for i in range(4) if i != 2]
        + [pod("g-2").req(cpu=1).gang("g")],
        [gang("g", 3)],
    )
    gangs = Gangs.of(waiting)
    stranded = Stranded()
    stranded.await_doubts(["g-0", "g-1"], gangs, {"g-0": "n1", "g-1": "n1"}, ["g-2"])
    assert stranded.due(waiting, gangs, bound={}, unsettled={"g-3"}) == []
    assert stranded.doubts == {"g": {"g-2", "g-3"}} and set(stranded.pods) == {"g-0", "g-1"}
    both_lapsed, gangs = _gang_of_three({"g-0": "n1", "g-1": "n1"})
    assert stranded.due(both_lapsed, gangs, bound={}) == ["g-0", "g-1"]


class _LostAnswer(FakeCluster):
    """g-2's bind lands, its answer lost, and the fake keeps its outcome unknown until the
    test settles it (``in_doubt``)."""

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        failures = super().bind(placements)
        if any(p == "g-2" for p, _ in placements):
            failures["g-2"] = ClusterError("ReadTimeoutError", "no answer", uncertain=True)
            self.in_doubt.add("g-2")
        return failures


def _fresh_gang() -> ClusterState:
    return state(
        [node("n0").cap(cpu=4)],
        [pod(f"g-{i}").req(cpu=1).gang("g") for i in range(3)],
        [gang("g", 3)],
        [queue()],
    )


def test_a_gang_short_only_of_a_bind_of_unknown_outcome_is_kept_until_it_is_settled() -> None:
    cluster = _LostAnswer(_fresh_gang())
    stranded = Stranded()
    first = run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert first.evicted == [] and set(first.in_doubt) == {"g"}
    assert set(cluster.bound) == {"g-0", "g-1", "g-2"}
    # Still unknown: kept, though the snapshot shows the gang whole.
    second = run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert second.evicted == [] and set(stranded.pods) == {"g-0", "g-1"}
    cluster.in_doubt.clear()  # the watch showed it landed
    run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert set(cluster.bound) == {"g-0", "g-1", "g-2"} and not stranded


def test_without_a_memory_for_later_cycles_a_gang_in_doubt_is_rolled_back_at_once() -> None:
    cluster = _LostAnswer(_fresh_gang())
    result = run_cycle(cluster, SETTINGS, None, Holds())
    assert sorted(result.evicted) == ["g-0", "g-1", "g-2"] and result.in_doubt == {}


def test_a_gang_short_of_a_definite_failure_too_is_rolled_back_at_once() -> None:
    """g-1's bind is refused, g-2's of unknown outcome: landed or not, the gang is short,
    so nothing is kept for g-2."""
    cluster = _LostAnswer(_fresh_gang(), fail_binds={"g-1"})
    stranded = Stranded()
    result = run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert sorted(result.evicted) == ["g-0", "g-2"] and result.in_doubt == {}
    assert not stranded


class _GroupUnanswered(_LostAnswer):
    """Gangs x (2 x 1 cpu) and y (1 x 2 cpu), one Koordinator GangGroup (merged while
    both are short, as ``gang_groups`` merges them); y-0's answer is lost."""

    def __init__(self) -> None:
        super().__init__(state([node("n0").cap(cpu=4)], [], [], [queue()]))

    def snapshot(self, again: bool = False) -> ClusterState:
        own, cpu = {"x-0": "x", "x-1": "x", "y-0": "y"}, {"x-0": 1, "x-1": 1, "y-0": 2}
        merged = len(self.bound) == 0
        pods = []
        for name, g in own.items():
            p = pod(name).req(cpu=cpu[name])
            p = p.gang("gang-group:x,y").task(g) if merged else p.gang(g)
            pods.append(p.on(self.bound[name]) if name in self.bound else p)
        group = gang("gang-group:x,y", 3).task_minimums(x=2, y=1).build()
        gangs = (
            [group.model_copy(update={"members": ("x", "y")})]
            if merged
            else [gang("x", 2), gang("y", 1)]
        )
        return state([node("n0").cap(cpu=4)], pods, gangs, [queue()])

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        failures = FakeCluster.bind(self, placements)
        if any(p == "y-0" for p, _ in placements):
            failures["y-0"] = ClusterError("ReadTimeoutError", "no answer", uncertain=True)
            self.in_doubt.add("y-0")
        return failures


def test_a_gang_group_short_of_a_bind_of_unknown_outcome_is_rolled_back_at_once() -> None:
    """Its gangs are remembered and judged each on its own: kept, x (at its minimum) was
    forgotten once y-0's doubt lapsed, x running without y for good."""
    cluster = _GroupUnanswered()
    stranded = Stranded()
    result = run_cycle(cluster, SETTINGS, None, Holds(), stranded)
    assert result.in_doubt == {} and sorted(result.evicted) == ["x-0", "x-1", "y-0"]
    assert cluster.bound == {} and not stranded


def test_a_gang_groups_stranded_gang_is_whole_only_with_every_gang_of_its_group() -> None:
    """Master a (minMember 1) and worker b (2) started as one merged gang; b's binds
    failed, and a's pod, bound, could not be deleted. At the next snapshot a holds its own
    minimum, so the group is no longer merged, but b is short: a's pod is due (judged on
    its own, a ran while its workers never could). Once a cycle binds b's minimum, the
    group is whole: nothing is due, nothing remembered."""
    merged = gang("gang-group:a,b", 3).task_minimums(a=1, b=2).build()
    merged = merged.model_copy(update={"members": ("a", "b")})
    s = state(
        [node("n0").cap(cpu=4)],
        [pod("a-0").req(cpu=1).gang("gang-group:a,b").task("a").on("n0")],
        [merged],
    )
    stranded = Stranded()
    stranded.add(["a-0"], Gangs.of(s), {"a-0": "n0"})
    apart = state(
        [node("n0").cap(cpu=4)],
        [
            pod("a-0").req(cpu=1).gang("a").on("n0"),
            pod("b-0").req(cpu=1).gang("b"),
            pod("b-1").req(cpu=1).gang("b"),
        ],
        [gang("a", 1), gang("b", 2)],
    )
    gangs = Gangs.of(apart)
    assert stranded.due(apart, gangs, bound={"b-0": "n0"}) == ["a-0"]
    assert stranded.due(apart, gangs, bound={"b-0": "n0", "b-1": "n0"}) == [] and not stranded
    assert not stranded.groups


def test_a_gang_groups_stranded_gang_is_judged_with_its_group_merged_again() -> None:
    """As above, but a lost its pod a-1 too, so a and b are both short and merged again:
    a's stranded pod is due until a cycle binds the merged group whole."""
    merged = gang("gang-group:a,b", 3).task_minimums(a=2, b=1).build()
    merged = merged.model_copy(update={"members": ("a", "b")})
    s = state(
        [node("n0").cap(cpu=4)],
        [
            pod("a-0").req(cpu=1).gang("gang-group:a,b").task("a").on("n0"),
            pod("a-1").req(cpu=1).gang("gang-group:a,b").task("a"),
            pod("b-0").req(cpu=1).gang("gang-group:a,b").task("b"),
        ],
        [merged],
    )
    gangs = Gangs.of(s)
    stranded = Stranded()
    stranded.add(["a-0"], gangs, {"a-0": "n0"})
    assert stranded.due(s, gangs, bound={"b-0": "n0"}) == ["a-0"]
    assert stranded.due(s, gangs, bound={"b-0": "n0", "a-1": "n0"}) == [] and not stranded


def test_a_gang_groups_stranded_pods_wait_for_its_hold_too() -> None:
    """As above, g a gang of GangGroup [g, h] merged (both short): its stranded pods are
    remembered by g, the hold by the group's name; they wait for the hold all the same."""
    lo = [pod(f"lo-{i}").req(cpu=2).gang("lo").on("n1") for i in range(2)]
    grouped = [
        pod("g-0").req(cpu=2).gang("gang-group:g,h").task("g").on("n0"),
        pod("g-1").req(cpu=2).gang("gang-group:g,h").task("g").on("n0"),
        pod("g-2").req(cpu=2).gang("gang-group:g,h").task("g"),
        pod("h-0").req(cpu=2).gang("gang-group:g,h").task("h"),
    ]
    group = gang("gang-group:g,h", 4).task_minimums(g=3, h=1).priority(10).build()
    s = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*lo, *grouped],
        [gang("lo", 2), group.model_copy(update={"members": ("g", "h")})],
        [queue()],
    )
    _kept_while_held(s, "gang-group:g,h")
