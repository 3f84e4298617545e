"""The benchmark suite's outputs: results.json, report.md and the plots.

Flow: ``benchmarks.suite`` runs scenarios x schedulers through ``adapter.sim.run.simulate``
and ``adapter.sim.measures.summarise``; this module turns what came out into files. The
JSON and Markdown writers take only ``RunSummary`` figures (plus run metadata), so a
report can be rebuilt from a saved results.json; the plots need the runs' samples, which
are never serialised, so they take the ``SimRun`` objects the suite keeps in memory.

Everything here is a pure function of its arguments apart from the files it writes; the
console tables the suite prints use the same column definitions as report.md, so the two
never disagree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display, and no GUI toolkit in CI

import matplotlib.pyplot as plt  # after use(): pyplot picks its backend on import
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict

from adapter.sim.measures import RunSummary, deserved_at
from adapter.sim.run import SimRun
from solver.model import GPU

CANDIDATE = "cpsat"
BASELINE = "gang-greedy"
MAX_QUEUES_PLOTTED = 8  # more lines than this are unreadable; the heaviest queues are shown
LOG_SPAN = 50  # JCT CDFs whose longest / shortest JCT exceeds this get a log time axis
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --- formatting ---------------------------------------------------------------------------


def resource_label(resource: str) -> str:
    return "GPU" if resource == GPU else resource


def duration(seconds: float | None) -> str:
    """Seconds in the unit a reader can compare at a glance (traces run for days)."""
    if seconds is None:
        return "-"
    if abs(seconds) < 100:
        return f"{seconds:.1f} s"
    if abs(seconds) < 100 * 60:
        return f"{seconds / 60:.1f} min"
    if abs(seconds) < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _gap(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def fair_utilisation(s: RunSummary) -> float | None:
    return s.utilisation.get(s.fair_resource)


def fair_busy(s: RunSummary) -> float | None:
    return s.busy_utilisation.get(s.fair_resource)


def fair_backlogged(s: RunSummary) -> float | None:
    return s.backlogged_utilisation.get(s.fair_resource)


# --- the comparison tables ----------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    header: str  # "{fair}" is replaced by the scenario's fair resource
    cell: Callable[[RunSummary], str]
    numeric: bool = True

    def title(self, fair: str) -> str:
        return self.header.replace("{fair}", resource_label(fair))


OUTCOME_COLUMNS: tuple[Column, ...] = (
    Column("scheduler", lambda s: s.scheduler, numeric=False),
    Column("finished", lambda s: f"{s.finished_jobs}/{s.jobs}"),
    Column("deadlocks", lambda s: str(s.deadlocks)),
    Column("partial gangs", lambda s: str(s.partial_gangs)),
    Column("{fair} util", lambda s: _pct(fair_utilisation(s))),
    Column("{fair} busy util", lambda s: _pct(fair_busy(s))),
    Column("{fair} util backlogged", lambda s: _pct(fair_backlogged(s))),
    Column("mean JCT", lambda s: duration(s.jct_mean_s)),
    Column("p95 JCT", lambda s: duration(s.jct_p95_s)),
    Column("mean queueing", lambda s: duration(s.queueing_delay_mean_s)),
    Column("makespan", lambda s: duration(s.makespan_s)),
)
COST_COLUMNS: tuple[Column, ...] = (
    Column("scheduler", lambda s: s.scheduler, numeric=False),
    Column("max share error", lambda s: _pct(s.max_share_error)),
    Column("Jain", lambda s: _num(s.jain_index)),
    Column("cycles", lambda s: str(s.cycles)),
    Column("cycle p50 ms", lambda s: _ms(s.cycle_p50_s)),
    Column("cycle p99 ms", lambda s: _ms(s.cycle_p99_s)),
    Column("mean gap", lambda s: _gap(s.gap_mean)),
    Column("max gap", lambda s: _gap(s.gap_max)),
    Column("wall s", lambda s: f"{s.wall_s:.2f}"),
    Column("stopped", lambda s: s.stopped, numeric=False),
)
TABLES: tuple[tuple[str, tuple[Column, ...]], ...] = (
    ("Outcomes", OUTCOME_COLUMNS),
    ("Fairness and cost", COST_COLUMNS),
)

GLOSSARY: tuple[tuple[str, str], ...] = (
    ("finished", "jobs that ran to completion / jobs in the scenario."),
    (
        "deadlocks",
        "1 when the run ended in deadlock: partly bound gangs held resources, no job ran "
        "and nothing changed for the scenario's `deadlock_after_s`. Without preemption "
        "(off unless the scenario turns it on) nothing could ever change again.",
    ),
    (
        "partial gangs",
        "distinct gangs ever seen with pods bound while not running (fewer than minMember "
        "bound): resources held for no work.",
    ),
    (
        "util",
        "time average over the run of allocated / capacity of the fair resource (GPUs if "
        "the cluster has any, else CPU); allocated counts every bound pod, partial gangs "
        "included.",
    ),
    ("busy util", "as util, counting only pods of running jobs: useful work."),
    (
        "util backlogged",
        "as util, averaged only while some queue has waiting pods: how much of the cluster "
        "a scheduler keeps allocated when there is work to place. When every scheduler "
        "finishes the same jobs, whole-run util differs only through the makespan; this "
        "is where packing shows.",
    ),
    ("JCT", "job completion time, finish - submit, over finished jobs; mean and 95th pct."),
    ("mean queueing", "mean of first start - submit, over jobs that started."),
    ("makespan", "first submit to last finish; only when every job finished."),
    (
        "deserved",
        "a backlogged queue's fair amount: the weighted water-filling of the cluster among "
        "all queues, each capped by what it holds plus what it waits for (kube-batch's "
        "proportion plugin); as a time average over the queue's backlogged time, / cluster "
        "total. When every queue asks for more than its weight's share this is "
        "weight / sum of weights.",
    ),
    ("share", "what a queue held, time-averaged over its backlogged time, / cluster total."),
    ("error", "share - deserved, per queue; positive means it got more than its due."),
    ("max share error", "the largest |error| over queues."),
    (
        "Jain",
        "Jain's index over queues of held / deserved (time integrals while backlogged): "
        "1.000 is perfectly proportional, 1/n is one queue taking everything.",
    ),
    ("backlogged", "a queue is backlogged while it has waiting pods."),
    (
        "cycles",
        "scheduling cycles run; a cycle whose snapshot could not differ from the last "
        "is skipped, not counted.",
    ),
    (
        "cycle p50 / p99 ms",
        "wall time of one cycle (snapshot, decide, validate, bind), 50th / 99th pct.",
    ),
    (
        "gap",
        "CP-SAT's relative optimality gap per cycle, (bound - objective) / |bound|: how far "
        "the decision could be from the best one; mean and max. '-' for schedulers that "
        "prove no bound.",
    ),
    ("wall s", "wall-clock seconds the whole simulated run took on this host."),
    ("stopped", "why the run ended."),
    (
        "ratio",
        f"{CANDIDATE} / {BASELINE} in the same suite run. Utilisation above 1 and mean JCT "
        "below 1 favour CP-SAT.",
    ),
)


def by_scenario(summaries: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    """Summaries grouped by scenario, both in first-seen order."""
    groups: dict[str, list[RunSummary]] = {}
    for s in summaries:
        groups.setdefault(s.scenario, []).append(s)
    return groups


def rows(summaries: Sequence[RunSummary], columns: Sequence[Column]) -> list[list[str]]:
    return [[c.cell(s) for c in columns] for s in summaries]


# --- cpsat vs gang-greedy -----------------------------------------------------------------


class Comparison(BaseModel):
    """The candidate against the baseline on one scenario, both from the same suite run."""

    model_config = ConfigDict(frozen=True)

    scenario: str
    candidate: str
    baseline: str
    utilisation_ratio: float | None  # fair resource, candidate / baseline
    backlogged_utilisation_ratio: float | None  # the same, while some queue waits
    queueing_mean_ratio: float | None
    jct_mean_ratio: float | None
    notes: list[str]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(
    summaries: Sequence[RunSummary], candidate: str = CANDIDATE, baseline: str = BASELINE
) -> list[Comparison]:
    out = []
    for scenario, group in by_scenario(summaries).items():
        found = {s.scheduler: s for s in group}
        if candidate not in found or baseline not in found:
            continue
        c, b = found[candidate], found[baseline]
        notes = []
        if c.finished_jobs != b.finished_jobs:
            # A mean over different job sets is not a like-for-like comparison.
            notes.append(
                f"mean JCT is over finished jobs only: {candidate} finished "
                f"{c.finished_jobs}/{c.jobs}, {baseline} {b.finished_jobs}/{b.jobs}"
            )
        out.append(
            Comparison(
                scenario=scenario,
                candidate=candidate,
                baseline=baseline,
                utilisation_ratio=_ratio(fair_utilisation(c), fair_utilisation(b)),
                backlogged_utilisation_ratio=_ratio(fair_backlogged(c), fair_backlogged(b)),
                queueing_mean_ratio=_ratio(c.queueing_delay_mean_s, b.queueing_delay_mean_s),
                jct_mean_ratio=_ratio(c.jct_mean_s, b.jct_mean_s),
                notes=notes,
            )
        )
    return out


def comparison_text(c: Comparison) -> str:
    def ratio(value: float | None) -> str:
        return "-" if value is None else f"x{value:.3f}"

    text = (
        f"{c.candidate} vs {c.baseline}: utilisation {ratio(c.utilisation_ratio)} "
        f"(while backlogged {ratio(c.backlogged_utilisation_ratio)}), "
        f"mean JCT {ratio(c.jct_mean_ratio)}, mean queueing {ratio(c.queueing_mean_ratio)}"
    )
    return text + "".join(f" ({n})" for n in c.notes)


# --- results.json -------------------------------------------------------------------------


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_json(path: Path, summaries: Sequence[RunSummary], meta: Mapping[str, Any]) -> Path:
    payload = {
        "meta": dict(meta),
        "runs": [s.model_dump(mode="json") for s in summaries],
        "comparisons": [c.model_dump(mode="json") for c in compare(summaries)],
    }
    return write_text(path, json.dumps(payload, indent=2) + "\n")


# --- report.md ----------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], body: Sequence[Sequence[str]], numeric: Sequence[bool]) -> str:
    align = ["---:" if n else ":---" for n in numeric]
    lines = [
        "| " + " | ".join(_md_escape(h) for h in headers) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def queue_table(summary: RunSummary) -> str:
    # Heaviest queues first: they decide most of the cluster's shares.
    ordered = sorted(summary.queues.items(), key=lambda kv: (-kv[1].weight, kv[0]))
    body = [
        [
            name,
            str(q.weight),
            _pct(q.weight_share),
            duration(q.backlogged_s),
            _pct(q.deserved),
            _pct(q.share),
            f"{q.error:+.1%}",
        ]
        for name, q in ordered
    ]
    headers = ["queue", "weight", "weight share", "backlogged", "deserved", "share", "error"]
    return md_table(headers, body, [False] + [True] * 6)


def _meta_lines(meta: Mapping[str, Any]) -> list[str]:
    settings = meta.get("settings", {})
    lines = [
        f"- date: {meta.get('date', '-')}",
        f"- gangsat {meta.get('gangsat_version', '-')}, OR-Tools {meta.get('ortools_version', '-')}"
        f", Python {meta.get('python', '-')}",
        f"- host: {meta.get('host_cores', '-')} cores ({meta.get('platform', '-')})",
        f"- schedulers: {', '.join(settings.get('schedulers', []))}",
        f"- CP-SAT: {settings.get('time_limit_s', '-')} s per cycle, seed "
        f"{settings.get('seed', '-')}, {settings.get('workers', '-')} worker(s)",
    ]
    if settings.get("quick"):
        lines.append(f"- quick mode: {settings.get('quick_note', 'reduced runs')}")
    return lines


def markdown(
    summaries: Sequence[RunSummary],
    meta: Mapping[str, Any],
    plots: Mapping[str, Sequence[Path]],
) -> str:
    """The report; ``plots`` maps a scenario to its images, linked by file name (report.md
    sits next to them)."""
    scenarios_meta: Mapping[str, Mapping[str, Any]] = meta.get("scenarios", {})
    out = ["# gangsat benchmark suite", "", *_meta_lines(meta), ""]
    comparisons = {c.scenario: c for c in compare(summaries)}
    for scenario, group in by_scenario(summaries).items():
        fair = group[0].fair_resource
        info = scenarios_meta.get(scenario, {})
        out += [f"## {scenario}", ""]
        if info.get("description"):
            out += [str(info["description"]), ""]
        out += [
            f"{group[0].nodes} nodes, {group[0].jobs} jobs; fairness and utilisation are "
            f"judged on {resource_label(fair)}"
            + (f"; source `{info['source']}`" if info.get("source") else "")
            + ".",
            "",
        ]
        for title, columns in TABLES:
            out += [
                f"### {title}",
                "",
                md_table(
                    [c.title(fair) for c in columns],
                    rows(group, columns),
                    [c.numeric for c in columns],
                ),
                "",
            ]
        if scenario in comparisons:
            out += [f"**{comparison_text(comparisons[scenario])}**", ""]
        fairest = next((s for s in group if s.scheduler == CANDIDATE), group[0])
        if len(fairest.queues) > 1:  # with one queue there are no shares to compare
            out += [f"### Queue fairness ({fairest.scheduler})", "", queue_table(fairest), ""]
        for path in plots.get(scenario, ()):
            out += [f"![{path.stem}]({path.name})", ""]
    out += ["## Glossary", ""]
    out += [f"- **{term}**: {text}" for term, text in GLOSSARY]
    return "\n".join(out) + "\n"


# --- plots --------------------------------------------------------------------------------


def file_stem(scenario: str) -> str:
    """A scenario name safe as a file name (names may come from arbitrary files)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", scenario).strip("-") or "scenario"


