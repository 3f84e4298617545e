"""What one scheduling cycle costs on a big cluster, phase by phase, without a server.

    gangsat-bench cycle [--nodes 5000] [--bound 40000] [--pending 2000] [--gang-size 4]
                        [--cycles 6] [--time-limit 1]

The Kubernetes adapter's cluster (``KubeCluster``: cache, conversion, binder, reporter)
is filled directly with objects as an API server stores them — nodes as a cloud's
kubelet reports them with two DaemonSet pods each, PodGroups of ``--gang-size`` pods in
three weighted Queues, ``--bound`` of their pods running and ``--pending`` waiting — and
``run_cycle`` runs ``--cycles`` times, with no automatic collection inside and the heap
collected and frozen after each, as the loop's ``HeapKeeper`` does. Binds answer at once
without a server and the pods stay pending, so every cycle decides the same backlog on
the same cluster: the steady state of a scheduler whose cluster changes little from one
cycle to the next.

Printed: the first cycle (nothing memoised yet, as after a start) and the median of the
others, by phase (snapshot, decision, binding, report). Not modelled: the watches, the
requests and the API server's CPU on the same cores (``bind-throughput``, ``restart``).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from rich.console import Console
from rich.table import Table

from adapter.kube.cluster import KubeCluster
from adapter.kube.heap import HeapKeeper
from adapter.kube.resources import DIALECTS, NODES, PODS
from adapter.loop import LoopSettings, run_cycle
from adapter.results import CycleResult
from benchmarks.churn import GROUP, QUEUES, VERSION, pod_manifest
from benchmarks.footprint import DAEMONS_PER_NODE, daemon_pod, node_manifest
from benchmarks.gangsat_process import SCHEDULER
from benchmarks.suite import at_least_one, count, positive
from solver.config import SolverConfig

NAMESPACE = "batch"
PODGROUPS, QUEUE_OBJECTS = (
    next(r for r in DIALECTS if r.group == GROUP and r.kind == kind)
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


def cluster(nodes: int, bound: int, pending: int, size: int) -> KubeCluster:
    api = client.ApiClient()  # never called: binds are answered in-process
    kube = KubeCluster(api, (SCHEDULER,), resources=[NODES, PODS, PODGROUPS, QUEUE_OBJECTS])
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
    kube.cache.replace(NODES, node_objects)
    kube.cache.replace(PODS, pods)
    kube.cache.replace(PODGROUPS, groups)
    kube.cache.replace(QUEUE_OBJECTS, queue_objects)
    kube.bind = lambda placements: {}  # type: ignore[method-assign]
    return kube


def phases(result: CycleResult) -> list[float]:
    rest = result.total_s - result.snapshot_s - result.decide_s - result.bind_s - result.report_s
    parts = [result.snapshot_s, result.decide_s, result.bind_s, result.report_s, rest]
    return [1000 * s for s in (*parts, result.total_s)]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench cycle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", type=at_least_one, default=5000)
    parser.add_argument("--bound", type=count, default=40000, help="running pods of gangs")
    parser.add_argument("--pending", type=count, default=2000, help="pods waiting")
    parser.add_argument("--gang-size", type=at_least_one, default=4)
    parser.add_argument("--cycles", type=at_least_one, default=6)
    parser.add_argument("--time-limit", type=positive, default=1.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or Console()
    kube = cluster(args.nodes, args.bound, args.pending, args.gang_size)
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
            rows.append(phases(result))
    finally:
        heap.release()  # as the scheduler does when it stops: the process may go on
    daemons = args.nodes * DAEMONS_PER_NODE
    table = Table(
        title=f"A cycle at {args.nodes:,} nodes: {args.bound:,} gang pods and {daemons:,} "
        f"DaemonSet pods running, {args.pending:,} pending (in-process, no API server)"
    )
    for column in ("cycle", "snapshot ms", "decide ms", "bind ms", "report ms", "rest ms"):
        table.add_column(column, justify="right")
    table.add_column("total ms", justify="right")
    first, later = rows[0], rows[1:]
    table.add_row("first", *(f"{v:.0f}" for v in first))
    if later:
        medians = [statistics.median(column) for column in zip(*later, strict=True)]
        table.add_row(f"median of {len(later)} after", *(f"{v:.0f}" for v in medians))
    console.print(table)
    return 0
