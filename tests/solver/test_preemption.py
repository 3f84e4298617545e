"""Preemption and reclaim on hand-made clusters whose right answer can be worked out."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.config import ObjectiveWeights, SolverConfig
from solver.cpsat import solve
from solver.decision import Decision, SolveStatus
from solver.greedy_preemption import apply_withdrawals, greedy_preempt
from solver.joint import joint_stage
from solver.model import ClusterState
from solver.objective import coefficients
from solver.objective import score as objective_score
from solver.placement import Placer
from solver.preemption import preempt
from solver.problem import prepare
from solver.schedulers import schedule
from solver.search import OPTIMAL_GAP, Search
from solver.validate import check
from solver.victims import Preemption
from tests.builders import gang, node, pod, queue, state

PREEMPT = SolverConfig(preemption=True)
SCHEDULERS = ["cpsat", "gang-greedy"]


def _running(name: str, size: int, cpu: int, nodes: list[str], started: float = 0.0) -> list:
    return [
        pod(f"{name}-{i}").req(cpu=cpu).gang(name).on(nodes[i % len(nodes)]).started(started)
        for i in range(size)
    ]


def _pending(name: str, size: int, cpu: int) -> list:
    return [pod(f"{name}-{i}").req(cpu=cpu).gang(name) for i in range(size)]


def _evicted_gangs(decision: Decision) -> Counter[str]:
    return Counter(p.rsplit("-", 1)[0] for p in decision.evictions)


def _priority_cluster(min_member: int = 4, **kw: object) -> ClusterState:
    """Two 4-cpu nodes full of a low-priority gang (4 x 2 cpu); a high-priority gang of
    2 x 4 cpu waits."""
    hi = gang("hi", 2).priority(10)
    lo = gang("lo", min_member)
    return state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("lo", 4, 2, ["n0", "n0", "n1", "n1"]), *_pending("hi", 2, 4)],
        [lo, hi],
        [queue()],
        now_s=600,
    )


def test_without_preemption_nothing_is_evicted() -> None:
    decision = solve(_priority_cluster())
    assert not decision.evictions and not decision.nominated
    assert not decision.placements


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_higher_priority_gang_evicts_a_whole_lower_one_and_is_nominated(scheduler: str) -> None:
    st_ = _priority_cluster()
    decision = schedule(st_, scheduler, PREEMPT)
    assert set(decision.evictions) == {f"lo-{i}" for i in range(4)}
    assert all("preempted by gang hi" in why for why in decision.evictions.values())
    assert sorted(decision.nominated.values()) == ["n0", "n1"]
    assert not decision.placements  # bound once the victims are gone
    assert decision.terms["disruption"] < 0
    assert check(st_, decision) == []
    if scheduler == "cpsat":  # the joint model reports its solve as a stage
        [lp] = [s for s in decision.stages if s.name == "joint-lp"]
        [guided] = [s for s in decision.stages if s.name == "joint-lp-guided"]
        assert guided.status == "OPTIMAL" and guided.objective is not None
        # The LP's bound is on the nominated gang's value too: the decision is at it.
        assert lp.bound is not None and guided.objective <= lp.bound
        assert decision.bound == lp.bound and decision.status is SolveStatus.OPTIMAL
        assert decision.gap is not None and decision.gap <= OPTIMAL_GAP


def test_above_the_node_level_limit_preemption_follows_placement() -> None:
    """Where the node-level model would not fit in a cycle, victims are decided by the
    preemption model after placement, to the same effect here."""
    st_ = _priority_cluster()
    decision = solve(st_, SolverConfig(preemption=True, max_node_level_pairs=0))
    assert set(decision.evictions) == {f"lo-{i}" for i in range(4)}
    assert sorted(decision.nominated.values()) == ["n0", "n1"]
    assert [s.name for s in decision.stages if s.name in ("joint", "preemption")] == ["preemption"]
    assert check(st_, decision) == []


PATHS = ["joint", "sequential", "gang-greedy"]


def _decide(st_: ClusterState, how: str) -> Decision:
    """Preemption decided jointly with placement, after it, or by gang-greedy's actions."""
    if how == "gang-greedy":
        return schedule(st_, "gang-greedy", PREEMPT)
    return solve(st_, PREEMPT, joint=how == "joint")


