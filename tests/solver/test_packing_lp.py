"""A class of nodes packed from its LP relaxation rounded down, then greedily."""

from __future__ import annotations

import numpy as np
import pytest

import solver.disaggregate
import solver.packing_lp
from solver.arrays import FloatArray, IntArray
from solver.config import SolverConfig
from solver.disaggregate import disaggregate
from solver.packing import pack_greedy, pod_worth
from solver.packing_lp import pack_lp_rounded
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.relaxation import Matrices
from tests.builders import gang, node, pod, state
from tests.solver.encodings import class_model

ALLOCATABLE = np.array([8, 8], dtype=np.int64)


def test_the_lp_places_the_large_pod_where_the_greedy_strands_it() -> None:
    """Node 0 has (3, 8) free, node 1 (5, 5); a pod of (4, 1) fits node 1 only, a pod of
    (2, 1) either. Filling the fullest node first with the best-matched pod, the greedy
    gives node 1 the small pod and the large one fits nowhere; the LP's optimum puts the
    large pod on node 1 and the small one on node 0."""
    free = np.array([[3, 8], [5, 5]], dtype=np.int64)
    demands = [np.array([4, 1]), np.array([2, 1])]
    greedy = pack_greedy(free, demands, [1, 1], [1, 1], ALLOCATABLE)
    assert sum(sum(p.values()) for p in greedy) == 1
    assert pack_lp_rounded(free, demands, [1, 1], [1, 1], ALLOCATABLE, 1.0) == [{1: 1}, {0: 1}]


def test_what_the_rounding_leaves_is_packed_greedily(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 0 has (8, 3) free, node 1 (8, 6); a pod of (3, 3) fits either, one of (2, 4)
    node 1 only. An LP point of a half of each column rounds down to nothing: the
    greedy, given the room, places both, the (2, 4) pod on node 1."""
    free = np.array([[8, 3], [8, 6]], dtype=np.int64)
    demands = [np.array([3, 3]), np.array([2, 4])]

    def halves(m: Matrices, _limit: float) -> tuple[float, FloatArray]:
        return 0.0, m.col_high / 2

    monkeypatch.setattr(solver.packing_lp, "solve_matrices", halves)
    plan = pack_lp_rounded(free, demands, [1, 1], [2, 3], ALLOCATABLE, 1.0)
    assert plan is not None
    assert plan[1] == {1: 1}
    assert sum(plan[0].values()) == 1
    assert _within(free, demands, [1, 1], plan)


def test_what_the_first_lp_rounds_away_the_next_places(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 0 has (4, 9) free, node 1 (5, 5); pods of (4, 1), (2, 1) and (1, 1), one
    each. A first LP point that places the (1, 1) pod on node 0 and half of each other
    column rounds down to that pod alone, leaving (3, 8) and (5, 5): as in the first
    test, the greedy then places one pod of two; the LP of that room places both."""
    free = np.array([[4, 9], [5, 5]], dtype=np.int64)
    demands = [np.array([4, 1]), np.array([2, 1]), np.array([1, 1])]
    solve = solver.packing_lp.solve_matrices
    rooms: list[list[float]] = []

    def first_rounded_away(m: Matrices, limit: float) -> tuple[float, FloatArray] | None:
        rooms.append(m.high.tolist())
        if len(rooms) == 1:
            return 0.0, np.array([0.5, 0.5, 0.5, 0.5, 1.0, 0.0])
        return solve(m, limit)

    monkeypatch.setattr(solver.packing_lp, "solve_matrices", first_rounded_away)
    plan = pack_lp_rounded(free, demands, [1, 1, 1], [1, 1, 1], ALLOCATABLE, 1.0)
    assert plan == [{1: 1}, {0: 1}, {0: 1}]
    # The second LP had the counts and the room the first left: (1, 1, 0), (3, 8), (5, 5).
    assert rooms[1] == [1, 1, 0, 3, 8, 5, 5]

    rooms.clear()
    monkeypatch.setattr(solver.packing_lp, "ROUNDS", 1)
    once = pack_lp_rounded(free, demands, [1, 1, 1], [1, 1, 1], ALLOCATABLE, 1.0)
    assert once is not None and sum(sum(p.values()) for p in once) == 2


def test_a_second_lp_unsolved_leaves_what_the_first_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    free = np.array([[4, 9], [5, 5]], dtype=np.int64)
    demands = [np.array([4, 1]), np.array([2, 1]), np.array([1, 1])]
    calls: list[int] = []

    def once(m: Matrices, _limit: float) -> tuple[float, FloatArray] | None:
        calls.append(1)
        return (0.0, np.array([0.5, 0.5, 0.5, 0.5, 1.0, 0.0])) if len(calls) == 1 else None

    monkeypatch.setattr(solver.packing_lp, "solve_matrices", once)
    plan = pack_lp_rounded(free, demands, [1, 1, 1], [1, 1, 1], ALLOCATABLE, 1.0)
    assert len(calls) == 2 and plan is not None
    assert plan[2] == {0: 1}  # the first round's pod stands
    assert _within(free, demands, [1, 1, 1], plan)


@pytest.mark.parametrize("seed", range(20))
def test_an_lp_point_past_its_rows_is_brought_within_them(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """HiGHS meets its rows to a tolerance: a point just past them, rounded, would pass a
    node's room or an item's count. Every column's bound plus 0.999 is far past it."""

    def past(m: Matrices, _limit: float) -> tuple[float, FloatArray]:
        return 0.0, m.col_high + 0.999

    monkeypatch.setattr(solver.packing_lp, "solve_matrices", past)
    free, demands, counts, values = _random_class(seed)
    plan = pack_lp_rounded(free, demands, counts, values, np.full(3, 40), 1.0)
    assert plan is None or _within(free, demands, counts, plan)


def _random_class(seed: int) -> tuple[IntArray, list[IntArray], list[int], list[int]]:
    rng = np.random.default_rng(seed)
    nodes, items, resources = int(rng.integers(1, 12)), int(rng.integers(1, 8)), 3
    free = rng.integers(-2, 40, size=(nodes, resources))
    demands = [rng.integers(0, 12, size=resources) for _ in range(items)]
    counts = [int(rng.integers(0, 9)) for _ in range(items)]
    values = [int(rng.integers(1, 5)) for _ in range(items)]
    return free, demands, counts, values


def _within(
    free: IntArray, demands: list[IntArray], counts: list[int], plan: list[dict[int, int]]
) -> bool:
    load = np.zeros_like(free)
    for i, on_nodes in enumerate(plan):
        if sum(on_nodes.values()) > counts[i] or any(k <= 0 for k in on_nodes.values()):
            return False
        for n, k in on_nodes.items():
            load[n] += demands[i] * k
    return bool((load <= np.maximum(free, 0)).all())


@pytest.mark.parametrize("seed", range(40))
def test_a_packing_never_passes_a_node_s_room_or_an_item_s_count(seed: int) -> None:
    free, demands, counts, values = _random_class(seed)
    plan = pack_lp_rounded(free, demands, counts, values, np.full(3, 40), 1.0)
    if plan is None:
        # Nothing fits anywhere (no column): the only case without a plan at this size.
        assert all(
            (np.maximum(free, 0) < d).any(axis=1).all() or c == 0
            for d, c in zip(demands, counts, strict=True)
            if d.any()
        )
        return
    assert _within(free, demands, counts, plan)


def test_the_lp_does_nothing_when_its_model_is_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solver.packing_lp, "MAX_PAIRS", 3)
    free = np.full((2, 2), 10, dtype=np.int64)
    demands = [np.array([1, 1]), np.array([2, 1])]
    assert pack_lp_rounded(free, demands, [1, 1], [1, 1], ALLOCATABLE, 1.0) is None


def short_class() -> Problem:
    """Two 8-cpu nodes of one class, 5 and 3 cpu taken by running pods: 3 and 5 free. A
    4-cpu and a 2-cpu pod, each a gang of one."""
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=8, memory="8Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            pod("run-0").req(cpu=5).gang("run-0").on("n0"),
            pod("run-1").req(cpu=3).gang("run-1").on("n1"),
            pod("large").req(cpu=4).gang("large"),
            pod("small").req(cpu=2).gang("small"),
        ],
        gangs=[gang("run-0", 1), gang("run-1", 1), gang("large", 1), gang("small", 1)],
    )
    problem = prepare(s)
    assert problem.node_classes == [[0, 1]]
    return problem


