"""What the stages of one CP-SAT solve share: the clock, the candidates and bounds, the
gang-greedy baseline beside them, and the one place CP-SAT is called with its parameters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model, cp_model_helper

from solver.baselines import allocate_gangs
from solver.config import SolverConfig
from solver.decision import StageReport
from solver.decode import relative_gap
from solver.encode import Encoding
from solver.grouped_lp import model_lp
from solver.objective import Coefficients, evaluate
from solver.placement import Placer
from solver.problem import Problem
from solver.relaxation import LpSolution, Meanwhile
from solver.topup import gang_prices

MIN_STAGE_S = 0.05
# An LP bound is exact to HiGHS' tolerance and rounded up past it: a decision this close
# is optimal.
OPTIMAL_GAP = 1e-6
# A solver's decision this close to a bound, with the time used: the baseline need not
# be waited for (it could add at most this much).
BASELINE_STOP_GAP = 0.05
BASELINE_SKIP_GAP = 0.001  # ... and this close, whether or not time is up
DECODE_RESERVE = 0.08  # share of the time limit kept for decoding
BASELINE_BESIDE_VARS = 100  # smallest model whose solve the baseline runs beside
# Deterministic solves stop on deterministic time; the wall clock only guards against a
# machine so slow or loaded that the cycle would stall (then reproducibility is lost).
DETERMINISTIC_WALL_FACTOR = 10.0
# ... and never less than this: a call's deterministic time ran at a tenth of the wall
# clock's pace on a loaded machine (``set_limits``), and a short call's guard of 10 times
# its limit (an exact packing of 0.03 s: 0.3 s) cut it.
DETERMINISTIC_GUARD_FLOOR_S = 2.0


class _FirstSolution(cp_model.CpSolverSolutionCallback):
    def __init__(self, beside: Beside | None = None) -> None:
        super().__init__()
        self.first_s: float | None = None
        self.beside = beside

    def on_solution_callback(self) -> None:
        if self.first_s is None:
            self.first_s = self.wall_time
        if self.beside is not None:
            self.beside.found.set()
            if self.beside.wanted.is_set():
                self.stop_search()


@dataclass
class StageResult:
    report: StageReport
    solution: Sequence[int] | None  # variable values; None when nothing was found
    optimal: bool
    deterministic_s: float  # CP-SAT's own load-independent measure of the work done


def set_limits(
    params: cp_model_helper.SatParameters,
    config: SolverConfig,
    time_limit_s: float,
    workers: int | None = None,
    guard_s: float | None = None,
) -> None:
    """What every CP-SAT call of a cycle shares: its time limit (with ``deterministic``, in
    deterministic time, the wall clock then only a guard: DETERMINISTIC_WALL_FACTOR times
    the limit, or ``guard_s``, the solve's own guard left (``Search.wall_guard_left``),
    where that is longer), workers (default: the config's) and seed, and no symmetry
    detection or probing (measured on the benchmark instances: they took seconds of
    presolve on models that must be solved in one).

    A call's deterministic time ran at a tenth of the wall clock's pace on a loaded
    machine (1,975 variables: 0.03-0.06 s of it in 0.5 s): guarded at 10 times its own
    limit, short calls (0.05 s) were cut by the wall clock, and a deterministic solve of
    the same input gave another decision (a fuzzer: 3 of 100 pairs; replayed with two
    busy processes on the 2 cores). Guarded by the solve's own guard (and never less than
    DETERMINISTIC_GUARD_FLOOR_S), only a solve past that loses reproducibility."""
    params.max_time_in_seconds = time_limit_s
    params.num_workers = workers if workers is not None else config.workers()
    params.random_seed = config.seed
    params.symmetry_level = 0
    params.cp_model_probing_level = 0
    if config.deterministic:
        params.interleave_search = True
        params.max_deterministic_time = time_limit_s
        params.max_time_in_seconds = deterministic_guard(time_limit_s, guard_s)


def deterministic_guard(time_limit_s: float, guard_s: float | None = None) -> float:
    """The wall-clock guard of a deterministic call of ``time_limit_s`` (see ``set_limits``)."""
    floor = max(DETERMINISTIC_GUARD_FLOOR_S, guard_s or 0.0)
    return max(time_limit_s * DETERMINISTIC_WALL_FACTOR, floor)


def run_cpsat(
    enc: Encoding,
    name: str,
    time_limit_s: float,
    config: SolverConfig,
    presolve: bool = True,
    lp_worker: bool = False,
    first_only: bool = False,
    beside: Beside | None = None,
    solver: cp_model.CpSolver | None = None,
    guard_s: float | None = None,
) -> StageResult:
    """``lp_worker``: one worker, CP-SAT's ``max_lp`` subsolver, whatever the config asks;
    ``first_only``: stopped at its first solution; ``beside``: run by it (see there).

    Measured on LP-guided node-class models of real-shaped 1,000-node clusters (1,300
    variables, 6 seeds, a busy Python thread beside it as the baseline is): that worker's
    first solution came at 0.12-0.16 s and was 0.3-1.1% from the LP bound on every seed,
    and nothing better followed within 0.3 s; two default workers found nothing on half
    of the seeds in 0.3 s, one worker at linearization 2 without that subsolver's
    settings nothing on four of six (and the default worker, on 200 nodes, nothing on
    some seeds within a cycle's third).
    """
    if beside is not None:
        solver = beside.solver
    solver = solver or cp_model.CpSolver()
    params = solver.parameters
    # Measured on real-shaped node-class models (8,000 variables): presolve took 0.35 s and
    # found little; without it the LP-guided search proved the optimum in 0.45 s. The
    # max_lp worker was measured without it.
    params.cp_model_presolve = presolve and not lp_worker
    set_limits(
        params, config, max(MIN_STAGE_S, time_limit_s), 1 if lp_worker else None, guard_s
    )
    if lp_worker:
        params.subsolvers.append("max_lp")
    params.stop_after_first_solution = first_only
    params.relative_gap_limit = config.relative_gap_limit
    params.linearization_level = config.linearization_level
    callback = _FirstSolution(beside)
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


class Beside:
    """A CP-SAT solve on the other core while this thread's Python runs (CP-SAT releases
    the GIL): ``result`` ends it as soon as it has a solution (at its first, if it has
    none yet), so it searches for as long as the caller has other work. The model is no
    relaxation (restricted): its report keeps no bound."""

    def __init__(
        self, search: Search, enc: Encoding, name: str, time_limit_s: float, lp_worker: bool
    ) -> None:
        self.search = search
        self.enc = enc
        self.solver = cp_model.CpSolver()
        self.wanted = threading.Event()  # the caller wants the result
        self.found = threading.Event()  # a solution is there
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="beside")
        self._job = self._pool.submit(
            run_cpsat,
            enc,
            name,
            time_limit_s,
            search.config,
            lp_worker=lp_worker,
            beside=self,
            guard_s=search.wall_guard_left(),
        )

    def stop(self) -> None:
        self.wanted.set()
        if self.found.is_set():
            self.solver.stop_search()

    def discard(self) -> None:
        """Ended at once, its result unread. Asked again until it ends: a stop asked
        before the thread has entered the solve may be lost."""
        self.wanted.set()
        _ended(self.solver, self._job)
        self._pool.shutdown()

    def result(self) -> StageResult:
        self.stop()
        result = self._job.result()
        self._pool.shutdown()
        report = result.report.model_copy(update={"bound": None})
        self.search.stages.append(report)
        self.search.deterministic_s += result.deterministic_s
        return StageResult(report, result.solution, result.optimal, result.deterministic_s)


class Ahead:
    """The node-class model searched whole on the other core, from the node-class
    stage's first decision (``Search.start_ahead``) until the node-level stage's last
    phase reads it: each stage between is one CP-SAT worker, HiGHS or Python, so the
    second core was idle but for gang-greedy's milliseconds. Searched whole, with
    presolve and unhinted, the class model often gets far closer to its bound within a
    second than the node-level model to its own (real-shaped 40 nodes, seed 3, alone:
    0.1-3.5% in 0.6 s over six CP-SAT seeds, one proving its optimum; the node-level
    model 3% after 1 s, 0.1% after 9 s), and its bound is one on the real problem. Not
    for deterministic solves (what it finds by the time it is read depends on the load)."""

    def __init__(self, search: Search, enc: Encoding, name: str) -> None:
        self.search = search
        self.enc = enc
        self._solver = cp_model.CpSolver()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._job = self._pool.submit(
            run_cpsat, enc, name, search.remaining(), search.config, solver=self._solver
        )
        self._read = False

    def result(self) -> StageResult:
        """Stopped where it is (if its time is not up, nor its optimum proven), and
        reported as a stage."""
        self._read = True
        try:
            _ended(self._solver, self._job)
            result = self._job.result()
        finally:
            self._pool.shutdown()
        self.search.stages.append(result.report)
        self.search.deterministic_s += result.deterministic_s
        return result

    def discard(self) -> None:
        """Ended at once, unless its result was read."""
        if not self._read:
            self._read = True
            _ended(self._solver, self._job)
            self._pool.shutdown()


def _ended(solver: cp_model.CpSolver, job: Future[StageResult]) -> None:
    """``job``'s solve stopped and waited for. Asked again until it ends: a stop asked
    before the thread has entered the solve may be lost."""
    while True:
        solver.stop_search()
        try:
            job.result(timeout=0.01)
            return
        except FuturesTimeout:
            continue


@dataclass
class Search:
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
    held_back_s: float = 0.0  # of the limit, kept for what follows placement (preemption)
    # Builds the node-class model's search ahead (``start_ahead``), where one may run.
    ahead_of: Callable[[], Ahead] | None = None
    ahead: Ahead | None = None  # that search, once started
    warmed: bool = False  # ``warm_up`` done
    # The node-class model, its LP's optimum and wall time (``candidates.place_other_optima``).
    class_lp: tuple[Encoding, LpSolution, float] | None = None
    class_rounded: tuple[int, ...] | None = None  # that optimum rounded, where placed
    placing_s: float = 0.0  # the longest placement of a model's counts so far
    # Per candidate (its id, shared with the exchanges made from it), the waiting gangs
    # an exchange has tried to place in it (``displace.exchanged``); the longest
    # exchange so far.
    exchange_tried: dict[int, set[int]] = field(default_factory=dict)
    exchange_s: float = 0.0

    def wall_guard_left(self) -> float:
        """Of a deterministic solve's wall-clock guard (DETERMINISTIC_WALL_FACTOR times its
        limit), what is left: past it the cycle would stall, and reproducibility is lost."""
        elapsed = time.perf_counter() - self.started
        return self.config.time_limit_s * DETERMINISTIC_WALL_FACTOR - elapsed

    def remaining(self) -> float:
        """Time left for solving: wall time, or with ``deterministic`` the solves'
        deterministic time, so that which stages run does not depend on the load either."""
        # Decoding and explaining the decision come after the last solve: keep a reserve.
        reserve = DECODE_RESERVE * self.config.time_limit_s
        if self.config.deterministic:
            used = self.deterministic_s
        else:
            used = time.perf_counter() - self.started
        return self.config.time_limit_s - reserve - self.held_back_s - used

    def run(
        self,
        enc: Encoding,
        name: str,
        time_limit_s: float,
        presolve: bool = True,
        lp_worker: bool = False,
        first_only: bool = False,
    ) -> StageResult:
        # A search stopped at its first solution, or of a model this small, ends within
        # a fraction of a second and is followed by the disaggregation, pure Python: a
        # baseline started beside it would share the GIL with that, not run on the
        # second core (5,000 nodes: disaggregating took 0.15-0.35 s beside it, 0.05-0.1 s
        # alone). It starts at the end, if it can still matter.
        if not first_only and enc.size()[0] >= BASELINE_BESIDE_VARS:
            self.start_baseline()
        result = run_cpsat(
            enc,
            name,
            time_limit_s,
            self.config,
            presolve,
            lp_worker,
            first_only,
            guard_s=self.wall_guard_left(),
        )
        self.stages.append(result.report)
        self.deterministic_s += result.deterministic_s
        return result

    def lp(
        self,
        enc: Encoding,
        time_limit_s: float,
        name: str,
        relaxation: bool = True,
        solve: Callable[[float], LpSolution | None] | None = None,
    ) -> LpSolution | None:
        """The model's LP relaxation (HiGHS), reported as a stage named ``name``; without
        ``relaxation`` (a model over some gangs only, or other prices) the report keeps
        no bound. ``solve``: another LP of the model's rows, given the time limit."""
        started = time.perf_counter()
        meanwhile = None if self.warmed or solve is not None else Meanwhile(self.warm_up)
        lp = model_lp(enc, time_limit_s, meanwhile) if solve is None else solve(time_limit_s)
        variables, constraints = enc.size()
        self.stages.append(
            StageReport(
                name=name,
                variables=variables,
                constraints=constraints,
                status="OPTIMAL" if lp is not None else "UNKNOWN",
                objective=None,
                bound=lp.bound if lp is not None and relaxation else None,
                # What the LP took: not the warm-up where it ran on past HiGHS.
                wall_s=time.perf_counter() - started - (meanwhile.past_s if meanwhile else 0.0),
            )
        )
        return lp

    def warm_up(self) -> None:
        """The class of each pod and the gangs' prices, which placing any candidate reads
        (memoised on the problem): built beside the cycle's first LP, while HiGHS solves
        (5,000 real-shaped nodes: 15-20 ms)."""
        self.warmed = True
        self.problem.class_of_pod()
        gang_prices(self.problem, self.config.weights)

    def no_bound(self) -> None:
        """The last stage's model is no relaxation (restricted, repacked, over some gangs
        only): its report keeps no bound, so no gap is ever measured against it."""
        self.stages[-1] = self.stages[-1].model_copy(update={"bound": None})

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
            self.baseline_job = self.pool.submit(
                gang_greedy_placer, self.problem, self.stop_baseline
            )

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

    def baseline_cannot_matter(self) -> bool:
        """A solver's decision is optimal, within BASELINE_SKIP_GAP of a bound, or within
        BASELINE_STOP_GAP when time is up or the baseline has not started: the baseline
        could add nothing, or little, so it need not be waited for (gang-greedy takes
        0.4-0.8 s on 5,000 nodes). Deterministic solves wait unless the decision is
        optimal (the decision must not depend on the load), and so does a solve without
        such a decision (the baseline is then the guarantee)."""
        if not self.bounds or not self.solved:
            return False
        gap = relative_gap(max(map(self.score, self.solved)), min(self.bounds))
        if gap is None:
            return False
        if gap <= OPTIMAL_GAP:
            return True  # nothing can score more, and a solver's candidate wins a tie
        if self.config.deterministic:
            return False
        if gap <= BASELINE_SKIP_GAP:
            return True
        # Not started (every solve was a dive or tiny), it would now run after them, on the
        # cycle's time: real-shaped 1,000 nodes waited 0.3 s past a 1 s limit for it.
        late = self.baseline_job is None or self.remaining() <= 0
        return late and gap <= BASELINE_STOP_GAP

    def start_ahead(self) -> None:
        """The search ahead started, if one may run and has not. Called once the
        node-class stage's first decision is not at its bound: where it is (an easy
        cycle, e.g. identical gangs on identical nodes) it would search for nothing (an
        earlier search ahead, of the node-level model, took the decision's CPU from 0.07
        to 0.2 s at 1,000 nodes x 1,000 gangs of 3 when started with the cycle)."""
        if self.ahead is None and self.ahead_of is not None:
            self.ahead = self.ahead_of()

    def settled(self, wait_for_baseline: bool = True) -> bool:
        """A candidate is within ``relative_gap_limit`` of a proven bound (or at it, to the
        LP's tolerance): too little left to gain for another stage. Proving the last
        0.1% took whole searches: 1,000 real-shaped nodes x 1,000 gangs of 3, 0.43 s of
        both cores for the decision the first search had found."""
        if not self.bounds:
            return False  # and no waiting for the baseline
        candidates = [*self.solved, self.baseline] if wait_for_baseline else self.solved
        return bool(candidates) and self.at_bound(max(candidates, key=self.score))

    def at_bound(self, placer: Placer) -> bool:
        """``placer`` is ``close_enough`` to the lowest bound proven so far."""
        return bool(self.bounds) and self.close_enough(self.score(placer), min(self.bounds))

    def close_enough(self, score: int, bound: int) -> bool:
        """``score`` is within ``relative_gap_limit`` of the proven ``bound`` (or at it, to
        the LP's tolerance): no stage need search for more."""
        gap = relative_gap(score, bound)
        return gap is not None and gap <= max(OPTIMAL_GAP, self.config.relative_gap_limit)


def gang_greedy_placer(problem: Problem, stop: threading.Event | None = None) -> Placer:
    placer = Placer(problem)
    allocate_gangs(problem, placer, stop=stop.is_set if stop is not None else None)
    return placer
