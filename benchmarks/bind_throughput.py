"""Bind throughput end to end: gangsat vs a trivial round-robin binder, same server, same run.

    gangsat-bench bind-throughput [--kubeconfig PATH] [--nodes 1000] [--gangs 1000]
                                  [--gang-size 3] [--also COUNTxSIZE,...] [--threads 16]
                                  [--latency-ms 0] [--cpu-ms 0] [--pod-shape minimal|job]
                                  [--repeat 3]

Binding is where a scheduler meets the API server's limit. Both contenders face pods
that are already present and must bind them all:

- *trivial*: lists its pending pods once and binds them round-robin over the nodes
  from ``--threads`` threads (no decisions, no gangs, no watch): the server's ceiling
  for this client;
- *gangsat*: the real scheduler (``adapter.kube.run.KubeScheduler``, no leader
  election) from start-up — initial lists, caches, CP-SAT decisions over every gang,
  all-or-nothing binding, status and Event writes — until every pod is bound.

Each is timed from its start until a watch of its namespace (in a process of its own,
so it slows neither) has seen every pod bound;
the figure is pods per second and gangsat's ratio to the trivial binder in the same
round, the median over ``--repeat`` rounds (target: at least 0.8), and the CPU each
spent per bound pod (this process's CPU until every pod was seen bound, read by the
watching process at that moment; target: gangsat at most 1.25x).
Without ``--kubeconfig`` the fake API server (``benchmarks.fake_apiserver``) runs in its
own process, so it does not share the interpreter with the clients, and its CPU per pod
is reported too. A sleeping server does not model what limits a real one on a small
machine: ``--cpu-ms`` makes every request burn that much CPU on the same cores (a real
kube-apiserver and etcd spend about 1-2 ms per bind), so the scheduler's own CPU is
taken from the server as it would be; ``--latency-ms`` adds a per-request delay.
Each contender gets its own namespace and scheduler name, so neither sees the other's
pending pods; the nodes are shared and large enough for both.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import queue
import statistics
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from kubernetes import client
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from adapter.kube.binder import binding_body, post_binding
from adapter.kube.connections import Connections
from adapter.kube.resources import read_json
from adapter.kube.run import KubeOptions, KubeScheduler, api_client
from adapter.settings import Settings
from benchmarks.bound_watch import BoundWatcher, CpuMeter
from benchmarks.cluster_setup import (
    POD_SHAPES,
    create_gangs,
    create_nodes,
    ensure_namespace,
    ensure_podgroup_crd,
    fake_server,
    in_parallel,
    remove_namespace,
)
from benchmarks.suite import at_least_one, non_negative, pairs, positive

TRIVIAL = "trivial-binder"
GANGSAT = "gangsat-bench"


class Throughput(BaseModel):
    contender: str
    pods: int
    seconds: float
    client_cpu_s: float  # this process's CPU from its start until every pod was seen bound
    server_cpu_s: float | None = None  # the fake API server's, when it is ours to read

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.seconds if self.seconds > 0 else 0.0

    @property
    def client_ms_per_pod(self) -> float:
        return 1000 * self.client_cpu_s / self.pods if self.pods else 0.0

    @property
    def server_ms_per_pod(self) -> float | None:
        if self.server_cpu_s is None or not self.pods:
            return None
        return 1000 * self.server_cpu_s / self.pods


def trivial_binder(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    pods: int,
    threads: int,
    meter: CpuMeter,
) -> Throughput:
    core = client.CoreV1Api(api)
    watcher = BoundWatcher(kubeconfig, namespace, pods, meter.pids())
    meter.start()
    started = time.time()
    pending = read_json(
        core.list_namespaced_pod(namespace, field_selector="spec.nodeName=", _preload_content=False)
    )["items"]
    nodes = [
        n["metadata"]["name"]
        for n in read_json(
            core.list_node(label_selector="gangsat-bench=yes", _preload_content=False)
        )["items"]
    ]

    # The same lean request on the same kind of connections as gangsat's binder: the
    # ceiling is the server's, not the generated client's.
    connections = Connections(api)

    def bind(name: str, node: str) -> None:
        post_binding(connections, namespace, name, binding_body(namespace, name, node), 5.0, 30.0)

    # Workers take binds from a queue, as gangsat's binder does: a future per bind cost
    # this binder 10-15% more CPU (3,000 pods, 3 rounds each way), and the baseline
    # must be the leanest binder, not one gangsat beats by its dispatch.
    work: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
    for p, node in zip(pending, itertools.cycle(nodes), strict=False):
        work.put((p["metadata"]["name"], node))
    for _ in range(threads):
        work.put(None)

    def worker() -> None:
        while (item := work.get()) is not None:
            bind(*item)

    try:
        in_parallel(threads, [worker] * threads)
    finally:
        connections.close()
    done_at, cpu = watcher.wait_cpu(600)
    client_s, server_s = meter.until(cpu)
    return Throughput(
        contender="trivial binder",
        pods=pods,
        seconds=done_at - started,
        client_cpu_s=client_s,
        server_cpu_s=server_s,
    )


def gangsat(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    pods: int,
    threads: int,
    time_limit_s: float,
    meter: CpuMeter,
) -> Throughput:
    settings = Settings.model_validate(
        {
            "schedulerNames": [GANGSAT],
            "cycleSeconds": 0.05,
            "solver": {"time_limit_s": time_limit_s},
        }
    )
    options = KubeOptions(
        leader_elect=False, metrics_port=0, metrics_host="127.0.0.1", bind_threads=threads
    )
    watcher = BoundWatcher(kubeconfig, namespace, pods, meter.pids())
    meter.start()
    started = time.time()
    scheduler = KubeScheduler(api, options, settings)
    runner = threading.Thread(target=scheduler.run, daemon=True)
    runner.start()
    try:
        # Measured when every pod is bound, as for the trivial binder: what gangsat still
        # has to write (PodGroup status, Events) is its report, not its binding.
        done_at, cpu = watcher.wait_cpu(600)
        client_s, server_s = meter.until(cpu)
    finally:
        scheduler.stop_event.set()
        runner.join(timeout=30)
    return Throughput(
        contender="gangsat",
        pods=pods,
        seconds=done_at - started,
        client_cpu_s=client_s,
        server_cpu_s=server_s,
    )


def _shapes(text: str) -> list[tuple[int, int]]:
    shapes = pairs(text)
    if not all(count > 0 and size > 0 for count, size in shapes):
        raise argparse.ArgumentTypeError(f"{text!r}: COUNTxSIZE of at least 1 each (e.g. 9x1000)")
    return shapes


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench bind-throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kubeconfig", type=Path, help="a real cluster (default: the fake)")
    parser.add_argument("--nodes", type=at_least_one, default=1000)
    parser.add_argument("--gangs", type=at_least_one, default=1000)
    parser.add_argument("--gang-size", type=at_least_one, default=3)
    parser.add_argument(
        "--also",
        type=_shapes,
        default=[],
        help="further gang shapes, COUNTxSIZE[,...]: scheduler_perf's 5,000-node case is "
        "--nodes 5000 --gangs 3000 --gang-size 3 --also 9x1000",
    )
    parser.add_argument("--threads", type=at_least_one, default=16)
    parser.add_argument(
        "--latency-ms",
        type=non_negative,
        default=0.0,
        help="per-request latency of the fake server",
    )
    parser.add_argument(
        "--cpu-ms",
        type=non_negative,
        default=0.0,
        help="CPU the fake server burns per request, on the same cores (a real API server "
        "and etcd on 2 cores: about 1-2 ms per bind)",
    )
    parser.add_argument(
        "--pod-shape",
        choices=POD_SHAPES,
        default="minimal",
        help="the pods' objects: minimal (one container and its requests) or as a Job "
        "controller and admission make them (~3 KB each)",
    )
    parser.add_argument("--repeat", type=at_least_one, default=3, help="rounds (median)")
    parser.add_argument("--time-limit", type=positive, default=1.0, help="solver seconds per cycle")
    return parser.parse_args(list(argv))


def run(
    args: argparse.Namespace, kubeconfig: Path, console: Console, meter: CpuMeter
) -> list[Throughput]:
    """``--repeat`` rounds, each on pods of its own, removed after the round so every
    round meets the same cluster; the contenders alternate who goes first."""
    api = api_client(kubeconfig)
    console.print(f"setting up {args.nodes} nodes ...")
    ensure_podgroup_crd(api)
    create_nodes(api, args.nodes, args.threads)
    shapes = [(args.gangs, args.gang_size), *args.also]
    pods = sum(count * size for count, size in shapes)
    results: list[Throughput] = []
    for round_ in range(args.repeat):
        trivial_ns, gangsat_ns = f"{TRIVIAL}-{round_}", f"{GANGSAT}-{round_}"
        described = " + ".join(f"{count} gangs of {size}" for count, size in shapes)
        console.print(f"round {round_ + 1}: 2 x ({described}) pods ...")
        for namespace, scheduler in ((trivial_ns, TRIVIAL), (gangsat_ns, GANGSAT)):
            ensure_namespace(api, namespace)
            for s, (count, size) in enumerate(shapes):
                prefix = "gang" if s == 0 else f"gang{s}"
                create_gangs(
                    api, namespace, scheduler, count, size, args.threads, prefix, args.pod_shape
                )
        contenders = [
            partial(trivial_binder, api, kubeconfig, trivial_ns, pods, args.threads, meter),
            partial(
                gangsat, api, kubeconfig, gangsat_ns, pods, args.threads, args.time_limit, meter
            ),
        ]
        for contender in contenders if round_ % 2 == 0 else contenders[::-1]:
            # The set-up's garbage, and what the contender before left (a stopped
            # gangsat gives its frozen heap back), are not collected inside this one's
            # measure.
            gc.collect()
            results.append(contender())
        for namespace in (trivial_ns, gangsat_ns):
            remove_namespace(api, namespace)
    return results


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or Console()
    if args.kubeconfig is not None:
        results = run(args, args.kubeconfig, console, CpuMeter())
        where = "real API server"
    else:
        pids: list[int] = []
        with fake_server(args.latency_ms, args.cpu_ms, pids) as kubeconfig:
            results = run(args, kubeconfig, console, CpuMeter(pids[0]))
        where = f"fake API server, {args.latency_ms:g} ms latency, {args.cpu_ms:g} ms CPU/request"
    report(results, f"{where}, {args.pod_shape} pods", console)
    return 0


def report(results: Sequence[Throughput], where: str, console: Console) -> None:
    table = Table(title=f"Bind throughput, pods present -> all bound ({where})")
    columns = ("round", "contender", "pods", "seconds", "pods/s", "CPU ms/pod", "server ms/pod")
    for column in columns:
        table.add_column(column, justify="left" if column == "contender" else "right")
    by_round: dict[int, dict[str, Throughput]] = {}
    for i, r in enumerate(results):
        by_round.setdefault(i // 2, {})[r.contender] = r
    for round_, pair in by_round.items():
        for r in pair.values():
            server = r.server_ms_per_pod
            table.add_row(
                str(round_ + 1),
                r.contender,
                str(r.pods),
                f"{r.seconds:.2f}",
                f"{r.pods_per_s:.0f}",
                f"{r.client_ms_per_pod:.2f}",
                "-" if server is None else f"{server:.2f}",
            )
    console.print(table)
    pairs = [p for p in by_round.values() if p["trivial binder"].pods_per_s]
    speed = sorted(p["gangsat"].pods_per_s / p["trivial binder"].pods_per_s for p in pairs)
    cpu = sorted(
        p["gangsat"].client_ms_per_pod / p["trivial binder"].client_ms_per_pod
        for p in pairs
        if p["trivial binder"].client_ms_per_pod
    )
    if speed:
        console.print(
            f"gangsat / trivial binder, pods/s: x{statistics.median(speed):.2f} median of "
            f"{len(speed)} round(s) (x{speed[0]:.2f} to x{speed[-1]:.2f}; target >= 0.80)"
        )
    if cpu:
        console.print(
            f"gangsat / trivial binder, CPU per bound pod: x{statistics.median(cpu):.2f} "
            f"(x{cpu[0]:.2f} to x{cpu[-1]:.2f}; target <= 1.25)"
        )