def small_on_the_roomier_node(problem: Problem, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first pass that puts the 2-cpu pod on the roomier node (as the greedy does where
    pods are worth alike), and the 4-cpu pod nowhere."""
    small = next(c for c in problem.classes if c.exemplar.name == "small")

    def first_pass(*_: object) -> list[dict[int, int]]:
        return [{1: 1} if c is small else {} for c in problem.classes]

    monkeypatch.setattr(solver.disaggregate, "pack_greedy", first_pass)


def test_a_class_left_short_is_packed_from_its_lp_within_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first pass leaves the class short; with an LP budget it is packed again, the
    4-cpu pod on the roomier node. Without one, the LP is not built."""
    problem = short_class()
    enc = class_model(problem)[1]
    small_on_the_roomier_node(problem, monkeypatch)
    placer = Placer(problem)
    items = [(c.index, c.count) for c in problem.classes]
    placed = solver.disaggregate._matched(placer, enc.bins[0], items)
    assert sum(map(len, placed)) == 1
    placed = solver.disaggregate._lp_packed(placer, enc.bins[0], items, placed, 1.0)
    assert placer.placed == {"large": 1, "small": 0}
    assert sorted(p for pods in placed for p in pods) == ["large", "small"]
    assert placer.free[:, problem.r("cpu")].tolist() == [1000, 1000]

    built: list[int] = []
    real = solver.packing_lp.pack_lp_rounded

    def counted(*args: object, **kwargs: object) -> object:
        built.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(solver.disaggregate, "pack_lp_rounded", counted)
    counts = {c.index: [(0, c.count)] for c in problem.classes}
    admitted = {g.index for g in problem.gangs}
    weights = SolverConfig().weights
    disaggregate(problem, enc, counts, admitted, weights)
    assert built == []
    disaggregate(problem, enc, counts, admitted, weights, lp_budget_s=1.0)
    assert built == [1]


def test_an_lp_packing_of_little_more_worth_leaves_the_first_pass_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan from the LP that places no more than LP_PACK_GAIN more worth than the first
    pass does not stand: the first pass's pods are back where they were, the room and
    each class's next pod as before."""
    problem = short_class()
    enc = class_model(problem)[1]
    small_on_the_roomier_node(problem, monkeypatch)
    small = next(c for c in problem.classes if c.exemplar.name == "small")

    def small_elsewhere(*_: object, **__: object) -> list[dict[int, int]]:
        return [{0: 1} if c is small else {} for c in problem.classes]

    monkeypatch.setattr(solver.disaggregate, "pack_lp_rounded", small_elsewhere)
    placer = Placer(problem)
    items = [(c.index, c.count) for c in problem.classes]
    placed = solver.disaggregate._matched(placer, enc.bins[0], items)
    free, next_pod = placer.free.copy(), list(placer.next_pod)
    again = solver.disaggregate._lp_packed(placer, enc.bins[0], items, placed, 1.0)
    assert again == placed
    assert placer.placed == {"small": 1}
    assert (placer.free == free).all()
    assert placer.next_pod == next_pod


def test_a_node_past_its_room_loses_the_cheapest_pods_that_ask_for_what_it_lacks() -> None:
    """One node of (4, 4); two pods of (0, 2) worth 1, one of (2, 0) worth 2, two of (2, 0)
    worth 5: cpu 6 of 4. The pod worth 1 asks for no cpu, and taking it out would not
    help; the (2, 0) pod worth 2 goes."""
    room = np.array([[4, 4]], dtype=np.int64)
    demand = np.array([[0, 2], [2, 0], [2, 0]], dtype=np.int64)
    item = np.array([0, 1, 2])
    node = np.array([0, 0, 0])
    plan = solver.packing_lp._within_rows(
        room, demand, np.array([2, 1, 2]), np.array([1, 2, 5]), item, node, np.array([2, 1, 2])
    )
    assert plan.tolist() == [2, 0, 2]


def test_a_value_a_hair_below_a_whole_pod_is_that_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """HiGHS' 0.9999999 of a pod is one pod, not none."""

    def hair_below(m: Matrices, _limit: float) -> tuple[float, FloatArray]:
        return 0.0, m.col_high - 1e-8

    monkeypatch.setattr(solver.packing_lp, "solve_matrices", hair_below)
    monkeypatch.setattr(solver.packing_lp, "pack_greedy", lambda *_: [{}, {}])
    free = np.array([[8, 8], [8, 8]], dtype=np.int64)
    demands = [np.array([4, 4]), np.array([8, 8])]
    plan = pack_lp_rounded(free, demands, [1, 1], [1, 1], ALLOCATABLE, 1.0)
    assert plan is not None
    assert sum(plan[0].values()) + sum(plan[1].values()) >= 1
    assert _within(free, demands, [1, 1], plan)


@pytest.mark.parametrize(("gain", "kept"), [(0.99, True), (1.01, False)])
def test_an_lp_packing_stands_only_above_the_gain_it_must_bring(
    monkeypatch: pytest.MonkeyPatch, gain: float, kept: bool
) -> None:
    """The first pass placed the 2-cpu pod; the LP's plan places both pods, worth w_small
    + w_large against w_small. It stands where that is more than (1 + LP_PACK_GAIN)
    times the first pass's worth: LP_PACK_GAIN set a hair below, then above, the gain."""
    problem = short_class()
    enc = class_model(problem)[1]
    small_on_the_roomier_node(problem, monkeypatch)
    worth = {c.exemplar.name: pod_worth(problem, c.index) for c in problem.classes}
    ratio = (worth["small"] + worth["large"]) / worth["small"] - 1
    monkeypatch.setattr(solver.disaggregate, "LP_PACK_GAIN", ratio * gain)
    placer = Placer(problem)
    items = [(c.index, c.count) for c in problem.classes]
    placed = solver.disaggregate._matched(placer, enc.bins[0], items)
    solver.disaggregate._lp_packed(placer, enc.bins[0], items, placed, 1.0)
    assert placer.placed == ({"large": 1, "small": 0} if kept else {"small": 1})


def test_no_lp_is_built_for_a_class_past_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class of more pairs than MAX_PAIRS is left to the greedy and the orders: its pods
    are not even taken back."""
    problem = short_class()
    enc = class_model(problem)[1]
    small_on_the_roomier_node(problem, monkeypatch)
    monkeypatch.setattr(solver.packing_lp, "MAX_PAIRS", 1)
    taken: list[int] = []
    monkeypatch.setattr(solver.disaggregate, "_lp_packed", lambda *_: taken.append(1))
    counts = {c.index: [(0, c.count)] for c in problem.classes}
    admitted = {g.index for g in problem.gangs}
    disaggregate(problem, enc, counts, admitted, SolverConfig().weights, lp_budget_s=1.0)
    assert taken == []