@pytest.mark.parametrize("how", PATHS)
def test_a_victim_is_evicted_for_its_queues_capability_not_only_for_node_room(
    how: str,
) -> None:
    """The queue is capped at 3 cpu and its low-priority gang holds 2 of them on a node
    with room to spare: the high-priority gang of 2 x 1 cpu fits on the node but not
    under the cap. Its victim must go: kept "because the node has room" (the sequential
    decoder checked only node room), the cap would be broken, and the preemptor waited;
    gang-greedy's actions counted only the capability left, not what the victim frees."""
    st_ = state(
        [node("n0").cap(cpu=8)],
        [*_running("lo", 2, 1, ["n0"]), *_pending("hi", 2, 1)],
        [gang("lo", 2).queue("q"), gang("hi", 2).queue("q").priority(10)],
        [queue("q").capability(cpu="3")],
        now_s=600,
    )
    decision = _decide(st_, how)
    assert set(decision.evictions) == {"lo-0", "lo-1"}
    assert sorted(decision.nominated) == ["hi-0", "hi-1"]
    assert check(st_, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_what_one_preemptor_frees_of_its_queues_capability_serves_the_next(how: str) -> None:
    """Capped at 4 cpu, the queue's low-priority gangs hold all of it (lo1: 3 pods, lo2:
    1) on a node with room to spare; two high-priority gangs of 2 x 1 cpu wait. Evicting
    lo1 for the first leaves 1 cpu of the cap, and lo2's makes 2 for the second: both
    are nominated, and the cap holds."""
    st_ = state(
        [node("n0").cap(cpu=8)],
        [
            *_running("lo1", 3, 1, ["n0"]),
            *_running("lo2", 1, 1, ["n0"]),
            *_pending("hi1", 2, 1),
            *_pending("hi2", 2, 1),
        ],
        [
            gang("lo1", 3).queue("q"),
            gang("lo2", 1).queue("q"),
            gang("hi1", 2).queue("q").priority(10),
            gang("hi2", 2).queue("q").priority(10),
        ],
        [queue("q").capability(cpu="4")],
        now_s=600,
    )
    decision = _decide(st_, how)
    assert set(decision.evictions) == {"lo1-0", "lo1-1", "lo1-2", "lo2-0"}
    assert sorted(decision.nominated) == ["hi1-0", "hi1-1", "hi2-0", "hi2-1"]
    assert check(st_, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_the_capability_a_reclaim_frees_serves_the_victims_own_queue(how: str) -> None:
    """Queue b is capped at 6 cpu and its two low-priority gangs hold all of it: lo (4
    cpu on n0) and lo2 (2 cpu on n2, which has 2 cpu free). Queue a, below its share,
    reclaims lo for pa (only n0 will do), which leaves b at its deserved 2 cpu. hi, b's
    high-priority gang of 4 cpu, goes only on n2: lo2's eviction makes the node room,
    and the cap has room once lo is gone too. gang-greedy's actions counted what a
    reclaim freed only in the preemptor's queue: hi found b's cap full and waited."""
    st_ = state(
        [node("n0").cap(cpu=4).label(pool="a"), node("n2").cap(cpu=4).label(pool="b")],
        [
            *_running("lo", 2, 2, ["n0"]),
            *_running("lo2", 1, 2, ["n2"]),
            pod("pa-0").req(cpu=4).gang("pa").selector(pool="a"),
            pod("hi-0").req(cpu=4).gang("hi").selector(pool="b"),
            # Fits nowhere: a's demand, and so its deserved share, is its weight's 6 cpu.
            pod("big-0").req(cpu=100).gang("big"),
        ],
        [
            gang("big", 1).queue("a"),
            gang("lo", 2).queue("b"),
            gang("lo2", 1).queue("b"),
            gang("pa", 1).queue("a").priority(20),
            gang("hi", 1).queue("b").priority(10),
        ],
        [queue("a", weight=3), queue("b").capability(cpu="6")],
        now_s=600,
    )
    decision = _decide(st_, how)
    assert set(decision.evictions) == {"lo-0", "lo-1", "lo2-0"}
    assert decision.nominated == {"pa-0": "n0", "hi-0": "n2"}
    assert "reclaim" in decision.evictions["lo-0"]
    assert check(st_, decision) == []


def test_an_eviction_costs_the_same_whichever_path_decides_it() -> None:
    """Priorities 0, 5 and 10 run or wait; hi (10) can only go where mid (5) runs. The
    joint model priced mid's eviction on the ranks of every gang's priority, the model
    after placement on those of its preemptors and victims alone (mid ranked 0 there:
    its priority cost nothing), so one eviction reported two disruption terms."""
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("mid", 1, 4, ["n0"]), *_running("low", 1, 4, ["n1"]), *_pending("hi", 1, 4)],
        [gang("mid", 1).priority(5), gang("low", 1).not_preemptible(), gang("hi", 1).priority(10)],
        [queue()],
        now_s=600,
    )
    joint, sequential = (solve(st_, PREEMPT, joint=j) for j in (True, False))
    assert set(joint.evictions) == set(sequential.evictions) == {"mid-0"}
    assert joint.terms["disruption"] == sequential.terms["disruption"] < 0
    greedy = schedule(st_, "gang-greedy", PREEMPT)
    assert greedy.terms["disruption"] == joint.terms["disruption"]
    # Underpriced, the greedy start scored 2e9 above the joint model's LP bound, and won.
    nominated = joint.model_copy(update={"placements": {**joint.nominated}})
    score = sum(objective_score(st_, nominated, PREEMPT.weights).values())
    (lp,) = [s.bound for s in joint.stages if s.name == "joint-lp"]
    assert lp is not None and score + joint.terms["disruption"] <= lp


