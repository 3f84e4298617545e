"""Tune the objective weights from measured trade-offs: a multi-objective Optuna study.

    gangsat-bench tune SCENARIO [--trials N] [--timeout S] [--jobs N] [--seed N]
                       [--storage URL] [--study NAME] [--out DIR] [--holdout SCENARIO]
                       [--max-fairness-error F] [--tolerance R] [--fairness-tolerance F]
                       [--time-limit S] [--draws K] [--holdout-draws H]

Each trial is one simulator run of SCENARIO (``adapter.sim``) with cpsat and a candidate
``ObjectiveWeights``, the solver in deterministic mode (the same weights and draw score
the same on any machine, under any load); it scores three objectives, all read from
``adapter.sim.measures``:

- utilisation (maximise): the fair resource's allocated share while some queue waits
  (whole-run utilisation hardly moves when every job finishes anyway);
- share error (minimise): the largest per-queue time-averaged |held - deserved|;
- mean JCT (minimise): submit to finish, over all jobs.

A trial that leaves a job unfinished is pruned (kept in the study, off the front): such
weights refuse work rather than trade one objective for another.

``value`` stays at 100: the weights are relative, so one of them is the unit. A weight
that cannot change a decision on the scenario is not searched (``priority`` when every
job has one priority) and stays at its default.
With ``--draws K`` each trial averages K seeded variants of the scenario (for a trace,
K draws of jobs to queues): share error on one draw is mostly the history of that draw,
and weights tuned to one draw do not carry over (measured on philly).

The study lives in an Optuna storage, so it resumes where it stopped and several
processes — on this machine (``--jobs``) or on several — can share it. The default is a
journal file, ``DIR/<study>.journal`` (file locks; one machine). For several machines
give every worker the same RDB URL, e.g. on each machine::

    gangsat-bench tune philly --storage postgresql://user:pw@db/gangsat --trials 20

Each worker process samples with seed ``--seed`` + its index, so workers propose
different weights. ``--trials`` is how many more trials (complete or pruned) this
invocation waits for in the study, counted across everyone working on it: with workers
on other machines, their trials count too.

The default weights are the study's first trial, so the Pareto front is read against
them. The recommendation rule: a Pareto-optimal trial qualifies only if, draw by draw
against the defaults, it is better on some objective by more than two standard errors of
the paired differences (one draw: any gain) and worse on none beyond the budget
(``--tolerance``, ``--fairness-tolerance``) — the held-out verdict's own test; among those
within ``--max-fairness-error``, the highest utilisation, then the lowest mean JCT (if
none is within the budget, the lowest share error). If none qualifies, the defaults
stand. The recommended weights and the defaults are then both run on a HELD-OUT
workload — for a trace scenario the next slice of jobs with other queue draws (other
jobs, other queues), else ``--holdout`` — in H draws (default 6) none of which a trial
saw, so a gain is not an artefact of tuning on the test data; the runs are spread over
``--jobs`` processes. The verdict: a win on some objective beyond two standard errors of
the paired per-draw differences, and no objective worse than the stated budget
(``--tolerance``, ``--fairness-tolerance``) on the means. Written to DIR:
``<study>-pareto.png``, ``<study>.md``, ``<study>.json``, ``<study>-settings.yaml`` (an
``adapter.settings`` file) and ``<study>-configmap.yaml``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.study import MaxTrialsCallback, StudyDirection
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from adapter.loop import LoopSettings
from adapter.settings import Settings
from adapter.sim.measures import summarise
from adapter.sim.run import SimRun, simulate
from adapter.sim.scenario import Scenario, ScenarioError, Workload, load_scenario, materialise
from benchmarks import report
from benchmarks.suite import at_least_one, non_negative, positive
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


# --- storage and workers ------------------------------------------------------------------


def open_storage(url: str) -> BaseStorage:
    """An RDB URL (sqlite:///..., postgresql://...) or a journal file path."""
    if "://" in url:
        return RDBStorage(url)
    Path(url).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(url))


def storage_url(settings: TuneSettings, study: str) -> str:
    return settings.storage or str(settings.out / f"{study}.journal")


