"""The solver benchmark's rows and tables (``benchmarks.solver``): one row per decision,
with what the validator found in it, and the tables printed from them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.table import Table

from solver.decision import Decision
from solver.validate import Violation

BASELINE = "gang-greedy"
# Schedulers that place pods one at a time: their partial gangs are no failure of the run.
PODS_ONE_AT_A_TIME = frozenset({"greedy"})


@dataclass
class InstanceResult:
    instance: str
    nodes: int
    pods: int
    pending_pods: int
    gangs: int
    build_s: float
    prepare_s: float


@dataclass
class Row:
    instance: str
    scheduler: str
    pending_pods: int
    variables: int | None = None
    first_solution_s: float | None = None
    objective: int | None = None
    bound: int | None = None
    gap: float | None = None
    wall_s: float = 0.0
    explain_s: float | None = None
    placed: int = 0
    admitted: int = 0
    evicted: int = 0
    nominated: int = 0
    status: str = ""
    decided_by: str = ""
    vs_baseline: float | None = None
    minus_baseline: int | None = None
    error: str | None = None
    seed: int = 0
    run: int = 0
    # What the validator found: gangs placed below minMember, and every other broken rule.
    partial_gangs: int | None = None
    violations: int | None = None
    # Of a refused decision only, each finding (kind: message); greedy's thousand partial
    # gangs would swamp the JSON.
    findings: list[str] = field(default_factory=list)

    def refused(self) -> bool:
        """The decision breaks a rule its scheduler claims to keep."""
        if self.violations:
            return True
        return bool(self.partial_gangs) and self.scheduler not in PODS_ONE_AT_A_TIME


def decision_row(
    instance: str,
    scheduler: str,
    pending: int,
    decision: Decision,
    wall: float,
    explain_s: float | None = None,
    violations: Sequence[Violation] | None = None,
) -> Row:
    stages = decision.stages
    partial = None if violations is None else sum(v.kind == "partial-gang" for v in violations)
    firsts = [s.first_solution_s for s in stages if s.first_solution_s is not None]
    return Row(
        instance=instance,
        scheduler=scheduler,
        pending_pods=pending,
        variables=sum(s.variables for s in stages) if stages else None,
        first_solution_s=min(firsts) if firsts else None,
        objective=decision.objective,
        bound=decision.bound,
        gap=decision.gap,
        wall_s=wall,
        explain_s=explain_s,
        placed=len(decision.placements),
        admitted=len(decision.admitted),
        evicted=len(decision.evictions),
        nominated=len(decision.nominated),
        status=str(decision.status),
        decided_by=decision.decided_by,
        partial_gangs=partial,
        violations=None if violations is None else len(violations) - (partial or 0),
    )


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def instance_table(results: Sequence[InstanceResult]) -> Table:
    table = Table(title="Instances")
    for column in ("instance", "nodes", "pods", "pending", "gangs", "build s", "prepare s"):
        table.add_column(column, justify="left" if column == "instance" else "right")
    for r in results:
        table.add_row(
            r.instance,
            _num(r.nodes),
            _num(r.pods),
            _num(r.pending_pods),
            _num(r.gangs),
            _secs(r.build_s),
            _secs(r.prepare_s),
        )
    return table


def results_table(rows: Sequence[Row], time_limit: float) -> Table:
    table = Table(title=f"Schedulers (time limit {time_limit:g} s)")
    columns = (
        "instance",
        "scheduler",
        "pending",
        "variables",
        "first sol s",
        "objective",
        "bound",
        "gap",
        "wall s",
        "explain s",
        "placed",
        "admitted",
        "evicted",
        "nominated",
        "status",
        "decided by",
        "partial gangs",
        "violations",
        f"vs {BASELINE}",
        f"- {BASELINE}",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("instance", "scheduler") else "right")
    for r in rows:
        table.add_row(
            r.instance,
            r.scheduler,
            _num(r.pending_pods),
            _num(r.variables),
            _secs(r.first_solution_s),
            _num(r.objective),
            _num(r.bound),
            "-" if r.gap is None else f"{r.gap:.2%}",
            _secs(r.wall_s),
            _secs(r.explain_s),
            _num(r.placed),
            _num(r.admitted),
            _num(r.evicted),
            _num(r.nominated),
            r.status if r.error is None else f"ERROR: {r.error}",
            r.decided_by or "-",
            _num(r.partial_gangs),
            _num(r.violations),
            "-" if r.vs_baseline is None else f"{r.vs_baseline:.3f}",
            "-" if r.minus_baseline is None else f"{r.minus_baseline:+,}",
        )
    return table


def _p99(values: Sequence[float]) -> float:
    """Nearest rank: with fewer than 100 values, the worst."""
    ordered = sorted(values)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


def summary_table(rows: Sequence[Row]) -> Table:
    """Per instance and scheduler, over every seed and run."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.error is None:
            groups.setdefault((row.instance, row.scheduler), []).append(row)
    table = Table(title="Over seeds and runs")
    columns = ("instance", "scheduler", "n", "gap median", "gap max", "wall median s")
    ratio_columns = (f"vs {BASELINE} min", f"vs {BASELINE} median")
    for column in (*columns, "wall p99 s", *ratio_columns, "refused"):
        table.add_column(column, justify="left" if column in ("instance", "scheduler") else "right")
    for (instance, scheduler), group in groups.items():
        gaps = [r.gap for r in group if r.gap is not None]
        walls = [r.wall_s for r in group]
        ratios = [r.vs_baseline for r in group if r.vs_baseline is not None]
        table.add_row(
            instance,
            scheduler,
            str(len(group)),
            f"{statistics.median(gaps):.2%}" if gaps else "-",
            f"{max(gaps):.2%}" if gaps else "-",
            _secs(statistics.median(walls)),
            _secs(_p99(walls)),
            f"{min(ratios):.3f}" if ratios else "-",
            f"{statistics.median(ratios):.3f}" if ratios else "-",
            str(sum(r.refused() for r in group)),
        )
    return table
