"""A cluster on an API server for the benchmarks that bind through one: the fake API
server in a process of its own, the PodGroup CRD, namespaces, nodes labelled as kubelets
label them, and gangs of pending pods (``bind_throughput``, ``restart``, ``churn``,
``footprint``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.kube.resources import done, read_json
from adapter.sim.realistic.nodes import kubelet_labels

PODGROUP = ("scheduling.sigs.dev", "v1alpha2", "podgroups")


@contextmanager
def fake_server(
    latency_ms: float, cpu_ms: float = 0.0, pid_out: list[int] | None = None
) -> Iterator[Path]:
    """The fake API server in a child process; yields a kubeconfig for it (and appends
    its pid to ``pid_out``, for CPU accounting). ``cpu_ms`` of CPU is burnt per request,
    as a real API server and etcd on the same cores would spend it."""
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.fake_apiserver",
                "--port",
                "0",
                "--kubeconfig-out",
                str(kubeconfig),
                "--latency-ms",
                str(latency_ms),
                "--cpu-ms",
                str(cpu_ms),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            process.stdout.readline()  # the URL, once it listens
            if pid_out is not None:
                pid_out.append(process.pid)
            yield kubeconfig
        finally:
            process.terminate()
            process.wait(timeout=10)


def in_parallel(threads: int, calls: Sequence[Any]) -> None:
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(c) for c in calls]:
            future.result()


def ensure_podgroup_crd(api: client.ApiClient) -> None:
    """The kube-batch PodGroup CRD, unless the cluster has it (gangsat's deploy/ installs it)."""
    group, version, plural = PODGROUP
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": "podgroup", "kind": "PodGroup"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    try:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            client.V1CustomResourceDefinition.model_validate(body), _preload_content=False
        )
    except ApiException as e:
        if e.status != 409:
            raise


def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
    except ApiException as e:
        if e.status != 409:
            raise


def remove_namespace(api: client.ApiClient, namespace: str, timeout_s: float = 120.0) -> None:
    """Delete a round's pods (no grace: nothing runs them) and namespace, and wait until
    they are gone, so every round starts from the same cluster."""
    core = client.CoreV1Api(api)
    done(
        core.delete_collection_namespaced_pod(
            namespace, grace_period_seconds=0, _preload_content=False
        )
    )
    try:
        done(core.delete_namespace(namespace, _preload_content=False))
    except ApiException as e:
        if e.status != 404:
            raise
    deadline = time.monotonic() + timeout_s
    while read_json(core.list_namespaced_pod(namespace, limit=1, _preload_content=False))["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of namespace {namespace} still there after {timeout_s} s")
        time.sleep(0.5)


def create_nodes(
    api: client.ApiClient, count: int, threads: int, cpu: str = "4", memory: str = "32Gi"
) -> None:
    core = client.CoreV1Api(api)

    def make(i: int) -> None:
        name = f"bench-node-{i}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            # Labelled as kubelets and clouds label nodes: a unique hostname on each.
            "metadata": {
                "name": name,
                "labels": {**kubelet_labels(name, i), "gangsat-bench": "yes"},
            },
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            },
        }
        try:
            done(core.create_node(client.V1Node.model_validate(body), _preload_content=False))
        except ApiException as e:
            if e.status != 409:
                raise

    in_parallel(threads, [lambda i=i: make(i) for i in range(count)])


def create_gangs(
    api: client.ApiClient,
    namespace: str,
    scheduler: str,
    gangs: int,
    size: int,
    threads: int,
    prefix: str = "gang",
) -> list[str]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    group, version, plural = PODGROUP
    names: list[str] = []

    def make(g: int) -> None:
        custom.create_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            {
                "apiVersion": f"{group}/{version}",
                "kind": "PodGroup",
                "metadata": {"name": f"{prefix}-{g}", "namespace": namespace},
                "spec": {"minMember": size},
            },
        )
        for i in range(size):
            pod = client.V1Pod(
                metadata=client.V1ObjectMeta(
                    name=f"{prefix}-{g}-{i}",
                    namespace=namespace,
                    annotations={"scheduling.k8s.io/group-name": f"{prefix}-{g}"},
                ),
                spec=client.V1PodSpec(
                    scheduler_name=scheduler,
                    containers=[
                        client.V1Container(
                            name="c",
                            image="registry.k8s.io/pause:3.9",
                            resources=client.V1ResourceRequirements(
                                requests={"cpu": "100m", "memory": "100Mi"}
                            ),
                        )
                    ],
                ),
            )
            done(core.create_namespaced_pod(namespace, pod, _preload_content=False))

    in_parallel(threads, [lambda g=g: make(g) for g in range(gangs)])
    names.extend(f"{namespace}/{prefix}-{g}-{i}" for g in range(gangs) for i in range(size))
    return names