def _over_its_capability() -> ClusterState:
    """Queue q's capability was lowered to 8 cpu while it holds 12 (big: 8, lo: 4); hi
    (priority 10) waits. Evicting lo would leave 8 held: no room for hi's 4."""
    return state(
        [node(f"n{j}").cap(cpu=4) for j in range(3)],
        [
            *_running("big", 2, 4, ["n0", "n1"]),
            *_running("lo", 1, 4, ["n2"]),
            *_pending("hi", 1, 4),
        ],
        [
            gang("big", 2).queue("q").priority(20),
            gang("lo", 1).queue("q"),
            gang("hi", 1).queue("q").priority(10),
        ],
        [queue("q").capability(cpu="8")],
        now_s=600,
    )


@pytest.mark.parametrize("how", PATHS)
def test_a_queue_over_a_lowered_capability_preempts_nothing_it_could_not_use(how: str) -> None:
    """Its room was counted from 0 (the clipped room) plus what lo frees: hi was
    nominated and lo evicted, for a bind the capability would refuse."""
    st_ = _over_its_capability()
    decision = _decide(st_, how)
    assert not decision.evictions and not decision.nominated
    assert check(st_, decision) == []


def test_the_validator_refuses_nominations_over_the_capability_after_evictions() -> None:
    st_ = _over_its_capability()
    decision = Decision(
        scheduler="test",
        placements={},
        status=SolveStatus.GREEDY,
        evictions={"lo-0": "preempted"},
        nominated={"hi-0": "n2"},
    )
    violations = check(st_, decision)
    assert [(v.kind, v.subject) for v in violations] == [("nomination", "q")]
    assert "capability" in violations[0].message
    # With the capability it had (16 cpu), the same decision holds.
    raised = st_.model_copy(update={"queues": (queue("q").capability(cpu="16").build(),)})
    assert check(raised, decision) == []


def _capped_beside_the_victim() -> ClusterState:
    """Queue q, capped at 8 cpu, runs lo (8 cpu) on n0; hi1 (priority 10, 4 cpu) and hi2
    (4 cpu, zone b only: n1, where no victim runs) wait. Both fit once lo goes."""
    return state(
        [node("n0").cap(cpu=8), node("n1").cap(cpu=8).label(zone="b")],
        [
            *_running("lo", 1, 8, ["n0"]),
            *_pending("hi1", 1, 4),
            pod("hi2-0").req(cpu=4).gang("hi2").selector(zone="b"),
        ],
        [
            gang("lo", 1).queue("q"),
            gang("hi1", 1).queue("q").priority(10),
            gang("hi2", 1).queue("q"),
        ],
        [queue("q").capability(cpu="8")],
        now_s=600,
    )


