"""The ``gangsat`` command line: the only entry point users type.

Flow: cluster -> snapshot -> solver (pure) -> decision -> validator -> binder. This
module stands in for the cluster ends of that flow: it reads a snapshot from a JSON file
(a ``solver.model.ClusterState``), hands it to a scheduler from
``solver.schedulers.SCHEDULERS`` and prints the ``Decision``; ``run`` also checks each
decision with ``solver.validate.check`` and explains it. Nothing here talks to
Kubernetes yet.

    gangsat solve STATE.json [--scheduler cpsat|greedy|gang-greedy] [--time-limit S]
                             [--seed N] [--workers N]
    gangsat schema [state|decision]
    gangsat run [--scenario seed-deadlock|STATE.json] [--time-limit S]
    gangsat version

Exit status: 0 on success; 2 on bad arguments or a bad state file (missing, unreadable,
not JSON, or not a valid ``ClusterState``), reported on stderr one line per problem with
the path of the offending field, never as a traceback.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table

from solver.config import SolverConfig
from solver.model import ClusterState, Decision
from solver.schedulers import schedule
from solver.validate import Violation, check

app = typer.Typer(
    name="gangsat",
    help="gangsat: a Kubernetes gang scheduler whose every cycle is an exact CP-SAT "
    "optimisation. Gangs run all-or-nothing; queues share the cluster by weight.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",
)

EXIT_BAD_INPUT = 2
SCENARIOS_DIR = "scenarios"
DEFAULT_SCENARIO = "seed-deadlock"
RUN_ORDER = ("greedy", "gang-greedy", "cpsat")
ABOUT = {
    "greedy": "pod by pod, like the stock kube-scheduler; knows nothing of gangs",
    "gang-greedy": "kube-batch's allocate: whole gangs or none, first fit in order",
    "cpsat": "one exact CP-SAT optimisation over every gang at once",
}
MAX_PODS_SHOWN = 8  # per node in `run`'s picture
MAX_NODES_SHOWN = 30
CONFIG_OPTION = {"time_limit_s": "--time-limit", "seed": "--seed", "num_workers": "--workers"}


class BadInput(Exception):
    """Input the user must fix; each line is printed to stderr as is."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def _fail(lines: list[str]) -> NoReturn:
    for line in lines:
        typer.echo(f"gangsat: {line}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


# --- reading a state --------------------------------------------------------------------


def _field_path(loc: tuple[int | str, ...], raw: Any, error_type: str) -> str:
    """``('nodes', 2, 'allocatable')`` -> ``nodes["node-2"].allocatable``.

    A list index is shown as the element's ``name`` when it has one, else as the index.
    Components that are not in the input (pydantic's tags for union members) are dropped,
    except a missing field's own name.
    """
    out = ""
    at: Any = raw
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int) and isinstance(at, list) and 0 <= part < len(at):
            at = at[part]
            name = at.get("name") if isinstance(at, dict) else None
            out += f"[{json.dumps(name)}]" if isinstance(name, str) and name else f"[{part}]"
        elif isinstance(part, str) and isinstance(at, dict) and part in at:
            at = at[part]
            out += f".{part}" if out else part
        elif isinstance(part, str) and last and error_type == "missing":
            out += f".{part}" if out else part
        elif isinstance(part, int):
            out += f"[{part}]"
            at = None
        # else: a union-member tag such as 'literal['']' — not a place in the file
    return out


def _message(error: Mapping[str, object]) -> str:
    return str(error["msg"]).removeprefix("Value error, ")


def validation_lines(source: str, error: ValidationError, raw: Any) -> list[str]:
    """One ``source: path: message`` line per bad field, in pydantic's order.

    A value that fails every member of a union gets one line, its messages joined by "or".
    """
    by_path: dict[str, list[str]] = {}
    for e in error.errors(include_url=False):
        path = _field_path(tuple(e["loc"]), raw, e["type"])
        messages = by_path.setdefault(path, [])
        if _message(e) not in messages:
            messages.append(_message(e))
    return [
        f"{source}: {path}: {'; or '.join(messages)}"
        if path
        else f"{source}: {'; '.join(messages)}"
        for path, messages in by_path.items()
    ]