def _worker(
    index: int,
    settings: TuneSettings,
    study_name: str,
    url: str,
    target: int,
    echo: bool,
) -> None:
    """One process of the study: trials until ``target`` are complete or time is up."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    workloads = materialise_all(draws(load_scenario(settings.scenario), 0, settings.draws))
    space = searched(workloads)
    study = optuna.load_study(
        study_name=study_name,
        storage=open_storage(url),
        sampler=optuna.samplers.TPESampler(seed=settings.seed + index),
    )

    def objective(trial: optuna.Trial) -> tuple[float, float, float]:
        weights = suggest(trial, space)
        result = evaluate(workloads, weights, settings.time_limit_s)
        trial.set_user_attr("worker", index)
        trial.set_user_attr("finished", result.finished)
        trial.set_user_attr("jobs", result.jobs)
        trial.set_user_attr(PER_DRAW_ATTR, [list(v) for v in result.per_draw])
        if result.finished < result.jobs:
            # Weights that leave work undone (e.g. opening a node costs more than filling
            # it earns) are not a trade-off: a short run would flatter their mean JCT.
            raise optuna.TrialPruned(f"{result.jobs - result.finished} job(s) never finished")
        return result.values()

    def line(study: optuna.Study, trial: FrozenTrial) -> None:
        if not echo:
            return
        if trial.values is not None:
            print(_trial_line(trial), flush=True)
        else:
            unfinished = trial.user_attrs.get("jobs", 0) - trial.user_attrs.get("finished", 0)
            print(
                f"trial {trial.number}: pruned, {unfinished} job(s) never finished "
                f"({', '.join(f'{k} {v}' for k, v in trial.params.items())})",
                flush=True,
            )

    study.optimize(
        objective,
        timeout=settings.timeout_s,
        callbacks=[MaxTrialsCallback(target, states=DONE), line],
    )


def _trial_line(trial: FrozenTrial) -> str:
    util, err, jct = trial.values
    w = ", ".join(f"{k} {v}" for k, v in trial.params.items())
    return (
        f"trial {trial.number}: util {util:.2%}, share error {err:.2%}, "
        f"mean JCT {report.duration(jct)} ({w})"
    )


def run_study(settings: TuneSettings, console: Console) -> tuple[optuna.Study, str]:
    """Create or resume the study and add ``settings.trials`` trials; returns it and its URL."""
    scenario = _load(settings.scenario)
    if settings.draws > 1 and not varies(scenario):
        raise TuneError(
            f"--draws {settings.draws}: the draws of {scenario.name} would be identical (no "
            "trace, no injected bind faults); use --draws 1, or a trace scenario"
        )
    _holdout_workloads(settings)  # a bad held-out scenario must fail now, not after the study
    space = searched(materialise_all(draws(scenario, 0, settings.draws)))
    study_name = settings.study or f"gangsat-{scenario.name}"
    url = storage_url(settings, study_name)
    settings.out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=study_name,
        storage=open_storage(url),
        directions=list(DIRECTIONS),
        load_if_exists=True,
    )
    done = _done(study)
    target = done + settings.trials
    if not study.trials:
        defaults = ObjectiveWeights()
        study.enqueue_trial(
            {name: getattr(defaults, name) for name in space},
            user_attrs={DEFAULTS_ATTR: True},
        )
        target += 1  # the defaults are a reference point, not one of the trials asked for
    console.print(
        f"study {study_name} at {url}: {done} trial(s) done, adding {settings.trials} "
        f"with {settings.jobs} worker process(es)"
    )
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=_worker, args=(i, settings, study_name, url, target, True), daemon=False
        )
        for i in range(settings.jobs)
    ]
    columns = (
        TextColumn("trials"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("trials", total=settings.trials)
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers):
            progress.update(task, completed=min(settings.trials, _done(study) - done))
            time.sleep(0.5)
        progress.update(task, completed=min(settings.trials, _done(study) - done))
    failed = [w.exitcode for w in workers if w.exitcode]
    if failed:
        raise TuneError(f"{len(failed)} worker process(es) failed (exit codes {failed})")
    return study, url


def _done(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=DONE))


def _load(source: str) -> Scenario:
    try:
        return load_scenario(source)
    except ScenarioError as e:
        raise TuneError(str(e)) from None


# --- choosing, checking and writing -------------------------------------------------------


def _gains(trial: FrozenTrial, defaults: FrozenTrial) -> list[tuple[float, float]] | None:
    return paired_gains(trial.user_attrs.get(PER_DRAW_ATTR), defaults.user_attrs.get(PER_DRAW_ATTR))


def paired_gains(
    mine: Sequence[Sequence[float]] | None, base: Sequence[Sequence[float]] | None
) -> list[tuple[float, float]] | None:
    """Per objective, the paired mean gain over the base (positive = better) and its
    standard error over the draws; None without per-draw values for both."""
    if not mine or not base or len(mine) != len(base):
        return None
    out = []
    for k, sign in enumerate(SIGNS):
        diffs = [sign * (a[k] - b[k]) for a, b in zip(mine, base, strict=True)]
        mean = sum(diffs) / len(diffs)
        if len(diffs) > 1:
            var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
            se = math.sqrt(var / len(diffs))
        else:
            se = 0.0  # one draw: no noise estimate, the plain comparison stands
        out.append((mean, se))
    return out


def compare(
    mine: Sequence[float],
    base: Sequence[float],
    gains: Sequence[tuple[float, float]] | None,
    budget: Budget,
) -> tuple[list[str], list[str]]:
    """The objectives ``mine`` wins on (beyond NOISE_Z standard errors of the paired
    per-draw gains, when there are several draws) and those it loses beyond the budget."""
    limits = (base[0] * budget.tolerance, budget.fairness_tolerance, base[2] * budget.tolerance)
    better, worse = [], []
    for k, name in enumerate(OBJECTIVE_NAMES):
        gain = SIGNS[k] * (mine[k] - base[k])
        noise = NOISE_Z * gains[k][1] if gains else 0.0
        if gain > 0 and gain > noise:
            better.append(name)
        elif gain < -limits[k]:
            worse.append(name)
    return better, worse


def beats(trial: FrozenTrial, defaults: FrozenTrial, budget: Budget) -> bool:
    """The held-out verdict's test, on the tuning draws: a win beyond the noise and no
    loss beyond the budget."""
    gains = _gains(trial, defaults)
    if gains is None:
        return False
    better, worse = compare(trial.values, defaults.values, gains, budget)
    return bool(better) and not worse


def recommend(
    front: Sequence[FrozenTrial],
    max_fairness_error: float,
    defaults: FrozenTrial | None = None,
    budget: Budget | None = None,
) -> FrozenTrial:
    """Best utilisation within the share-error budget, then lowest JCT; else the fairest.

    With the defaults measured on the same draws, only trials that beat them beyond the
    draw-to-draw noise qualify; if none does, the defaults are the recommendation.
    """
    pool = list(front)
    if defaults is not None:
        budget = budget or Budget()
        pool = [t for t in front if t.number != defaults.number and beats(t, defaults, budget)]
        if not pool:
            return defaults
    within = [t for t in pool if t.values[1] <= max_fairness_error]
    if within:
        return max(within, key=lambda t: (t.values[0], -t.values[2], -t.number))
    return min(pool, key=lambda t: (t.values[1], -t.values[0], t.values[2], t.number))


def holdout_scenario(settings: TuneSettings) -> tuple[Scenario, str]:
    """The held-out workload and a line saying what it is."""
    if settings.holdout:
        return _load(settings.holdout), f"scenario {settings.holdout}"
    scenario = _load(settings.scenario)
    if scenario.trace is None:
        return scenario, "the tuning scenario itself (it has no trace to hold a slice out of)"
    trace = scenario.trace
    held = trace.model_copy(update={"first_job": trace.first_job + trace.jobs})
    return (
        scenario.model_copy(update={"trace": held}),
        f"trace jobs {held.first_job}..{held.first_job + held.jobs - 1} (the next slice)",
    )


def _holdout_workloads(settings: TuneSettings) -> tuple[list[Workload], str]:
    """The held-out scenario in as many draws as a trial, none of them a tuning draw."""
    held, text = holdout_scenario(settings)
    # From draw settings.draws on: the trials used 0 .. settings.draws - 1.
    variants = draws(held, settings.draws, settings.holdout_draws)
    try:
        workloads = materialise_all(variants)
    except TuneError as e:
        raise TuneError(f"held-out workload ({text}): {e}") from None
    seeds = [v.trace.seed if v.trace is not None else v.settings.seed for v in variants]
    kind = "queue draw" if held.trace is not None else "simulator"
    if not varies(held):
        return workloads, f"{text}, one run (nothing in it is random: no noise estimate)"
    return workloads, f"{text}, {kind} seed(s) {', '.join(map(str, seeds))}"


def verdict(defaults: Score, recommended: Score, settings: TuneSettings) -> str:
    """Does the recommendation win on one objective without losing beyond the budget?

    A win must also exceed the draw-to-draw noise: with several held-out draws, the paired
    gain must be over NOISE_Z standard errors of the per-draw differences. A loss is
    judged on the means against the stated budget."""
    gains = paired_gains(recommended.per_draw, defaults.per_draw)
    better, worse = compare(recommended.values(), defaults.values(), gains, settings.budget())
    budget = (
        f"budget: utilisation and mean JCT within {settings.tolerance:.0%}, share error "
        f"within {settings.fairness_tolerance:.1%} points"
    )
    if gains and len(recommended.per_draw) > 1:
        budget += f"; a win must exceed {NOISE_Z:g} standard errors over the draws"
    if better and not worse:
        return f"recommended beats the defaults on {', '.join(better)} ({budget})"
    if worse:
        return f"recommended is worse than the defaults on {', '.join(worse)} ({budget})"
    return f"recommended does not beat the defaults on any objective ({budget})"


def paired_rows(defaults: Score, recommended: Score) -> list[list[str]]:
    """Recommended minus defaults, draw by draw, and the mean with its standard error."""
    gains = paired_gains(recommended.per_draw, defaults.per_draw)
    if gains is None:
        return []

    def fmt(k: int, delta: float) -> str:
        if k == 2:
            return f"{delta / 3600:+.3f} h"
        return f"{delta * 100:+.2f} pt"

    rows = [
        [f"draw {i}", *(fmt(k, r[k] - d[k]) for k in range(3))]
        for i, (d, r) in enumerate(zip(defaults.per_draw, recommended.per_draw, strict=True))
    ]
    rows.append(
        [
            "mean ± s.e.",
            *(
                f"{fmt(k, SIGNS[k] * mean)} ± {fmt(k, se)[1:]}"
                for k, (mean, se) in enumerate(gains)
            ),
        ]
    )
    return rows


def settings_snippet(weights: ObjectiveWeights) -> str:
    return Settings(solver=SolverConfig(weights=weights)).to_yaml()


def configmap(snippet: str, name: str = "gangsat-settings") -> str:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "gangsat-system"},
        "data": {"gangsat.yaml": snippet},
    }
    return yaml.safe_dump(manifest, sort_keys=False)


def _score_row(label: str, s: Score) -> list[str]:
    return [
        label,
        f"{s.utilisation:.2%}",
        f"{s.share_error:.2%}",
        report.duration(s.mean_jct_s),
        f"{s.finished}/{s.jobs}",
    ]


def front_rows(result: TuneResult) -> list[list[str]]:
    rows = []
    for t in sorted(result.front, key=lambda t: -t.values[0]):
        mark = []
        if t.number == result.recommended.number:
            mark.append("recommended")
        if t.user_attrs.get(DEFAULTS_ATTR):
            mark.append("defaults")
        rows.append(
            [
                str(t.number),
                f"{t.values[0]:.2%}",
                f"{t.values[1]:.2%}",
                report.duration(t.values[2]),
                *[str(t.params.get(k, "-")) for k in SPACE],
                ", ".join(mark),
            ]
        )
    return rows


FRONT_HEADERS = ("trial", "utilisation", "share error", "mean JCT", *SPACE, "")
SCORE_HEADERS = ("weights", "utilisation", "share error", "mean JCT", "finished")
PAIRED_HEADERS = ("", "utilisation", "share error", "mean JCT")


def plot_front(study: optuna.Study, result: TuneResult, path: Path) -> Path:
    fig, ax = report.subplots(figsize=(8, 5))
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    front = {t.number for t in result.front}
    others = [t for t in done if t.number not in front]
    jct = [t.values[2] for t in done] or [0.0]
    lo, hi = min(jct), max(jct)
    kwargs: dict[str, Any] = {"cmap": "viridis", "vmin": lo, "vmax": hi if hi > lo else lo + 1}
    ax.scatter(
        [t.values[1] for t in others],
        [t.values[0] for t in others],
        c=[t.values[2] for t in others],
        marker="o",
        alpha=0.45,
        **kwargs,
    )
    points = ax.scatter(
        [t.values[1] for t in result.front],
        [t.values[0] for t in result.front],
        c=[t.values[2] for t in result.front],
        marker="D",
        edgecolors="black",
        **kwargs,
    )
    fig.colorbar(points, ax=ax, label="mean JCT (s)")
    for t, label in ((result.recommended, "recommended"), (result.defaults, "defaults")):
        if t is not None:
            ax.annotate(
                label, (t.values[1], t.values[0]), textcoords="offset points", xytext=(6, 6)
            )
    ax.set_xlabel("max share error (lower is fairer)")
    ax.set_ylabel("utilisation while backlogged")
    ax.set_title(f"{result.study}: {len(done)} trials, Pareto front as diamonds")
    ax.grid(alpha=0.3)
    return report.save_figure(fig, path)


def markdown(result: TuneResult, settings: TuneSettings, snippet: str) -> str:
    lines = [
        f"# Weight tuning: {result.study}",
        "",
        f"{result.trials} complete trials on `{settings.scenario}`; objectives: "
        "utilisation while backlogged (max), max share error (min), mean JCT (min).",
        "",
        "## Pareto front",
        "",
        report.md_table(
            FRONT_HEADERS, front_rows(result), [True] * (len(FRONT_HEADERS) - 1) + [False]
        ),
        "",
        "Rule: among front trials that beat the defaults on some objective and lose on "
        f"none by more than {NOISE_Z:g} standard errors of the paired per-draw differences, "
        f"those with share error <= {settings.max_fairness_error:.1%}: the highest "
        "utilisation, then the lowest mean JCT (none within: the lowest share error). If no "
        "trial beats the defaults, the defaults are recommended.",
        "",
        f"## Held out: {result.holdout_source}",
        "",
        report.md_table(
            SCORE_HEADERS,
            [_score_row(k, v) for k, v in result.holdout.items()],
            [False, True, True, True, True],
        ),
        "",
        *(
            [
                "Recommended minus defaults, draw by draw (pt = percentage points; for share "
                "error and JCT, negative is better):",
                "",
                report.md_table(
                    PAIRED_HEADERS,
                    result.paired,
                    [False, True, True, True],
                ),
                "",
            ]
            if len(result.paired) > 2
            else []
        ),
        f"**{result.verdict}**",
        "",
        "## Settings (paste into the ConfigMap's `gangsat.yaml`)",
        "",
        "```yaml",
        snippet.rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def finish(study: optuna.Study, settings: TuneSettings, console: Console) -> TuneResult:
    """Front, recommendation, held-out check, files."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        raise TuneError(f"study {study.study_name} has no complete trial")
    front = study.best_trials
    defaults = next((t for t in done if t.user_attrs.get(DEFAULTS_ATTR)), None)
    result = TuneResult(
        study=study.study_name,
        trials=len(done),
        front=front,
        recommended=recommend(front, settings.max_fairness_error, defaults, settings.budget()),
        defaults=defaults,
    )
    workloads, result.holdout_source = _holdout_workloads(settings)
    console.print(f"held out: {result.holdout_source}")
    held = evaluate_many(
        workloads,
        [ObjectiveWeights(), weights_of(result.recommended)],
        settings.time_limit_s,
        settings.jobs,
    )
    result.holdout = dict(zip(("defaults", "recommended"), held, strict=True))
    result.paired = paired_rows(result.holdout["defaults"], result.holdout["recommended"])
    result.verdict = verdict(result.holdout["defaults"], result.holdout["recommended"], settings)
    snippet = settings_snippet(weights_of(result.recommended))
    stem = settings.out / result.study
    out_json = {
        "study": result.study,
        "scenario": settings.scenario,
        "trials": result.trials,
        "objectives": {o: d.name.lower() for o, d in zip(OBJECTIVES, DIRECTIONS, strict=True)},
        "front": [
            {
                "number": t.number,
                "values": list(t.values),
                "params": t.params,
                "defaults": bool(t.user_attrs.get(DEFAULTS_ATTR)),
            }
            for t in front
        ],
        "recommended": {"number": result.recommended.number, "params": result.recommended.params},
        "max_fairness_error": settings.max_fairness_error,
        "holdout": {
            "source": result.holdout_source,
            **{k: v.__dict__ for k, v in result.holdout.items()},
        },
        "verdict": result.verdict,
    }
    result.paths = [
        report.write_text(Path(f"{stem}.json"), json.dumps(out_json, indent=2) + "\n"),
        report.write_text(Path(f"{stem}-settings.yaml"), snippet),
        report.write_text(Path(f"{stem}-configmap.yaml"), configmap(snippet)),
        report.write_text(Path(f"{stem}.md"), markdown(result, settings, snippet)),
        plot_front(study, result, Path(f"{stem}-pareto.png")),
    ]
    table = Table(title=f"{result.study}: Pareto front ({result.trials} trials)")
    for h in FRONT_HEADERS:
        table.add_column(h, justify="left" if h == "" else "right")
    for row in front_rows(result):
        table.add_row(*row)
    console.print(table)
    held_table = Table(title=f"held out: {result.holdout_source}")
    for h in SCORE_HEADERS:
        held_table.add_column(h, justify="left" if h == "weights" else "right")
    for k, v in result.holdout.items():
        held_table.add_row(*_score_row(k, v))
    console.print(held_table)
    if len(result.paired) > 2:  # more than one draw: a row each, then the mean
        paired = Table(title="recommended minus defaults, per held-out draw")
        for h in PAIRED_HEADERS:
            paired.add_column(h, justify="right")
        for row in result.paired:
            paired.add_row(*row)
        console.print(paired)
    console.print(result.verdict)
    console.print("settings:\n" + snippet)
    return result