FREE_EVICTIONS = PREEMPT.model_copy(update={"weights": ObjectiveWeights(disruption=0)})


@pytest.mark.parametrize("how", PATHS)
def test_a_gang_beside_the_victims_waits_for_the_capability_they_free(how: str) -> None:
    """The joint model let hi2 use the capability lo frees, and its decoder bound hi2 at
    once (no victim on its node) while lo still held it: over the cap."""
    st_ = _capped_beside_the_victim()
    if how == "gang-greedy":
        decision = schedule(st_, "gang-greedy", FREE_EVICTIONS)
    else:
        decision = solve(st_, FREE_EVICTIONS, joint=how == "joint")
    assert check(st_, decision) == []
    assert set(decision.evictions) == {"lo-0"}
    assert decision.nominated["hi1-0"] == "n0"
    assert "hi2-0" not in decision.placements  # bound now, it would break the cap


def test_victim_above_min_member_is_shrunk_not_evicted() -> None:
    # lo runs 4 pods with minMember 2: one node's two pods make room for one 4-cpu pod.
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("lo", 4, 2, ["n0", "n0", "n1", "n1"]), *_pending("hi", 1, 4)],
        [gang("lo", 2), gang("hi", 1).priority(10)],
        [queue()],
    )
    decision = solve(st_, PREEMPT)
    assert len(decision.evictions) == 2
    node_of = {p.name: p.node_name for p in st_.pods}
    assert len({node_of[p] for p in decision.evictions}) == 1
    assert list(decision.nominated.values()) == [node_of[next(iter(decision.evictions))]]
    assert check(st_, decision) == []


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_no_eviction_for_a_gang_that_would_not_fit_anyway(scheduler: str) -> None:
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("lo", 4, 2, ["n0", "n0", "n1", "n1"]), *_pending("hi", 1, 8)],
        [gang("lo", 4), gang("hi", 1).priority(10)],
        [queue()],
    )
    decision = schedule(st_, scheduler, PREEMPT)
    assert not decision.evictions and not decision.nominated


def test_equal_priority_in_one_queue_never_preempts() -> None:
    st_ = state(
        [node("n0").cap(cpu=4)],
        [*_running("lo", 2, 2, ["n0"]), *_pending("hi", 1, 4)],
        [gang("lo", 2).priority(5), gang("hi", 1).priority(5)],
        [queue()],
    )
    assert not solve(st_, PREEMPT).evictions


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_preemption_policy_never_and_non_preemptible_gangs_are_honoured(scheduler: str) -> None:
    never = state(
        [node("n0").cap(cpu=4)],
        [*_running("lo", 2, 2, ["n0"]), pod("hi-0").req(cpu=4).gang("hi").never_preempts()],
        [gang("lo", 2), gang("hi", 1).priority(10)],
        [queue()],
    )
    assert not schedule(never, scheduler, PREEMPT).evictions
    # Two victims would do; the one marked non-preemptible is spared.
    spared = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("keep", 2, 2, ["n0"]), *_running("lo", 2, 2, ["n1"]), *_pending("hi", 1, 4)],
        [gang("keep", 2).not_preemptible(), gang("lo", 2), gang("hi", 1).priority(10)],
        [queue()],
    )
    decision = schedule(spared, scheduler, PREEMPT)
    assert _evicted_gangs(decision) == Counter({"lo": 2})
    assert check(spared, decision) == []


def test_the_youngest_victim_goes_first() -> None:
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [
            *_running("old", 1, 4, ["n0"], started=0.0),
            *_running("young", 1, 4, ["n1"], started=7 * 3600.0),
            *_pending("hi", 1, 4),
        ],
        [gang("old", 1), gang("young", 1), gang("hi", 1).priority(10)],
        [queue()],
        now_s=8 * 3600.0,
    )
    decision = solve(st_, PREEMPT)
    assert set(decision.evictions) == {"young-0"}