def _time_unit(end_s: float) -> tuple[float, str]:
    if end_s > 3 * 86400:
        return 86400.0, "days"
    if end_s > 3 * 3600:
        return 3600.0, "hours"
    if end_s > 300:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _steps(run: SimRun, values: list[float]) -> tuple[list[float], list[float]]:
    """x, y of a step line over the run's samples (one value each), held to the run's end.

    Of samples taken at the same instant only the last is kept: the others held for no
    time, and drawn they would show as spikes that never happened (a job finishing and
    the next one binding in the same step).
    """
    samples = run.samples
    keep = [
        i for i in range(len(samples)) if i + 1 == len(samples) or samples[i + 1].t > samples[i].t
    ]
    xs = [samples[i].t for i in keep]
    ys = [values[i] for i in keep]
    if xs:
        xs.append(max(run.end_s, xs[-1]))
        ys.append(ys[-1])
    return xs, ys


def _width(k: int, n: int) -> float:
    """Line width of the k-th of n schedulers: earlier lines wider, so identical results
    (cpsat and gang-greedy often agree) show as nested lines instead of one hiding the
    other."""
    return 1.2 + 1.6 * (n - 1 - k)


def subplots(**kwargs: Any) -> tuple[Figure, Any]:
    """pyplot's subplots on this module's file-only backend, for other report writers."""
    fig, axes = plt.subplots(**kwargs)
    return fig, axes


