"""Memory under churn: gangs arriving and finishing for minutes while gangsat schedules them.

    gangsat-bench churn [--kubeconfig PATH] [--minutes 10] [--rate 4] [--nodes 200]
                        [--node-cpu 8] [--min-life 10] [--max-life 60] [--tracemalloc]

A job controller's life, as gangsat meets it: gangs of 1-8 pods arrive at ``--rate`` per
second in three queues; each is deleted (its pods, then its PodGroup, as garbage
collection does) a uniform ``--min-life`` to ``--max-life`` seconds after its last pod
is bound. The cluster at any moment holds only the live gangs, so a scheduler whose
memory follows the live cluster levels off, and one that remembers its history grows
in a straight line.

gangsat runs in a process of its own (the real ``KubeScheduler``, no leader election);
this process drives the churn and samples gangsat's resident memory (``VmRSS``) every
``--sample-s``. Printed: RSS, live gangs and bound gangs per minute, the growth of RSS
over the second half of the run (target under 5% between minute 10 and 30 of a 30-minute
run), creation-to-bound latency p50/p99 (gangs arrive once gangsat has run its first
cycle: a steady state, start-up is ``restart``'s), and with ``--tracemalloc`` the allocation sites
that grew most since the end of the warm-up, every minute (tracemalloc costs gangsat
CPU and memory of its own: RSS figures of such a run are not comparable).

Without ``--kubeconfig`` the fake API server (``benchmarks.fake_apiserver``) runs in its
own process. It does not model a real server's CPU cost or its watch cache; memory is
gangsat's own either way.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rich.console import Console
from rich.table import Table

from adapter.kube.reflector import lines
from adapter.kube.resources import done, raw, read_json
from adapter.kube.run import api_client
from benchmarks.cluster_setup import create_nodes, ensure_namespace, fake_server
from benchmarks.gangsat_process import SCHEDULER, GangsatProcess
from benchmarks.suite import at_least_one, positive

GROUP, VERSION = "scheduling.sigs.dev", "v1alpha2"
NAMESPACE = "gangsat-churn"
QUEUES = {"churn-a": 1, "churn-b": 2, "churn-c": 3}
CRDS = Path(__file__).resolve().parent.parent / "deploy" / "crds"
CPU_CHOICES = ("250m", "500m", "1", "2")


# --- gangsat, in its own process ---------------------------------------------------------------


# --- the churn ---------------------------------------------------------------------------------


@dataclass
class Gang:
    name: str
    size: int
    created: float
    bound: set[str] = field(default_factory=set)
    bound_at: float | None = None


@dataclass
class Churn:
    """What the driver saw: gangs created, bound and deleted, and when."""

    gangs: dict[str, Gang] = field(default_factory=dict)
    deleted: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def live(self) -> int:
        with self.lock:
            return len(self.gangs) - self.deleted

    def bound(self) -> list[Gang]:
        with self.lock:
            return [g for g in self.gangs.values() if g.bound_at is not None]


def install_crds(api: client.ApiClient) -> None:
    """gangsat's own PodGroup and Queue CRDs, exactly as ``deploy/crds`` ships them."""
    extensions = client.ApiextensionsV1Api(api)
    for path in sorted(CRDS.glob("*.scheduling.sigs.dev.yaml")):
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        try:
            extensions.create_custom_resource_definition(body, _preload_content=False)
        except ApiException as e:
            if e.status != 409:
                raise
    time.sleep(0.5)  # a real server serves a new CRD's routes a moment after creating it


def create_queues(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    for name, weight in QUEUES.items():
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": weight},
        }
        try:
            custom.create_cluster_custom_object(GROUP, VERSION, "queues", body)
        except ApiException as e:
            if e.status != 409:
                raise


def pod_manifest(
    gang: str, index: int, queue_cpu: str, namespace: str = NAMESPACE
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{gang}-{index}",
            "namespace": namespace,
            "labels": {"app": "churn"},
            "annotations": {"scheduling.k8s.io/group-name": gang},
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {
                    "name": "worker",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": queue_cpu, "memory": "512Mi"}},
                }
            ],
        },
    }