def tune(settings: TuneSettings, console: Console | None = None) -> TuneResult:
    console = console or Console()
    study, _ = run_study(settings, console)
    return finish(study, settings, console)


# --- command line -------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> TuneSettings:
    p = argparse.ArgumentParser(
        prog="gangsat-bench tune",
        description="Tune cpsat's objective weights on a scenario: a multi-objective Optuna "
        "study (utilisation, share error, mean JCT), then a held-out check.",
    )
    p.add_argument("scenario", help="a packaged scenario name or a scenario file")
    p.add_argument("--trials", type=at_least_one, default=30, help="trials to add (default 30)")
    p.add_argument("--timeout", type=positive, default=None, help="seconds for this run")
    p.add_argument("--jobs", type=at_least_one, default=1, help="worker processes (default 1)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed of worker 0 (default 0)")
    p.add_argument("--storage", default=None, help="Optuna RDB URL or journal file path")
    p.add_argument("--study", default=None, help="study name (default gangsat-<scenario>)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    p.add_argument("--holdout", default=None, help="held-out scenario (default: derived)")
    p.add_argument("--max-fairness-error", type=non_negative, default=0.02)
    p.add_argument("--tolerance", type=non_negative, default=0.01)
    p.add_argument("--fairness-tolerance", type=non_negative, default=0.002)
    p.add_argument("--time-limit", type=positive, default=None, help="CP-SAT s per cycle")
    p.add_argument(
        "--holdout-draws",
        type=at_least_one,
        default=6,
        help="unseen variants the held-out check runs (default 6)",
    )
    p.add_argument(
        "--draws",
        type=at_least_one,
        default=1,
        help="seeded variants per trial, averaged (default 1)",
    )
    a = p.parse_args(argv)
    return TuneSettings(
        scenario=a.scenario,
        trials=a.trials,
        timeout_s=a.timeout,
        jobs=a.jobs,
        seed=a.seed,
        storage=a.storage,
        study=a.study,
        out=a.out,
        holdout=a.holdout,
        max_fairness_error=a.max_fairness_error,
        tolerance=a.tolerance,
        fairness_tolerance=a.fairness_tolerance,
        time_limit_s=a.time_limit,
        draws=a.draws,
        holdout_draws=a.holdout_draws,
    )


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    settings = parse_args(argv)
    if console is None:
        console = Console() if sys.stdout.isatty() else Console(width=200)
    try:
        tune(settings, console)
    except TuneError as e:
        for line in str(e).splitlines():
            print(f"gangsat-bench tune: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