def save_figure(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _scale(values: list[float], unit: float) -> list[float]:
    return [v / unit for v in values]


def _dashed_step(ax: Any, xs: Sequence[float], ys: Sequence[float], color: Any) -> None:
    """The reference line under a solid one: busy under allocated, deserved under held."""
    ax.step(xs, ys, where="post", linestyle="--", linewidth=1, color=color)


def plot_utilisation(runs: Sequence[SimRun], path: Path) -> Path:
    """Per resource (one panel each, the fair resource first), allocated (solid) and busy
    (dashed) share of capacity over time, one colour per scheduler: the gap between the
    two is resource held by gangs that are not running."""
    fair = runs[0].fair_resource if runs else GPU
    present = sorted(
        {r for run in runs for r, cap in run.capacity.items() if cap > 0 and r != "pods"}
    )
    resources = [fair] + [r for r in present if r != fair]
    fig, axes = plt.subplots(
        len(resources), 1, figsize=(9, 2.6 * len(resources) + 0.8), sharex=True, squeeze=False
    )
    end = max((r.end_s for r in runs), default=0.0)
    unit, unit_name = _time_unit(end)
    for ax, resource in zip(axes[:, 0], resources, strict=True):
        for k, run in enumerate(runs):
            cap = run.capacity.get(resource, 0) or 1
            xs, alloc = _steps(run, [s.allocated.get(resource, 0) / cap for s in run.samples])
            _, busy = _steps(run, [s.busy.get(resource, 0) / cap for s in run.samples])
            (line,) = ax.step(
                _scale(xs, unit),
                alloc,
                where="post",
                label=run.settings.scheduler,
                linewidth=_width(k, len(runs)),
                alpha=0.85,
            )
            _dashed_step(ax, _scale(xs, unit), busy, line.get_color())
        ax.set_ylim(-0.02, 1.05)
        ax.set_ylabel(f"{resource_label(resource)} used")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="best")
    axes[-1, 0].set_xlabel(f"simulated time ({unit_name})")
    title = runs[0].workload.scenario.name if runs else ""
    axes[0, 0].set_title(f"{title}: allocated / capacity per resource (dashed: running jobs)")
    return save_figure(fig, path)


