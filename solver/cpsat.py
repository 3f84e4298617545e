"""solve(state, config) -> Decision: the CP-SAT scheduler.

Stages, all within one time limit:
1. Prepare the problem; gang-greedy runs beside the solves (a thread: the solvers release
   the GIL): the baseline, a candidate, and a complete hint for the node-level stage.
2. Where nodes fall into fewer classes than there are nodes, solve the aggregated model
   (bins = classes of nodes this cycle's pending pods cannot tell apart, ``equivalence``):
   a relaxation, so its bound holds for the real problem. Its LP relaxation (HiGHS) comes
   first: a bound, and a guide that fixes what it leaves at zero, so CP-SAT searches a
   model small enough for the cycle (``relaxation``); small models are then searched
   whole. The counts per node class are packed onto real nodes (disaggregation).
3. If the node-level model (all gangs, else the admitted ones) is small enough, solve it,
   hinted with the best decision so far: exact, with the solver's own bound.
4. Every candidate is scored by the same solver-free objective and the best is returned,
   so a decision is never worse than the greedy hint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import BoolArray
from solver.baselines import allocate_gangs
from solver.config import ObjectiveWeights, SolverConfig
from solver.decode import decision_from_placements, relative_gap
from solver.encode import (
    Encoding,
    class_bins,
    decode_admitted,
    decode_counts,
    encode,
    feasible_pair_estimate,
    hint,
    node_bins,
    pair_capacity,
    restricted,
    solution_of,
)
from solver.model import ClusterState, Decision, SolveStatus, StageReport
from solver.objective import Coefficients, coefficients, evaluate
from solver.packing import pack
from solver.placement import Placer, Policy
from solver.problem import Problem, prepare
from solver.relaxation import LpSolution, solve_lp
from solver.shapes import Shapes, group

MIN_STAGE_S = 0.05
DECODE_RESERVE = 0.08  # share of the time limit kept for decoding
# The wide (RINS) neighbourhood is searched on node-class models up to this many times
# max_exact_class_pairs: above, real-shaped 1,000-node models found nothing in 0.5 s.
RINS_PAIRS = 2
RINS_ROUNDS = 3
# An LP bound is exact to HiGHS' tolerance and rounded up past it: a decision this close
# is optimal.
OPTIMAL_GAP = 1e-6
# Of the time limit: the LP, and the LP-guided search, run at least this long even when
# preparing took the cycle's time (a 1,000-node narrow model's first solution: 0.1-0.3 s).
GUIDED_FLOOR = 0.35
GUIDED_SHARE = 0.6  # of the node-level stage's time, for its LP-guided searches
BASELINE_STOP_GAP = 0.05  # of the time limit: the LP-guided search runs at least this long
PACK_SHARE = 0.1  # of the time limit, at most, to pack one candidate's node classes exactly
PACK_BIN_S = 0.03  # for one class: measured 2-15 ms where a packing exists
# Deterministic solves stop on deterministic time; the wall clock only guards against a
# machine so slow or loaded that the cycle would stall (then reproducibility is lost).
DETERMINISTIC_WALL_FACTOR = 10.0


class _FirstSolution(cp_model.CpSolverSolutionCallback):
    def __init__(self) -> None:
        super().__init__()
        self.first_s: float | None = None

    def on_solution_callback(self) -> None:
        if self.first_s is None:
            self.first_s = self.wall_time


@dataclass
class StageResult:
    report: StageReport
    solution: Sequence[int] | None  # variable values; None when nothing was found
    optimal: bool
    deterministic_s: float  # CP-SAT's own load-independent measure of the work done


def _run(
    enc: Encoding,
    name: str,
    time_limit_s: float,
    config: SolverConfig,
    presolve: bool = True,
    min_workers: int = 1,
) -> StageResult:
    solver = cp_model.CpSolver()
    params = solver.parameters
    # Measured on real-shaped node-class models (8,000 variables): presolve took 0.35 s and
    # found little; without it the LP-guided search proved the optimum in 0.45 s.
    params.cp_model_presolve = presolve
    params.max_time_in_seconds = max(MIN_STAGE_S, time_limit_s)
    if config.deterministic:
        params.max_time_in_seconds *= DETERMINISTIC_WALL_FACTOR
    params.num_workers = max(config.workers(), min_workers)
    params.random_seed = config.seed
    params.relative_gap_limit = config.relative_gap_limit
    # Measured on the benchmark instances: symmetry detection and probing took seconds
    # of presolve on models that must be solved in one; the search does better without.
    params.symmetry_level = 0
    params.linearization_level = config.linearization_level
    params.cp_model_probing_level = 0
    if config.deterministic:
        params.interleave_search = True
        params.max_deterministic_time = max(MIN_STAGE_S, time_limit_s)
    callback = _FirstSolution()
    started = time.perf_counter()
    status = solver.solve(enc.model, callback)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    variables, constraints = enc.size()
    report = StageReport(
        name=name,
        variables=variables,
        constraints=constraints,
        status=solver.status_name(status),
        objective=round(solver.objective_value) if found else None,
        bound=int(np.floor(solver.best_objective_bound + 1e-6)) if found else None,
        wall_s=time.perf_counter() - started,
        first_solution_s=callback.first_s,
    )
    solution = list(solver.response_proto.solution) if found else None
    return StageResult(
        report, solution, status == cp_model.OPTIMAL, solver.response_proto.deterministic_time
    )


def _placer_from_counts(
    problem: Problem, enc: Encoding, per_pod_class: dict[int, list[tuple[int, int]]]
) -> Placer:
    """Node-level counts -> placements, exactly where the solver put them."""
    placer = Placer(problem)
    for c, where in sorted(per_pod_class.items()):
        for b, count in where:
            placer.place_on(problem.classes[c], enc.bins[b].nodes[0], count)
    return placer


def _disaggregate(
    problem: Problem,
    enc: Encoding,
    per_class: dict[int, list[tuple[int, int]]],
    admitted: set[int],
    weights: ObjectiveWeights,
    pack_budget_s: float = 0.0,
) -> Placer:
    """Place the aggregate's counts on real nodes, each node class on its own.

    Classes hold disjoint nodes, so each is a packing problem of its own: its pods go
    largest first, each on the fullest node it fits (best-fit decreasing); where that
    leaves pods out, the class is packed exactly (``packing``) within ``pack_budget_s``
    in all. A gang left below minMember is withdrawn and tried anywhere; what room is left
    is topped up.
    """
    placer = Placer(problem)
    items: dict[int, list[tuple[int, int]]] = {}
    for c, where in per_class.items():
        for b, count in where:
            items.setdefault(b, []).append((c, count))
    deadline = time.perf_counter() + pack_budget_s
    for b, bin_items in sorted(items.items()):
        bin_ = enc.bins[b]
        mask = np.zeros(len(problem.nodes), dtype=np.bool_)
        mask[list(bin_.nodes)] = True
        alloc = np.maximum(bin_.node_allocatable, 1)
        # Largest first; equal specs of one queue adjacent, so they are placed in one pass.
        bin_items.sort(
            key=lambda it: (
                -float((problem.classes[it[0]].demand / alloc).max()),
                problem.classes[it[0]].spec,
                problem.gangs[problem.classes[it[0]].gang].queue,
                it[0],
            )
        )
        # A class whose feasible nodes all lie in the bin needs no mask (a full pass each).
        spans: dict[int, bool] = {}
        for c, _ in bin_items:
            spec = problem.classes[c].spec
            if spec not in spans:
                spans[spec] = not (problem.classes[c].feasible & ~mask).any()
        placed = _place_items(placer, bin_items, mask, spans)
        if sum(map(len, placed)) == sum(n for _, n in bin_items) or len(bin_.nodes) < 2:
            continue
        left = min(deadline - time.perf_counter(), PACK_BIN_S)
        if left <= 0:
            continue
        nodes = list(bin_.nodes)
        placer.unplace([pod for pods in placed for pod in pods])
        packed = pack(
            placer.free[nodes],
            [problem.classes[c].demand for c, _ in bin_items],
            [n for _, n in bin_items],
            [
                problem.classes[c].value * (1 + problem.gangs[problem.classes[c].gang].rank)
                for c, _ in bin_items
            ],
            left,
        )
        if packed is None or sum(map(sum, (p.values() for p in packed))) <= sum(map(len, placed)):
            # No better packing found in time: the greedy one stands.
            for (c, _), pods in zip(bin_items, placed, strict=True):
                only = None if spans[problem.classes[c].spec] else mask
                placer.place_class(problem.classes[c], len(pods), Policy.PACK, only)
            continue
        for (c, _), on_nodes in zip(bin_items, packed, strict=True):
            for n, count in sorted(on_nodes.items()):
                placer.place_on(problem.classes[c], nodes[n], count)

    def difficulty(g: int) -> tuple[int, int, str]:
        gang = problem.gangs[g]
        return (-gang.rank, -sum(problem.classes[c].count for c in gang.classes), gang.name)

    def reached(g: int) -> bool:
        return problem.gangs[g].reaches(sum(placer.next_pod[c] for c in problem.gangs[g].classes))

    short = [g for g in sorted(admitted, key=difficulty) if not reached(g)]
    # The pods a class could not hold may fit elsewhere: a 53-pod gang short of 7 keeps
    # its 46 if the 7 find room; only a gang still short is withdrawn whole.
    for g in short:
        for c in problem.gangs[g].classes:
            placer.place_class(problem.classes[c], problem.classes[c].count, Policy.PACK)
    short = [g for g in short if not reached(g)]
    for g in short:
        classes = problem.gangs[g].classes
        placer.unplace([p for c in classes for p in problem.classes[c].pods[: placer.next_pod[c]]])
    for g in short:
        placer.try_gang(problem.gangs[g], Policy.PACK, extras=False)
    return _topped_up(problem, placer, weights)


def _place_items(
    placer: Placer, items: list[tuple[int, int]], mask: BoolArray, spans: dict[int, bool]
) -> list[list[str]]:
    """Each (pod class, count) in order; runs of one spec and queue in one pass."""
    problem = placer.problem
    placed: list[list[str]] = []
    start = 0
    while start < len(items):
        first = problem.classes[items[start][0]]
        key = (first.spec, problem.gangs[first.gang].queue)
        end = start + 1
        while end < len(items):
            other = problem.classes[items[end][0]]
            if (other.spec, problem.gangs[other.gang].queue) != key:
                break
            end += 1
        run = [(problem.classes[c], count) for c, count in items[start:end]]
        placed += placer.place_alike(run, Policy.PACK, None if spans[first.spec] else mask)
        start = end
    return placed


def _topped_up(problem: Problem, placer: Placer, weights: ObjectiveWeights) -> Placer:
    """Fill what room is left with the gangs that have no pod placed yet (gang-greedy),
    unless that lowers the objective: with overuse or opening priced above value, the
    room a solver left empty may be empty on purpose."""
    of_pod = problem.class_of_pod()
    before = set(placer.placed)
    placed_gangs = {problem.classes[of_pod[pod]].gang for pod in before}
    rest = [g for g in problem.schedulable_gangs() if g.index not in placed_gangs]
    worth = sum(evaluate(problem, placer.placed, weights).values())
    allocate_gangs(problem, placer, rest, Policy.PACK)
    added = [pod for pod in placer.placed if pod not in before]
    if added and sum(evaluate(problem, placer.placed, weights).values()) < worth:
        placer.unplace(added)
    return placer


@dataclass
class _Search:
    """What the stages of one solve share: candidates, bounds, and the clock."""

    problem: Problem
    config: SolverConfig
    coef: Coefficients
    started: float
    pool: ThreadPoolExecutor  # runs the baseline beside the CP-SAT solves
    stop_baseline: threading.Event
    baseline_job: Future[Placer] | None = None  # gang-greedy, once started
    stages: list[StageReport] = field(default_factory=list)
    solved: list[Placer] = field(default_factory=list)  # candidates from a solver
    bounds: list[int] = field(default_factory=list)
    admitted: set[int] | None = None  # gangs the node-class stage admitted
    scores: dict[int, int] = field(default_factory=dict)  # id(candidate) -> objective
    origin: dict[int, str] = field(default_factory=dict)  # id(candidate) -> stage
    deterministic_s: float = 0.0  # spent by the solves so far, in deterministic time

    def remaining(self) -> float:
        """Time left for solving: wall time, or with ``deterministic`` the solves'
        deterministic time, so that which stages run does not depend on the load either."""
        # Decoding and explaining the decision come after the last solve: keep a reserve.
        reserve = DECODE_RESERVE * self.config.time_limit_s
        if self.config.deterministic:
            used = self.deterministic_s
        else:
            used = time.perf_counter() - self.started
        return self.config.time_limit_s - reserve - used

    def run(
        self,
        enc: Encoding,
        name: str,
        time_limit_s: float,
        presolve: bool = True,
        min_workers: int = 1,
    ) -> StageResult:
        self.start_baseline()
        result = _run(enc, name, time_limit_s, self.config, presolve, min_workers)
        self.stages.append(result.report)
        self.deterministic_s += result.deterministic_s
        return result

    def score(self, placer: Placer) -> int:
        # Candidates are not changed once made: score each once.
        if id(placer) not in self.scores:
            terms = evaluate(self.problem, placer.placed, self.config.weights)
            self.scores[id(placer)] = sum(terms.values())
        return self.scores[id(placer)]

    def start_baseline(self) -> None:
        """Gang-greedy is pure Python; CP-SAT solves release the GIL. Started as the first
        solve starts, it runs on the second core instead of slowing the Python stages."""
        if self.baseline_job is None:
            self.baseline_job = self.pool.submit(_gang_greedy, self.problem, self.stop_baseline)

    @property
    def baseline(self) -> Placer:
        self.start_baseline()
        assert self.baseline_job is not None
        return self.baseline_job.result()

    def finished_baseline(self) -> list[Placer]:
        """The baseline if it is done, without waiting for it."""
        job = self.baseline_job
        return [job.result()] if job is not None and job.done() else []

    def best_so_far(self) -> Placer:
        # Solver candidates first: on a tie, max keeps the first.
        return max([*self.solved, self.baseline], key=self.score)

    def settled(self, wait_for_baseline: bool = True) -> bool:
        """A candidate already meets a proven bound: nothing left to gain."""
        if not self.bounds:
            return False
        candidates = [*self.solved, self.baseline] if wait_for_baseline else self.solved
        return bool(candidates) and max(map(self.score, candidates)) >= min(self.bounds)


def _lp_stage(search: _Search, enc: Encoding, time_limit_s: float, name: str) -> LpSolution | None:
    started = time.perf_counter()
    lp = solve_lp(enc.rows, time_limit_s)
    variables, constraints = enc.size()
    search.stages.append(
        StageReport(
            name=name,
            variables=variables,
            constraints=constraints,
            status="OPTIMAL" if lp is not None else "UNKNOWN",
            objective=None,
            bound=lp.bound if lp is not None else None,
            wall_s=time.perf_counter() - started,
        )
    )
    if lp is not None:
        search.bounds.append(lp.bound)
    return lp


def _use_class_solution(search: _Search, enc: Encoding, result: StageResult) -> None:
    assert result.solution is not None
    admitted = decode_admitted(enc, result.solution)
    counts = decode_counts(enc, result.solution)
    config = search.config
    budget = min(PACK_SHARE * config.time_limit_s, max(MIN_STAGE_S, search.remaining()))
    placer = _disaggregate(search.problem, enc, counts, admitted, config.weights, budget)
    if search.admitted is None or all(
        search.score(placer) >= search.score(p) for p in search.solved
    ):
        search.admitted = admitted
    search.solved.append(placer)
    search.origin[id(placer)] = result.report.name


def _node_class_stage(search: _Search, shapes: Shapes, share: float) -> None:
    """Admission on classes of nodes: the LP relaxation bounds it and guides a restricted
    search; small models are then also searched whole."""
    problem = search.problem
    config = search.config
    deadline = search.remaining() * (1 - share)  # what this stage leaves to the next

    def left() -> float:
        return search.remaining() - deadline

    bins = class_bins(problem)
    agg = encode(problem, shapes, bins, search.coef, pair_capacity(problem, shapes, bins))
    large = len(agg.pairs) > RINS_PAIRS * config.max_exact_class_pairs
    _guided_search(search, agg, "node-classes", left, large)
    size = len(agg.pairs)
    too_big = size > config.max_exact_class_pairs
    if search.settled(wait_for_baseline=False) or too_big or left() < MIN_STAGE_S:
        return
    # No hint: the greedy decision, followed first, held the search near it (real-shaped
    # 200-node models: 18% gap after 0.6 s hinted, proven optimal in 0.45 s unhinted).
    result = search.run(agg, "node-classes", left(), presolve=False)
    if result.solution is not None and result.report.bound is not None:
        search.bounds.append(result.report.bound)
        _use_class_solution(search, agg, result)


def _guided_search(
    search: _Search, enc: Encoding, prefix: str, left: Callable[[], float], large: bool
) -> None:
    """The model's LP relaxation bounds it and guides restricted searches (``restricted``).

    Large models: only what the LP uses is searched (real-shaped 1,000 nodes: 0.3% from
    the LP bound in 0.5 s, where wider neighbourhoods found nothing). Others: what the LP
    uses first, then what the LP or the best decision so far uses, again around each
    better decision (RINS as a large-neighbourhood search): the LP's support alone lost
    up to 16% on real-shaped 200-node clusters.
    """
    # Large models' LP and first search get a floor even when preparing took the cycle's
    # time: without it, 1,000-node cycles fell back to greedy.
    floor = GUIDED_FLOOR * search.config.time_limit_s if large else 0.0
    if max(left(), floor) < MIN_STAGE_S:
        return
    lp = _lp_stage(search, enc, max(left(), floor), f"{prefix}-lp")
    if lp is None:
        return
    narrow = restricted(enc, search.coef, lp.values)
    if large:
        # Two workers: one worker's first solution of a 1,000-node narrow model took
        # 0.1-0.3 s, two workers' 0.06-0.08 s; here time is short and the first counts.
        _search_classes(search, narrow, f"{prefix}-lp-guided", max(left(), floor), 2)
        return
    _search_classes(search, narrow, f"{prefix}-lp-guided", left() / 3)
    incumbent: Placer | None = None
    for _ in range(RINS_ROUNDS):
        candidates = [*search.solved, *search.finished_baseline()]
        if left() < MIN_STAGE_S or not candidates:
            break
        best = max(candidates, key=search.score)
        if incumbent is not None and search.score(best) <= search.score(incumbent):
            break  # the last neighbourhood held nothing better
        incumbent = best
        values = solution_of(enc, incumbent.placed, search.coef)
        wide = restricted(enc, search.coef, lp.values, values)
        if _search_classes(search, wide, f"{prefix}-rins", left() * 0.6):
            break  # its optimum is known: searching around it again finds the same


def _search_classes(
    search: _Search, enc: Encoding, name: str, time_limit_s: float, min_workers: int = 1
) -> bool:
    """A restricted node-class model: its solution is a candidate, its bound is not one.

    Returns whether the restricted model was solved to optimality."""
    result = search.run(enc, name, time_limit_s, presolve=True, min_workers=min_workers)
    search.stages[-1] = search.stages[-1].model_copy(update={"bound": None})
    if result.solution is not None:
        _use_class_solution(search, enc, result)
    return result.optimal


def _node_stage(search: _Search, shapes: Shapes, only: set[int] | None) -> None:
    """The exact model over every shape, or over ``only`` (then topped up greedily).

    Over every shape, its LP guides restricted searches first, as on node classes: the
    whole model's search from a hint improved little within a cycle (real-shaped 40-node
    clusters: 2-13% from the bound)."""
    problem = search.problem
    nodes = node_bins(problem)
    enc = encode(problem, shapes, nodes, search.coef, pair_capacity(problem, shapes, nodes, only))
    if only is None:
        deadline = search.remaining() * (1 - GUIDED_SHARE)

        def left() -> float:
            return search.remaining() - deadline

        _guided_search(search, enc, "node-level", left, large=False)
        if search.settled(wait_for_baseline=False) or search.remaining() < MIN_STAGE_S:
            return
    hint(enc, search.best_so_far().placed, search.coef)
    name = "node-level" if only is None else "node-level-admitted"
    result = search.run(enc, name, search.remaining())
    if result.solution is not None and result.report.bound is not None:
        placer = _placer_from_counts(problem, enc, decode_counts(enc, result.solution))
        if only is None:
            search.bounds.append(result.report.bound)
            search.solved.insert(0, placer)
        else:
            placer = _topped_up(problem, placer, search.config.weights)
            search.solved.append(placer)
        search.origin[id(placer)] = name


def solve(state: ClusterState, config: SolverConfig | None = None) -> Decision:
    started = time.perf_counter()
    config = config or SolverConfig()
    problem = prepare(state)
    if not problem.schedulable_gangs():
        return decision_from_placements(
            problem,
            _gang_greedy(problem),
            config,
            scheduler="cpsat",
            status=SolveStatus.NOTHING_TO_DO,
            wall_s=time.perf_counter() - started,
        )
    # The baseline runs in a thread beside the CP-SAT solves (_Search.start_baseline).
    # When a solver's decision makes it moot, it stops at its next gang (a prefix of
    # gang-greedy's decision: whole gangs only); see _baseline_cannot_matter.
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gang-greedy") as pool:
        try:
            return _solve(problem, config, started, pool, stop)
        finally:
            stop.set()


def _baseline_cannot_matter(search: _Search) -> bool:
    """A solver's decision is optimal, or time is up and it is within BASELINE_STOP_GAP of
    a bound: the baseline could add nothing, or little, so it need not be waited for.
    Deterministic solves wait unless the decision is optimal (the decision must not
    depend on the load), and so does a solve without such a decision (the baseline is
    then the guarantee)."""
    if not search.bounds or not search.solved:
        return False
    gap = relative_gap(max(map(search.score, search.solved)), min(search.bounds))
    if gap is None:
        return False
    if gap <= OPTIMAL_GAP:
        return True  # nothing can score more, and a solver's candidate wins a tie
    return not search.config.deterministic and search.remaining() <= 0 and gap <= BASELINE_STOP_GAP


def _gang_greedy(problem: Problem, stop: threading.Event | None = None) -> Placer:
    placer = Placer(problem)
    allocate_gangs(problem, placer, stop=stop.is_set if stop is not None else None)
    return placer


def _solve(
    problem: Problem,
    config: SolverConfig,
    started: float,
    pool: ThreadPoolExecutor,
    stop_baseline: threading.Event,
) -> Decision:
    coef = coefficients(problem, config.weights)
    search = _Search(problem, config, coef, started, pool, stop_baseline)
    shapes = group(problem, coef)

    limit = config.max_node_level_pairs
    pairs_estimate = feasible_pair_estimate(shapes)
    if len(problem.node_classes) < len(problem.nodes):
        # Far above the node-level limit no node-level stage follows: take all the time.
        far = pairs_estimate > 2 * limit
        _node_class_stage(search, shapes, 1.0 if far else config.aggregate_time_share)

    only: set[int] | None = None
    if pairs_estimate > limit and search.admitted is not None:
        only = {s.index for s in shapes.shapes if set(s.gangs) & search.admitted}
    if (
        (pairs_estimate <= limit or only is not None)
        and search.remaining() > MIN_STAGE_S
        and feasible_pair_estimate(shapes, only) <= limit
        and not search.settled(wait_for_baseline=False)
    ):
        _node_stage(search, shapes, only)

    if _baseline_cannot_matter(search):
        stop_baseline.set()
    best = search.best_so_far()
    gap = relative_gap(search.score(best), min(search.bounds)) if search.bounds else None
    if gap is not None and gap <= OPTIMAL_GAP:
        status = SolveStatus.OPTIMAL  # whoever found it, nothing scores more
    elif best is search.baseline:
        status = SolveStatus.FALLBACK
    else:
        status = SolveStatus.FEASIBLE
    return decision_from_placements(
        problem,
        best,
        config,
        scheduler="cpsat",
        status=status,
        bound=min(search.bounds) if search.bounds else None,
        stages=search.stages,
        wall_s=time.perf_counter() - started,
        decided_by=search.origin.get(id(best), "gang-greedy"),
    )
