"""Placement and preemption decided by one model (``solver.joint``), on hand-made
clusters where deciding them one after the other loses something."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

import solver.cpsat
import solver.disaggregate
import solver.joint
import solver.last_stage
import solver.search
from benchmarks.instances import realistic
from solver.bins import Bin, Pairs, class_bins, pair_capacity
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import Decision, SolveStatus
from solver.encode_victims import (
    VictimSet,
    encode_joint,
    joint_bins,
    joint_pairs,
    narrowed,
    victim_nodes,
    victim_set,
)
from solver.model import ClusterState, Queue
from solver.objective import coefficients, score
from solver.problem import Problem, prepare
from solver.schedulers import schedule
from solver.shapes import group
from solver.validate import check
from tests.builders import gang, node, pod, queue, state
from tests.solver.test_preemption import _clusters

JOINT = SolverConfig(preemption=True)
# No node-level model fits: victims are decided after placement, by the preemption model.
SEQUENTIAL = SolverConfig(preemption=True, max_node_level_pairs=0)


def _joint_score(st_: ClusterState, decision: Decision) -> int:
    """The joint objective: nominated pods count as placed, evictions cost their term."""
    placed = {**decision.placements, **decision.nominated}
    terms = score(st_, decision.model_copy(update={"placements": placed}), JOINT.weights)
    return sum(terms.values()) + decision.terms.get("disruption", 0)


def _two_preemptors() -> ClusterState:
    """n0 is free; n1 and n2 each run a 1-pod gang of priority 0 filling them. hi
    (priority 10, two pods, zone a or b only) needs n0 and n1; mid (priority 5, one pod)
    fits anywhere. Placement alone can only put mid on n0."""
    nodes = [
        node("n0").cap(cpu=4).label(zone="a"),
        node("n1").cap(cpu=4).label(zone="b"),
        node("n2").cap(cpu=4).label(zone="c"),
    ]
    running = [pod(f"lo{j}-0").req(cpu=4).gang(f"lo{j}").on(f"n{j}").started(0) for j in (1, 2)]
    hi = [pod(f"hi-{i}").req(cpu=4).gang("hi").affinity("zone", "In", "a", "b") for i in range(2)]
    return state(
        nodes,
        [*running, *hi, pod("mid-0").req(cpu=4).gang("mid")],
        [gang("lo1", 1), gang("lo2", 1), gang("hi", 2).priority(10), gang("mid", 1).priority(5)],
        [queue()],
        now_s=600,
    )


def test_a_placement_moves_where_it_can_preempt_for_itself() -> None:
    """One after the other, placement puts mid on n0; preemption then takes n0 back for hi
    and mid waits a cycle. Jointly, mid goes to n2 (evicting lo2) in the same decision."""
    st_ = _two_preemptors()
    joint = solve(st_, JOINT)
    assert check(st_, joint) == []
    assert joint.nominated["mid-0"] == "n2"
    assert sorted(joint.nominated[f"hi-{i}"] for i in range(2)) == ["n0", "n1"]
    assert set(joint.evictions) == {"lo1-0", "lo2-0"}
    assert joint.status is SolveStatus.OPTIMAL
    sequential = solve(st_, SEQUENTIAL)
    assert check(st_, sequential) == []
    assert "mid-0" not in sequential.nominated and "mid-0" not in sequential.placements
    assert _joint_score(st_, joint) > _joint_score(st_, sequential)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_gang_evicted_whole_gets_none_of_its_own_pending_pods(seed: int) -> None:
    """Running gang v (minMember 2) has two pending extras that fit on the class of nodes
    b; h (priority 100) takes v's node. The disaggregation's top-up of the room left
    placed one of v's extras while the model evicted v whole: v kept one pod, below its
    minMember, and the validator refused the whole decision (a fuzzer's find). Nor is v
    admitted by a decision that evicts it."""
    s = state(
        nodes=[node("a").cap(cpu=4), node("b0").cap(cpu=1), node("b1").cap(cpu=1)],
        pods=[
            *(pod(f"v-{i}").req(cpu=2).gang("v").on("a").started(0.0) for i in range(2)),
            *(pod(f"v-x{i}").req(cpu=1).gang("v") for i in range(2)),
            *(pod(f"h-{i}").req(cpu=2).gang("h") for i in range(2)),
            pod("w-0").req(cpu=0.5).gang("w"),
        ],
        gangs=[
            gang("v", 2).queue("q"),
            gang("h", 2).queue("q").priority(100),
            gang("w").queue("q"),
        ],
        queues=[queue("q")],
    )
    decision = solve(s, SolverConfig(preemption=True, time_limit_s=1.0, seed=seed))
    assert check(s, decision) == []
    assert set(decision.evictions) == {"v-0", "v-1"}
    assert not any(p.startswith("v-") for p in decision.placements)
    assert "v" not in decision.admitted


def test_a_victim_is_kept_only_where_the_pods_placed_need_no_room_they_may_not_take() -> None:
    """P (queue a) takes V's room on n1, so V, of queue a, goes whole, and its pod on n2
    too; T (queue b) needs 1 cpu on n2 and may take from W (its own queue, lower
    priority), not from V (queue a is not reclaimable). Victims the decision does not
    need are kept after solving: W was kept because V's pod on n2 frees room enough in
    total, and T was left on V's room. The validator refused the whole decision (a
    fuzzer's find)."""
    s = state(
        nodes=[node("n1").cap(cpu=10, memory="8Gi"), node("n2").cap(cpu=2, memory="8Gi")],
        pods=[
            pod("V-0").req(cpu=8, memory="1Gi").gang("V").on("n1").started(3600.0),
            pod("X-0").req(cpu=2, memory="1Gi").gang("X").on("n1").started(0.0),
            pod("V-1").req(cpu=1, memory="1Gi").gang("V").on("n2").started(3600.0),
            pod("W-0").req(cpu=1, memory="1Gi").gang("W").on("n2").started(0.0),
            pod("P-0").req(cpu=8, memory="1Gi").gang("P").priority(100),
            pod("T-0").req(cpu=1, memory="1Gi").gang("T").priority(100),
        ],
        gangs=[
            gang("V", 2).queue("a"),
            gang("X").queue("a").not_preemptible(),
            gang("W").queue("b"),
            gang("P").queue("a").priority(100),
            gang("T").queue("b").priority(100),
        ],
        queues=[Queue(name="a", reclaimable=False), queue("b")],
        now_s=3600.0,
    )
    for deterministic in (True, False):
        config = SolverConfig(preemption=True, time_limit_s=1.0, deterministic=deterministic)
        decision = solve(s, config)
        assert check(s, decision) == []
        assert decision.nominated.get("P-0") == "n1"


def test_every_waiting_gang_may_preempt_in_one_cycle() -> None:
    """Ten full nodes of priority-0 gangs and ten priority-10 gangs waiting: the
    preemption model after placement takes a few preemptors per cycle, the joint model
    decides for all of them."""
    n = 10
    st_ = state(
        [node(f"n{j}").cap(cpu=4) for j in range(n)],
        [
            *[pod(f"lo{j}-0").req(cpu=4).gang(f"lo{j}").on(f"n{j}").started(0) for j in range(n)],
            *[pod(f"hi{j}-0").req(cpu=4).gang(f"hi{j}") for j in range(n)],
        ],
        [
            *[gang(f"lo{j}", 1) for j in range(n)],
            *[gang(f"hi{j}", 1).priority(10) for j in range(n)],
        ],
        [queue()],
        now_s=600,
    )
    joint = solve(st_, JOINT)
    assert check(st_, joint) == []
    assert len(joint.nominated) == n and len(joint.evictions) == n
    assert joint.decided_by == "joint"  # the greedy actions take a few preemptors too
    sequential = solve(st_, SEQUENTIAL)
    assert len(sequential.nominated) < n


@settings(max_examples=40, deadline=None)
@given(cluster=_clusters())
def test_never_below_gang_greedy_with_its_preempt_and_reclaim_actions(
    cluster: ClusterState,
) -> None:
    """On the joint objective, with a bound that holds: the gang-greedy scheduler's
    decision (greedy placement, then the greedy actions) is one the model starts from."""
    config = SolverConfig(preemption=True, time_limit_s=0.5)
    joint = schedule(cluster, "cpsat", config)
    greedy = schedule(cluster, "gang-greedy", config)
    assert check(cluster, joint) == []
    assert _joint_score(cluster, joint) >= _joint_score(cluster, greedy)
    if joint.bound is not None:
        assert joint.bound >= _joint_score(cluster, joint)
    # Decoding keeps what the joint model found: the decision scores at least as much.
    found = [s.objective for s in joint.stages if s.name.startswith("joint")]
    found = [o for o in found if o is not None]
    if found:
        assert _joint_score(cluster, joint) >= max(found)


def test_a_deterministic_joint_decision_does_not_depend_on_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st_ = _two_preemptors()
    config = SolverConfig(preemption=True, time_limit_s=0.5, deterministic=True)
    calm = solve(st_, config)
    # A machine so loaded that each reading of the clock is a second after the last.
    ticks = itertools.count()
    clock = SimpleNamespace(perf_counter=lambda: next(ticks))
    modules = (solver.cpsat, solver.search, solver.disaggregate, solver.joint, solver.last_stage)
    for module in modules:
        monkeypatch.setattr(module, "time", clock)
    loaded = solve(st_, config)
    assert (loaded.placements, loaded.nominated, loaded.evictions) == (
        calm.placements,
        calm.nominated,
        calm.evictions,
    )
    assert [s.name for s in loaded.stages] == [s.name for s in calm.stages]
    assert calm.nominated["mid-0"] == "n2"


def test_the_joint_model_is_searched_whole_only_while_short_of_the_gap_limit() -> None:
    """Real-shaped 40 nodes with running gangs: the LP bounds the joint model and guides a
    restricted search; the whole model follows unless that decision is within
    ``relative_gap_limit`` of the bound, as the placement stages end (``Search.settled``)."""
    cluster = realistic(0, 40, 60)
    config = SolverConfig(preemption=True, time_limit_s=1.0, deterministic=True)

    def joint_stages(gap_limit: float) -> list[str]:
        decision = solve(cluster, config.model_copy(update={"relative_gap_limit": gap_limit}))
        assert check(cluster, decision) == []
        stages = [s for s in decision.stages if s.name.startswith("joint")]
        assert stages[0].name == "joint-lp" and stages[0].bound is not None
        return [s.name for s in stages]

    assert "joint" in joint_stages(0.0)  # this guided decision is short of its bound
    assert "joint" not in joint_stages(1e9)  # any decision is within that of it


def _with_empty_nodes(cluster: ClusterState, count: int, half: int = 0) -> ClusterState:
    """``cluster`` and ``count`` empty nodes alike: a class of nodes beside the victims';
    and ``half`` nodes half used by a victim of priority 0, with room left beside it."""
    extra = [node(f"e{i}").cap(cpu=4).build() for i in range(count)]
    extra += [node(f"h{i}").cap(cpu=4).build() for i in range(half)]
    running = [pod(f"h{i}-0").req(cpu=2).gang(f"h{i}").on(f"h{i}").build() for i in range(half)]
    gangs = [gang(f"h{i}", 1).queue("a").build() for i in range(half)]
    return cluster.model_copy(
        update={
            "nodes": (*cluster.nodes, *extra),
            "pods": (*cluster.pods, *running),
            "gangs": (*cluster.gangs, *gangs),
        }
    )


def test_victims_nodes_are_bins_of_their_own_beside_classes_of_the_others() -> None:
    st_ = _with_empty_nodes(_two_preemptors(), 4)
    problem = prepare(st_)
    config = JOINT
    coef = coefficients(problem, config.weights)
    shapes = group(problem, coef)
    vs = victim_set(problem, shapes, coef, config.weights)
    assert vs is not None
    bins = joint_bins(problem, vs)
    names = [problem.nodes[n].name for n in victim_nodes(vs)]
    assert names == ["n1", "n2"]
    singles = {problem.nodes[b.nodes[0]].name for b in bins if len(b.nodes) == 1}
    assert {"n1", "n2"} <= singles
    # The four empty nodes are alike: one bin.
    assert [len(b.nodes) for b in bins if len(b.nodes) > 1] == [4]
    pairs = joint_pairs(problem, shapes, bins, vs)
    on = {(int(c), int(b)) for c, b in zip(pairs.cls, pairs.bin, strict=True)}
    victim_bins = {i for i, b in enumerate(bins) if b.nodes[0] in victim_nodes(vs)}
    # hi and mid may take from lo1/lo2: they pair with the victims' (full) nodes; nothing
    # pairs there only by free room, as none is free.
    takers = {sc.index for sc in shapes.classes if sc.shape in vs.eligible}
    assert {c for c, b in on if b in victim_bins} <= takers
    decision = solve(st_, JOINT)
    assert check(st_, decision) == []
    assert any(s.name == "joint-lp" for s in decision.stages)
    # hi (zones a and b only) still needs lo1's node; mid goes to an empty node at once.
    assert set(decision.evictions) == {"lo1-0"}
    assert sorted(decision.nominated) == ["hi-0", "hi-1"]
    assert decision.placements["mid-0"].startswith("e")


@settings(max_examples=30, deadline=None)
@given(cluster=_clusters(), empty=st.integers(2, 4), half=st.integers(0, 2))
def test_with_classes_of_nodes_beside_the_victims_decisions_hold(
    cluster: ClusterState, empty: int, half: int
) -> None:
    """Counts on classes of nodes are disaggregated around the victims' nodes: the
    decision passes the validator, never below gang-greedy's with its actions."""
    cluster = _with_empty_nodes(cluster, empty, half)
    config = SolverConfig(preemption=True, time_limit_s=0.5)
    joint = schedule(cluster, "cpsat", config)
    greedy = schedule(cluster, "gang-greedy", config)
    assert check(cluster, joint) == []
    assert _joint_score(cluster, joint) >= _joint_score(cluster, greedy)


def _ladder(v3_cpu: int = 4) -> ClusterState:
    """v0..v3 (priorities 0..3) each fill one node; two empty nodes beside them; hi
    (priority 10, 3 pods of a whole node each) needs one victim's node."""
    nodes = [node(f"v{j}").cap(cpu=v3_cpu if j == 3 else 4).build() for j in range(4)]
    nodes += [node(f"e{i}").cap(cpu=4).build() for i in range(2)]
    running = [pod(f"v{j}-0").req(cpu=4).gang(f"v{j}").on(f"v{j}").started(0) for j in range(4)]
    hi = [pod(f"hi-{i}").req(cpu=4).gang("hi") for i in range(3)]
    gangs = [gang(f"v{j}", 1).priority(j) for j in range(4)]
    return state(nodes, [*running, *hi], [*gangs, gang("hi", 3).priority(10)], [queue()], 600)


def _victims_of(st_: ClusterState) -> tuple[Problem, VictimSet, list[Bin], Pairs]:
    problem = prepare(st_)
    coef = coefficients(problem, JOINT.weights)
    shapes = group(problem, coef)
    vs = victim_set(problem, shapes, coef, JOINT.weights)
    assert vs is not None
    bins = joint_bins(problem, vs)
    return problem, vs, bins, joint_pairs(problem, shapes, bins, vs)


def test_a_joint_model_too_large_holds_the_starts_victims_then_the_cheapest() -> None:
    problem, vs, bins, pairs = _victims_of(_ladder())
    names = {v.index: v.name for v in vs.victims}
    assert [problem.nodes[n].name for n in victim_nodes(vs)] == ["v0", "v1", "v2", "v3"]
    # One pending shape: a pair on each victim's node, one on the empty nodes' class.
    assert len(bins) == len(pairs) == 5
    # Room for two victims' nodes: v3, which a start evicts, and then v0, the cheapest.
    held = narrowed(problem, vs, bins, pairs, {3}, 3)
    assert held is not None
    assert {names[g.victim] for g in held.groups} == {"v0", "v3"}
    assert set(held.eligible[next(iter(held.eligible))]) == {0, 3}
    assert [problem.nodes[n].name for n in victim_nodes(held)] == ["v0", "v3"]
    # The others go back to the empty nodes' class, whose bin the pending pods see alike.
    assert sorted(len(b.nodes) for b in joint_bins(problem, held)) == [1, 1, 4]
    # Victims another start evicts come before the cheapest; the whole set is unchanged
    # by the narrowing before (each victim's groups still index it).
    assert [[vs.groups[g].victim for g in v.groups] for v in vs.victims] == [[0], [1], [2], [3]]
    held = narrowed(problem, vs, bins, pairs, {3}, 3, then={1})
    assert held is not None
    assert {names[g.victim] for g in held.groups} == {"v1", "v3"}
    # Not even the starts' victims fit: no narrowed model.
    assert narrowed(problem, vs, bins, pairs, {3}, 1) is None


def test_a_victims_node_alone_in_its_class_costs_nothing_to_hold() -> None:
    """v3's node is larger than the others: alone in its class. Left out, it keeps its
    pair in a bin of its own; counted as saved, the narrowed model overshot its limit
    (v0 held, 3 pairs for 2)."""
    problem, vs, bins, pairs = _victims_of(_ladder(v3_cpu=8))
    names = {v.index: v.name for v in vs.victims}
    held = narrowed(problem, vs, bins, pairs, set(), 2)
    assert held is not None
    assert {names[g.victim] for g in held.groups} == {"v3"}
    shapes = group(problem, coefficients(problem, JOINT.weights))
    assert len(joint_pairs(problem, shapes, joint_bins(problem, held), held)) <= 2


def test_a_joint_model_narrowed_to_its_limit_still_decides_jointly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st_ = _ladder()
    monkeypatch.setattr(solver.last_stage, "JOINT_MAX_PAIRS", 4)
    decision = solve(st_, SolverConfig(preemption=True, time_limit_s=0.5, deterministic=True))
    assert check(st_, decision) == []
    assert any(s.name == "joint-lp" for s in decision.stages)
    # hi needs one node beyond the two empty ones: the cheapest victim, v0, goes, and
    # the gang waits for it whole.
    assert set(decision.evictions) == {"v0-0"}
    assert sorted(decision.nominated.values()) == ["e0", "e1", "v0"]
    # Over some victims only, the model's bound is none on the decision (another
    # eviction might score more): none is reported, and the decision is not "optimal".
    assert decision.bound is None and decision.gap is None
    assert decision.status is not SolveStatus.OPTIMAL


def test_where_every_node_is_a_class_of_its_own_no_narrowed_model_is_built() -> None:
    """A node whose victim is left out keeps its pairs as a bin of its own: fewer victims
    make no smaller model, and preemption is decided after placement as before."""
    nodes = [node(f"v{j}").cap(cpu=4 + j).build() for j in range(4)]  # all different
    running = [pod(f"v{j}-0").req(cpu=4).gang(f"v{j}").on(f"v{j}").started(0) for j in range(4)]
    st_ = state(
        nodes,
        [*running, pod("hi-0").req(cpu=4).gang("hi")],
        [*(gang(f"v{j}", 1) for j in range(4)), gang("hi", 1).priority(10)],
        [queue()],
        600,
    )
    problem, vs, bins, pairs = _victims_of(st_)
    assert len(problem.node_classes) == len(problem.nodes)
    assert narrowed(problem, vs, bins, pairs, set(), len(pairs) - 1) is None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(solver.last_stage, "JOINT_MAX_PAIRS", len(pairs) - 1)
        decision = solve(st_, SolverConfig(preemption=True, time_limit_s=0.5, deterministic=True))
    assert not any(s.name.startswith("joint") for s in decision.stages)
    assert len(decision.evictions) == 1 and list(decision.nominated) == ["hi-0"]
    assert check(st_, decision) == []


@settings(max_examples=30, deadline=None)
@given(cluster=_clusters(), empty=st.integers(2, 4), half=st.integers(0, 2))
def test_narrowed_joint_models_hold_the_rules(cluster: ClusterState, empty: int, half: int) -> None:
    """Where the joint model holds only some victims (a pair limit that lets none but
    the node classes and a victim's node or two in): valid, never below gang-greedy's
    decision with its preempt and reclaim actions."""
    cluster = _with_empty_nodes(cluster, empty, half)
    config = SolverConfig(preemption=True, time_limit_s=0.5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(solver.last_stage, "JOINT_MAX_PAIRS", 12)
        joint = schedule(cluster, "cpsat", config)
    greedy = schedule(cluster, "gang-greedy", config)
    assert check(cluster, joint) == []
    assert _joint_score(cluster, joint) >= _joint_score(cluster, greedy)


@settings(max_examples=40, deadline=None)
@given(cluster=_clusters(), empty=st.integers(0, 4), half=st.integers(0, 2))
def test_the_pairs_known_before_the_victims_never_exceed_the_joint_models(
    cluster: ClusterState, empty: int, half: int
) -> None:
    """``pairs_away_from_victims`` lets a too large joint model be refused before its
    victims are found: it must never count more than the model has away from them."""
    cluster = _with_empty_nodes(cluster, empty, half)
    problem = prepare(cluster)
    coef = coefficients(problem, JOINT.weights)
    shapes = group(problem, coef)
    known = solver.last_stage.pairs_away_from_victims(problem, shapes)
    vs = victim_set(problem, shapes, coef, JOINT.weights)
    single = set(victim_nodes(vs)) if vs is not None else set()
    bins = joint_bins(problem, vs) if vs is not None else []
    others = [b for b in bins if not (len(b.nodes) == 1 and b.nodes[0] in single)]
    assert vs is None or known <= len(pair_capacity(problem, shapes, others))


def test_a_joint_model_known_too_large_is_refused_before_its_victims_are_found() -> None:
    """The same decision as finding the victims first, without finding them."""
    st_ = _with_empty_nodes(_two_preemptors(), 4)
    config = SolverConfig(preemption=True, time_limit_s=0.5, deterministic=True)
    problem = prepare(st_)
    known = solver.last_stage.pairs_away_from_victims(
        problem, group(problem, coefficients(problem, config.weights))
    )
    assert known > 0  # the four empty nodes take every pending pod
    decisions = []
    calls: list[int] = []
    real = solver.last_stage.victim_set
    for bound in (lambda problem, shapes: 0, solver.last_stage.pairs_away_from_victims):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(solver.last_stage, "JOINT_MAX_PAIRS", known - 1)
            patch.setattr(solver.last_stage, "pairs_away_from_victims", bound)
            patch.setattr(
                solver.last_stage,
                "victim_set",
                lambda *a, **k: calls.append(1) or real(*a, **k),
            )
            decisions.append(solve(st_, config))
    assert calls == [1]  # only where the bound was not asked
    first, second = decisions
    assert second.placements == first.placements and second.evictions == first.evictions
    assert second.nominated == first.nominated and second.objective == first.objective
    assert not any(s.name.startswith("joint") for s in second.stages)
    assert check(st_, second) == []


def test_a_victims_node_counts_no_pair_before_the_victims_are_known() -> None:
    """v0 runs lo (a victim for hi) and has room for hi beside it; e0 and e1 are empty.
    The joint model keeps v0 as a bin of its own, outside ``base``: one pair there."""
    nodes = [node("v0").cap(cpu=8).build(), node("e0").cap(cpu=4).build()]
    nodes.append(node("e1").cap(cpu=4).build())
    running = pod("lo-0").req(cpu=4).gang("lo").on("v0").started(0)
    hi = pod("hi-0").req(cpu=4).gang("hi")
    st_ = state(nodes, [running, hi], [gang("lo", 1), gang("hi", 1).priority(10)], [queue()], 600)
    problem = prepare(st_)
    coef = coefficients(problem, JOINT.weights)
    shapes = group(problem, coef)
    vs = victim_set(problem, shapes, coef, JOINT.weights)
    assert vs is not None and [problem.nodes[n].name for n in victim_nodes(vs)] == ["v0"]
    assert len(pair_capacity(problem, shapes, class_bins(problem))) == 2
    assert solver.last_stage.pairs_away_from_victims(problem, shapes) == 1


def test_a_victims_node_keeps_no_rounded_row_that_its_evictions_would_break() -> None:
    """n0 runs lo's 3 cores of 4; hi (priority 10) asks for 3. Rounded to 3-core units,
    n0's free core holds none of hi's pods: such a row counts no room that evictions
    free, so a victim's node gets none, and the joint model's optimum evicts lo for hi."""
    st_ = state(
        [node("n0").cap(cpu=4)],
        [
            pod("lo-0").req(cpu=3).gang("lo").on("n0").started(0),
            pod("hi-0").req(cpu=3).gang("hi"),
        ],
        [gang("lo", 1), gang("hi", 1).priority(10)],
        [queue()],
        now_s=600,
    )
    problem, vs, bins, pairs = _victims_of(st_)
    coef = coefficients(problem, JOINT.weights)
    enc, out = encode_joint(problem, group(problem, coef), coef, vs, bins, pairs)
    solver = cp_model.CpSolver()
    assert solver.solve(enc.model) == cp_model.OPTIMAL
    value = enc.model.get_int_var_from_proto_index
    assert [solver.value(value(p)) for p in range(len(enc.pairs))] == [1]  # hi placed
    assert [solver.value(value(v)) for v in out.evicted.values()] == [1]  # lo evicted