def plot_shares(run: SimRun, path: Path) -> Path:
    """Each queue's held share (solid) against its deserved share (dashed) over time."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    unit, unit_name = _time_unit(run.end_s)
    total = run.capacity.get(run.fair_resource, 0)
    weights = {q.name: q.weight for q in run.workload.queues}
    queues = run.workload.queues
    deserved = [
        deserved_at(s, total, queues, run.fair_resource) if total else {} for s in run.samples
    ]
    shown = sorted(weights, key=lambda q: (-weights[q], q))[:MAX_QUEUES_PLOTTED]
    scale = total or 1
    for q in shown:
        xs, held = _steps(run, [s.queue_allocated.get(q, 0) / scale for s in run.samples])
        _, fair = _steps(run, [d.get(q, 0.0) / scale for d in deserved])
        (line,) = ax.step(_scale(xs, unit), held, where="post", label=f"{q} (w={weights[q]})")
        _dashed_step(ax, _scale(xs, unit), fair, line.get_color())
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(f"simulated time ({unit_name})")
    ax.set_ylabel(f"share of cluster {resource_label(run.fair_resource)}")
    hidden = len(weights) - len(shown)
    note = f"; {hidden} lighter queue(s) not shown" if hidden > 0 else ""
    ax.set_title(
        f"{run.workload.scenario.name}: {run.settings.scheduler} queue shares "
        f"(dashed: deserved{note})",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8, ncols=2 if len(shown) > 4 else 1)
    return save_figure(fig, path)


def plot_jct_cdf(runs: Sequence[SimRun], path: Path) -> Path:
    """Share of *all* jobs finished within a JCT: a line that stops short of 1 shows the
    jobs that never finished."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    jcts = {
        run.settings.scheduler: sorted(
            j.finished_s - j.submit_s for j in run.jobs if j.finished_s is not None
        )
        for run in runs
    }
    longest = max((v[-1] for v in jcts.values() if v), default=1.0)
    shortest = min((v[0] for v in jcts.values() if v), default=1.0)
    unit, unit_name = _time_unit(longest)
    # Trace JCTs span minutes to weeks: on a linear axis most jobs crowd into the first
    # pixel column.
    log_x = shortest > 0 and longest / shortest > LOG_SPAN
    for k, run in enumerate(runs):
        values = jcts[run.settings.scheduler]
        n = len(run.jobs) or 1
        label = f"{run.settings.scheduler} ({len(values)}/{len(run.jobs)} finished)"
        if not values:
            # Keep it in the legend: "no job finished" is the result, not a missing line.
            ax.plot([], [], label=label)
            continue
        xs = [v / unit for v in values]
        ys = [(i + 1) / n for i in range(len(values))]
        if not log_x:
            xs, ys = [0.0, *xs], [0.0, *ys]
        ax.step(xs, ys, where="post", label=label, linewidth=_width(k, len(runs)), alpha=0.85)
    if log_x:
        ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(f"job completion time ({unit_name}{', log scale' if log_x else ''})")
    ax.set_ylabel("share of jobs finished")
    title = runs[0].workload.scenario.name if runs else ""
    ax.set_title(f"{title}: JCT CDF")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return save_figure(fig, path)


def plot_scenario(runs: Sequence[SimRun], out_dir: Path, candidate: str = CANDIDATE) -> list[Path]:
    """The three plots of one scenario's runs; the shares plot is of ``candidate`` (or of
    the first run when it is not among them)."""
    if not runs:
        return []
    stem = file_stem(runs[0].workload.scenario.name)
    fairest = next((r for r in runs if r.settings.scheduler == candidate), runs[0])
    return [
        plot_utilisation(runs, out_dir / f"{stem}-utilisation.png"),
        plot_shares(fairest, out_dir / f"{stem}-shares.png"),
        plot_jct_cdf(runs, out_dir / f"{stem}-jct-cdf.png"),
    ]
