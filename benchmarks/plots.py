"""The benchmark suite's plots: utilisation over time, queue shares against their deserved
shares, and JCT CDFs, per scenario. They need the runs' samples, which are never
serialised, so they take the ``SimRun`` objects the suite keeps in memory
(``benchmarks.report`` writes what a saved results.json can rebuild)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display, and no GUI toolkit in CI

import matplotlib.pyplot as plt  # after use(): pyplot picks its backend on import
from matplotlib.figure import Figure

from adapter.sim.measures import deserved_at
from adapter.sim.run import SimRun
from benchmarks.report import CANDIDATE, resource_label
from solver.model import GPU

MAX_QUEUES_PLOTTED = 8  # more lines than this are unreadable; the heaviest queues are shown
LOG_SPAN = 50  # JCT CDFs whose longest / shortest JCT exceeds this get a log time axis
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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
