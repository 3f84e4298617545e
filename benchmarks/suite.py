"""The benchmark suite: scenarios x schedulers on the simulator, compared in one report.

    gangsat-bench [--scenarios seed-deadlock,philly,...] [--schedulers cpsat,gang-greedy,greedy]
                  [--out bench-out] [--time-limit S] [--seed N] [--workers N] [--quick]
    gangsat-bench tune SCENARIO ...     (weight tuning: see benchmarks.tune)
    gangsat-bench bind-throughput ...   (binding vs a trivial binder: benchmarks.bind_throughput)
    gangsat-bench footprint ...         (memory by cluster size: benchmarks.footprint)
    gangsat-bench churn ...             (memory under arriving, finishing gangs: benchmarks.churn)
    gangsat-bench restart ...           (start-up to first bind at 5,000 nodes: benchmarks.restart)
    gangsat-bench cycle ...             (a cycle at scale by phase, no server: benchmarks.cycle)
    gangsat-bench joint ...             (preemption with placement or after it: benchmarks.joint)
    gangsat-bench optimum ...           (a decision against the optimum: benchmarks.optimum)

Flow: each scenario (a packaged name or a file, ``adapter.sim.scenario.load_scenario``)
is materialised once and replayed by every scheduler through the real scheduling loop
(``adapter.sim.run.simulate``); ``adapter.sim.measures.summarise`` turns each run into
figures, printed here as one comparison table per scenario, with the cpsat / gang-greedy
ratios of the same suite run. ``benchmarks.report`` writes ``DIR/results.json`` (the
summaries and how they were obtained), ``DIR/report.md`` and per-scenario plots; both
are rewritten after every scenario, so a long suite stopped early keeps what it finished.

Every scenario and scheduler name is checked before anything runs: a typo must not be
found after an hour of simulation. ``--seed`` seeds CP-SAT only; a scenario's own
``settings.seed`` (bind failures) and trace seed are part of the scenario. ``--quick``
is a smoke run: CP-SAT gets 0.2 s per cycle (unless ``--time-limit`` says otherwise) and
trace scenarios replay only their first 50 jobs; results.json records it.

Exit status: 0 when every run completed; 1 when a run raised (the others still run and
are reported); 2 on bad arguments or a scenario that cannot be loaded.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from adapter.loop import LoopSettings
from adapter.results import CycleResult
from adapter.sim.cluster import SimEvent, SimulatedCluster
from adapter.sim.measures import RunSummary, summarise
from adapter.sim.run import SimRun, simulate
from adapter.sim.scenario import Scenario, ScenarioError, Workload, load_scenario, materialise
from solver.config import SolverConfig
from solver.schedulers import SCHEDULERS

try:
    from benchmarks import report
    from benchmarks.plots import plot_scenario
except ModuleNotFoundError as missing:  # the image and a plain install leave the extra out
    if missing.name not in ("matplotlib", "optuna"):
        raise
    raise SystemExit(
        f"gangsat-bench needs the bench extra ({missing.name} is not installed): "
        "pip install 'gangsat[bench]'"
    ) from None

DEFAULT_SCENARIOS = ("seed-deadlock", "contention", "philly", "scheduler-perf-gangs")
DEFAULT_SCHEDULERS = ("cpsat", "gang-greedy", "greedy")
DEFAULT_OUT = Path("bench-out")
QUICK_TIME_LIMIT_S = 0.2
QUICK_TRACE_JOBS = 50
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2


class SuiteError(ValueError):
    """A suite that cannot start; the message names every offending scenario or scheduler."""


@dataclass(frozen=True)
class SuiteSettings:
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    schedulers: tuple[str, ...] = DEFAULT_SCHEDULERS
    out: Path = DEFAULT_OUT
    time_limit_s: float | None = None  # None: SolverConfig's default, or the quick one
    seed: int = 0
    workers: int | None = None  # None: SolverConfig's default
    quick: bool = False

    def solver(self) -> SolverConfig:
        defaults = SolverConfig()
        limit = self.time_limit_s
        if limit is None:
            limit = QUICK_TIME_LIMIT_S if self.quick else defaults.time_limit_s
        workers = defaults.num_workers if self.workers is None else self.workers
        return SolverConfig(time_limit_s=limit, seed=self.seed, num_workers=workers)


@dataclass
class SuiteResult:
    summaries: list[RunSummary] = field(default_factory=list)
    runs: list[SimRun] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)  # every file written, latest versions
    errors: list[str] = field(default_factory=list)  # "scenario / scheduler: what raised"


def _quick(scenario: Scenario) -> Scenario:
    if scenario.trace is None or scenario.trace.jobs <= QUICK_TRACE_JOBS:
        return scenario
    trace = scenario.trace.model_copy(update={"jobs": QUICK_TRACE_JOBS})
    return scenario.model_copy(update={"trace": trace})


def resolve(
    names: Sequence[str], schedulers: Sequence[str], quick: bool = False
) -> list[tuple[str, Workload]]:
    """Every scenario loaded and materialised and every scheduler known, or one
    ``SuiteError`` naming all that are not."""
    problems: list[str] = []
    unknown = [s for s in schedulers if s not in SCHEDULERS]
    if unknown:
        problems.append(
            f"unknown scheduler(s) {', '.join(unknown)}; choose from {', '.join(SCHEDULERS)}"
        )
    if not schedulers:
        problems.append("no schedulers given")
    if not names:
        problems.append("no scenarios given")
    loaded: list[tuple[str, Workload]] = []
    seen: dict[str, str] = {}
    for name in names:
        try:
            scenario = load_scenario(name)
            loaded.append((name, materialise(_quick(scenario) if quick else scenario)))
        except ScenarioError as e:
            problems.append(str(e))  # it names the scenario or file
            continue
        if scenario.name in seen:
            # Outputs are keyed by scenario name: two would overwrite each other's files.
            problems.append(
                f"scenarios {seen[scenario.name]!r} and {name!r} are both named {scenario.name!r}"
            )
        seen[scenario.name] = name
    if problems:
        raise SuiteError("\n".join(problems))
    return loaded


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def suite_meta(settings: SuiteSettings, config: SolverConfig) -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gangsat_version": _version("gangsat"),
        "ortools_version": _version("ortools"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host_cores": os.cpu_count(),
        "complete": False,
        "settings": {
            "scenarios": list(settings.scenarios),
            "schedulers": list(settings.schedulers),
            "time_limit_s": config.time_limit_s,
            "seed": config.seed,
            "workers": config.workers(),
            "quick": settings.quick,
            "quick_note": (
                f"CP-SAT {config.time_limit_s:g} s per cycle; trace scenarios cut to their "
                f"first {QUICK_TRACE_JOBS} jobs"
                if settings.quick
                else ""
            ),
            "solver": config.model_dump(mode="json"),
        },
        "scenarios": {},
        "errors": [],
    }


def scenario_tables(summaries: Sequence[RunSummary]) -> list[Table]:
    """The console's comparison tables for one scenario (same columns as report.md)."""
    if not summaries:
        return []
    name, fair = summaries[0].scenario, summaries[0].fair_resource
    tables = []
    for title, columns in report.TABLES:
        table = Table(title=f"{name}: {title.lower()}", title_justify="left")
        for c in columns:
            table.add_column(c.title(fair), justify="right" if c.numeric else "left")
        for row in report.rows(summaries, columns):
            table.add_row(*row)
        tables.append(table)
    return tables


