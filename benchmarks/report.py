"""The benchmark suite's outputs: results.json and report.md (the plots: ``benchmarks.plots``).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display, and no GUI toolkit in CI

from pydantic import BaseModel, ConfigDict

from adapter.sim.measures import RunSummary
from solver.model import GPU

CANDIDATE = "cpsat"
BASELINE = "gang-greedy"


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
    Column("max mean |error|", lambda s: _pct(s.max_abs_share_error)),
    Column("max time >2% off", lambda s: _pct(s.max_off_share)),
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
