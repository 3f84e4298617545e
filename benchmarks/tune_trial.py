"""The weight study's terms (objectives, searched space, settings, scores) and one trial:
a simulator run of a workload with candidate weights, scored (``benchmarks.tune``)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from adapter.loop import LoopSettings
from adapter.sim.measures import summarise
from adapter.sim.run import SimRun, simulate
from adapter.sim.scenario import Scenario, ScenarioError, Workload, load_scenario, materialise
from solver.config import ObjectiveWeights, SolverConfig

OBJECTIVES = ("utilisation", "share_error", "mean_jct_s")
OBJECTIVE_NAMES = ("utilisation", "share error", "mean JCT")
DIRECTIONS: tuple[StudyDirection, ...] = (
    StudyDirection.MAXIMIZE,
    StudyDirection.MINIMIZE,
    StudyDirection.MINIMIZE,
)
# Searched weights and their ranges; ``value`` (100) is the unit the others are read in.
Space = dict[str, tuple[int, int, bool]]  # name -> (low, high, log scale)
SPACE: Space = {
    "fairness": (1, 3000, True),
    "overuse": (0, 400, False),
    "priority": (0, 1000, False),
    "gang_start": (0, 200, False),
    "packing": (0, 50, False),
    "gpu_node_open": (0, 50, False),
}
DEFAULT_OUT = Path("bench-out/tune")
DEFAULTS_ATTR = "defaults"
PER_DRAW_ATTR = "per_draw"
NOISE_Z = 2.0  # a gain must exceed this many standard errors of the paired differences
SIGNS = (1.0, -1.0, -1.0)  # per objective: +1 when higher is better
# Trials that count as done: a pruned trial used its run too, and if every trial of a
# bad region were pruned, counting only complete ones would never stop.
DONE = (TrialState.COMPLETE, TrialState.PRUNED)
EXIT_BAD_INPUT = 2


class TuneError(ValueError):
    """A study that cannot start; the message says what to fix."""


@dataclass(frozen=True)
class Budget:
    """How much worse than the defaults an objective may get while another improves."""

    tolerance: float = 0.01  # relative, utilisation and mean JCT
    fairness_tolerance: float = 0.002  # absolute, share error


@dataclass(frozen=True)
class TuneSettings:
    scenario: str
    trials: int = 30
    timeout_s: float | None = None
    jobs: int = 1
    seed: int = 0
    storage: str | None = None  # None: a journal file in ``out``
    study: str | None = None  # None: gangsat-<scenario name>
    out: Path = DEFAULT_OUT
    holdout: str | None = None
    max_fairness_error: float = 0.02
    tolerance: float = 0.01  # relative worsening of utilisation or JCT within budget
    fairness_tolerance: float = 0.002  # absolute worsening of share error within budget
    time_limit_s: float | None = None
    draws: int = 1  # each trial runs this many seeded variants of the scenario
    holdout_draws: int = 6  # the held-out check runs this many unseen variants

    def budget(self) -> Budget:
        return Budget(self.tolerance, self.fairness_tolerance)


@dataclass(frozen=True)
class Score:
    utilisation: float
    share_error: float
    mean_jct_s: float
    finished: int
    jobs: int
    per_draw: tuple[tuple[float, float, float], ...] = ()  # values() of each draw

    def values(self) -> tuple[float, float, float]:
        return (self.utilisation, self.share_error, self.mean_jct_s)


@dataclass
class TuneResult:
    study: str
    trials: int
    front: list[FrozenTrial]
    recommended: FrozenTrial
    defaults: FrozenTrial | None
    holdout: dict[str, Score] = field(default_factory=dict)  # "defaults"/"recommended"
    holdout_source: str = ""
    paired: list[list[str]] = field(default_factory=list)  # per held-out draw, then mean
    verdict: str = ""
    paths: list[Path] = field(default_factory=list)


# --- one trial ---------------------------------------------------------------------------


def score(run: SimRun) -> Score:
    summary = summarise(run)
    fair = summary.fair_resource
    return Score(
        utilisation=summary.backlogged_utilisation.get(fair, 0.0),
        share_error=summary.max_share_error or 0.0,
        mean_jct_s=summary.jct_mean_s or 0.0,  # over finished jobs: the study prunes the rest
        finished=summary.finished_jobs,
        jobs=summary.jobs,
    )


def run_one(workload: Workload, weights: ObjectiveWeights, time_limit_s: float | None) -> Score:
    # Deterministic time: a trial's score depends on the weights and the draw alone, not on
    # how loaded this machine is or how fast another machine sharing the study is.
    config = SolverConfig(weights=weights, deterministic=True)
    if time_limit_s is not None:
        config = config.model_copy(update={"time_limit_s": time_limit_s})
    return score(simulate(workload, LoopSettings(scheduler="cpsat", solver=config)))


def evaluate(
    workloads: Sequence[Workload], weights: ObjectiveWeights, time_limit_s: float | None
) -> Score:
    """The weights' score averaged over the workloads (the draws of one scenario)."""
    return averaged([run_one(w, weights, time_limit_s) for w in workloads])


