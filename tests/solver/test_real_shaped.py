"""Regression: on clusters shaped like production ones, CP-SAT must beat greedy.

The first wave's figures came from nodes without the labels kubelets set; with a unique
``kubernetes.io/hostname`` on every node each node was its own class and cpsat decided
exactly what gang-greedy decided. These instances carry every such label.
"""

from __future__ import annotations

import inspect
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from ortools.sat.python import cp_model

import solver.candidates as candidates
import solver.cpsat as cpsat
import solver.exchanges as exchanges
import solver.guided as guided
import solver.search
from adapter.sim import realistic
from benchmarks import instances
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus, StageReport
from solver.disaggregate import LP_PACK_SHARE, PACK_SHARE, REORDER_SHARE
from solver.encode import Encoding
from solver.grouped_lp import model_lp
from solver.model import ClusterState
from solver.objective import evaluate
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.relaxation import LpSolution, Meanwhile, solve_lp
from solver.restricted import restricted
from solver.schedulers import schedule
from solver.search import Search, StageResult, gang_greedy_placer
from solver.solution import hint, rounded_down, solution_of
from solver.validate import check
from tests.solver.encodings import class_model, without_branches

# Deterministic: the stages' budgets count CP-SAT's deterministic time, not this
# machine's load, so the figures below do not depend on what else the CI runs.
CONFIG = SolverConfig(time_limit_s=1.0, deterministic=True)


def stage_of(decision: Decision) -> str:
    """The stage whose candidate was decided, maybe then improved by an exchange
    (``displace.exchanged``)."""
    return decision.decided_by.removesuffix("+exchange")


def with_hostnames(s: ClusterState) -> ClusterState:
    nodes = tuple(
        n.model_copy(update={"labels": {**n.labels, "kubernetes.io/hostname": n.name}})
        for n in s.nodes
    )
    return s.model_copy(update={"nodes": nodes})


def compare(s: ClusterState) -> tuple[int, int]:
    cpsat = schedule(s, "cpsat", CONFIG)
    greedy = schedule(s, "gang-greedy", CONFIG)
    assert check(s, cpsat) == []
    assert cpsat.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    assert cpsat.objective is not None and greedy.objective is not None
    assert cpsat.bound is not None and cpsat.bound >= cpsat.objective
    assert cpsat.decided_by.startswith("node-"), cpsat.decided_by  # a solver stage won
    return cpsat.objective, greedy.objective


def test_reference_with_hostname_labels_stays_well_above_gang_greedy() -> None:
    # Measured 1.71x, with and without the labels; before node equivalence, 1.00x.
    cpsat, greedy = compare(with_hostnames(instances.reference(0)))
    assert cpsat >= 1.5 * greedy


@pytest.mark.parametrize(("nodes", "gangs", "ratio"), [(40, 60, 1.2), (200, 300, 1.1)])
def test_real_shaped_clusters_are_decided_above_gang_greedy(
    nodes: int, gangs: int, ratio: float
) -> None:
    # Measured 1.39x (40 nodes) and 1.28x (200 nodes) at seed 0.
    cpsat, greedy = compare(realistic.cluster(0, nodes, gangs))
    assert cpsat >= ratio * greedy


