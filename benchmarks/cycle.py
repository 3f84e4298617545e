"""What one scheduling cycle costs on a big cluster, phase by phase, without a server.

    gangsat-bench cycle [--nodes 5000] [--bound 40000] [--pending 2000] [--gang-size 4]
                        [--cycles 6] [--time-limit 1]
    gangsat-bench cycle --real [--seed 0] [--nodes 5000] [--gangs 7500] [--cycles 6]
    gangsat-bench cycle --real --perf [--seed 0] [--nodes 5000] [--cycles 6]

The Kubernetes adapter's cluster (``KubeCluster``: cache, conversion, binder, reporter)
is filled directly with objects as an API server stores them — nodes as a cloud's
kubelet reports them with two DaemonSet pods each, PodGroups of ``--gang-size`` pods in
three weighted Queues, ``--bound`` of their pods running and ``--pending`` waiting; with
``--real``, the solver benchmark's real-shaped instance of that size
(``benchmarks.instances.realistic``: node groups, GPU taints, running jobs on part of
the cluster, pending gangs with selectors, affinity and tolerations; with ``--perf``,
the scheduler_perf gangs on such nodes, ``realistic_perf``), written as the
objects an API server would store for it (``benchmarks.api_objects``) — and
``run_cycle`` runs ``--cycles`` times, with no automatic collection inside and the heap
collected and frozen after each, as the loop's ``HeapKeeper`` does. Binds answer at once
without a server and the pods stay pending, so every cycle decides the same backlog on
the same cluster: the steady state of a scheduler whose cluster changes little from one
cycle to the next.

Printed: the first cycle (nothing memoised yet, as after a start), the median of the
others and the slowest of them by snapshot and decision, by phase (snapshot, decision,
binding, report), with each decision's objective and gap to its bound (the median
row's are of one cycle, the median by objective). Not modelled: the watches, the
requests and the API server's CPU on the same cores (``bind-throughput``, ``restart``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from rich.console import Console
from rich.table import Table

from adapter.kube.cluster import KubeCluster
from adapter.kube.heap import HeapKeeper
from adapter.kube.resources import DIALECTS, NODES, PODS, PRIORITY_CLASSES, Resource
from adapter.loop import LoopSettings, run_cycle
from adapter.results import CycleResult
from benchmarks import instances
from benchmarks.api_objects import api_objects
from benchmarks.churn import GROUP, QUEUES, VERSION, pod_manifest
from benchmarks.footprint import DAEMONS_PER_NODE, daemon_pod, node_manifest
from benchmarks.gangsat_process import SCHEDULER
from benchmarks.suite import at_least_one, count, positive
from solver.config import SolverConfig
from solver.model import ClusterState

NAMESPACE = "batch"
PODGROUPS, QUEUE_OBJECTS, VOLCANO_PODGROUPS, VOLCANO_QUEUES = (
    next(r for r in DIALECTS if r.group == group and r.kind == kind)
    for group in (GROUP, "scheduling.volcano.sh")
    for kind in ("PodGroup", "Queue")
)


def stored(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """``obj`` as an API server returns it: with a uid, a resourceVersion, a creation time."""
    metadata = {
        **obj["metadata"],
        "uid": uid,
        "resourceVersion": "1",
        "creationTimestamp": "2026-12-01T00:00:00Z",
    }
    return {**obj, "metadata": metadata}


def filled(objects: dict[Resource, list[dict[str, Any]]]) -> KubeCluster:
    """A cluster whose cache holds ``objects``, binds answered at once without a server."""
    api = client.ApiClient()  # never called
    kube = KubeCluster(api, (SCHEDULER,), resources=list(objects))
    for resource, listed in objects.items():
        kube.cache.replace(resource, listed)
    kube.bind = lambda placements: {}  # type: ignore[method-assign]
    return kube


def real_cluster(state: ClusterState) -> KubeCluster:
    """A real-shaped instance (``instances.realistic``), as objects."""
    objects = api_objects(state, SCHEDULER)
    return filled(
        {
            NODES: objects.nodes,
            PODS: objects.pods,
            VOLCANO_PODGROUPS: objects.podgroups,
            VOLCANO_QUEUES: objects.queues,
            PRIORITY_CLASSES: objects.priority_classes,
        }
    )


def cluster(nodes: int, bound: int, pending: int, size: int) -> KubeCluster:
    node_objects = [stored(node_manifest(i), f"node-{i}") for i in range(nodes)]
    names = [n["metadata"]["name"] for n in node_objects]
    pods = [
        stored(daemon_pod(name, d), f"daemon-{d}-{i}")
        for i, name in enumerate(names)
        for d in range(DAEMONS_PER_NODE)
    ]
    queues = sorted(QUEUES)
    groups = []
    for g in range(-(-(bound + pending) // size)):
        name, queue = f"job-{g}", queues[g % len(queues)]
        body: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"minMember": size, "queue": queue},
        }
        groups.append(stored(body, f"pg-{g}"))
        for i in range(size):
            k = g * size + i
            if k >= bound + pending:
                break
            pod = pod_manifest(name, i, "500m", NAMESPACE)
            if k < bound:
                pod["spec"]["nodeName"] = names[k % nodes]
                pod["status"] = {"phase": "Running"}
            pods.append(stored(pod, f"pod-{k}"))
    queue_objects = [
        stored(
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"weight": weight},
            },
            f"queue-{name}",
        )
        for name, weight in QUEUES.items()
    ]
    return filled(
        {NODES: node_objects, PODS: pods, PODGROUPS: groups, QUEUE_OBJECTS: queue_objects}
    )


def phases(result: CycleResult) -> list[float]:
    rest = result.total_s - result.snapshot_s - result.decide_s - result.bind_s - result.report_s
    parts = [result.snapshot_s, result.decide_s, result.bind_s, result.report_s, rest]
    return [1000 * s for s in (*parts, result.total_s)]


def scores(result: CycleResult) -> list[float]:
    """The decision's objective and its gap to its bound, in percent (nan where none)."""
    decision = result.decision
    objective = decision.objective if decision is not None else None
    gap = decision.gap if decision is not None else None
    return [
        math.nan if objective is None else float(objective),
        math.nan if gap is None else 100 * gap,
    ]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench cycle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", type=at_least_one, default=5000)
    parser.add_argument("--bound", type=count, default=40000, help="running pods of gangs")
    parser.add_argument("--pending", type=count, default=2000, help="pods waiting")
    parser.add_argument("--gang-size", type=at_least_one, default=4)
    parser.add_argument(
        "--real",
        action="store_true",
        help="the solver benchmark's real-shaped instance instead (--bound, --pending and "
        "--gang-size do not apply)",
    )
    parser.add_argument("--seed", type=count, default=0, help="of the --real instance")
    parser.add_argument(
        "--perf",
        action="store_true",
        help="with --real: the scheduler_perf gang shapes on those nodes, 3 gangs of 3 per 5 "
        "nodes and 9 of a fifth of the node count (the solver benchmark's real-perf-5000 "
        "at 5,000 nodes; --gangs does not apply)",
    )
    parser.add_argument(
        "--gangs", type=count, default=None, help="of the --real instance (default 1.5 per node)"
    )
    parser.add_argument("--cycles", type=at_least_one, default=6)
    parser.add_argument("--time-limit", type=positive, default=1.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    # Piped, the table keeps its columns rather than wrapping them to 80 characters.
    console = console or (Console() if sys.stdout.isatty() else Console(width=160))
    if args.perf and not args.real:
        console.print("--perf needs --real: it is a shape of the real-shaped instance")
        return 2
    if args.real:
        if args.perf:
            of_3, large = args.nodes * 3 // 5, (9, max(1, args.nodes // 5))
            state = instances.realistic_perf(args.seed, args.nodes, of_3, (large,))
            shapes = f"the scheduler_perf gangs ({of_3:,} of 3, 9 of {large[1]:,})"
        else:
            gangs = args.gangs if args.gangs is not None else args.nodes * 3 // 2
            state = instances.realistic(args.seed, args.nodes, gangs)
            shapes = f"{gangs:,} gangs"
        kube = real_cluster(state)
        running = sum(1 for p in state.pods if p.node_name is not None)
        title = (
            f"A cycle on the real-shaped instance of {args.nodes:,} nodes x {shapes}, "
            f"seed {args.seed}: {running:,} pods running, {len(state.pending_pods()):,} "
            "pending (in-process, synthetic, no API server)"
        )
        del state  # the cluster's cache holds what the cycles read
    else:
        kube = cluster(args.nodes, args.bound, args.pending, args.gang_size)
        daemons = args.nodes * DAEMONS_PER_NODE
        title = (
            f"A cycle at {args.nodes:,} nodes: {args.bound:,} gang pods and {daemons:,} "
            f"DaemonSet pods running, {args.pending:,} pending (in-process, no API server)"
        )
    settings = LoopSettings(solver=SolverConfig(time_limit_s=args.time_limit))
    heap = HeapKeeper()
    heap.freeze()
    kube.converted = heap.converted  # as the scheduler's cluster is made
    rows = []
    try:
        for _ in range(args.cycles):
            with heap.cycling():  # no automatic collections inside, then settled, as in the loop
                result = run_cycle(kube, settings)
            if result.error:
                console.print(f"cycle failed: {result.error}")
                return 1
            rows.append(phases(result) + scores(result))
    finally:
        heap.release()  # as the scheduler does when it stops: the process may go on
    table = Table(title=title)
    for column in ("cycle", "snapshot ms", "decide ms", "bind ms", "report ms", "rest ms"):
        table.add_column(column, justify="right")
    table.add_column("total ms", justify="right")
    table.add_column("objective", justify="right")
    table.add_column("gap %", justify="right")
    first, later = rows[0], rows[1:]
    table.add_row("first", *_shown(first))
    if later:
        times = [statistics.median(row[i] for row in later) for i in range(len(later[0]) - 2)]
        table.add_row(f"median of {len(later)} after", *_shown([*times, *median_scores(later)]))
        # The solver issue's cycle target is snapshot to decision, at the worst.
        slowest = max(later, key=lambda row: row[0] + row[1])
        table.add_row("slowest after, by snapshot + decide", *_shown(slowest))
    console.print(table)
    return 0


def median_scores(rows: list[list[float]]) -> list[float]:
    """The objective and gap of one cycle, the median by objective (the lower of two):
    each its own median could pair one cycle's objective with another's gap."""
    ranked = sorted(rows, key=lambda row: -math.inf if math.isnan(row[-2]) else row[-2])
    return ranked[(len(ranked) - 1) // 2][-2:]


def _shown(row: list[float]) -> list[str]:
    *times, objective, gap = row
    return [
        *(f"{v:.0f}" for v in times),
        "-" if math.isnan(objective) else f"{objective:,.0f}",
        "-" if math.isnan(gap) else f"{gap:.2f}",
    ]