def parse_state(text: str, source: str) -> ClusterState:
    """A ``ClusterState`` from JSON text; ``BadInput`` naming every bad field otherwise."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(
            [f"{source}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"]
        ) from None
    try:
        return ClusterState.model_validate_json(text)
    except ValidationError as e:
        raise BadInput(validation_lines(source, e, raw)) from None


def read_state(path: Path) -> ClusterState:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise BadInput([f"{path}: is a directory, not a state JSON file"]) from None
    except UnicodeDecodeError as e:
        raise BadInput([f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except OSError as e:
        raise BadInput([f"{path}: cannot read: {e.strerror or e}"]) from None
    return parse_state(text, str(path))


def scenario_names() -> list[str]:
    folder = resources.files("adapter").joinpath(SCENARIOS_DIR)
    return sorted(
        entry.name.removesuffix(".json")
        for entry in folder.iterdir()
        if entry.name.endswith(".json")
    )


def load_scenario(scenario: str) -> tuple[ClusterState, str]:
    """A packaged scenario by name, else a state JSON file by path; with a label for it."""
    if scenario in scenario_names():
        entry = resources.files("adapter").joinpath(SCENARIOS_DIR, f"{scenario}.json")
        return parse_state(entry.read_text(encoding="utf-8"), scenario), scenario
    path = Path(scenario)
    if not path.exists():
        names = ", ".join(scenario_names())
        raise BadInput([f"{scenario}: not a packaged scenario ({names}) and no such file"])
    return read_state(path), str(path)


def make_config(**given: Any) -> SolverConfig:
    """``SolverConfig`` from the options the user gave; bad values name the option."""
    try:
        return SolverConfig(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        raise BadInput(
            [
                f"{CONFIG_OPTION.get(str(err['loc'][0]), err['loc'][0])}: {_message(err)}"
                for err in e.errors(include_url=False)
            ]
        ) from None


# --- commands ---------------------------------------------------------------------------

SchedulerName = Literal["cpsat", "greedy", "gang-greedy"]  # = SCHEDULERS' keys (tested)
SchedulerOption = Annotated[
    SchedulerName, typer.Option("--scheduler", "-s", help="Which scheduler decides.")
]
TimeLimitOption = Annotated[
    float | None,
    typer.Option("--time-limit", "-t", help="Seconds for all CP-SAT calls.", show_default="1.0"),
]


@app.command()
def solve(
    state_file: Annotated[
        Path,
        typer.Argument(
            metavar="STATE.json", help="A ClusterState as JSON (see `gangsat schema state`)."
        ),
    ],
    scheduler: SchedulerOption = "cpsat",
    time_limit: TimeLimitOption = None,
    seed: Annotated[int | None, typer.Option(help="CP-SAT random seed.", show_default="0")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="CP-SAT workers; 0 = all cores.",
            show_default=str(SolverConfig.model_fields["num_workers"].default),
        ),
    ] = None,
) -> None:
    """Schedule one snapshot and print the Decision as JSON."""
    try:
        config = make_config(time_limit_s=time_limit, seed=seed, num_workers=workers)
        state = read_state(state_file)
    except BadInput as e:
        _fail(e.lines)
    decision = schedule(state, scheduler, config)
    typer.echo(decision.model_dump_json(indent=2))


@app.command()
def schema(
    which: Annotated[
        Literal["state", "decision"] | None,
        typer.Argument(help="Only this model's schema.", show_default="both"),
    ] = None,
) -> None:
    """Print the JSON Schema of a state file (ClusterState) and of a Decision."""
    schemas = {
        "state": ClusterState.model_json_schema(),
        "decision": Decision.model_json_schema(),
    }
    typer.echo(json.dumps(schemas[which] if which else schemas, indent=2))


@app.command()
def version() -> None:
    """Print gangsat's version."""
    try:
        typer.echo(f"gangsat {metadata.version('gangsat')}")
    except metadata.PackageNotFoundError:
        typer.echo("gangsat (not installed)")


@dataclass(frozen=True)
class Outcome:
    """One scheduler's decision on one state, with what ``check`` found."""

    scheduler: str
    decision: Decision
    violations: list[Violation]
    deadlocked: dict[str, tuple[int, int]]  # gang -> (pods it would hold, minMember)


def evaluate(state: ClusterState, scheduler: str, config: SolverConfig) -> Outcome:
    decision = schedule(state, scheduler, config)
    violations = check(state, decision)
    gang_of = {p.name: p.gang_name() for p in state.pods}
    held: dict[str, int] = defaultdict(int)
    for pod in state.bound_pods():
        held[pod.gang_name()] += 1
    for pod_name in decision.placements:
        if pod_name in gang_of:
            held[gang_of[pod_name]] += 1
    need = {g.name: g.min_member for g in state.gangs}
    deadlocked = {
        v.subject: (held[v.subject], need.get(v.subject, 1))
        for v in violations
        if v.kind == "partial-gang"
    }
    return Outcome(scheduler, decision, violations, deadlocked)