@pytest.mark.parametrize("time_for_the_dive", [True, False])
def test_a_large_class_model_is_decided_by_its_rounded_lp_and_a_dive_if_time_allows(
    time_for_the_dive: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class models too large to search whole (here forced by a zero limit) are decided
    by their LP's optimum rounded down and, where the time left allows it (here: always,
    or never), by an LP-guided dive too; on a real-shaped cluster the better decides,
    validly, above gang-greedy."""
    monkeypatch.setattr(guided, "DIVE_S_PER_PAIR", 0.0 if time_for_the_dive else 1e9)
    # The tilted LPs' optima, placed where time is left, and the LP's branches are other
    # tests'.
    monkeypatch.setattr(exchanges, "place_other_optima", lambda search: None)
    without_branches(monkeypatch)
    s = realistic.cluster(1, 40, 60)
    config = CONFIG.model_copy(update={"max_exact_class_pairs": 0, "max_node_level_pairs": 0})
    decision = schedule(s, "cpsat", config)
    greedy = schedule(s, "gang-greedy", config)
    assert check(s, decision) == []
    names = [x.name for x in decision.stages]
    if time_for_the_dive:
        assert names == ["node-classes-lp", "node-classes-lp-guided"]
        assert stage_of(decision) in ("node-classes-lp-rounded", "node-classes-lp-guided")
    else:
        assert names == ["node-classes-lp"]
        assert stage_of(decision) == "node-classes-lp-rounded", decision.decided_by
    assert decision.objective is not None and greedy.objective is not None
    assert decision.objective > greedy.objective


@pytest.mark.parametrize(
    ("dive_found", "at_bound", "time_left"),
    [(True, False, True), (False, False, True), (True, True, True), (True, False, False)],
)
def test_a_last_class_search_places_the_rounded_lp_before_its_dive(
    dive_found: bool, at_bound: bool, time_left: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the class model is the cycle's last search but not a large one, the LP's
    optimum rounded is placed first, once, whatever the time left; then the dive (here
    one that places nothing, or finds nothing) runs, unless the rounded LP met the bound
    (here forced) or the time left cannot hold it (here none). Placed after the dive, it
    had no time left on most real-shaped 200-node seeds."""
    s = realistic.cluster(1, 40, 60)
    _, enc = class_model(prepare(s))
    # Too big to search whole, not large: the dive and the RINS rounds are the last search.
    config = CONFIG.model_copy(
        update={"max_exact_class_pairs": len(enc.pairs) - 1, "max_node_level_pairs": 0}
    )
    assert len(enc.pairs) <= cpsat.RINS_PAIRS * config.max_exact_class_pairs
    events: list[str] = []

    def nothing_found(search: Search, enc: Any, name: str, *args: Any, **kwargs: Any) -> bool:
        events.append(name)
        if name.endswith("-lp-guided") and dive_found:
            placer = Placer(search.problem)  # a dive that placed nothing
            search.solved.append(placer)
            search.origin[id(placer)] = name
        return False

    use = guided.place_counts

    def recorded(search: Search, enc: Any, solution: Any, name: str) -> Any:
        events.append(f"placed {name}")
        return use(search, enc, solution, name)

    monkeypatch.setattr(guided, "search_classes", nothing_found)
    monkeypatch.setattr(guided, "place_counts", recorded)
    # The node-level LP's candidate, which may follow the dive, and the LP's branches,
    # which may guide the rounding, are other tests'.
    monkeypatch.setattr(candidates, "NODE_LP_PAIRS", 0)
    without_branches(monkeypatch)
    if at_bound:
        monkeypatch.setattr(Search, "settled", lambda self, wait_for_baseline=True: True)
    if not time_left:
        monkeypatch.setattr(Search, "remaining", lambda self: 0.0)
    decision = schedule(s, "cpsat", config)
    greedy = schedule(s, "gang-greedy", config)
    assert check(s, decision) == []
    if at_bound or not time_left:
        assert events == ["placed node-classes-lp-rounded"], events
    else:
        assert events[:2] == ["placed node-classes-lp-rounded", "node-classes-lp-guided"], events
        assert events.count("placed node-classes-lp-rounded") == 1, events
    assert stage_of(decision) == "node-classes-lp-rounded", decision.decided_by
    assert decision.objective is not None and greedy.objective is not None
    assert decision.objective > greedy.objective


def test_the_rounded_lp_keeps_the_values_within_tolerance_of_an_integer() -> None:
    """HiGHS returns 2.9999999 for 3: rounded down naively, a count and so a gang is lost;
    and -1e-9 for 0: as -1, an admitted count would admit all of a shape's gangs but one."""
    values = np.array([2.9999999, 3.0, 0.5, 1e-9, 4.0000001, -1e-9, -0.5])
    assert rounded_down(values) == [3, 3, 0, 0, 4, 0, 0]