def _reclaim_cluster(weight_a: int, b_priority: int = 0) -> ClusterState:
    """Queue a holds all four 4-cpu nodes with four 1-pod gangs; queue b waits with a gang
    of two."""
    running = [pod(f"a{j}-0").req(cpu=4).gang(f"a{j}").on(f"n{j}").started(0) for j in range(4)]
    return state(
        [node(f"n{j}").cap(cpu=4) for j in range(4)],
        [*running, *_pending("b", 2, 4)],
        [
            *[gang(f"a{j}", 1).queue("qa") for j in range(4)],
            gang("b", 2).queue("qb").priority(b_priority),
        ],
        [queue("qa", weight_a), queue("qb", 1)],
        now_s=600,
    )


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_reclaim_takes_back_down_to_the_victims_deserved_share(scheduler: str) -> None:
    st_ = _reclaim_cluster(weight_a=1)  # each deserves 2 nodes
    decision = schedule(st_, scheduler, PREEMPT)
    assert len(decision.evictions) == 2
    assert all("reclaimed by queue qb" in why for why in decision.evictions.values())
    assert len(decision.nominated) == 2
    assert check(st_, decision) == []


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_reclaim_never_pushes_a_queue_below_its_deserved_share(scheduler: str) -> None:
    # qa deserves 3 of 4 nodes: freeing two for b's gang would push it below that. b's
    # priority makes the trade pay in the objective: only the floor stops it.
    cluster = _reclaim_cluster(weight_a=3, b_priority=10)
    assert not schedule(cluster, scheduler, PREEMPT).evictions


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_gang_spanning_nodes_is_evicted_whole_for_one_node_of_room(scheduler: str) -> None:
    # lo runs one pod on each node (minMember 2); hi needs one whole node: lo goes whole,
    # its pod on the other node too, as a gang cannot run in part.
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("lo", 2, 4, ["n0", "n1"]), *_pending("hi", 1, 4)],
        [gang("lo", 2), gang("hi", 1).priority(10)],
        [queue()],
    )
    # Priced at 100, the trade pays; at the default 200, two pods evicted for one placed
    # do not, and cpsat keeps lo (gang-greedy's actions price nothing).
    cheaper = PREEMPT.model_copy(update={"weights": ObjectiveWeights(disruption=100)})
    decision = schedule(st_, scheduler, cheaper)
    assert set(decision.evictions) == {"lo-0", "lo-1"}
    assert len(decision.nominated) == 1
    assert check(st_, decision) == []
    if scheduler == "cpsat":
        assert not schedule(st_, scheduler, PREEMPT).evictions


@st.composite
def _clusters(draw: st.DrawFn) -> ClusterState:
    """Full nodes of running gangs of random sizes, priorities and queues; pending gangs
    that may only run by preempting or reclaiming."""
    n_nodes = draw(st.integers(2, 5))
    nodes = [node(f"n{i}").cap(cpu=4) for i in range(n_nodes)]
    pods, gangs = [], []
    slots = [f"n{i}" for i in range(n_nodes) for _ in range(4)]
    g = 0
    while slots:
        size = min(len(slots), draw(st.integers(1, 4)))
        mm = draw(st.integers(1, size))
        name = f"r{g}"
        pods += [pod(f"{name}-{i}").req(cpu=1).gang(name).on(slots.pop()) for i in range(size)]
        gangs.append(
            gang(name, mm).priority(draw(st.integers(0, 2))).queue(draw(st.sampled_from("ab")))
        )
        g += 1
    for k in range(draw(st.integers(1, 3))):
        name = f"p{k}"
        size, cpu = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        pods += _pending(name, size, cpu)
        gangs.append(
            gang(name, draw(st.integers(1, size)))
            .priority(draw(st.integers(0, 3)))
            .queue(draw(st.sampled_from("abc")))
        )
    return state(nodes, pods, gangs, [queue("a"), queue("b"), queue("c", 2)])


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@settings(max_examples=40, deadline=None)
@given(cluster=_clusters())
def test_every_preemption_passes_the_validator(scheduler: str, cluster: ClusterState) -> None:
    """Never a victim below minMember, no eviction without a nominated taker, and the
    nominated gangs whole and fitting once their victims are gone."""
    decision = schedule(cluster, scheduler, SolverConfig(preemption=True, time_limit_s=0.5))
    assert check(cluster, decision) == []
    assert bool(decision.evictions) == bool(decision.nominated)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_placement_this_cycle_is_taken_back_rather_than_evicting_more(scheduler: str) -> None:
    """Placement alone gives n0's free room to 'low' (priority 0), as 'hi' (priority 10,
    two 4-cpu pods) fits nowhere. Preemption takes that placement back and evicts only
    r on n1: hi gets both nodes, nothing else is evicted, low waits."""
    st_ = state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=4)],
        [*_running("r", 1, 4, ["n1"]), *_pending("low", 1, 4), *_pending("hi", 2, 4)],
        [gang("r", 1), gang("low", 1), gang("hi", 2).priority(10)],
        [queue()],
    )
    assert schedule(st_, scheduler).placements == {"low-0": "n0"}  # without preemption
    decision = schedule(st_, scheduler, PREEMPT)
    assert decision.placements == {}
    assert set(decision.evictions) == {"r-0"}
    assert sorted(decision.nominated.values()) == ["n0", "n1"]
    assert "low" not in decision.admitted
    assert check(st_, decision) == []


