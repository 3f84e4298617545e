"""The ``gangsat`` command line: the only entry point users type.

Flow: cluster -> snapshot -> solver (pure) -> decision -> validator -> binder. ``solve``
decides one snapshot read from a JSON file (a ``solver.model.ClusterState``) and prints
the ``Decision``; ``run`` drives the scheduling loop (``adapter.loop``) on the simulated
cluster (``adapter.sim``) for each scheduler and logs what happens (``adapter.runlog``).

    gangsat solve STATE.json [--scheduler cpsat|greedy|gang-greedy] [--time-limit S]
                             [--seed N] [--workers N]
    gangsat solve --manifests FILE.yaml [--manifests FILE ...] [--scheduler-name NAME ...] [...]
    gangsat schema [state|decision]
    gangsat run [--scenario NAME|SCENARIO.json] [--scheduler S ...] [--time-limit S]
                [--detail/--brief] [--json OUT.json]
    gangsat run --kubeconfig PATH [--settings FILE] [--metrics-port N]
                [--leader-elect/--no-leader-elect] [--lease-namespace NS] [--cycles N]
    gangsat version

Exit status: 0 on success; 2 on bad arguments or a bad input file (missing, unreadable,
not JSON, or not a valid state or scenario), reported on stderr one line per problem
with the path of the offending field, never as a traceback. ``run`` on a cluster: 1 when
the leader lease was lost (the Deployment restarts it), 3 when the API server cannot be
reached or its watches never list.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from adapter.cli_kube import LogLevel, kube_style, run_cluster
from adapter.errors import message
from adapter.inputs import BadInput, read_objects, read_state
from adapter.kube.convert import convert
from adapter.kube.run import in_cluster
from adapter.kube.source import SourceError, cluster_source
from adapter.loop import LoopSettings
from adapter.metrics import installed_version
from adapter.runlog import ABOUT, EVICTED_GLOSSARY, GLOSSARY, RunLog, summary_table
from adapter.settings import Settings, SettingsError
from adapter.sim.measures import summarise
from adapter.sim.run import simulate
from adapter.sim.scenario import ScenarioError, load_scenario, materialise, scenario_names
from solver.config import SolverConfig
from solver.decision import Decision
from solver.model import ClusterState
from solver.schedulers import SCHEDULERS, schedule

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
DEFAULT_SCENARIO = "seed-deadlock"
RUN_ORDER = ("greedy", "gang-greedy", "cpsat")
DETAIL_MAX_JOBS = 30
CONFIG_OPTION = {"time_limit_s": "--time-limit", "seed": "--seed", "num_workers": "--workers"}
# ``run``'s options that only a real cluster reads (parameter -> flag), refused in a
# simulation where given.
CLUSTER_ONLY = {
    "cycles": "--cycles",
    "scheduler_names": "--scheduler-name",
    "metrics_port": "--metrics-port",
    "leader_elect": "--leader-elect",
    "lease_namespace": "--lease-namespace",
    "lease_name": "--lease-name",
    "sync_timeout": "--sync-timeout",
    "log_level": "--log-level",
    "log_format": "--log-format",
}


def _fail(lines: list[str]) -> NoReturn:
    for line in lines:
        typer.echo(f"gangsat: {line}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


# --- reading a state --------------------------------------------------------------------


def make_config(base: SolverConfig | None = None, **given: Any) -> SolverConfig:
    """``SolverConfig`` from the options the user gave, over ``base`` (a settings file's);
    bad values name the option."""
    fields = base.model_dump() if base is not None else {}
    try:
        return SolverConfig(**{**fields, **{k: v for k, v in given.items() if v is not None}})
    except ValidationError as e:
        raise BadInput(
            [
                f"{CONFIG_OPTION.get(str(err['loc'][0]), err['loc'][0])}: {message(err)}"
                for err in e.errors(include_url=False)
            ]
        ) from None


# --- commands ---------------------------------------------------------------------------

SchedulerName = Literal["cpsat", "greedy", "gang-greedy"]  # = SCHEDULERS' keys (tested)
TIME_LIMIT_HELP = (
    "Seconds per decision, preparing it included (in the loop: from the cycle's start)."
)
TimeLimitOption = Annotated[
    float | None,
    typer.Option("--time-limit", "-t", help=TIME_LIMIT_HELP, show_default="1.0"),
]


@app.command()
def solve(
    state_file: Annotated[
        Path | None,
        typer.Argument(
            metavar="[STATE.json]", help="A ClusterState as JSON (see `gangsat schema state`)."
        ),
    ] = None,
    manifests: Annotated[
        list[Path] | None,
        typer.Option(
            "--manifests",
            help="Kubernetes objects (YAML or JSON; Nodes, Pods, Jobs, PodGroups, Queues, "
            "PriorityClasses in any supported dialect) instead of a state file; "
            "repeatable, all read as one cluster; - reads standard input.",
        ),
    ] = None,
    scheduler_name: Annotated[
        list[str] | None,
        typer.Option(
            "--scheduler-name",
            help="Pending pods naming this spec.schedulerName are ours (repeatable).",
            show_default="gangsat",
        ),
    ] = None,
    scheduler: Annotated[
        SchedulerName | None,
        typer.Option("--scheduler", "-s", help="Which scheduler decides.", show_default="cpsat"),
    ] = None,
    time_limit: TimeLimitOption = None,
    seed: Annotated[int | None, typer.Option(help="CP-SAT random seed.", show_default="0")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="CP-SAT workers; 0 = all cores.",
            show_default=str(SolverConfig.model_fields["num_workers"].default),
        ),
    ] = None,
    settings_file: Annotated[
        Path | None,
        typer.Option(
            "--settings",
            help="Settings YAML, as `gangsat run` reads it: its scheduler, solver "
            "parameters and weights, and schedulerNames (the options above override them).",
        ),
    ] = None,
) -> None:
    """Schedule one snapshot and print the Decision as JSON.

    With `--manifests`, the snapshot is built from Kubernetes objects — an offline "what
    would gangsat do"; objects it cannot use are listed on stderr as warnings.
    """
    try:
        settings = Settings.load(settings_file) if settings_file is not None else None
        config = make_config(
            settings.solver if settings is not None else None,
            time_limit_s=time_limit,
            seed=seed,
            num_workers=workers,
        )
        names = scheduler_name or (settings.scheduler_names if settings else ("gangsat",))
        if (state_file is None) == (not manifests):
            raise BadInput(["give either STATE.json or --manifests FILE, not both or neither"])
        if manifests:
            objects = [o for path in manifests for o in read_objects(path)]
            conversion = convert(objects, names)
            for finding in conversion.findings:
                typer.echo(f"gangsat: warning: {finding}", err=True)
            for note in conversion.ignored:
                typer.echo(f"gangsat: note: {note}", err=True)
            state = conversion.state
            if not state.nodes and state.pods:
                # Else each gang read "0/0 nodes are available", and nothing said why.
                typer.echo(
                    "gangsat: note: no Node in the manifests, so every pod waits; add the "
                    "cluster's (kubectl get nodes -o yaml > nodes.yaml; --manifests nodes.yaml)",
                    err=True,
                )
        else:
            assert state_file is not None
            state = read_state(state_file)
    except BadInput as e:
        _fail(e.lines)
    except SettingsError as e:
        _fail(str(e).splitlines())
    chosen = scheduler or (settings.scheduler if settings is not None else "cpsat")
    decision = schedule(state, chosen, config)
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
    typer.echo(f"gangsat {installed_version() or '(not installed)'}")


def _version_option(given: bool) -> None:
    if given:
        version()
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version_option, help="Print the version."
        ),
    ] = False,
) -> None:
    """gangsat: a Kubernetes gang scheduler whose every cycle is an exact CP-SAT
    optimisation. Gangs run all-or-nothing; queues share the cluster by weight."""


ScenarioOption = Annotated[
    str | None,
    typer.Option(
        "--scenario",
        help="A packaged scenario (" + ", ".join(scenario_names()) + ") or a scenario file; "
        "always a simulation, never a cluster.",
        show_default=DEFAULT_SCENARIO,
    ),
]


@app.command()
def run(
    ctx: typer.Context,
    scenario: ScenarioOption = None,
    scheduler: Annotated[
        list[str] | None,
        typer.Option(
            "--scheduler", "-s", help="Run only these (repeatable).", show_default="all three"
        ),
    ] = None,
    time_limit: TimeLimitOption = None,
    detail: Annotated[
        bool | None,
        typer.Option(
            "--detail/--brief",
            help="Every event and gang, or one line per cycle.",
            show_default="detail up to 30 jobs",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the run summaries here.")
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Schedule this cluster's pods (spec.schedulerName in the settings' "
            "schedulerNames) instead of simulating; so does a KUBECONFIG variable.",
            rich_help_panel="Real cluster",
        ),
    ] = None,
    in_cluster_flag: Annotated[
        bool,
        typer.Option(
            "--in-cluster",
            help="Schedule the cluster this pod runs in, with its service account (the "
            "Deployment passes it; a service account alone never makes gangsat schedule).",
            rich_help_panel="Real cluster",
        ),
    ] = False,
    settings_file: Annotated[
        Path | None,
        typer.Option(
            "--settings",
            help="Settings YAML (scheduler names, cycle period, solver, weights); re-read "
            "when it changes.",
            rich_help_panel="Real cluster",
        ),
    ] = None,
    metrics_port: Annotated[
        int,
        typer.Option(
            help="Port of /metrics, /healthz, /readyz.",
            min=0,
            max=65535,
            rich_help_panel="Real cluster",
        ),
    ] = 8080,
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect/--no-leader-elect",
            help="Only the holder of the Lease binds.",
            rich_help_panel="Real cluster",
        ),
    ] = True,
    lease_namespace: Annotated[
        str | None,
        typer.Option(
            help="Namespace of the Lease.",
            show_default="the pod's namespace, else gangsat-system",
            rich_help_panel="Real cluster",
        ),
    ] = None,
    lease_name: Annotated[
        str, typer.Option(help="Name of the Lease.", rich_help_panel="Real cluster")
    ] = "gangsat",
    sync_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds from start for the first list of every watched resource; past "
            "them gangsat exits (raise it, and the Deployment's startupProbe with it, for "
            "very large clusters).",
            min=1,
            max=3600,
            rich_help_panel="Real cluster",
        ),
    ] = 60.0,
    scheduler_names: Annotated[
        list[str] | None,
        typer.Option(
            "--scheduler-name",
            help="Schedule the pending pods naming this spec.schedulerName (repeatable; "
            "overrides the settings' schedulerNames).",
            rich_help_panel="Real cluster",
        ),
    ] = None,
    log_level: Annotated[
        LogLevel,
        typer.Option(help="Least severe log records shown.", rich_help_panel="Real cluster"),
    ] = "info",
    log_format: Annotated[
        Literal["text", "json"],
        typer.Option(
            help="Log lines as text, or one JSON object each.", rich_help_panel="Real cluster"
        ),
    ] = "text",
    cycles: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Stop after this many cycles.",
            show_default="run until stopped",
            rich_help_panel="Real cluster",
        ),
    ] = None,
) -> None:
    """Run the scheduling loop: on the simulated cluster (default), or on a real one.

    Simulated, no cluster is needed: the default scenario is the seed talk's deadlock, 3
    nodes and two jobs of 6 pods that each need all 6 running. Each cycle's decisions
    and the jobs' lives are logged; a summary compares the schedulers.

    With `--kubeconfig`, a KUBECONFIG variable, or `--in-cluster`, gangsat is that
    cluster's gang scheduler until stopped.
    """
    try:
        source = cluster_source(
            kubeconfig, in_cluster_flag, scenario is not None, os.environ, in_cluster()
        )
    except SourceError as e:
        _fail([str(e)])
    if source is not None:
        try:
            status = run_cluster(
                source,
                (log_level, log_format),
                scheduler_names,
                settings_file,
                metrics_port,
                leader_elect,
                lease_namespace,
                lease_name,
                cycles,
                scheduler,
                time_limit,
                sync_timeout,
            )
        except BadInput as e:
            _fail(e.lines)
        raise typer.Exit(status)
    # Accepted and ignored, --cycles 1 ran every cycle of the scenario, and --metrics-port
    # served nothing.
    # (By name: typer's click and click's are two enums of sources.)
    cluster_flags = [
        flag
        for name, flag in CLUSTER_ONLY.items()
        if (how := ctx.get_parameter_source(name)) is not None and how.name != "DEFAULT"
    ]
    if cluster_flags:
        flags = ", ".join(cluster_flags)
        _fail([f"{flags}: for a real cluster only (--kubeconfig, --in-cluster)"])
    try:
        # A settings file is honoured in simulation too: its solver parameters and weights
        # are what a cluster would run with (--time-limit still overrides).
        base = Settings.load(settings_file).solver if settings_file is not None else None
        config = make_config(base, time_limit_s=time_limit)
        workload = materialise(load_scenario(scenario or DEFAULT_SCENARIO))
    except SettingsError as e:
        _fail(str(e).splitlines())
    except BadInput as e:
        _fail(e.lines)
    except ScenarioError as e:
        _fail(str(e).splitlines())
    names = scheduler or list(RUN_ORDER)
    unknown = [n for n in names if n not in SCHEDULERS]
    if unknown:
        _fail([f"--scheduler: unknown {', '.join(unknown)}; choose from {', '.join(SCHEDULERS)}"])
    if json_out is not None and (
        json_out.is_dir()
        or not json_out.parent.is_dir()
        or not os.access(json_out if json_out.exists() else json_out.parent, os.W_OK)
    ):
        # Said before the runs, not as a traceback after them.
        _fail([f"--json {json_out}: not a file it may write in an existing directory"])
    # A pipe gets 80 columns by default, too narrow for the summary table.
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 120)
    spec = workload.scenario
    pods = sum(len(j.pods) for j in workload.jobs)
    console.print(f"[bold]{escape(spec.name)}[/bold]: {escape(spec.description)}", highlight=False)
    console.print(
        f"{len(workload.nodes)} nodes, {len(workload.jobs)} jobs ({pods} pods), "
        f"{len(workload.queues)} queue(s); a cycle every {spec.settings.cycle_s:g} s of "
        "simulated time",
        highlight=False,
    )
    show_detail = detail if detail is not None else len(workload.jobs) <= DETAIL_MAX_JOBS
    summaries = []
    for name in names:
        about = ABOUT.get(name, "")
        console.rule(f"[bold]{name}[/bold]" + (f" — {about}" if about else ""))
        log = RunLog(console, show_detail)
        result = simulate(
            workload,
            LoopSettings(scheduler=name, solver=config),
            on_cycle=log.cycle_done,
            on_event=log.event,
        )
        log.finished(result)
        summaries.append(summarise(result))
    console.print()
    console.print(summary_table(f"Summary: {escape(spec.name)}", summaries))
    evicted = any(s.evicted_pods for s in summaries)
    console.print(GLOSSARY + (EVICTED_GLOSSARY if evicted else ""), style="dim")
    if json_out is not None:
        try:
            json_out.write_text(
                json.dumps([s.model_dump(mode="json") for s in summaries], indent=2) + "\n",
                encoding="utf-8",
            )
        except OSError as e:
            _fail([f"--json {json_out}: cannot write: {e}"])


def main() -> None:
    """The `gangsat` command."""
    app(args=kube_style(sys.argv[1:]), prog_name="gangsat")


if __name__ == "__main__":  # pragma: no cover
    main()
