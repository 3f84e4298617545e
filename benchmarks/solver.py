"""Run every scheduler on benchmark instances and compare them in one table.

    python -m benchmarks.solver [--instances real-40,real-200] [--time-limit 1.0]
                                [--seed 0 | --seeds 0,1,2] [--runs 1] [--follow 0]
                                [--preemption]
                                [--json out.json]

Per instance the build time and ``prepare()`` time are printed; per scheduler one row:
pending pods, model size (sum of ``StageReport.variables``), time to first solution
(earliest ``first_solution_s`` over the stages), objective, bound, gap, wall time
(measured here, around the call), the time to explain why gangs wait, placed pods,
admitted gangs, status, the stage that produced the decision (``Decision.decided_by``),
with ``--preemption`` (pending gangs may evict running ones: ``SolverConfig.preemption``)
the pods evicted and the pods nominated into the room they free, what the validator
(``solver.validate.check``, the rules the loop checks before it binds, preemption's too)
finds wrong with the decision, outside the time measured: its partial gangs, and every
other broken rule, and the ratio
of the objective to gang-greedy's objective on the same instance (only when
gang-greedy's is positive: against a negative one a better objective reads as a ratio
below 1) and the difference from it (always).

With several seeds or runs (each scheduler solving the same instance again: CP-SAT's
wall-clock limits make runs differ), a summary follows: per instance and scheduler, the
median and worst gap, the median and 99th-percentile (nearest rank) wall time, the
lowest and median ratio to gang-greedy, and how many decisions the validator refused
(also ``refused`` in each JSON result).

Each call runs as the scheduling loop makes it (``adapter.loop``, ``adapter.kube.heap``):
why each gang not admitted waits is worked out after the decision (the loop does it once
the binds are sent), the instance's objects are frozen out of the garbage collector's
sight, as the loop freezes its snapshot (otherwise the wall time counted full
collections over the whole instance that the loop never makes: 0.1-0.15 s of a
real-shaped 1,000-node cycle), and no automatic collection runs during the call, as
none runs during the loop's cycle (``HeapKeeper.cycling``); what the call left is
collected after it, outside the time measured.

``--follow N`` then binds cpsat's decision (``ClusterState.with_bindings``, as the
loop's cache holds it before any watch shows it) and runs every scheduler again on what
is left, N times, one run each: a backlog larger than the cluster is decided whole once,
when it arrives on free nodes, and then again every cycle on a full cluster. Nothing
finishes in between (no pod leaves), so the follow-ups are the cycles of a backlog on a
cluster that stays full. Only placements are bound: with ``--preemption`` the evicted
pods keep running and the nominated ones stay pending, so the follow-ups are not the
loop's next cycles there; and a decision the validator refused is bound all the same
(the loop would bind none of it; the run's exit status already says so).

Schedulers come from ``solver.schedulers.SCHEDULERS`` (name -> ``callable(state,
config) -> Decision``), imported when the benchmark runs. ``--seed`` seeds both the
instance generators and CP-SAT (``SolverConfig.seed``).

Exit status: 0 when every scheduler returned a decision that breaks no rule; 1 when one
raised (its row shows the error and the others still run) or returned a decision the
validator refuses (each finding is printed), but for the partial gangs of ``greedy``,
which places pods one at a time as kube-scheduler does: they are what it is there to
show; 2 on bad arguments or when ``solver.schedulers`` cannot be imported.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from adapter.kube.heap import collections_paused
from benchmarks import instances
from benchmarks.solver_tables import (
    BASELINE,
    InstanceResult,
    Row,
    decision_row,
    instance_table,
    results_table,
    summary_table,
)
from solver.config import SolverConfig
from solver.decision import Decision
from solver.model import ClusterState
from solver.problem import prepare
from solver.validate import check

Scheduler = Callable[[ClusterState, SolverConfig], Decision]
# The scheduler whose decisions ``--follow`` binds (the loop's; else the first one run).
FOLLOWED = "cpsat"

INSTANCES: dict[str, Callable[[int], ClusterState]] = {
    "reference": lambda seed: instances.reference(seed),
    "large": lambda seed: instances.large(seed),
    "perf-small": lambda seed: instances.scheduler_perf(500, 300, ((3, 100),)),
    "perf": lambda seed: instances.scheduler_perf(),
    "perf-15k": lambda seed: instances.scheduler_perf(5000, 5000),
    "deadlock": lambda seed: instances.seed_deadlock(),
    "real-40": lambda seed: instances.realistic(seed, 40, 60),
    "real-200": lambda seed: instances.realistic(seed, 200, 300),
    "real-1000": lambda seed: instances.realistic(seed, 1000, 1500),
    # Tens of thousands of pending pods: 21,000 at 2,000 nodes, 55,000 at 5,000.
    "real-2000": lambda seed: instances.realistic(seed, 2000, 3000),
    "real-5000": lambda seed: instances.realistic(seed, 5000, 7500),
    # Three gangs per node, twice as many as real-200 and real-1000: pending work of about
    # 2.6-4x the free room (theirs: 1.3-2x), most of it left waiting.
    "real-200-heavy": lambda seed: instances.realistic(seed, 200, 600),
    "real-500-heavy": lambda seed: instances.realistic(seed, 500, 1500),
    "real-perf-5000": lambda seed: instances.realistic_perf(seed, 5000, 3000, ((9, 1000),)),
    # A third of the multi-pod gangs asking a node per pod (anti-affinity per hostname).
    "real-200-apart": lambda seed: instances.realistic_apart(seed, 200, 300),
    "real-1000-apart": lambda seed: instances.realistic_apart(seed, 1000, 1500),
    # ... or spreading them at most two a node (topology spread per hostname, maxSkew 2).
    "real-200-spread": lambda seed: instances.realistic_spread(seed, 200, 300),
    "real-1000-spread": lambda seed: instances.realistic_spread(seed, 1000, 1500),
    # ... or spreading them over the zones (topology spread per zone, maxSkew 1).
    "real-200-spread-zones": lambda seed: instances.realistic_zone_spread(seed, 200, 300),
    "real-1000-spread-zones": lambda seed: instances.realistic_zone_spread(seed, 1000, 1500),
    "real-200-zone": lambda seed: instances.realistic_together(seed, 200, 300),
    "real-1000-zone": lambda seed: instances.realistic_together(seed, 1000, 1500),
}
"""Named instances; the scheduler_perf and deadlock ones ignore the seed."""
# The solver issue's targets: real-shaped 40 x 60 gangs, 200 x 300, 1,000 x 1,500, and the
# scheduler_perf gangs on 5,000 nodes.
DEFAULT_INSTANCES = "real-40,real-200,real-1000,real-perf-5000"


def load_schedulers() -> dict[str, Scheduler]:
    module = importlib.import_module("solver.schedulers")
    schedulers: Mapping[str, Scheduler] = module.SCHEDULERS
    return dict(schedulers)


def run_instance(
    name: str,
    state: ClusterState,
    schedulers: Mapping[str, Scheduler],
    config: SolverConfig,
    decisions: dict[str, Decision] | None = None,
) -> list[Row]:
    """One row per scheduler, in ``schedulers`` order; ratios against gang-greedy. Each
    scheduler's decision also goes into ``decisions``, where given (``--follow``)."""
    pending = len(state.pending_pods())
    rows: list[Row] = []
    for sched_name, schedule in schedulers.items():
        start = time.perf_counter()
        try:
            with collections_paused():  # as the loop runs a cycle (``HeapKeeper.cycling``)
                decision = schedule(state, config)
        except Exception as exc:  # a crashing scheduler is a result, not the end of the run
            wall = time.perf_counter() - start
            traceback.print_exc(file=sys.stderr)
            rows.append(
                Row(name, sched_name, pending, wall_s=wall, status="ERROR", error=repr(exc))
            )
            continue
        wall = time.perf_counter() - start
        gc.collect()  # what the call left, as the loop's ``HeapKeeper.settle`` after a cycle
        start = time.perf_counter()
        decision = decision.explained()
        explain_s = time.perf_counter() - start
        violations = check(state, decision)
        row = decision_row(name, sched_name, pending, decision, wall, explain_s, violations)
        if row.refused():
            row.findings = [f"{v.kind}: {v.message}" for v in violations]
            for finding in row.findings:
                print(f"{name} seed {config.seed} {sched_name}: {finding}", file=sys.stderr)
        rows.append(row)
        if decisions is not None:
            decisions[sched_name] = decision
    baseline = next((r.objective for r in rows if r.scheduler == BASELINE), None)
    for row in rows:
        if row.objective is None or baseline is None:
            continue
        row.minus_baseline = row.objective - baseline
        # A ratio only reads right against a positive baseline: against a negative one,
        # a better (higher) objective would show as a ratio below 1.
        if baseline > 0:
            row.vs_baseline = row.objective / baseline
    return rows