@pytest.mark.parametrize("path", ["joint", "after placement", "gang-greedy"])
def test_a_placement_taken_back_runs_elsewhere_where_there_is_room(path: str) -> None:
    """'low' (2 cpu) is placed beside r on n0 (the used node; for gang-greedy, the
    emptier one), not on n2. 'hi' (priority 10, 8 cpu) fits only on a whole n0: r is
    evicted and low's placement taken back for it. n2 has room for low, which runs
    there now instead of waiting for the next cycle."""
    st_ = state(
        [node("n0").cap(cpu=8), node("n2").cap(cpu=2)],
        [*_running("r", 1, 4, ["n0"]), *_pending("low", 1, 2), *_pending("hi", 1, 8)],
        [gang("r", 1), gang("low", 1), gang("hi", 1).priority(10)],
        [queue()],
    )

    def decide(config: SolverConfig) -> Decision:
        if path == "gang-greedy":
            return schedule(st_, "gang-greedy", config)
        return solve(st_, config, joint=path == "joint")

    assert decide(SolverConfig()).placements == {"low-0": "n0"}  # without preemption
    decision = decide(PREEMPT)
    assert set(decision.evictions) == {"r-0"}
    assert decision.nominated == {"hi-0": "n0"}
    assert decision.placements == {"low-0": "n2"}
    assert check(st_, decision) == []


@pytest.mark.parametrize("victims_queue", ["a", "b"])
def test_a_reclaiming_queues_placement_taken_back_is_not_placed_again(victims_queue: str) -> None:
    """blo (queue b) is placed on n0 and taken back for bhi (queue b), which r's eviction
    and blo's room make fit there; n2 has room for blo. When r is of queue a, b is
    reclaiming: blo placed again would count toward the share b reclaims up to, and
    stays out. When r is b's own (a preemption), blo runs on n2."""
    st_ = state(
        [node("n0").cap(cpu=8), node("n2").cap(cpu=6)],
        [
            *_running("r", 1, 2, ["n0"]),
            pod("blo-0").req(cpu=6).gang("blo"),
            pod("bhi-0").req(cpu=8).gang("bhi"),
        ],
        [
            gang("r", 1).queue(victims_queue),
            gang("blo", 1).queue("b"),
            gang("bhi", 1).queue("b").priority(10),
        ],
        [queue("a"), queue("b")],
    )
    problem = prepare(st_)
    placer = Placer(problem)
    [blo] = [c for c in problem.classes if problem.gangs[c.gang].name == "blo"]
    placer.place(blo, 0)
    choice = Preemption(withdrawn={"blo-0"}, evictions={"r-0": "why"}, nominated={"bhi-0": 0})
    apply_withdrawals(problem, placer, choice)
    assert placer.placed == ({} if victims_queue == "a" else {"blo-0": 1})
    assert choice.nominated == {"bhi-0": 0}


