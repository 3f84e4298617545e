"""Branches of a class model's LP on the gangs it admits in part (``solver.branching``):
the bound they leave is never below a placement, and the LP they leave guides to whole
gangs."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import solver.candidates
import solver.cpsat
import solver.disaggregate
import solver.search
from solver import branching
from solver.arrays import FloatArray
from solver.branching import branch_variable, branched
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import SolveStatus
from solver.encode import Encoding, encode
from solver.grouped_lp import groups_apply, model_lp
from solver.model import ClusterState
from solver.problem import prepare
from solver.relaxation import LpSolution, Meanwhile, NoSolution, solve_lp
from solver.topup import gang_prices
from tests.builders import gang, node, pods_of, state
from tests.solver.encodings import class_model, search_for
from tests.solver.test_schedulers import PROPERTY, small_clusters

EXACT = SolverConfig(time_limit_s=5.0, deterministic=True)
WEIGHTS = EXACT.weights
# The class model is the cycle's last search (its pairs count as too many for a whole
# search, and no node-level stage follows): the branches' guide leads to the decision.
CLASSES_LAST = SolverConfig(
    time_limit_s=5.0, deterministic=True, max_node_level_pairs=0, max_exact_class_pairs=0
)


def either_or() -> ClusterState:
    """Two 4-cpu nodes, one class. Gang big (two 3-cpu pods) and gang dense (four 1-cpu,
    6 GiB pods) cannot both run: big leaves 1 cpu a node, dense 2 GiB. The LP admits dense
    whole and 2/3 of big, and counts both; every placement runs one of them (big, with the
    one-pod gang low beside it, is worth more)."""
    return state(
        nodes=[node("n0").cap(cpu=4, memory="16Gi"), node("n1").cap(cpu=4, memory="16Gi")],
        pods=[
            *pods_of("big", 2, cpu=3, memory="1Gi"),
            *pods_of("dense", 4, cpu=1, memory="6Gi"),
            *pods_of("low", 1, cpu=1, memory="1Gi"),
        ],
        gangs=[gang("big", 2).priority(5), gang("dense", 4).priority(5), gang("low", 1)],
    )


def admitted(enc: Encoding, values: FloatArray) -> dict[str, float]:
    return {
        enc.problem.gangs[enc.shapes.shapes[s].gangs[0]].name: round(float(values[var]), 6)
        for s, var in enc.admitted.items()
    }


def test_branches_bring_the_bound_down_to_the_optimum_and_guide_to_it() -> None:
    s = either_or()
    _, enc = class_model(prepare(s))
    root = model_lp(enc, 5.0)
    assert root is not None
    assert admitted(enc, root.values) == {"big": pytest.approx(2 / 3), "dense": 1.0, "low": 0.0}
    assert branch_variable(enc, root, WEIGHTS) == enc.admitted[_shape(enc, "big")]
    exact = solve(s, EXACT)
    assert exact.status is SolveStatus.OPTIMAL and exact.objective is not None
    assert set(exact.admitted) == {"big", "low"}
    assert root.bound > 1.5 * exact.objective  # the LP's bound, far above any placement

    tree = branched(enc, root, WEIGHTS, 5.0, until=None)
    assert tree.branches >= 1
    assert exact.objective <= tree.bound <= exact.objective * 1.01
    # The guide admits what the optimum admits, each gang whole.
    assert admitted(enc, tree.guide.values) == {"big": 1.0, "dense": 0.0, "low": 1.0}


def test_a_cycle_reports_the_branched_bound_and_places_the_gang_kept_whole() -> None:
    s = either_or()
    decision = solve(s, CLASSES_LAST)
    stages = {stage.name: stage for stage in decision.stages}
    lp, branched_stage = stages["node-classes-lp"], stages["node-classes-lp-branched"]
    assert lp.bound is not None and branched_stage.bound is not None
    assert branched_stage.bound < lp.bound
    assert decision.bound == branched_stage.bound
    assert decision.objective is not None and decision.bound >= decision.objective
    assert set(decision.admitted) == {"big", "low"}
    assert decision.gap is not None and decision.gap <= 0.01


def test_a_class_model_that_is_not_the_last_search_is_branched_too() -> None:
    """Where the class model is searched whole (small clusters, a node-level stage may
    follow), its LP is branched on all the same: its bound is the cycle's, and branches
    are cheap on a small model."""
    decision = solve(either_or(), EXACT)
    stages = {stage.name: stage for stage in decision.stages}
    assert "node-classes" in stages  # the restricted class searches were not the last
    lp, branched_stage = stages["node-classes-lp"], stages["node-classes-lp-branched"]
    assert lp.bound is not None and branched_stage.bound is not None
    assert branched_stage.bound < lp.bound
    assert decision.objective is not None and decision.bound is not None
    assert decision.objective <= decision.bound <= branched_stage.bound


def test_deterministic_branches_do_not_depend_on_the_wall_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deterministic solve branches the class LP as far as its deterministic time says,
    whatever the load: on a machine so loaded that each reading of the clock is a second
    after the last, the same stages and the same decision."""
    config = SolverConfig(time_limit_s=1.0, deterministic=True)
    calm = solve(either_or(), config)
    stages = [(x.name, x.bound) for x in calm.stages]
    lp, branched_bound = dict(stages)["node-classes-lp"], dict(stages)["node-classes-lp-branched"]
    assert lp is not None and branched_bound is not None and branched_bound < lp
    ticks = itertools.count()
    clock = SimpleNamespace(perf_counter=lambda: next(ticks))
    for module in (solver.cpsat, solver.search, solver.disaggregate, solver.candidates):
        monkeypatch.setattr(module, "time", clock)
    monkeypatch.setattr(branching, "time", clock)
    loaded = solve(either_or(), config)
    assert [(x.name, x.bound) for x in loaded.stages] == stages
    assert loaded.placements == calm.placements


