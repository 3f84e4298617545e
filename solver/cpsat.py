"""solve(state, config) -> Decision: the CP-SAT scheduler.

Stages, all within one time limit:
1. Prepare the problem and run gang-greedy: the baseline, and a complete hint.
2. Where nodes fall into fewer classes than there are nodes, solve the aggregated model
   (bins = classes of identical nodes): small, so fast; a relaxation, so its bound holds
   for the real problem; it decides which gangs to admit. Its counts per node class guide
   a placer onto real nodes (disaggregation).
3. If the node-level model (all gangs, else the admitted ones) is small enough, solve it,
   hinted with the best decision so far: exact, with the solver's own bound.
4. Every candidate is scored by the same solver-free objective and the best is returned,
   so a decision is never worse than the greedy hint.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.baselines import allocate_gangs
from solver.config import SolverConfig
from solver.decode import decision_from_placements
from solver.encode import (
    Encoding,
    class_bins,
    encode,
    feasible_pair_estimate,
    hint,
    node_bins,
    pair_capacity,
    solution_admitted,
    solution_counts,
)
from solver.model import ClusterState, Decision, SolveStatus, StageReport
from solver.objective import coefficients, evaluate
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
    solution: Sequence[int] | None  # variable values; None when nothing was found
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
        bound=int(np.floor(solver.best_objective_bound + 1e-6)) if found else None,
        wall_s=time.perf_counter() - started,
        first_solution_s=callback.first_s,
    )
    solution = list(solver.response_proto.solution) if found else None
    return StageResult(report, solution, status == cp_model.OPTIMAL)


def _placer_from_counts(problem: Problem, counts: dict[tuple[int, int], int]) -> Placer:
    placer = Placer(problem)
    for (c, node), count in sorted(counts.items()):
        placer.place_on(problem.classes[c], node, count)
    return placer


def _disaggregate(
    problem: Problem, enc: Encoding, counts: dict[tuple[int, int], int], admitted: set[int]
) -> Placer:
    """Place the admitted gangs on real nodes, each class where the aggregate put it.

    Hardest gangs first (priority, then size); a gang that no longer fits its node
    classes is tried anywhere, then rolled back. What room is left goes to gang-greedy.
    """
    placer = Placer(problem)
    per_class: dict[int, list[tuple[int, int]]] = {}
    for (c, b), count in counts.items():
        per_class.setdefault(c, []).append((b, count))
    in_bin = {}
    for b, bin_ in enumerate(enc.bins):
        mask = np.zeros(len(problem.nodes), dtype=np.bool_)
        mask[list(bin_.nodes)] = True
        in_bin[b] = mask

    def difficulty(g: int) -> tuple[int, int, str]:
        gang = problem.gangs[g]
        return (-gang.rank, -sum(problem.classes[c].count for c in gang.classes), gang.name)

    for g in sorted(admitted, key=difficulty):
        gang = problem.gangs[g]
        placed: list[str] = []
        for c in gang.classes:
            for b, count in per_class.get(c, []):
                placed += placer.place_class(problem.classes[c], count, Policy.PACK, in_bin[b])
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
    coef = coefficients(problem, config.weights)

    def score(placer: Placer) -> int:
        return sum(evaluate(problem, placer.placed, config.weights).values())

    stages: list[StageReport] = []
    solved: list[Placer] = []  # candidates from a solver
    bounds: list[int] = []
    proven = False
    admitted: set[int] | None = None
    best_hint = baseline

    nodes = node_bins(problem)
    if len(problem.node_classes) < len(problem.nodes):
        classes = class_bins(problem)
        agg = encode(problem, classes, coef, pair_capacity(problem, classes))
        hint(agg, baseline.placed, coef)
        share = config.aggregate_time_share
        result = _run(agg, "node-classes", remaining() * share, config)
        stages.append(result.report)
        if result.solution is not None and result.report.bound is not None:
            bounds.append(result.report.bound)
            admitted = solution_admitted(agg, result.solution)
            guided = _disaggregate(problem, agg, solution_counts(agg, result.solution), admitted)
            solved.append(guided)
            best_hint = max((guided, baseline), key=score)

    limit = config.max_node_level_pairs
    restricted = feasible_pair_estimate(problem) > limit
    modelled = admitted if restricted else None
    if (
        (not restricted or admitted is not None)
        and remaining() > MIN_STAGE_S
        and (feasible_pair_estimate(problem, modelled) <= limit)
    ):
        pairs = pair_capacity(problem, nodes, modelled)
        enc = encode(problem, nodes, coef, pairs)
        hint(enc, best_hint.placed, coef)
        name = "node-level-admitted" if restricted else "node-level"
        result = _run(enc, name, remaining(), config)
        stages.append(result.report)
        if result.solution is not None and result.report.bound is not None:
            placer = _placer_from_counts(problem, solution_counts(enc, result.solution))
            if restricted:
                placer = _topped_up(problem, placer)
            else:
                bounds.append(result.report.bound)
                proven = result.optimal
            solved.append(placer)

    # Solver candidates first: on a tie, max keeps the first.
    best = max([*solved, baseline], key=score)
    if best is baseline:
        status = SolveStatus.FALLBACK
    elif proven and score(best) >= min(bounds):
        status = SolveStatus.OPTIMAL
    else:
        status = SolveStatus.FEASIBLE
    return decision_from_placements(
        problem,
        best,
        config,
        scheduler="cpsat",
        status=status,
        bound=min(bounds) if bounds else None,
        stages=stages,
        wall_s=time.perf_counter() - started,
    )