@contextmanager
def frozen() -> Iterator[None]:
    """Every object alive now (the instance just built) out of the collector's sight while
    the schedulers run on it, as the scheduling loop keeps its snapshot
    (``adapter.kube.heap``); what the runs leave is collected as usual, and the instance
    once the runs are over."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--seeds: {exc}") from exc
    if not seeds or any(seed < 0 for seed in seeds):
        raise argparse.ArgumentTypeError("--seeds: comma-separated seeds >= 0")
    return seeds


def _names(text: str, known: Sequence[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what}: {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(known)}"
        )
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.solver",
        description="Run every scheduler on benchmark instances and compare them.",
    )
    # Real-shaped by default: the unlabelled instances hid that cpsat added nothing on
    # nodes labelled as kubelets label them; they stay as comparison rows, asked for.
    parser.add_argument(
        "--instances",
        default=DEFAULT_INSTANCES,
        help=f"comma-separated, from: {', '.join(INSTANCES)} (default: {DEFAULT_INSTANCES})",
    )
    parser.add_argument(
        "--schedulers",
        default=None,
        help="comma-separated scheduler names (default: all in solver.schedulers.SCHEDULERS)",
    )
    parser.add_argument(
        "--time-limit", type=float, default=1.0, help="SolverConfig.time_limit_s (default 1.0)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="instance seed and CP-SAT seed (default 0)"
    )
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds, each as --seed would be (replaces --seed)",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="solves of each instance per scheduler (default 1)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=SolverConfig().num_workers,
        help=f"CP-SAT workers, 0 = all cores (default {SolverConfig().num_workers})",
    )
    parser.add_argument(
        "--follow",
        type=int,
        default=0,
        help=(
            f"then bind {FOLLOWED}'s decision (of the last run) and decide again, this many "
            "times: the cycles a loop runs next on what is left of the backlog; rows "
            "named <instance>+1, +2, ... (default 0)"
        ),
    )
    parser.add_argument(
        "--preemption",
        action="store_true",
        help=(
            "SolverConfig.preemption: pending gangs may evict running ones (placement's "
            "share of the limit shrinks by preemption_time_share)"
        ),
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    return parser.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    schedulers: Mapping[str, Scheduler] | None = None,
    console: Console | None = None,
) -> int:
    args = parse_args(argv)
    if console is None:
        # Piped output (CI logs, tee) gets a wide table instead of 80-column truncation.
        console = Console() if sys.stdout.isatty() else Console(width=300)
    try:
        instance_names = _names(args.instances, list(INSTANCES), "instance")
        if args.time_limit <= 0:
            raise argparse.ArgumentTypeError("--time-limit must be positive")
        if args.runs < 1:
            raise argparse.ArgumentTypeError("--runs must be at least 1")
        if args.follow < 0:
            raise argparse.ArgumentTypeError("--follow must be at least 0")
        seeds = _seeds(args.seeds) if args.seeds is not None else [args.seed]
        config = SolverConfig(
            time_limit_s=args.time_limit,
            seed=seeds[0],
            num_workers=args.workers,
            defer_explanations=True,
            preemption=args.preemption,
        )
        if schedulers is None:
            try:
                schedulers = load_schedulers()
            except (ImportError, AttributeError) as exc:
                console.print(f"[red]cannot load solver.schedulers.SCHEDULERS: {exc}[/red]")
                return 2
        if args.schedulers is not None:
            chosen = _names(args.schedulers, list(schedulers), "scheduler")
            schedulers = {n: schedulers[n] for n in chosen}
    except (argparse.ArgumentTypeError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        return 2

    built: list[InstanceResult] = []
    rows: list[Row] = []
    for seed, name in ((seed, name) for seed in seeds for name in instance_names):
        start = time.perf_counter()
        state = INSTANCES[name](seed)
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        prepare(state)
        prepare_s = time.perf_counter() - start
        result = InstanceResult(
            instance=name,
            nodes=len(state.nodes),
            pods=len(state.pods),
            pending_pods=len(state.pending_pods()),
            gangs=len(state.gangs),
            build_s=build_s,
            prepare_s=prepare_s,
        )
        built.append(result)
        console.print(
            f"{name} (seed {seed}): {result.nodes:,} nodes, {result.pending_pods:,} pending "
            f"pods, built in {build_s:.3f} s, prepare() {prepare_s:.3f} s"
        )
        seeded = config.model_copy(update={"seed": seed})
        decisions: dict[str, Decision] = {}
        with frozen():
            for run in range(args.runs):
                for row in run_instance(name, state, schedulers, seeded, decisions):
                    row.seed, row.run = seed, run
                    rows.append(row)
        for step in range(1, args.follow + 1):
            bound = decisions.get(FOLLOWED) or next(iter(decisions.values()), None)
            if bound is None or not bound.placements:
                break  # nothing bound: the next cycle would decide the same backlog
            state = state.with_bindings(bound.placements)
            decisions = {}
            with frozen():
                for row in run_instance(f"{name}+{step}", state, schedulers, seeded, decisions):
                    row.seed = seed
                    rows.append(row)

    console.print(instance_table(built))
    console.print(results_table(rows, args.time_limit))
    if len(seeds) * args.runs > 1:
        console.print(summary_table(rows))
    if args.json is not None:
        payload = {
            "time_limit_s": args.time_limit,
            "seeds": seeds,
            "runs": args.runs,
            "workers": config.workers(),
            "preemption": config.preemption,
            "instances": [asdict(r) for r in built],
            "results": [{**asdict(r), "refused": r.refused()} for r in rows],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 1 if any(r.error is not None or r.refused() for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