def test_a_branch_starts_where_the_time_left_holds_what_follows_on_its_model() -> None:
    """The least time left to branch grows with the model (BRANCH_FOLLOW branches' time),
    up to BRANCH_MIN_LEFT of the limit: on a tiny model, far less than that share."""
    problem = prepare(either_or())
    _, enc = class_model(problem)
    root = model_lp(enc, 5.0)
    assert root is not None
    need = branching.BRANCH_FOLLOW * branching.BRANCH_S_PER_PAIR * len(enc.pairs)
    assert need < branching.BRANCH_MIN_LEFT * EXACT.time_limit_s
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = search_for(problem, EXACT, pool)
        guide = branching.branch_stage(search, enc, root, "branched", lambda: need * 0.9)
        assert guide is root and search.stages == []
        guide = branching.branch_stage(search, enc, root, "branched", lambda: need * 1.1)
        assert guide is not root and [s.name for s in search.stages] == ["branched"]


def test_without_a_gang_admitted_in_part_nothing_is_branched() -> None:
    """Where every gang fits, the LP admits each whole: no branch, no stage."""
    s = state(
        nodes=[node("n0").cap(cpu=4, memory="16Gi"), node("n1").cap(cpu=4, memory="16Gi")],
        pods=[*pods_of("big", 2, cpu=3, memory="1Gi"), *pods_of("low", 2, cpu=1, memory="1Gi")],
        gangs=[gang("big", 2).priority(5), gang("low", 2)],
    )
    _, enc = class_model(prepare(s))
    root = model_lp(enc, 5.0)
    assert root is not None
    assert admitted(enc, root.values) == {"big": 1.0, "low": 1.0}
    assert branch_variable(enc, root, WEIGHTS) is None
    assert branched(enc, root, WEIGHTS, 5.0, until=None).branches == 0
    decision = solve(s, CLASSES_LAST)
    assert "node-classes-lp-branched" not in {stage.name for stage in decision.stages}
    assert set(decision.admitted) == {"big", "low"}


def test_a_small_fraction_is_branched_on_only_where_its_stake_is_large() -> None:
    """Big admitted 0.1 of a gang (below BRANCH_MIN_FRACTION): branched on where that
    tenth of what big earns is at least BRANCH_LARGE_STAKE of the LP's optimum, not where
    it is less, nor where rounding would keep it (0.1 past an integer, whole gangs below)."""
    _, enc = class_model(prepare(either_or()))
    root = model_lp(enc, 5.0)
    assert root is not None
    big = enc.admitted[_shape(enc, "big")]
    values = root.values.copy()
    values[big] = 0.1
    small = replace(root, values=values)
    stake = 0.1 * float(gang_prices(enc.problem, WEIGHTS).base[_gang(enc, "big")]) / root.bound
    assert branching.BRANCH_MIN_FRACTION > 0.1 and stake > branching.BRANCH_LARGE_STAKE
    assert branch_variable(enc, small, WEIGHTS) == big
    with mock.patch.object(branching, "BRANCH_LARGE_STAKE", stake * 1.01):
        assert branch_variable(enc, small, WEIGHTS) is None
        values[big] = 0.3  # past BRANCH_MIN_FRACTION: the smaller stake is enough
        assert branch_variable(enc, small, WEIGHTS) == big
        values[big] = 1.0 - 1e-9  # an integer to HiGHS' tolerance: nothing to branch on
        assert branch_variable(enc, small, WEIGHTS) is None