class _Tracker:
    """Per-run progress: simulated time and jobs finished, advanced every cycle."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress = progress
        self.task = task
        self.finished = 0
        self.cycles = 0

    def on_event(self, event: SimEvent) -> None:
        if event.kind == "finished":
            self.finished += 1

    def on_cycle(self, t: float, result: CycleResult, cluster: SimulatedCluster) -> None:
        self.cycles += 1
        self.progress.update(
            self.task,
            completed=self.finished,
            detail=f"sim {report.duration(t)}, {self.cycles} cycles",
        )


def _run_one(
    workload: Workload,
    loop: LoopSettings,
    progress: Progress,
) -> SimRun:
    label = f"  {workload.scenario.name} / {loop.scheduler}"
    task = progress.add_task(label, total=len(workload.jobs) or 1, detail="")
    tracker = _Tracker(progress, task)
    try:
        return simulate(workload, loop, on_cycle=tracker.on_cycle, on_event=tracker.on_event)
    finally:
        progress.remove_task(task)


def _write(result: SuiteResult, out: Path, plots: dict[str, list[Path]]) -> None:
    written = [
        report.write_json(out / "results.json", result.summaries, result.meta),
        report.write_text(out / "report.md", report.markdown(result.summaries, result.meta, plots)),
    ]
    result.paths = written + [p for ps in plots.values() for p in ps]


def run_suite(settings: SuiteSettings, console: Console | None = None) -> SuiteResult:
    """Run the suite; ``SuiteError`` before anything runs if a name is wrong."""
    console = console or Console()
    scenarios = resolve(settings.scenarios, settings.schedulers, settings.quick)
    config = settings.solver()
    result = SuiteResult(meta=suite_meta(settings, config))
    plots: dict[str, list[Path]] = {}
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[detail]}"),
    )
    with Progress(*columns, console=console) as progress:
        overall = progress.add_task(
            "runs", total=len(scenarios) * len(settings.schedulers), detail=""
        )
        for source, workload in scenarios:
            scenario = workload.scenario
            result.meta["scenarios"][scenario.name] = {
                "source": source,
                "description": scenario.description,
                "nodes": len(workload.nodes),
                "jobs": len(workload.jobs),
                "fair_resource": workload.fair_resource(),
            }
            runs: list[SimRun] = []
            summaries: list[RunSummary] = []
            for scheduler in settings.schedulers:
                progress.update(overall, detail=f"{scenario.name} / {scheduler}")
                loop = LoopSettings(scheduler=scheduler, solver=config)
                try:
                    run = _run_one(workload, loop, progress)
                    summary = summarise(run)
                except Exception as e:  # one broken run is a result; the suite goes on
                    message = f"{scenario.name} / {scheduler}: {type(e).__name__}: {e}"
                    result.errors.append(message)
                    result.meta["errors"].append(message)
                    progress.console.print(message, style="red", markup=False, highlight=False)
                    traceback.print_exc(file=sys.stderr)
                    progress.advance(overall)
                    continue
                runs.append(run)
                summaries.append(summary)
                progress.console.print(
                    f"{scenario.name} / {scheduler}: {summary.finished_jobs}/{summary.jobs} "
                    f"finished, {summary.stopped}, {summary.wall_s:.2f} s"
                )
                progress.advance(overall)
            result.runs += runs
            result.summaries += summaries
            plots[scenario.name] = plot_scenario(runs, settings.out)
            for table in scenario_tables(summaries):
                progress.console.print(table)
            for comparison in report.compare(summaries):
                progress.console.print(report.comparison_text(comparison))
            _write(result, settings.out, plots)
    result.meta["complete"] = True
    _write(result, settings.out, plots)
    return result


# --- command line -------------------------------------------------------------------------


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def positive(text: str) -> float:
    """argparse type: a finite number above 0."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative(text: str) -> float:
    """argparse type: a finite number, 0 or more."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def at_least_one(text: str) -> int:
    """argparse type: a count of 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def count(text: str) -> int:
    """argparse type: a count, 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def pairs(text: str) -> list[tuple[int, int]]:
    """argparse type: comma-separated AxB pairs of whole numbers (``1000x500,4000x2500``)."""
    out = []
    for part in text.split(","):
        a, x, b = (side.strip() for side in part.partition("x"))
        if not (x and a.isdigit() and b.isdigit()):
            raise argparse.ArgumentTypeError(f"{part!r} is not AxB (e.g. 1000x500)")
        out.append((int(a), int(b)))
    return out


def _workers(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (all cores) or more, got {text}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = SolverConfig()
    parser = argparse.ArgumentParser(
        prog="gangsat-bench",
        description="Replay scenarios on the simulated cluster with each scheduler and "
        "compare utilisation, job times, deadlocks, fairness and cycle cost.",
    )
    parser.add_argument(
        "--scenarios",
        type=_names,
        default=DEFAULT_SCENARIOS,
        help="comma-separated packaged scenario names or scenario file paths "
        f"(default: {','.join(DEFAULT_SCENARIOS)})",
    )
    parser.add_argument(
        "--schedulers",
        type=_names,
        default=DEFAULT_SCHEDULERS,
        help=f"comma-separated, from {', '.join(SCHEDULERS)} "
        f"(default: {','.join(DEFAULT_SCHEDULERS)})",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--time-limit",
        type=positive,
        default=None,
        help=f"CP-SAT seconds per cycle (default {defaults.time_limit_s:g}; "
        f"{QUICK_TIME_LIMIT_S:g} with --quick)",
    )
    parser.add_argument("--seed", type=int, default=0, help="CP-SAT seed (default 0)")
    parser.add_argument(
        "--workers",
        type=_workers,
        default=None,
        help=f"CP-SAT workers, 0 = all cores (default {defaults.num_workers})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: CP-SAT {QUICK_TIME_LIMIT_S:g} s per cycle, trace scenarios cut "
        f"to {QUICK_TRACE_JOBS} jobs",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["tune"]:
        from benchmarks import tune  # Optuna loads only for tuning

        return tune.main(given[1:], console)
    if given[:1] == ["bind-throughput"]:
        from benchmarks import bind_throughput  # the Kubernetes client loads only for this

        return bind_throughput.main(given[1:], console)
    if given[:1] == ["footprint"]:
        from benchmarks import footprint

        return footprint.main(given[1:], console)
    if given[:1] == ["restart"]:
        from benchmarks import restart

        return restart.main(given[1:], console)
    if given[:1] == ["cycle"]:
        from benchmarks import cycle

        return cycle.main(given[1:], console)
    if given[:1] == ["churn"]:
        from benchmarks import churn

        return churn.main(given[1:], console)
    if given[:1] == ["joint"]:
        from benchmarks import joint

        return joint.main(given[1:], console)
    if given[:1] == ["optimum"]:
        from benchmarks import optimum

        return optimum.main(given[1:], console)
    if given[:1] == ["preemption"]:
        from benchmarks import preemption

        return preemption.main(given[1:], console)
    args = parse_args(given)
    if console is None:
        # Piped output (CI logs, tee) gets wide tables instead of 80-column wrapping.
        console = Console() if sys.stdout.isatty() else Console(width=200)
    settings = SuiteSettings(
        scenarios=args.scenarios,
        schedulers=args.schedulers,
        out=args.out,
        time_limit_s=args.time_limit,
        seed=args.seed,
        workers=args.workers,
        quick=args.quick,
    )
    try:
        result = run_suite(settings, console)
    except SuiteError as e:
        for line in str(e).splitlines():
            print(f"gangsat-bench: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    console.print(f"wrote {', '.join(str(p) for p in result.paths)}")
    return EXIT_RUN_FAILED if result.errors else 0


if __name__ == "__main__":
    sys.exit(main())