def test_a_gang_the_lp_splits_over_classes_of_nodes_is_not_lost_to_rounding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real-shaped 1,000 nodes, seed 15: the LP splits admitted gangs' pods over classes of
    nodes in fractions. Rounded down, 9 of the 20 gangs the decision lost had asked for
    fewer pods than they need, and the decision ended 6.1% from its bound; with their
    fractions rounded up (``solution.rounded_for_gangs``), 1.6%. (The tilted LPs' optima,
    rounded the same way, are left out: this is the LP's own optimum.)"""
    monkeypatch.setattr(exchanges, "place_other_optima", lambda search: None)
    s = realistic.cluster(15, 1000, 1500)
    decision = schedule(s, "cpsat", CONFIG)
    assert check(s, decision) == []
    assert stage_of(decision) == "node-classes-lp-rounded", decision.decided_by
    assert decision.gap is not None and decision.gap < 0.03, decision.gap


@pytest.fixture
def baseline_starts(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each start of gang-greedy beside a cpsat solve: whether it was already told to stop."""
    started_stopped: list[bool] = []
    original = solver.search.gang_greedy_placer

    def recorded(problem: Problem, stop: threading.Event | None = None) -> Placer:
        started_stopped.append(stop is not None and stop.is_set())
        return original(problem, stop)

    monkeypatch.setattr(solver.search, "gang_greedy_placer", recorded)
    return started_stopped


def test_a_decision_this_close_to_its_bound_does_not_wait_for_the_baseline(
    baseline_starts: list[bool],
) -> None:
    """5,000 real-shaped nodes, scheduler_perf gangs: the class model decides within 0.01%
    of its bound in milliseconds. Gang-greedy (0.4-0.8 s here) could add no more than
    that: it is neither run beside so small a model nor waited for at the end."""
    s = instances.realistic_perf(0, 5000, 3000, ((9, 1000),))
    decision = schedule(s, "cpsat", SolverConfig())
    assert decision.gap is not None and decision.gap <= 0.001
    assert decision.decided_by.startswith("node-classes"), decision.decided_by
    assert baseline_starts == [True]  # started once, at the end, already told to stop


def test_a_baseline_that_never_ran_beside_a_dive_is_not_run_after_it(
    baseline_starts: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dive (here forced on a real-shaped 200-node cluster) does not start gang-greedy
    beside it. With the dive's decision within 5% of its bound, gang-greedy is not run
    after it either: it would have taken the cycle's time for at most that much."""
    # The dive always follows the rounded LP here, whatever the time left.
    monkeypatch.setattr(guided, "DIVE_S_PER_PAIR", 0.0)
    config = SolverConfig(max_exact_class_pairs=0, max_node_level_pairs=0)
    decision = schedule(realistic.cluster(1, 200, 300), "cpsat", config)
    # The rounded LP, the dive, or one of the LP's other optima (tilted prices) rounded.
    assert stage_of(decision).startswith("node-classes-lp-"), decision.decided_by
    assert "node-classes-lp-guided" in [s.name for s in decision.stages]
    assert decision.gap is not None and decision.gap <= 0.05
    assert baseline_starts == [True]  # started once, at the end, already told to stop


def test_a_decision_is_a_feasible_hint_for_the_neighbourhood_around_it() -> None:
    """RINS searches a restricted class model around the best decision so far, hinted
    with it: the hint must satisfy that model (counts, gangs, opened nodes, fairness
    shortfalls), so the search starts from the decision and cannot end below it."""
    problem = prepare(instances.realistic(0, 40, 60))
    coef, enc = class_model(problem)
    lp = solve_lp(enc.rows, 5.0)
    assert lp is not None
    incumbent = gang_greedy_placer(problem)
    wide = restricted(enc, coef, lp.values, solution_of(enc, incumbent.placed, coef))
    hint(wide, incumbent.placed, coef)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.solve(wide.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    score = sum(evaluate(problem, incumbent.placed, SolverConfig().weights).values())
    assert round(solver.objective_value) == score


def test_waiting_gangs_may_take_any_bin_in_the_class_models_neighbourhoods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real-shaped 40 nodes: the RINS neighbourhoods of the node-class model (what the LP
    or the best decision uses) also hold every pair of the gangs the best decision leaves
    waiting, so one may take room where neither put anything; the node-level ones do not
    (too big to search there). Which pairs they are: ``test_relaxation``."""
    widened: list[tuple[int, bool]] = []
    original = restricted

    def recorded(enc: Any, coef: Any, guide: Any, incumbent: Any = None, also: Any = None) -> Any:
        if incumbent is not None:
            widened.append((len(enc.bins), also is not None and bool(also.any())))
        return original(enc, coef, guide, incumbent, also)

    monkeypatch.setattr(guided, "restricted", recorded)
    cluster = instances.realistic(8, 40, 60)
    decision = schedule(cluster, "cpsat", SolverConfig(deterministic=True))
    assert check(cluster, decision) == []
    classes = len(prepare(cluster).node_classes)
    assert classes < 40
    on_classes = [wide for bins, wide in widened if bins == classes]
    on_nodes = [wide for bins, wide in widened if bins == 40]
    assert on_classes and all(on_classes)
    assert on_nodes and not any(on_nodes)


@pytest.mark.parametrize(("nodes", "gangs"), [(40, 60), (200, 300)])
def test_the_first_lp_guided_search_stops_at_its_first_solution_with_a_floor(
    monkeypatch: pytest.MonkeyPatch, nodes: int, gangs: int
) -> None:
    """The search over the LP's support is a dive: searched on for a third of the
    stage, it took the time the RINS rounds needed (real-shaped 40 nodes: up to 8% below
    the decision the dive leaves room for). As the cycle's first solver decision it gets
    the floor a 1 s limit gives it, however little time is left (here none): with
    floors scaled to a 0.5 s limit, every real-shaped 200-node cycle fell back to
    gang-greedy, 9-24% from the bound. Where the rounded LP is placed first (200 nodes:
    the class searches are the cycle's last) a decision is there, and a dive the time
    left cannot hold is not started."""
    calls: list[tuple[str, float, bool]] = []
    original = solver.search.run_cpsat
    signature = inspect.signature(original)

    def recorded(*args: Any, **kwargs: Any) -> StageResult:
        given = signature.bind(*args, **kwargs)
        given.apply_defaults()
        arguments = given.arguments
        calls.append((arguments["name"], arguments["time_limit_s"], arguments["first_only"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(solver.search, "run_cpsat", recorded)
    monkeypatch.setattr(Search, "remaining", lambda self: 0.0)
    s = realistic.cluster(0, nodes, gangs)
    decision = schedule(s, "cpsat", CONFIG)
    dives = [c for c in calls if c[0] == "node-classes-lp-guided"]
    if nodes == 40:
        assert dives and calls[0] == dives[0]
        _, first_s, first_only = dives[0]
        assert first_only and first_s >= guided.DIVE_FLOOR * 1.0  # what a 1 s limit gives
    else:
        assert dives == []
        assert stage_of(decision) == "node-classes-lp-rounded", decision.decided_by
    assert check(s, decision) == []
    assert decision.status is not SolveStatus.FALLBACK


def test_rins_rounds_start_from_the_baseline_when_the_dive_found_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dive does not start gang-greedy beside it; when it finds nothing, the RINS
    rounds wait for the baseline and start from it, rather than end for want of an
    incumbent (the cycle would then wait for the baseline at its end, all the same)."""
    names: list[str] = []
    original = solver.search.run_cpsat

    def dive_finds_nothing(enc: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        names.append(name)
        result = original(enc, name, *args, **kwargs)
        if name == "node-classes-lp-guided":
            return StageResult(result.report, None, False, result.deterministic_s)
        return result

    monkeypatch.setattr(solver.search, "run_cpsat", dive_finds_nothing)
    cluster = instances.realistic(0, 40, 60)
    # Not deterministic (a deterministic search always waits for the baseline), and so
    # on the wall clock: a 1 s limit once left the rounds no time on a loaded machine (a
    # fresh clone's run, stop 37); 3 s leaves them plenty wherever the test runs.
    decision = schedule(cluster, "cpsat", SolverConfig(time_limit_s=3.0))
    # The node-class model's whole search ahead, on the other core, is not one of them.
    classes = [name for name in names if name.startswith("node-classes-")]
    assert classes[:2] == ["node-classes-lp-guided", "node-classes-rins"]
    assert check(cluster, decision) == []


@pytest.mark.parametrize("last", [True, False])
def test_the_cycles_last_search_takes_all_the_time_but_what_disaggregation_needs(
    monkeypatch: pytest.MonkeyPatch, last: bool
) -> None:
    """Where no node-level stage follows the node-class model and it is too big to be
    searched whole (real-shaped 200 nodes), its RINS rounds are the cycle's last search.
    A round given 0.6 of the time left found nothing there (seed 22: its first solution
    came too late) and the cycle ended with 0.3 s unused; as the last search it gets all
    of it but what disaggregating its decision takes. Before a node-level stage, 0.6.
    (Since stop 41, where the node-level LP over the admitted gangs is small enough, as
    at 200 nodes, it follows the dive instead: here it is made too big.)"""
    monkeypatch.setattr(candidates, "NODE_LP_PAIRS", 0)
    given: list[float] = []
    original = solver.search.run_cpsat

    def nothing_found_in_rins(
        enc: Any, name: str, time_limit_s: float, *args: Any, **kwargs: Any
    ) -> Any:
        if name != "node-classes-rins":
            return original(enc, name, time_limit_s, *args, **kwargs)
        given.append(time_limit_s)
        report = StageReport(
            name=name,
            variables=0,
            constraints=0,
            status="UNKNOWN",
            objective=None,
            bound=None,
            wall_s=0.0,
        )
        return StageResult(report, None, False, 0.0)

    monkeypatch.setattr(solver.search, "run_cpsat", nothing_found_in_rins)
    problem = prepare(instances.realistic(22, 200, 300))
    config = SolverConfig(time_limit_s=1.0)
    coef, enc = class_model(problem)
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = Search(problem, config, coef, time.perf_counter(), pool, threading.Event())
        left = 0.6  # of the stage's time, whatever the clock says: the rule alone
        guided.guided_search(
            search, enc, "node-classes", lambda: left, False, free_waiting=True, last=last
        )
    after = (PACK_SHARE + REORDER_SHARE + LP_PACK_SHARE) * config.time_limit_s
    assert given and given[0] == pytest.approx(left - after if last else 0.6 * left)


@pytest.mark.parametrize(("nodes", "gangs", "last"), [(200, 300, True), (40, 60, False)])
def test_the_class_models_rins_rounds_are_the_last_search_only_where_nothing_follows(
    monkeypatch: pytest.MonkeyPatch, nodes: int, gangs: int, last: bool
) -> None:
    """Real-shaped 200 nodes: the class model is too big to be searched whole and the
    node-level model too big for a stage over every shape. 40 nodes: a node-level stage
    follows, and its time is not the class stage's to take."""
    seen: list[bool] = []
    original = cpsat.guided_search

    def recorded(search: Any, enc: Any, prefix: str, *args: Any, **kwargs: Any) -> None:
        if prefix == "node-classes":
            seen.append(kwargs.get("last", False))
        original(search, enc, prefix, *args, **kwargs)

    monkeypatch.setattr(cpsat, "guided_search", recorded)
    cluster = instances.realistic(0, nodes, gangs)
    decision = schedule(cluster, "cpsat", SolverConfig(time_limit_s=0.3))
    assert seen == [last]
    assert check(cluster, decision) == []


def lp_limits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The time limit of every LP the solve runs, in order, once it has run."""
    limits: list[float] = []
    original = model_lp

    def recorded(
        enc: Encoding, time_limit_s: float, meanwhile: Meanwhile | None = None
    ) -> LpSolution | None:
        limits.append(time_limit_s)
        return original(enc, time_limit_s, meanwhile)

    monkeypatch.setattr(solver.search, "model_lp", recorded)
    return limits


def test_a_short_limit_does_not_shorten_the_first_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle's first LP is its bound and its guide: at a 0.2 s limit it still gets the
    floor a 1 s limit gives it (HiGHS takes 0.07-0.12 s on this cluster, and timed out on
    some seeds when given what a 0.2 s limit left)."""
    limits = lp_limits(monkeypatch)
    config = CONFIG.model_copy(update={"time_limit_s": 0.2})
    decision = schedule(realistic.cluster(0, 200, 300), "cpsat", config)
    assert limits[0] >= guided.LP_FLOOR * 1.0  # what a 1 s limit gives it
    assert decision.bound is not None


@pytest.mark.parametrize("huge", [False, True])
def test_a_huge_class_model_gets_the_time_its_first_lp_needs(
    monkeypatch: pytest.MonkeyPatch, huge: bool
) -> None:
    """Above HUGE_LP_VARS variables (tens of thousands of pending pods) the class model's
    first LP may run to HUGE_LP_CAP of the limit: given the floor, it timed out and the
    cycle fell back to gang-greedy, run after it. Below, the floor as before. Here a
    200-node model stands in for one of 5,000 nodes (the thresholds lowered)."""
    limits = lp_limits(monkeypatch)
    if huge:
        monkeypatch.setattr(guided, "HUGE_LP_VARS", 0)
    # Every class model is then "large": only its LP is solved, as at 1,000 nodes and up.
    config = CONFIG.model_copy(update={"max_exact_class_pairs": 10, "max_node_level_pairs": 10})
    cluster = realistic.cluster(0, 200, 300)
    decision = schedule(cluster, "cpsat", config)
    assert limits
    if huge:
        assert limits[0] >= guided.HUGE_LP_CAP * config.time_limit_s
    else:
        assert limits[0] < guided.HUGE_LP_CAP * config.time_limit_s
    assert decision.status is SolveStatus.FEASIBLE or decision.status is SolveStatus.OPTIMAL
    assert check(cluster, decision) == []