def post_gang(
    api: client.ApiClient,
    name: str,
    size: int,
    queue: str,
    cpu: str,
    bound_to: Sequence[str] = (),
    namespace: str = NAMESPACE,
) -> None:
    """A PodGroup of ``size`` (minMember) and its pods; pod ``i`` already bound to
    ``bound_to[i]`` when given (a job that runs)."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": size, "queue": queue},
    }
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    done(
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "podgroups", body, _preload_content=False
        )
    )
    for i in range(size):
        manifest = pod_manifest(name, i, cpu, namespace)
        if bound_to:
            manifest["spec"]["nodeName"] = bound_to[i]
        pod = client.V1Pod.model_validate(manifest)
        done(core.create_namespaced_pod(namespace, pod, _preload_content=False))


def create_gang(api: client.ApiClient, churn: Churn, name: str, rng: random.Random) -> None:
    size = rng.randint(1, 8)
    queue = rng.choice(list(QUEUES))
    cpu = rng.choice(CPU_CHOICES)
    with churn.lock:
        churn.gangs[name] = Gang(name=name, size=size, created=time.monotonic())
    post_gang(api, name, size, queue, cpu)


def delete_gang(api: client.ApiClient, gang: Gang) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for i in range(gang.size):
        try:
            done(
                core.delete_namespaced_pod(
                    f"{gang.name}-{i}", NAMESPACE, grace_period_seconds=0, _preload_content=False
                )
            )
        except ApiException as e:
            if e.status != 404:
                raise
    try:
        done(
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "podgroups", gang.name, _preload_content=False
            )
        )
    except ApiException as e:
        if e.status != 404:
            raise


def watch_bound(
    api: client.ApiClient, churn: Churn, due: list[tuple[float, str]], args: Any, stop: Any
) -> None:
    """Note each gang the moment its last pod is seen bound, and when to delete it. A
    watch that ends or breaks is resumed from a fresh list."""
    core = client.CoreV1Api(api)
    rng = random.Random(args.seed + 1)

    def seen(pod: dict[str, Any]) -> None:
        if not pod["spec"].get("nodeName"):
            return
        gang_name = pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
        now = time.monotonic()
        with churn.lock:
            gang = churn.gangs.get(gang_name)
            if gang is None or gang.bound_at is not None:
                return
            gang.bound.add(pod["metadata"]["name"])
            if len(gang.bound) == gang.size:
                gang.bound_at = now
                heapq.heappush(due, (now + rng.uniform(args.min_life, args.max_life), gang_name))

    while not stop.is_set():
        try:
            listed = read_json(core.list_namespaced_pod(NAMESPACE, _preload_content=False))
            for pod in listed["items"]:
                seen(pod)
            response = core.list_namespaced_pod(
                NAMESPACE,
                watch=True,
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=60,
                _preload_content=False,
            )
            try:
                for line in lines(response):
                    event = json.loads(line) if line else {}
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        seen(event["object"])
                    if stop.is_set():
                        break
            finally:
                raw(response).close()
        except Exception as e:  # the server went away or the watch broke
            if not stop.is_set():
                with churn.lock:
                    churn.errors.append(f"watch: {e}")
                stop.wait(0.5)


def drive(api: client.ApiClient, churn: Churn, args: Any, stop: threading.Event) -> None:
    """Arrivals at a fixed rate and deletions when due, until ``stop``."""
    rng = random.Random(args.seed)
    due: list[tuple[float, str]] = []
    watcher = threading.Thread(target=watch_bound, args=(api, churn, due, args, stop), daemon=True)
    watcher.start()
    period = 1.0 / args.rate
    next_arrival = time.monotonic()
    count = 0
    with ThreadPoolExecutor(8) as pool:

        def guarded(call: Any, *rest: Any) -> None:
            try:
                call(api, *rest)
            except Exception as e:  # a failed call is reported, not fatal
                with churn.lock:
                    churn.errors.append(f"{call.__name__}: {e}")

        while not stop.is_set():
            now = time.monotonic()
            while next_arrival <= now:
                pool.submit(guarded, create_gang, churn, f"churn-{count}", rng)
                count += 1
                next_arrival += period
            with churn.lock:
                ripe = []
                while due and due[0][0] <= now:
                    ripe.append(churn.gangs[heapq.heappop(due)[1]])
                churn.deleted += len(ripe)
            for gang in ripe:
                pool.submit(guarded, delete_gang, gang)
            stop.wait(min(0.05, max(0.0, next_arrival - time.monotonic())))


def rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Sample:
    elapsed_s: float
    rss_mb: float
    live: int
    bound: int


def run(args: argparse.Namespace, kubeconfig: Path, console: Console) -> list[Sample]:
    api = api_client(kubeconfig)
    console.print(f"setting up {args.nodes} nodes of {args.node_cpu} cpu, 3 queues ...")
    install_crds(api)
    create_queues(api)
    ensure_namespace(api, NAMESPACE)
    create_nodes(api, args.nodes, 8, cpu=str(args.node_cpu), memory="64Gi")
    duration = args.minutes * 60
    trace_every = 60.0 if args.tracemalloc else 0.0
    gangsat = GangsatProcess(kubeconfig, trace_every, min(120.0, duration / 4)).start()
    # Steady state: gangs arrive once start-up is over (``restart`` measures start-up);
    # started together, the first seconds' gangs waited for the imports and set the p99.
    if not gangsat.wait_ready(120.0):
        gangsat.stop()
        raise RuntimeError("gangsat did not run its first cycle within 120 s")
    churn = Churn()
    stop = threading.Event()
    driver = threading.Thread(target=drive, args=(api, churn, args, stop), daemon=True)
    started = time.monotonic()
    driver.start()
    samples: list[Sample] = []
    console.print(f"churn for {args.minutes:g} min at {args.rate:g} gangs/s ...")
    next_minute = 60.0
    while (elapsed := time.monotonic() - started) < duration:
        if not gangsat.alive():
            code = gangsat.process.exitcode
            console.print(f"gangsat exited early (exit code {code}); churn stopped")
            break
        samples.append(
            Sample(
                elapsed_s=elapsed,
                rss_mb=rss_mb(gangsat.pid),
                live=churn.live(),
                bound=len(churn.bound()),
            )
        )
        if elapsed >= next_minute:
            last = samples[-1]
            console.print(
                f"  minute {elapsed / 60:4.1f}: RSS {last.rss_mb:6.1f} MB, "
                f"{last.live} live gangs, {last.bound} bound"
            )
            next_minute += 60.0
        while not gangsat.reports.empty():
            report = gangsat.reports.get()
            if report is not None:
                console.print(f"  growth since warm-up, at {report[0] / 60:.1f} min:")
                for site in report[1]:
                    console.print(f"    {site}")
        time.sleep(args.sample_s)
    stop.set()
    driver.join(timeout=30)
    gangsat.stop()
    if samples:
        summarise(samples, churn, console)
    return samples


def summarise(samples: list[Sample], churn: Churn, console: Console) -> None:
    table = Table(title="gangsat under churn (RSS of the scheduler process)")
    for column in ("minute", "RSS MB", "live gangs", "bound gangs"):
        table.add_column(column, justify="right")
    minute = 0
    for s in samples:
        if s.elapsed_s >= minute * 60:
            table.add_row(f"{minute}", f"{s.rss_mb:.1f}", f"{s.live}", f"{s.bound}")
            minute += 1
    console.print(table)
    last = samples[-1].elapsed_s
    # Over a minute's samples, so a collection in flight does not decide it.
    end = [s.rss_mb for s in samples if s.elapsed_s >= last - 60]
    for label, since in (("the second half", last / 2), ("minute 10 on", 600.0)):
        start = [s.rss_mb for s in samples if since <= s.elapsed_s < since + 60]
        if start and end and since + 120 <= last:
            growth = statistics.mean(end) / statistics.mean(start) - 1
            console.print(
                f"RSS growth over {label}: {growth:+.1%} ({statistics.mean(start):.1f} -> "
                f"{statistics.mean(end):.1f} MB; target under 5%)"
            )
    bound = churn.bound()
    latencies = sorted(g.bound_at - g.created for g in bound if g.bound_at is not None)
    if latencies:
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        console.print(
            f"{len(bound)}/{len(churn.gangs)} gangs bound, {churn.deleted} deleted; "
            f"creation-to-bound p50 {statistics.median(latencies):.2f} s, p99 {p99:.2f} s"
        )
        # The steady state: what was bound per second against what arrived per second.
        pods = sum(g.size for g in bound)
        console.print(
            f"sustained: {len(bound) / last:.2f} gangs/s, {pods / last:.1f} pods/s bound "
            f"({len(churn.gangs) / last:.2f} gangs/s arrived)"
        )
    if churn.errors:
        console.print(f"{len(churn.errors)} driver error(s), first: {churn.errors[0]}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench churn", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kubeconfig", type=Path, help="a real cluster (default: the fake)")
    parser.add_argument("--minutes", type=positive, default=10.0)
    parser.add_argument("--rate", type=positive, default=4.0, help="gangs arriving per second")
    parser.add_argument("--nodes", type=at_least_one, default=200)
    parser.add_argument("--node-cpu", type=at_least_one, default=8)
    parser.add_argument("--min-life", type=positive, default=10.0, help="seconds bound, at least")
    parser.add_argument("--max-life", type=positive, default=60.0, help="seconds bound, at most")
    parser.add_argument("--sample-s", type=positive, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tracemalloc", action="store_true", help="print growing allocation sites")
    args = parser.parse_args(list(argv))
    if args.max_life < args.min_life:
        parser.error("--max-life must be at least --min-life")
    return args


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or Console()
    if args.kubeconfig is not None:
        run(args, args.kubeconfig, console)
        return 0
    with fake_server(0.0) as kubeconfig:
        run(args, kubeconfig, console)
    return 0
