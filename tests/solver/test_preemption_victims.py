"""What evicting a victim gives, on every path: a running gang this decision grows is not
evicted whole (the validator refuses a decision that does it), on a node holding more
than its allocatable an eviction first repays that, and a victim's room goes only to
pods that may take from it."""

from __future__ import annotations

import pytest

from solver.config import MAX_WEIGHT, SHARE_SCALE, ObjectiveWeights, SolverConfig
from solver.cpsat import solve
from solver.decision import Decision, SolveStatus
from solver.freed_room import hall_sets
from solver.model import ClusterState
from solver.problem import prepare
from solver.schedulers import schedule
from solver.validate import check
from solver.victims import VictimGroup, running_victims, used_groups
from tests.builders import gang, node, pod, queue, state
from tests.solver.test_preemption import PATHS, _decide


def _elastic_victim() -> ClusterState:
    """v (minMember 2) runs 2 x 2 cpu on n0 and has a third pod pending (1 cpu), which
    fits on n1; hi (priority 10) needs all of n0. Evicting v whole for hi while placing
    v-2 on n1 would leave v running one pod, below its minMember."""
    return state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=2)],
        [
            pod("v-0").req(cpu=2).gang("v").on("n0").started(0),
            pod("v-1").req(cpu=2).gang("v").on("n0").started(0),
            pod("v-2").req(cpu=1).gang("v"),
            pod("hi-0").req(cpu=4).gang("hi"),
        ],
        [gang("v", 2), gang("hi", 1).priority(10)],
        [queue()],
        now_s=600,
    )


def _pods_left(st_: ClusterState, decision: Decision, gang_name: str) -> int:
    members = {p.name for p in st_.pods if p.gang == gang_name}
    running = {p.name for p in st_.bound_pods() if p.name in members}
    given = (set(decision.placements) | set(decision.nominated)) & members
    return len(running - set(decision.evictions)) + len(given)


@pytest.mark.parametrize("how", PATHS)
def test_a_victim_evicted_whole_is_not_given_its_pending_pod(how: str) -> None:
    st_ = _elastic_victim()
    decision = _decide(st_, how)
    left = _pods_left(st_, decision, "v")
    assert left == 0 or left >= 2
    assert check(st_, decision) == []
    # Either hi preempts v whole (and v-2 waits), or v grows and hi waits: whole gangs
    # both ways. The joint model does the first; placement first grows v, and a gang
    # growing this cycle is no victim after it.
    assert ("hi-0" in decision.nominated) == ("v-2" not in decision.placements)


def test_the_validator_refuses_a_victim_left_below_minmember_by_its_own_growth() -> None:
    st_ = _elastic_victim()
    decision = Decision(
        scheduler="test",
        status=SolveStatus.GREEDY,
        placements={"v-2": "n1"},
        evictions={"v-0": "preempted", "v-1": "preempted"},
        nominated={"hi-0": "n0"},
    )
    violations = check(st_, decision)
    assert any(v.subject == "v" and "below minMember" in v.message for v in violations)


def _overcommitted(gpu: bool) -> ClusterState:
    """Node n's allocatable shrank below what runs there: 2 cpu, 3 bound. ``gpu``: d (no
    gang) holds the cpu and v a GPU, which h wants; else v holds the 3 cpu and h wants
    them, which n no longer has."""
    if gpu:
        pods = [
            pod("d").req(cpu=3).on("n"),
            pod("v").req(gpu=1).gang("v").on("n").started(0),
            pod("h").req(gpu=1).gang("h"),
        ]
        nodes = [node("n").cap(cpu=2, gpu=1)]
    else:
        pods = [pod("v").req(cpu=3).gang("v").on("n").started(0), pod("h").req(cpu=3).gang("h")]
        nodes = [node("n").cap(cpu=2)]
    return state(nodes, pods, [gang("v", 1), gang("h", 1).priority(10)], [queue()], now_s=600)


