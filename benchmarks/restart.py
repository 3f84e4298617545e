"""Start-up at scale: from a scheduler process's start to its first bind, on a big cluster.

    gangsat-bench restart [--kubeconfig PATH] [--nodes 5000] [--gangs 2500] [--gang-size 4]
                          [--repeat 2]

What a restart (a crash, an upgrade, a new leader without warm caches) meets: ``--nodes``
nodes as a cloud's kubelet reports them, each running two DaemonSet pods (bound), and
``--gangs`` PodGroups of ``--gang-size`` pending pods — by default 5,000 nodes and 20,000
pods, half of them bound. gangsat (the real ``KubeScheduler``, no leader election) is
started in a fresh process ``--repeat`` times; each time its pending pods are first
returned to pending (the pods re-created), so every start meets the same cluster.
Printed, from the process's start: the first bind and every pending pod bound, as a
watch of their namespace (in a process of its own) sees them. Target: first bind under
10 s on 2 cores. Import time, the initial lists of every resource, the first snapshot
and decision are all inside the figure.

Without ``--kubeconfig`` the fake API server (``benchmarks.fake_apiserver``) runs in its
own process: it answers lists from memory at once, without a real server's CPU per
object, so a real cluster's lists take longer (figures labelled "fake").
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from rich.console import Console
from rich.table import Table

from adapter.kube.resources import done, read_json
from adapter.kube.run import api_client
from benchmarks.bound_watch import BoundWatcher
from benchmarks.churn import post_gang
from benchmarks.cluster_setup import ensure_namespace, fake_server
from benchmarks.footprint import DAEMONS_PER_NODE, populate_nodes
from benchmarks.gangsat_process import GangsatProcess
from benchmarks.suite import at_least_one, positive

JOBS = "gangsat-restart"  # the pending gangs' namespace: its pods are all gangsat's to bind
THREADS = 8


@dataclass
class Start:
    first_bind_s: float
    all_bound_s: float
    pending: int

    @property
    def pods_per_s(self) -> float:
        bind_s = self.all_bound_s - self.first_bind_s
        return self.pending / bind_s if bind_s > 0 else 0.0


def populate_gangs(api: client.ApiClient, gangs: int, size: int) -> None:
    """The pending gangs, in a namespace of their own (created afresh each round)."""
    core = client.CoreV1Api(api)
    done(
        core.delete_collection_namespaced_pod(JOBS, grace_period_seconds=0, _preload_content=False)
    )
    custom = client.CustomObjectsApi(api)
    done(
        custom.delete_collection_namespaced_custom_object(
            "scheduling.sigs.dev", "v1alpha2", JOBS, "podgroups", _preload_content=False
        )
    )
    ensure_namespace(api, JOBS)

    def make(g: int) -> None:
        post_gang(api, f"job-{g}", size, "churn-a", "250m", namespace=JOBS)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(make, range(gangs)))


def bound_now(api: client.ApiClient, namespace: str) -> int:
    listed = read_json(client.CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))
    return sum(1 for p in listed["items"] if (p.get("spec") or {}).get("nodeName"))


def start_once(kubeconfig: Path, pending: int, timeout_s: float) -> Start:
    first = BoundWatcher(kubeconfig, JOBS, 1)
    every = BoundWatcher(kubeconfig, JOBS, pending)
    gangsat = GangsatProcess(kubeconfig)
    started = time.time()
    gangsat.start()
    try:
        first_at = first.wait(timeout_s)
        all_at = every.wait(timeout_s)
    finally:
        gangsat.stop()
    return Start(first_at - started, all_at - started, pending)


def run(args: argparse.Namespace, kubeconfig: Path, console: Console) -> list[Start]:
    api = api_client(kubeconfig)
    console.print(f"setting up {args.nodes} nodes with {DAEMONS_PER_NODE} DaemonSet pods each ...")
    populate_nodes(api, args.nodes)
    results = []
    for round_ in range(args.repeat):
        pending = args.gangs * args.gang_size
        console.print(f"round {round_ + 1}: {args.gangs} pending gangs of {args.gang_size} ...")
        populate_gangs(api, args.gangs, args.gang_size)
        if bound_now(api, JOBS):
            raise RuntimeError(f"pods of {JOBS} are bound before gangsat starts")
        results.append(start_once(kubeconfig, pending, args.timeout_s))
    return results


def report(
    args: argparse.Namespace, results: Sequence[Start], console: Console, fake: bool
) -> None:
    pods = args.nodes * DAEMONS_PER_NODE + args.gangs * args.gang_size
    title = (
        f"Start-up: {args.nodes:,} nodes, {pods:,} pods ({args.nodes * DAEMONS_PER_NODE:,} bound)"
        + (" — fake API server" if fake else "")
    )
    table = Table(title=title)
    for column in ("round", "first bind s", "all bound s", "pods/s after the first"):
        table.add_column(column, justify="right")
    for i, r in enumerate(results, 1):
        table.add_row(
            str(i), f"{r.first_bind_s:.1f}", f"{r.all_bound_s:.1f}", f"{r.pods_per_s:.0f}"
        )
    console.print(table)
    first = statistics.median(r.first_bind_s for r in results)
    console.print(f"first bind: {first:.1f} s median of {len(results)} (target < 10 s)")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench restart", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kubeconfig", type=Path, help="a real cluster (default: the fake)")
    parser.add_argument("--nodes", type=at_least_one, default=5000)
    parser.add_argument("--gangs", type=at_least_one, default=2500)
    parser.add_argument("--gang-size", type=at_least_one, default=4)
    parser.add_argument("--repeat", type=at_least_one, default=2)
    parser.add_argument("--timeout-s", type=positive, default=600.0)
    return parser.parse_args(list(argv))


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or Console()
    if args.kubeconfig is not None:
        report(args, run(args, args.kubeconfig, console), console, fake=False)
        return 0
    with fake_server(0.0) as kubeconfig:
        report(args, run(args, kubeconfig, console), console, fake=True)
    return 0