def unsolved(proved: bool, unless: Callable[[Encoding], bool] = lambda enc: False) -> Any:
    """``model_lp`` as HiGHS out of time (``proved``: proving there is no solution), but
    for the LPs ``unless`` picks, solved; the other LP of a branch still runs beside."""

    def solve(
        enc: Encoding,
        time_limit_s: float,
        meanwhile: Meanwhile | None = None,
        proof: NoSolution | None = None,
    ) -> LpSolution | None:
        if meanwhile is not None:
            meanwhile.work()
        if unless(enc):
            return model_lp(enc, time_limit_s, proof=proof)
        if proof is not None:
            proof.proved = proved
        return None

    return solve


def test_an_lp_not_solved_in_time_keeps_its_parents_bound() -> None:
    """Out of time is no proof: the children keep the root's bound, and the root guides."""
    _, enc = class_model(prepare(either_or()))
    root = model_lp(enc, 5.0)
    assert root is not None
    with mock.patch.object(branching, "model_lp", unsolved(proved=False)):
        tree = branched(enc, root, WEIGHTS, 5.0, until=None)
    assert tree.branches == 1  # the unsolved child of the largest bound has no values
    assert tree.bound == root.bound
    assert tree.guide is root


def test_an_lp_with_no_solution_is_closed_and_the_other_holds_the_bound() -> None:
    """Big admitted whole proved impossible (here by a stand-in): the branch without it
    holds every placement, its optimum is the bound and guides."""
    _, enc = class_model(prepare(either_or()))
    root = model_lp(enc, 5.0)
    assert root is not None
    big = enc.admitted[_shape(enc, "big")]
    without_big = model_lp(replace(enc, rows=replace(enc.rows, high=_high(enc, big, 0))), 5.0)
    assert without_big is not None and without_big.bound < root.bound

    def keeps_big(narrowed: Encoding) -> bool:
        return narrowed.rows.high[big] == 0

    with mock.patch.object(branching, "model_lp", unsolved(proved=True, unless=keeps_big)):
        tree = branched(enc, root, WEIGHTS, 5.0, until=None, most=1)
    assert tree.bound == without_big.bound
    assert admitted(enc, tree.guide.values)["big"] == 0.0


def test_every_lp_proved_without_a_solution_leaves_the_root() -> None:
    """Not so in exact arithmetic; where HiGHS' tolerances would say so, no crash: the
    root's bound and guide."""
    _, enc = class_model(prepare(either_or()))
    root = model_lp(enc, 5.0)
    assert root is not None
    with mock.patch.object(branching, "model_lp", unsolved(proved=True)):
        tree = branched(enc, root, WEIGHTS, 5.0, until=None)
    assert (tree.bound, tree.guide, tree.branches) == (root.bound, root, 1)


def test_no_branch_starts_past_its_time() -> None:
    _, enc = class_model(prepare(either_or()))
    root = model_lp(enc, 5.0)
    assert root is not None
    tree = branched(enc, root, WEIGHTS, 5.0, until=time.perf_counter() - 1.0)
    assert (tree.bound, tree.guide, tree.branches) == (root.bound, root, 0)


def test_a_branch_that_lowers_no_bound_reports_none_and_still_guides() -> None:
    """The stage: where the branches leave the LP's bound, none is added to the solve's
    bounds (the LP's stands); where they lower it, it is added."""
    problem = prepare(either_or())
    _, enc = class_model(problem)
    root = model_lp(enc, 5.0)
    assert root is not None
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = search_for(problem, EXACT, pool)
        with mock.patch.object(branching, "model_lp", unsolved(proved=False)):
            guide = branching.branch_stage(search, enc, root, "branched", lambda: 5.0)
        assert guide is root and search.bounds == []
        assert [(s.name, s.bound) for s in search.stages] == [("branched", None)]
        guide = branching.branch_stage(search, enc, root, "branched", lambda: 5.0)
        assert guide is not root and search.bounds == [search.stages[-1].bound]
        assert search.bounds[0] < root.bound
        # Deterministic: its branches counted in the solve's deterministic time.
        assert search.deterministic_s > 0