def evaluate_many(
    workloads: Sequence[Workload],
    candidates: Sequence[ObjectiveWeights],
    time_limit_s: float | None,
    jobs: int,
) -> list[Score]:
    """Each candidate over the same workloads, the runs spread over ``jobs`` processes."""
    if jobs <= 1:
        return [evaluate(workloads, w, time_limit_s) for w in candidates]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [
            [pool.submit(run_one, workload, w, time_limit_s) for workload in workloads]
            for w in candidates
        ]
        return [averaged([f.result() for f in runs]) for runs in futures]


def averaged(scores: Sequence[Score]) -> Score:
    n = len(scores)
    return Score(
        utilisation=sum(s.utilisation for s in scores) / n,
        share_error=sum(s.share_error for s in scores) / n,
        mean_jct_s=sum(s.mean_jct_s for s in scores) / n,
        finished=sum(s.finished for s in scores),
        jobs=sum(s.jobs for s in scores),
        per_draw=tuple(s.values() for s in scores),
    )


def varies(scenario: Scenario) -> bool:
    """Whether seeded variants of ``scenario`` differ: a trace's draws of jobs to queues
    do; else the simulator's seed drives only injected bind faults."""
    return scenario.trace is not None or scenario.settings.bind_failure_rate > 0


def draws(scenario: Scenario, first: int, count: int) -> list[Scenario]:
    """Seeded variants: for a trace, other draws of jobs to queues; else other
    simulator seeds (injected faults). Draw k uses seed ``base + first + k``. A scenario
    whose variants cannot differ (``varies``) gets one: identical draws would make any
    gain look free of noise."""
    if not varies(scenario):
        count = min(count, 1)
    out = []
    for k in range(first, first + count):
        if scenario.trace is not None:
            trace = scenario.trace.model_copy(update={"seed": scenario.trace.seed + k})
            out.append(scenario.model_copy(update={"trace": trace}))
        else:
            sim = scenario.settings.model_copy(update={"seed": scenario.settings.seed + k})
            out.append(scenario.model_copy(update={"settings": sim}))
    return out


def materialise_all(scenarios: Sequence[Scenario]) -> list[Workload]:
    try:
        return [materialise(s) for s in scenarios]
    except ScenarioError as e:
        raise TuneError(str(e)) from None


def searched(workloads: Sequence[Workload]) -> Space:
    """The weights that can change a decision on these workloads: ``priority`` only
    prices differences in priority, so with one priority level it stays at its default
    rather than spend trials on a dimension that cannot matter."""
    levels = {job.priority for w in workloads for job in w.jobs}
    return {k: v for k, v in SPACE.items() if k != "priority" or len(levels) > 1}


def suggest(trial: optuna.Trial, space: Space) -> ObjectiveWeights:
    picked = {
        name: trial.suggest_int(name, low, high, log=log)
        for name, (low, high, log) in space.items()
    }
    return ObjectiveWeights(**picked)


def weights_of(trial: FrozenTrial) -> ObjectiveWeights:
    return ObjectiveWeights(**{k: int(v) for k, v in trial.params.items()})


def read_scenario(source: str) -> Scenario:
    """A scenario by name or file; what is wrong with it as a ``TuneError``."""
    try:
        return load_scenario(source)
    except ScenarioError as e:
        raise TuneError(str(e)) from None