@pytest.mark.parametrize("how", PATHS)
def test_an_eviction_on_an_overcommitted_node_first_repays_it(how: str) -> None:
    # Evicting v leaves 2 cpu: h (3 cpu) would not fit, so nothing is evicted for it.
    st_ = _overcommitted(gpu=False)
    decision = _decide(st_, how)
    assert decision.evictions == {} and decision.nominated == {}
    assert check(st_, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_a_node_over_in_one_resource_still_serves_another(how: str) -> None:
    # n is over in cpu, which h does not ask for: v's GPU is h's once v is gone.
    st_ = _overcommitted(gpu=True)
    decision = _decide(st_, how)
    assert set(decision.evictions) == {"v"} and decision.nominated == {"h": "n"}
    assert check(st_, decision) == []


def _two_victims_one_node() -> ClusterState:
    """n0 runs v1 and v2 (4 cpu each, priority 0) and has 4 cpu free. hi (priority 10, 4
    cpu) may take from either; y and z (priority 0, 4 cpu, more memory, so worth more
    than a victim) from neither. With both victims gone for hi, y and z fit on n0 only
    in the free room and one victim's room: that room is not theirs to take."""
    return state(
        [node("n0").cap(cpu=12, memory="32Gi")],
        [
            pod("v1-0").req(cpu=4, memory="1Gi").gang("v1").on("n0").started(0),
            pod("v2-0").req(cpu=4, memory="1Gi").gang("v2").on("n0").started(0),
            pod("hi-0").req(cpu=4, memory="1Gi").gang("hi"),
            pod("y-0").req(cpu=4, memory="14Gi").gang("y"),
            pod("z-0").req(cpu=4, memory="13Gi").gang("z"),
        ],
        [gang("v1", 1), gang("v2", 1), gang("hi", 1).priority(10), gang("y", 1), gang("z", 1)],
        [queue()],
        now_s=600,
    )


@pytest.mark.parametrize("how", PATHS)
def test_pods_use_no_room_of_a_victim_they_may_not_take_from(how: str) -> None:
    # Evictions free to make, overuse free: only the rule stops a second eviction. The
    # joint model evicted both, hi serving each, and gave z the second victim's room.
    st_ = _two_victims_one_node()
    weights = ObjectiveWeights(disruption=0, disruption_per_hour=0, overuse=0)
    config = SolverConfig(preemption=True, weights=weights)
    if how == "gang-greedy":
        decision = schedule(st_, how, config)
    else:
        decision = solve(st_, config, joint=how == "joint")
    assert len(decision.evictions) <= 1
    assert "z-0" not in decision.nominated
    assert check(st_, decision) == []


def test_the_validator_refuses_pods_in_the_room_of_a_victim_they_may_not_take_from() -> None:
    st_ = _two_victims_one_node()
    decision = Decision(
        scheduler="test",
        status=SolveStatus.GREEDY,
        placements={"y-0": "n0"},
        evictions={"v1-0": "preempted", "v2-0": "preempted"},
        nominated={"hi-0": "n0", "z-0": "n0"},
    )
    violations = check(st_, decision)
    assert [(v.kind, v.subject) for v in violations] == [("nomination", "n0")]
    assert "may not take from" in violations[0].message
    # hi alone in the room of both: nothing to refuse.
    fair = decision.model_copy(update={"nominated": {"hi-0": "n0"}})
    assert check(st_, fair) == []


def test_gang_greedy_gives_a_later_preemptor_no_room_an_earlier_one_freed_for_itself() -> None:
    """a (priority 10, only n0) evicts v (priority 5) and uses half of n0; b (priority 3,
    3 x 2 cpu) may take from w on n1 but not from v. n1 holds two of b's pods: the third
    went into v's leftover room on n0."""
    st_ = state(
        [node("n0").cap(cpu=4).label(zone="a"), node("n1").cap(cpu=4)],
        [
            pod("v-0").req(cpu=4).gang("v").on("n0").started(0),
            pod("w-0").req(cpu=4).gang("w").on("n1").started(0),
            pod("a-0").req(cpu=2).gang("a").selector(zone="a"),
            *[pod(f"b-{i}").req(cpu=2).gang("b") for i in range(3)],
        ],
        [
            gang("v", 1).priority(5),
            gang("w", 1).priority(1),
            gang("a", 1).priority(10),
            gang("b", 3).priority(3),
        ],
        [queue()],
        now_s=600,
    )
    decision = schedule(st_, "gang-greedy", SolverConfig(preemption=True))
    assert decision.nominated == {"a-0": "n0"}
    assert set(decision.evictions) == {"v-0"}
    assert check(st_, decision) == []


def test_hall_sets_are_the_unions_of_what_the_pods_may_take() -> None:
    every = frozenset({0, 1, 2})
    sets = hall_sets([frozenset({0}), frozenset({1}), frozenset(), every], every)
    assert sets == [frozenset(), frozenset({0}), frozenset({1}), frozenset({0, 1})]
    # Cut to the node's victims; the whole set is the node's capacity row, not one of these.
    assert hall_sets([frozenset({0, 7})], frozenset({0})) == []
    # Too many unions to tell apart: the caller falls back to the free room.
    many = frozenset(range(10))
    assert hall_sets([frozenset({i}) for i in range(10)], many) is None


@pytest.mark.parametrize("how", PATHS)
def test_a_pod_outside_any_podgroup_may_preempt_and_the_validator_agrees(how: str) -> None:
    # A gang of one in the default queue: the validator looked its gang up, found none,
    # and voided the cycle's every eviction.
    st_ = state(
        [node("n0").cap(cpu=4)],
        [
            pod("lo-0").req(cpu=4).gang("lo").on("n0").started(0),
            pod("plain").req(cpu=4).priority(100),
        ],
        [gang("lo", 1)],
        [queue()],
        now_s=600,
    )
    decision = _decide(st_, how)
    assert set(decision.evictions) == {"lo-0"} and decision.nominated == {"plain": "n0"}
    assert check(st_, decision) == []


def test_running_victims_are_fresh_each_call_and_renumbered_without_the_skipped() -> None:
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [
            *(pod(f"a-{i}").req(cpu=1).gang("a").on(f"n{i}") for i in range(2)),
            *(pod(f"b-{i}").req(cpu=1).gang("b").on(f"n{i}") for i in range(2)),
        ],
        [gang("a", 2), gang("b", 2)],
        [queue()],
    )
    problem = prepare(st_)
    w = ObjectiveWeights()
    victims, groups = running_victims(problem, w)
    assert [v.name for v in victims] == ["a", "b"] and len(groups) == 4
    victims[0].evict_cost = 99  # callers price and extend what they are given
    victims.append(victims[0])
    skipped, skipped_groups = running_victims(problem, w, skip={"a"})
    assert [(v.name, v.index) for v in skipped] == [("b", 0)]
    assert [skipped_groups[g].victim for g in skipped[0].groups] == [0, 0]
    assert sorted(skipped_groups[g].pods for g in skipped[0].groups) == [("b-0",), ("b-1",)]
    again, _ = running_victims(problem, w)
    assert [(v.name, v.evict_cost) for v in again] == [("a", 0), ("b", 0)]
    # Each victim is built once per cycle, for the kinds asked first: what callers do to
    # what they were given (renumber and drop groups, price) reaches no later call.
    cycle = prepare(st_)
    first, first_groups = running_victims(cycle, w, kinds={(again[0].queue, again[0].priority)})
    used_groups(first, first_groups, set())  # every group dropped, the lists renumbered
    first[0].evict_cost = 5
    later, later_groups = running_victims(cycle, w)
    fresh, fresh_groups = running_victims(prepare(st_), w)
    assert later == fresh and [v.groups for v in later] == [[0, 1], [2, 3]]

    def read(groups: list[VictimGroup]) -> list[tuple[object, ...]]:
        return [(g.victim, g.node, g.pods, g.cost, g.demand.tolist()) for g in groups]

    assert read(later_groups) == read(fresh_groups)
    running_victims(cycle, w, skip={"a"})  # renumbers b's groups in its own lists only
    assert [v.groups for v in later] == [[0, 1], [2, 3]]


