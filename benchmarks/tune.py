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
import multiprocessing
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from adapter.sim.scenario import load_scenario
from benchmarks import report
from benchmarks.suite import at_least_one, non_negative, positive
from benchmarks.tune_choice import (
    holdout_workloads,
    recommend,
    verdict,
)
from benchmarks.tune_output import (
    FRONT_HEADERS,
    PAIRED_HEADERS,
    SCORE_HEADERS,
    configmap,
    front_rows,
    markdown,
    paired_rows,
    plot_front,
    score_row,
    settings_snippet,
)
from benchmarks.tune_trial import (
    DEFAULT_OUT,
    DEFAULTS_ATTR,
    DIRECTIONS,
    DONE,
    EXIT_BAD_INPUT,
    OBJECTIVES,
    PER_DRAW_ATTR,
    TuneError,
    TuneResult,
    TuneSettings,
    draws,
    evaluate,
    evaluate_many,
    materialise_all,
    read_scenario,
    searched,
    suggest,
    varies,
    weights_of,
)
from solver.config import ObjectiveWeights

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
    scenario = read_scenario(settings.scenario)
    if settings.draws > 1 and not varies(scenario):
        raise TuneError(
            f"--draws {settings.draws}: the draws of {scenario.name} would be identical (no "
            "trace, no injected bind faults); use --draws 1, or a trace scenario"
        )
    holdout_workloads(settings)  # a bad held-out scenario must fail now, not after the study
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
    workloads, result.holdout_source = holdout_workloads(settings)
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
        held_table.add_row(*score_row(k, v))
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
