"""A simulated run told as a story: what arrived, what each cycle bound and why the rest
waits, what started and finished, and where a scheduler deadlocked. ``gangsat run``
prints it; it reads only the loop's ``CycleResult`` and the simulator's events.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from adapter.results import CycleResult
from adapter.sim.cluster import SimEvent, SimulatedCluster
from adapter.sim.measures import RunSummary
from adapter.sim.run import SimRun

ABOUT = {
    "greedy": "pod by pod, like the stock kube-scheduler; knows nothing of gangs",
    "gang-greedy": "kube-batch's allocate: whole gangs or none, first fit in queue order",
    "cpsat": "one exact CP-SAT optimisation over every gang at once",
}
MAX_GANGS_SHOWN = 6  # per cycle line, bound or waiting
EVENT_STYLE = {"started": "green", "finished": "cyan", "paused": "yellow", "evicted": "red"}


def clock(t: float) -> str:
    return f"t={t:>7.0f}s"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _nodes(nodes: list[str]) -> str:
    counts = Counter(nodes)
    shown = [f"{n}×{c}" if c > 1 else n for n, c in sorted(counts.items())[:4]]
    more = len(counts) - len(shown)
    return ", ".join(shown) + (f", +{more} nodes" if more > 0 else "")


class RunLog:
    """Prints a run as it happens. ``detail`` False: one line per cycle, no events."""

    def __init__(self, console: Console, detail: bool) -> None:
        self.console = console
        self.detail = detail
        self.cycle = 0

    def event(self, e: SimEvent) -> None:
        if not self.detail:
            return
        style = EVENT_STYLE.get(e.kind, "")
        kind = f"[{style}]{e.kind}[/{style}]" if style else e.kind
        text = f"  {clock(e.t)}  {escape(e.job)} {kind}: {escape(e.detail)}"
        self.console.print(text, highlight=False)

    def cycle_done(self, t: float, result: CycleResult, cluster: SimulatedCluster) -> None:
        self.cycle += 1
        d = result.decision
        head = (
            f"  {clock(t)}  [bold]cycle {self.cycle}[/bold]: "
            f"{plural(result.pending_pods, 'pending pod')}"
        )
        if result.error:
            error = escape(result.error)
            self.console.print(f"{head}; [red]error[/red]: {error}", highlight=False)
            return
        by_gang: dict[str, list[str]] = defaultdict(list)
        for pod, node in result.bound.items():
            by_gang[cluster.job_of.get(pod, pod)].append(node)
        status = ""
        if d is not None:
            gap = f", gap {d.gap:.2%}" if d.gap is not None else ""
            status = f" [dim]({d.status.value}{gap}, {result.decide_s * 1000:.0f} ms)[/dim]"
        bound = sum(len(v) for v in by_gang.values())
        self.console.print(
            f"{head} -> bound {plural(bound, 'pod')} of {plural(len(by_gang), 'gang')}{status}",
            highlight=False,
        )
        if not self.detail:
            return
        for gang, nodes in sorted(by_gang.items())[:MAX_GANGS_SHOWN]:
            js = cluster.jobs.get(gang)
            need = js.job.min_member if js else 1
            held = cluster.bound_count(gang) if js else len(nodes)
            mark = "" if held >= need else " [bold red](partial: it cannot start)[/bold red]"
            self.console.print(
                f"      + {escape(gang)}: {len(nodes)} pods on {escape(_nodes(nodes))}; "
                f"{held}/{need} bound{mark}",
                highlight=False,
            )
        if len(by_gang) > MAX_GANGS_SHOWN:
            self.console.print(f"      + … {len(by_gang) - MAX_GANGS_SHOWN} more gangs")
        for gang, why in sorted(result.rolled_back.items()):
            line = f"      [red]rolled back[/red] {escape(gang)}: {escape(why)}"
            self.console.print(line, highlight=False)
        for gang, why in sorted(result.rejected.items()):
            line = f"      [red]rejected[/red] {escape(gang)}: {escape(why)}"
            self.console.print(line, highlight=False)
        waiting = [s for s in result.statuses if s.phase == "Pending"]
        for s in waiting[:MAX_GANGS_SHOWN]:
            self.console.print(
                f"      . {escape(s.gang)} waits ({s.bound}/{s.min_member} bound): "
                f"{escape(s.message)}",
                highlight=False,
            )
        if len(waiting) > MAX_GANGS_SHOWN:
            self.console.print(f"      . … {len(waiting) - MAX_GANGS_SHOWN} more gangs wait")

    def finished(self, run: SimRun) -> None:
        last = run.cycles[-1].result.statuses if run.cycles else []
        statuses = {st.gang: st for st in last}
        for t in run.deadlocks:
            held = ", ".join(
                f"{escape(g)} {statuses[g].bound}/{statuses[g].min_member} pods bound"
                for g in run.samples[-1].partial_gangs
                if g in statuses
            )
            self.console.print(
                f"  {clock(t)}  [bold red]DEADLOCK[/bold red]: partly bound gangs hold "
                f"resources and wait for each other forever ({held})",
                highlight=False,
            )
        self.console.print(f"  [dim]run ended: {escape(run.stopped)}[/dim]", highlight=False)


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def summary_table(title: str, summaries: list[RunSummary]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    columns: tuple[str, ...] = (
        "scheduler",
        "done",
        "deadlock",
        "partial",
        "util",
        "JCT s",
        "p95 JCT s",
        "makespan s",
        "share err",
        "cycles",
        "cycle p50",
    )
    evictions = any(s.evicted_pods for s in summaries)
    if evictions:
        columns = (*columns, "evicted")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
    for s in summaries:
        util = s.utilisation.get(s.fair_resource)
        lost_h = s.lost_resource_s.get(s.fair_resource, 0.0) / 3600
        unit = "GPU" if s.fair_resource == "nvidia.com/gpu" else s.fair_resource
        evicted = [f"{s.evicted_pods} / {lost_h:,.1f} {unit}-h"] if evictions else []
        table.add_row(
            s.scheduler,
            f"{s.finished_jobs}/{s.jobs}",
            f"[bold red]{s.deadlocks}[/bold red]" if s.deadlocks else "0",
            f"[red]{s.partial_gangs}[/red]" if s.partial_gangs else "0",
            _fmt_pct(util),
            _fmt_s(s.jct_mean_s),
            _fmt_s(s.jct_p95_s),
            _fmt_s(s.makespan_s),
            _fmt_pct(s.max_share_error),
            str(s.cycles),
            "-" if s.cycle_p50_s is None else f"{s.cycle_p50_s * 1000:.0f} ms",
            *evicted,
        )
    return table


GLOSSARY = (
    "done: jobs finished; deadlock: times the run got stuck with partly bound gangs and "
    "nothing running, or ended with them unchanged; partial: gangs ever seen holding pods "
    "below minMember; util: mean allocated share of the fair resource (GPUs if any, else "
    "CPU); JCT: submit to finish (mean); share err: the largest queue's (held - deserved) "
    "share, averaged while it is backlogged, where over and under cancel (two or more "
    "queues; gangsat-bench also reports the mean absolute error)."
)
EVICTED_GLOSSARY = (
    " evicted: pods evicted for a preempting gang / the running work their jobs lost."
)