def _node_lines(state: ClusterState, decision: Decision) -> list[str]:
    """``node-0 (2/2 pods): job-a-0 job-b-1`` per node; already bound pods are dimmed."""
    bound: dict[str, list[str]] = defaultdict(list)
    for pod in state.bound_pods():
        bound[str(pod.node_name)].append(pod.name)
    new: dict[str, list[str]] = defaultdict(list)
    for pod_name, node_name in sorted(decision.placements.items()):
        new[node_name].append(pod_name)
    lines = []
    for node in state.nodes[:MAX_NODES_SHOWN]:
        names = [f"[dim]{n}[/dim]" for n in sorted(bound[node.name])] + new[node.name]
        shown = " ".join(names[:MAX_PODS_SHOWN]) or "[dim]-[/dim]"
        if len(names) > MAX_PODS_SHOWN:
            shown += f" … +{len(names) - MAX_PODS_SHOWN} more"
        slots = f"{len(names)}/{node.allocatable['pods']} pods"
        lines.append(f"  {node.name} ({slots}): {shown}")
    if len(state.nodes) > MAX_NODES_SHOWN:
        lines.append(f"  … and {len(state.nodes) - MAX_NODES_SHOWN} more nodes")
    return lines


def _report(console: Console, state: ClusterState, outcome: Outcome) -> None:
    d = outcome.decision
    about = ABOUT.get(outcome.scheduler, "")
    console.rule(f"[bold]{outcome.scheduler}[/bold]" + (f" — {about}" if about else ""))
    for line in _node_lines(state, d):
        console.print(line, highlight=False)
    admitted = ", ".join(d.admitted) or "none"
    console.print(f"  admitted: [green]{admitted}[/green]", highlight=False)
    for gang_name, (held, need) in sorted(outcome.deadlocked.items()):
        console.print(
            f"  [bold red]DEADLOCK[/bold red]: {gang_name} has {held}/{need} pods bound and "
            f"waits forever, holding {held} pod slot(s)",
            highlight=False,
        )
    for v in outcome.violations:
        if v.kind != "partial-gang":
            console.print(
                f"  [bold red]INVALID[/bold red] ({v.kind}): {v.message}", highlight=False
            )
    for gang_name, reason in sorted(d.unschedulable.items()):
        console.print(f"  not admitted: {gang_name}: {reason}", highlight=False)
    for pod_name, reason in sorted(d.waiting_pods.items()):
        console.print(f"  waiting: {pod_name}: {reason}", highlight=False)
    terms = ", ".join(f"{k} {v}" for k, v in d.terms.items() if v)
    objective = "-" if d.objective is None else f"{d.objective}"
    bound = f", bound {d.bound}" if d.bound is not None else ""
    gap = f", gap {d.gap:.2%}" if d.gap is not None else ""
    console.print(
        f"  status {d.status.value}, objective {objective}{bound}{gap}"
        + (f" ({terms})" if terms else "")
        + f", {d.wall_s:.3f} s",
        highlight=False,
    )


def _summary(console: Console, label: str, outcomes: list[Outcome]) -> None:
    table = Table(title=f"Summary: {label}", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("scheduler", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for column in ("admitted", "deadlocked", "valid", "objective", "wall s"):
        table.add_column(column, justify="right", no_wrap=True)
    for o in outcomes:
        d = o.decision
        stuck = sum(held for held, _ in o.deadlocked.values())
        table.add_row(
            o.scheduler,
            d.status.value,
            str(len(d.admitted)),
            f"{len(o.deadlocked)} ({stuck} pods)" if o.deadlocked else "0",
            "[red]no[/red]" if o.violations else "yes",
            "-" if d.objective is None else str(d.objective),
            f"{d.wall_s:.3f}",
        )
    console.print(table)
    console.print(
        "admitted: gangs at minMember; deadlocked: gangs left below "
        "minMember (their pods hold slots and never start); valid: no hard rule broken "
        "(solver.validate.check), so the decision may be bound.",
        style="dim",
    )


@app.command()
def run(
    scenario: Annotated[
        str,
        typer.Option(
            "--scenario",
            help="A packaged scenario (seed-deadlock) or the path of a state JSON file.",
        ),
    ] = DEFAULT_SCENARIO,
    time_limit: TimeLimitOption = None,
) -> None:
    """Run greedy, gang-greedy and cpsat on a scenario and show what each decides.

    No cluster is needed. The default scenario is the seed deadlock: 3 nodes of 2 pod
    slots and two gangs of 6 pods arriving interleaved; only one gang can run.
    """
    try:
        config = make_config(time_limit_s=time_limit)
        state, label = load_scenario(scenario)
    except BadInput as e:
        _fail(e.lines)
    console = Console(highlight=False, soft_wrap=True)
    pending = len(state.pending_pods())
    console.print(
        f"[bold]{label}[/bold]: {len(state.nodes)} nodes, {len(state.gangs)} gangs, "
        f"{pending} pending and {len(state.pods) - pending} bound pods"
    )
    outcomes = []
    for name in RUN_ORDER:
        outcome = evaluate(state, name, config)
        outcomes.append(outcome)
        _report(console, state, outcome)
    console.print()
    _summary(console, label, outcomes)


def main() -> None:  # pragma: no cover - `python -m adapter.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