@pytest.mark.parametrize("alo_queue", ["a", "b"])
def test_a_placement_taken_back_from_a_reclaiming_queue_without_evictions_stays_out(
    alo_queue: str,
) -> None:
    """alo (4 cpu) and blo (queue b, 6 cpu) are placed on n0 and both taken back for bhi
    (queue b, 10 cpu); nothing running is evicted, so bhi is placed at once. With alo
    of queue a, b took a's room: b is reclaiming and blo stays out, while alo, of the
    queue taken from, runs on n2. With alo of b, blo (the higher priority) runs on n2,
    and alo no longer fits there."""
    st_ = state(
        [node("n0").cap(cpu=10), node("n2").cap(cpu=6)],
        [
            pod("alo-0").req(cpu=4).gang("alo"),
            pod("blo-0").req(cpu=6).gang("blo"),
            pod("bhi-0").req(cpu=10).gang("bhi"),
        ],
        [
            gang("alo", 1).queue(alo_queue),
            gang("blo", 1).queue("b").priority(5),
            gang("bhi", 1).queue("b").priority(10),
        ],
        [queue("a"), queue("b")],
    )
    problem = prepare(st_)
    placer = Placer(problem)
    for name in ("alo", "blo"):
        [cls] = [c for c in problem.classes if problem.gangs[c.gang].name == name]
        placer.place(cls, 0)
    choice = Preemption(withdrawn={"alo-0", "blo-0"}, nominated={"bhi-0": 0})
    apply_withdrawals(problem, placer, choice)
    expected = {"bhi-0": 0, "alo-0": 1} if alo_queue == "a" else {"bhi-0": 0, "blo-0": 1}
    assert placer.placed == expected
    assert not choice.nominated and not choice.withdrawn


def test_a_preemptor_that_evicts_nothing_running_is_placed_at_once() -> None:
    """Only a placement of this cycle taken back: nothing has to terminate first."""
    st_ = state(
        [node("n0").cap(cpu=4)],
        [*_pending("low", 1, 4), *_pending("hi", 1, 4)],
        [gang("low", 1), gang("hi", 1).priority(10)],
        [queue()],
    )
    problem = prepare(st_)
    placer = Placer(problem)
    [low] = [g for g in problem.gangs if g.name == "low"]
    assert placer.try_gang(low) == ["low-0"]
    choice = Preemption(withdrawn={"low-0"}, nominated={"hi-0": 0})
    apply_withdrawals(problem, placer, choice)
    assert placer.placed == {"hi-0": 0}
    assert not choice.nominated and not choice.evictions


def test_with_the_cycles_time_up_the_greedy_choice_stands() -> None:
    st_ = _priority_cluster()
    problem = prepare(st_)
    config = PREEMPT
    coef = coefficients(problem, config.weights)
    placer = Placer(problem)
    late = preempt(problem, placer, coef, config, time_left_s=0.0)
    greedy = greedy_preempt(problem, Placer(problem), coef, config)
    assert late.stage is None  # no model was built
    assert late.evictions == greedy.evictions and late.nominated == greedy.nominated
    assert set(late.evictions) == {f"lo-{i}" for i in range(4)}


@pytest.mark.parametrize(("preemption", "node_level"), [(False, True), (True, True), (True, False)])
def test_placement_holds_back_the_preemption_share_of_the_limit(
    preemption: bool, node_level: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preemption follows placement within the same limit: placement's stages see the
    limit less ``preemption_time_share`` of it when preemption is on, and the joint model
    (or, above the node-level limit, the preemption model) is given what they left."""
    import solver.cpsat
    import solver.last_stage

    searches: list[Search] = []
    lefts: list[float | None] = []

    class Recorded(Search):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            searches.append(self)

    def recorded_preempt(*args: Any, **kwargs: Any) -> Preemption:
        lefts.append(args[4] if len(args) > 4 else kwargs.get("time_left_s"))
        return preempt(*args, **kwargs)

    def recorded_joint(*args: Any) -> Any:
        lefts.append(args[4])
        return joint_stage(*args)

    monkeypatch.setattr(solver.cpsat, "Search", Recorded)
    monkeypatch.setattr(solver.last_stage, "preempt", recorded_preempt)
    monkeypatch.setattr(solver.last_stage, "joint_stage", recorded_joint)
    config = SolverConfig(
        preemption=preemption,
        time_limit_s=2.0,
        preemption_time_share=0.3,
        max_node_level_pairs=5_000 if node_level else 0,
    )
    solve(_priority_cluster(), config)
    (search,) = searches
    assert search.held_back_s == pytest.approx(0.6 if preemption else 0.0)
    if preemption:
        (left,) = lefts
        assert left is not None
        # What placement left: its own share's rest, and all that was held back.
        assert left == pytest.approx(search.remaining() + 0.6, abs=0.05)
        assert left > 0.6 - 0.1
    else:
        assert not lefts