def test_an_lp_proved_to_have_no_solution_is_closed() -> None:
    """Big admitted whole on a class with room for one of its two pods: no solution."""
    _, enc = class_model(prepare(either_or()))
    var = enc.admitted[_shape(enc, "big")]
    rows = enc.rows
    low = list(rows.low)
    low[var] = 1
    high = list(rows.high)
    for p in enc.shape_span(_shape(enc, "big")):
        high[p] = 1  # one pod at most, where the gang needs two
    proof = NoSolution()
    assert solve_lp(replace(rows, low=low, high=high), 5.0, proof=proof) is None
    assert proof.proved
    proof = NoSolution()
    assert solve_lp(rows, 5.0, proof=proof) is not None
    assert not proof.proved


def test_the_grouped_lp_keeps_a_branchs_bounds_and_proves_no_solution() -> None:
    """Large class models' LP is solved over groups (``grouped_lp``): a branch's bounds on
    an admitted count hold there too, and a branch with no solution is proved so."""
    s = state(
        nodes=[node(f"n{i}").cap(cpu=8, memory="32Gi") for i in range(4)],
        pods=[p for g in range(12) for p in pods_of(f"g{g}", 2, cpu=2, memory="1Gi")],
        gangs=[gang(f"g{g}", 2).priority(5 if g < 6 else 0).created(g) for g in range(12)],
    )
    problem = prepare(s)
    coef, plain = class_model(problem)
    enc = encode(problem, plain.shapes, plain.bins, coef, plain.pairs, lp_only=True)
    assert groups_apply(enc)
    root = model_lp(enc, 5.0)
    assert root is not None and root.over_groups
    var = max(enc.admitted.values(), key=lambda v: root.values[v])
    assert root.values[var] >= 1
    fewer_high = list(enc.rows.high)
    fewer_high[var] = round(root.values[var]) - 1
    fewer = model_lp(replace(enc, rows=replace(enc.rows, high=fewer_high)), 5.0)
    assert fewer is not None and fewer.over_groups
    assert fewer.values[var] <= fewer_high[var] + 1e-6
    assert fewer.bound <= root.bound
    more_low = list(enc.rows.low)
    more_low[var] = enc.rows.high[var] + 1  # more gangs of the shape than it has
    proof = NoSolution()
    assert model_lp(replace(enc, rows=replace(enc.rows, low=more_low)), 5.0, proof=proof) is None
    assert proof.proved


@st.composite
def contended(draw: st.DrawFn) -> ClusterState:
    """A few nodes and gangs of several priorities whose pods compete for cpu and memory:
    LPs that admit gangs in part, so that there are branches to take."""
    nodes = [
        node(f"n{i}").cap(cpu=draw(st.integers(2, 6)), memory=f"{draw(st.integers(4, 16))}Gi")
        for i in range(draw(st.integers(1, 3)))
    ]
    pods, gangs = [], []
    for g in range(draw(st.integers(2, 5))):
        size = draw(st.integers(1, 3))
        cpu, memory = draw(st.integers(1, 4)), draw(st.integers(1, 8))
        pods += pods_of(f"g{g}", size, cpu=cpu, memory=f"{memory}Gi")
        priority = draw(st.sampled_from([0, 5, 10]))
        gangs.append(gang(f"g{g}", draw(st.integers(1, size))).priority(priority).created(g))
    return state(nodes=nodes, pods=pods, gangs=gangs)


@PROPERTY
@given(st.one_of(small_clusters(), contended()))
def test_the_branched_bound_is_never_below_a_placement(s: ClusterState) -> None:
    """Branching on every fractional admission (no stake needed): the bound left is at most
    the LP's and at least the proven optimum's objective."""
    _, enc = class_model(prepare(s))
    root = model_lp(enc, 5.0)
    if root is None:
        return  # nothing to place: no model rows
    with (
        mock.patch.object(branching, "BRANCH_MIN_STAKE", 0.0),
        mock.patch.object(branching, "BRANCH_LARGE_STAKE", 0.0),
    ):
        tree = branched(enc, root, WEIGHTS, 5.0, until=None, most=4)
    assert tree.bound <= root.bound
    exact = solve(s, EXACT)
    if exact.status is SolveStatus.OPTIMAL:
        assert exact.objective is not None and tree.bound >= exact.objective


def _high(enc: Encoding, var: int, high: int) -> list[int]:
    bounds = list(enc.rows.high)
    bounds[var] = high
    return bounds


def _shape(enc: Encoding, name: str) -> int:
    return next(
        s
        for s, shape in enumerate(enc.shapes.shapes)
        if enc.problem.gangs[shape.gangs[0]].name == name
    )


def _gang(enc: Encoding, name: str) -> int:
    return next(g for g, info in enumerate(enc.problem.gangs) if info.name == name)