def test_a_victims_price_stays_inside_int64_where_its_node_shrank_below_it() -> None:
    # lo holds far more of x than the schedulable nodes have (its node's allocatable
    # shrank, a device plugin restarted): its share, uncapped, times the heaviest
    # weights overflowed the objective, and the cycle raised.
    weights = ObjectiveWeights(**dict.fromkeys(ObjectiveWeights.model_fields, MAX_WEIGHT))
    x = "example.com/x"
    st_ = state(
        [
            node("n0").cap(cpu=204, pods=2000, **{x: 1}),
            node("n1").cap(cpu=400, pods=2000, **{x: 10**12}).cordon(),
        ],
        [
            *(pod(f"lo-{i}").req(cpu="1", **{x: 10**9}).gang("lo").on("n0") for i in range(200)),
            *(pod(f"hi-{i}").req(cpu="10").gang("hi") for i in range(8)),
        ],
        [gang("lo", 200).priority(5), gang("hi", 8).priority(10)],
        [queue()],
    )
    victims, _ = running_victims(prepare(st_), weights)
    assert victims[0].value == SHARE_SCALE
    for scheduler in ("cpsat", "greedy", "gang-greedy"):
        config = SolverConfig(weights=weights, time_limit_s=0.5, preemption=True)
        decision = schedule(st_, scheduler, config)
        assert check(st_, decision) == []
