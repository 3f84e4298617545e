"""solve(state, config) -> Decision: the CP-SAT scheduler.

Stages, all within one time limit:
1. Prepare the problem and run gang-greedy: the baseline, and a complete hint.
2. If the node-level count model is small enough, solve it directly (hinted): its
   solution is exact and its bound is the solver's own.
3. Otherwise solve the aggregated model (bins = classes of identical nodes): a relaxation,
   so its bound is valid for the real problem; it decides which gangs to admit. Then
   disaggregate onto real nodes (its per-class counts guide the placer), and if the
   node-level model restricted to the admitted gangs is small enough, polish with it.
4. Every candidate is scored by the same solver-free objective; the best one is returned,
   so a decision is never worse than the greedy hint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.baselines import allocate_gangs
from solver.config import SolverConfig
from solver.decode import decision_from_placements
from solver.encode import (
    Encoding,
    admitted_in,
    class_bins,
    encode,
    hint,
    node_bins,
    node_counts,
    pair_capacity,
)
from solver.model import ClusterState, Decision, SolveStatus, StageReport
from solver.objective import evaluate
from solver.placement import Placer, Policy
from solver.problem import Problem, prepare

MIN_STAGE_S = 0.05


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
    solver: cp_model.CpSolver | None  # None when no solution was found
    optimal: bool


def _run(enc: Encoding, name: str, time_limit_s: float, config: SolverConfig) -> StageResult:
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(MIN_STAGE_S, time_limit_s)
    params.num_workers = config.workers()
    params.random_seed = config.seed
    params.relative_gap_limit = config.relative_gap_limit
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
        bound=int(np.floor(solver.best_objective_bound)) if found else None,
        wall_s=time.perf_counter() - started,
        first_solution_s=callback.first_s,
    )
    return StageResult(report, solver if found else None, status == cp_model.OPTIMAL)


def _placer_from_counts(problem: Problem, counts: dict[tuple[int, int], int]) -> Placer:
    placer = Placer(problem)
    for (c, node), count in sorted(counts.items()):
        placer.place_on(problem.classes[c], node, count)
    return placer


def _disaggregate(
    problem: Problem, enc: Encoding, counts: dict[tuple[int, int], int], admitted: set[int]
) -> Placer:
    """Place the admitted gangs on real nodes, each class where the aggregate put it.

    Hardest gangs first (priority, then size); a gang that no longer fits its bins is
    tried anywhere, then rolled back. Whatever room is left goes to gang-greedy.
    """
    placer = Placer(problem)
    per_class: dict[int, list[tuple[int, int]]] = {}
    for (c, b), count in counts.items():
        per_class.setdefault(c, []).append((b, count))
    order = sorted(
        admitted,
        key=lambda g: (
            -problem.gangs[g].rank,
            -sum(problem.classes[c].count for c in problem.gangs[g].classes),
            problem.gangs[g].name,
        ),
    )
    for g in order:
        gang = problem.gangs[g]
        placed: list[str] = []
        for c in gang.classes:
            cls = problem.classes[c]
            for b, count in per_class.get(c, []):
                allowed = np.zeros(len(problem.nodes), dtype=np.bool_)
                allowed[list(enc.bins[b].nodes)] = True
                placed += placer.place_class(cls, count, Policy.PACK, allowed)
        if len(placed) < gang.need:
            placer.unplace(placed)
            placer.try_gang(gang, Policy.PACK, extras=False)
    rest = [gang for gang in problem.schedulable_gangs() if gang.index not in admitted]
    allocate_gangs(problem, placer, rest, Policy.PACK)
    return placer


def _topped_up(problem: Problem, placer: Placer) -> Placer:
    """The solution plus any gang gang-greedy can still fit (for restricted models)."""
    filled = placer.copy()
    of_pod = problem.class_of_pod()
    placed_gangs = {problem.classes[of_pod[pod]].gang for pod in placer.placed}
    rest = [g for g in problem.schedulable_gangs() if g.index not in placed_gangs]
    allocate_gangs(problem, filled, rest, Policy.PACK)
    return filled


def solve(state: ClusterState, config: SolverConfig | None = None) -> Decision:
    started = time.perf_counter()
    config = config or SolverConfig()
    problem = prepare(state)

    def remaining() -> float:
        return config.time_limit_s - (time.perf_counter() - started)

    baseline = Placer(problem)
    allocate_gangs(problem, baseline)
    if not problem.schedulable_gangs():
        return decision_from_placements(
            problem,
            baseline,
            config,
            scheduler="cpsat",
            status=SolveStatus.NOTHING_TO_DO,
            wall_s=time.perf_counter() - started,
        )

    stages: list[StageReport] = []
    candidates: list[tuple[Placer, bool]] = [(baseline, False)]  # (placer, from a solver)
    bound: int | None = None
    proven = False
    nodes = node_bins(problem)
    pairs = pair_capacity(problem, nodes)

    if len(pairs) <= config.max_node_level_pairs:
        enc = encode(problem, nodes, config.weights, pairs)
        hint(enc, baseline.placed)
        result = _run(enc, "node-level", remaining(), config)
        stages.append(result.report)
        bound = result.report.bound
        if result.solver is not None:
            proven = result.optimal
            candidates.append((_placer_from_counts(problem, node_counts(enc, result.solver)), True))
    else:
        agg = encode(problem, class_bins(problem), config.weights)
        hint(agg, baseline.placed)
        result = _run(agg, "node-classes", remaining() * config.aggregate_time_share, config)
        stages.append(result.report)
        bound = result.report.bound
        if result.solver is not None:
            admitted = admitted_in(agg, result.solver)
            guided = _disaggregate(problem, agg, node_counts(agg, result.solver), admitted)
            candidates.append((guided, True))
            polish_pairs = pair_capacity(problem, nodes, admitted)
            if len(polish_pairs) <= config.max_node_level_pairs and remaining() > MIN_STAGE_S:
                polish = encode(problem, nodes, config.weights, polish_pairs)
                hint(polish, guided.placed)
                polished = _run(polish, "node-level-admitted", remaining(), config)
                stages.append(polished.report)
                if polished.solver is not None:
                    placer = _placer_from_counts(problem, node_counts(polish, polished.solver))
                    candidates.append((_topped_up(problem, placer), True))

    def score(candidate: tuple[Placer, bool]) -> int:
        return sum(evaluate(problem, candidate[0].placed, config.weights).values())

    # Solver candidates first: on a tie, max keeps the first, and the solver's is proven.
    best, from_solver = max(candidates[1:] + candidates[:1], key=score)
    if not from_solver:
        status = SolveStatus.FALLBACK
    elif proven:
        status = SolveStatus.OPTIMAL
    else:
        status = SolveStatus.FEASIBLE
    return decision_from_placements(
        problem,
        best,
        config,
        scheduler="cpsat",
        status=status,
        bound=bound,
        stages=stages,
        wall_s=time.perf_counter() - started,
    )
