"""What memory gangsat needs for a cluster of a given size: RSS per node, per pod and gang.

    gangsat-bench footprint [--kubeconfig PATH] [--gang-size 4]
                            [--sizes 1000x500,1000x2500,4000x2500,4000x10000]

Each size ``NODESxGANGS`` is measured on a fresh fake API server (or, with
``--kubeconfig``, on a cluster that must hold nothing of ours): that many nodes as a
cloud's kubelet reports them (13 labels, conditions, addresses, node info, 40 images),
each running two DaemonSet pods; that many PodGroups of ``--gang-size`` pods, half of
them already bound (running jobs) and half pending. gangsat (the real ``KubeScheduler`` in a
process of its own) starts, binds every pending pod, runs on for ``--settle-s``; its
resident memory (``VmRSS``) is sampled throughout. Printed: the peak and settled RSS of
each size, and the cost per node and per pod (with its share of a PodGroup) fitted by
least squares over the sizes (each with gangs to decide, so the solver's libraries are
loaded in every one) — the figures ``deploy/``'s requests and limits are sized
from. The fake server answers at once; a real one is slower, which changes timings, not
what gangsat holds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes import client
from rich.console import Console
from rich.table import Table

from adapter.kube.resources import done, read_json
from adapter.kube.run import api_client
from benchmarks.churn import (
    NAMESPACE,
    create_queues,
    install_crds,
    post_gang,
    rss_mb,
)
from benchmarks.cluster_setup import ensure_namespace, fake_server
from benchmarks.gangsat_process import GangsatProcess
from benchmarks.suite import at_least_one, pairs, positive


@dataclass
class Footprint:
    nodes: int
    gangs: int
    pods: int
    peak_mb: float
    settled_mb: float
    seconds: float


DAEMONS_PER_NODE = 2  # kube-proxy and a CNI agent, say: bound, another scheduler's


def node_manifest(i: int) -> dict[str, Any]:
    """A node as a cloud's kubelet reports it: its labels, conditions, addresses, node
    info, and the images it holds (which the cache drops)."""
    name = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
    zone = "us-east-1" + "abc"[i % 3]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.2xlarge",
                "beta.kubernetes.io/instance-type": "m6i.2xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": zone,
                "failure-domain.beta.kubernetes.io/zone": zone,
                "eks.amazonaws.com/nodegroup": "batch",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "k8s.io/cloud-provider-aws": "8a7c2f0e1d3b",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"providerID": f"aws:///{zone}/i-{i:017x}"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32408740Ki", "pods": "58"},
            "allocatable": {"cpu": "7910m", "memory": "31391908Ki", "pods": "58"},
            "conditions": [
                {"type": t, "status": "False" if t != "Ready" else "True", "reason": f"Kubelet{t}"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
                {"type": "InternalDNS", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kernelVersion": "5.10.219-208.866.amzn2.x86_64",
                "osImage": "Amazon Linux 2",
                "containerRuntimeVersion": "containerd://1.7.11",
                "kubeletVersion": "v1.30.0-eks-036c24b",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "bootID": f"b00t-{i:08x}",
                "machineID": f"ec2{i:029x}",
                "systemUUID": f"ec2{i:05x}-0000-0000-0000-000000000000",
                "kubeProxyVersion": "",
            },
            "images": [
                {"names": [f"registry.example/team/image-{k}:v{k}"], "sizeBytes": 10**8 + k}
                for k in range(40)
            ],
        },
    }


def daemon_pod(node: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"daemon-{index}-{node.split('.')[0]}",
            "namespace": NAMESPACE,
            "labels": {"app": f"daemon-{index}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": f"daemon-{index}",
                    "uid": f"ds-{index}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


def populate_nodes(api: client.ApiClient, nodes: int) -> list[str]:
    """gangsat's CRDs and queues, and nodes as a cloud's kubelet reports them, each with
    its DaemonSet pods bound; the node names."""
    install_crds(api)
    create_queues(api)
    ensure_namespace(api, NAMESPACE)
    core = client.CoreV1Api(api)
    names = [node_manifest(i)["metadata"]["name"] for i in range(nodes)]

    def make_node(i: int) -> None:
        done(
            core.create_node(client.V1Node.model_validate(node_manifest(i)), _preload_content=False)
        )
        for d in range(DAEMONS_PER_NODE):
            body = client.V1Pod.model_validate(daemon_pod(names[i], d))
            done(core.create_namespaced_pod(NAMESPACE, body, _preload_content=False))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make_node, range(nodes)))
    return names


def populate(api: client.ApiClient, nodes: int, gangs: int, size: int) -> None:
    """Nodes with their daemons, and gangs of which every other one is already bound."""
    names = populate_nodes(api, nodes)

    def make(g: int) -> None:
        running = g % 2 == 1 and nodes > 0  # every other gang is already bound
        bound_to = [names[(g * size + i) % nodes] for i in range(size)] if running else []
        post_gang(api, f"job-{g}", size, "churn-a", "250m", bound_to)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(gangs)))


def pending(api: client.ApiClient) -> int:
    listed = read_json(
        client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, field_selector="spec.nodeName=", _preload_content=False
        )
    )
    return len(listed["items"])


def measure(kubeconfig: Path, nodes: int, gangs: int, args: argparse.Namespace) -> Footprint:
    api = api_client(kubeconfig)
    populate(api, nodes, gangs, args.gang_size)
    gangsat = GangsatProcess(kubeconfig)
    started = time.monotonic()
    gangsat.start()
    peak, samples = 0.0, []
    deadline = started + args.timeout_s
    settled_at: float | None = None
    while time.monotonic() < deadline and gangsat.alive():
        rss = rss_mb(gangsat.pid)
        peak = max(peak, rss)
        if settled_at is None and (nodes == 0 or pending(api) == 0):
            settled_at = time.monotonic()
        if settled_at is not None:
            samples.append(rss)
            if time.monotonic() - settled_at >= args.settle_s:
                break
        time.sleep(0.5)
    gangsat.stop()
    if settled_at is None:
        raise RuntimeError(f"{nodes}x{gangs}: pods still pending after {args.timeout_s:.0f} s")
    return Footprint(
        nodes=nodes,
        gangs=gangs,
        pods=gangs * args.gang_size + nodes * DAEMONS_PER_NODE,
        peak_mb=peak,
        settled_mb=samples[-1],
        seconds=settled_at - started,
    )


def fit(results: Sequence[Footprint]) -> tuple[float, float, float]:
    """Base MB, MB per node and MB per pod, least squares over the settled figures."""
    rows = np.array([[1.0, r.nodes, r.pods] for r in results])
    rss = np.array([r.settled_mb for r in results])
    coef, *_ = np.linalg.lstsq(rows, rss, rcond=None)
    return float(coef[0]), float(coef[1]), float(coef[2])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench footprint", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kubeconfig", type=Path, help="a real cluster (default: the fake)")
    parser.add_argument(
        "--sizes",
        type=pairs,
        default="1000x500,1000x2500,4000x2500,4000x10000",
        help="NODESxGANGS, comma-separated",
    )
    parser.add_argument("--gang-size", type=at_least_one, default=4)
    parser.add_argument("--settle-s", type=positive, default=10.0)
    parser.add_argument("--timeout-s", type=positive, default=600.0)
    args = parser.parse_args(list(argv))
    if len(args.sizes) < 3:
        parser.error("--sizes: at least three sizes, to fit a cost per node and per pod")
    return args


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or Console()
    results = []
    for nodes, gangs in args.sizes:
        console.print(f"{nodes} nodes, {gangs} gangs of {args.gang_size} ...")
        if args.kubeconfig is not None:
            results.append(measure(args.kubeconfig, nodes, gangs, args))
            continue
        with fake_server(0.0) as kubeconfig:
            results.append(measure(kubeconfig, nodes, gangs, args))
    table = Table(
        title=f"gangsat's resident memory by cluster size (fake API server; pods include "
        f"{DAEMONS_PER_NODE} DaemonSet pods a node)"
    )
    for column in ("nodes", "gangs", "pods", "peak MB", "settled MB", "all bound after s"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(
            f"{r.nodes}",
            f"{r.gangs}",
            f"{r.pods}",
            f"{r.peak_mb:.0f}",
            f"{r.settled_mb:.0f}",
            f"{r.seconds:.1f}",
        )
    console.print(table)
    base, per_node, per_pod = fit(results)
    console.print(
        f"fitted: {base:.0f} MB + {per_node * 1000:.0f} KB per node "
        f"+ {per_pod * 1000:.0f} KB per pod (gang pods with their share of a PodGroup, "
        "and daemons)"
    )
    return 0
