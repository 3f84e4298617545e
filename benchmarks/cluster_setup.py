"""A cluster on an API server for the benchmarks that bind through one: the fake API
server in a process of its own, the PodGroup CRD, namespaces, nodes labelled as kubelets
label them, and gangs of pending pods (``bind_throughput``, ``restart``, ``churn``,
``footprint``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import zlib
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
    shape: str = "minimal",
) -> list[str]:
    """``gangs`` PodGroups of ``size`` pods each; ``shape``: ``POD_SHAPES``."""
    if shape not in POD_SHAPES:
        raise ValueError(f"pod shape {shape!r}: one of {', '.join(POD_SHAPES)}")
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
            name, group_name = f"{prefix}-{g}-{i}", f"{prefix}-{g}"
            pod: Any = (
                job_pod(namespace, name, group_name, i, scheduler)
                if shape == "job"
                else minimal_pod(namespace, name, group_name, scheduler)
            )
            done(core.create_namespaced_pod(namespace, pod, _preload_content=False))

    in_parallel(threads, [lambda g=g: make(g) for g in range(gangs)])
    names.extend(f"{namespace}/{prefix}-{g}-{i}" for g in range(gangs) for i in range(size))
    return names


# "minimal": a pod of one container and its requests (~490 bytes as the fake stores it).
# "job": as a Job controller and the API server's admission make one (~3 KB as sent):
# labels, an indexed Job's hostname, a container with its command, environment, mounts
# and probe, the service-account token volume, the default tolerations. Not its owner
# reference (a real cluster's garbage collector deletes pods whose owner does not
# exist), finalizer (the namespace could not go) or priority (admission sets it, and
# refuses a pod that sets its own where a default PriorityClass is not 0); a real server
# adds managedFields besides (~1 KB more), which the fake drops.
POD_SHAPES = ("minimal", "job")


def minimal_pod(namespace: str, name: str, group: str, scheduler: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, annotations={"scheduling.k8s.io/group-name": group}
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


# What the DefaultTolerationSeconds admission plugin gives every pod.
ADMITTED_TOLERATIONS: tuple[dict[str, Any], ...] = tuple(
    {
        "key": f"node.kubernetes.io/{condition}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for condition in ("not-ready", "unreachable")
)


def job_pod(namespace: str, name: str, group: str, index: int, scheduler: str) -> dict[str, Any]:
    uid = f"00000000-0000-4000-8000-{zlib.crc32(f'{namespace}/{group}'.encode()):012d}"
    token = f"kube-api-access-{zlib.crc32(name.encode()) % 16**5:05x}"
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": group,
        "controller-uid": uid,
        "job-name": group,
        "batch.kubernetes.io/job-completion-index": str(index),
        "app.kubernetes.io/name": "trainer",
        "app.kubernetes.io/part-of": "training",
    }
    env: list[dict[str, Any]] = [
        {"name": f"TRAINER_SETTING_{k}", "value": f"value-{k:02d}-of-the-run"} for k in range(10)
    ]
    env.append(
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {
                    "apiVersion": "v1",
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                }
            },
        }
    )
    container = {
        "name": "trainer",
        "image": "registry.example.com/ml/trainer:2026.11.3",
        "command": ["python", "-m", "trainer.run"],
        "args": ["--config", "/etc/trainer/config.yaml", "--rank", str(index)],
        "env": env,
        "ports": [{"containerPort": 29500, "name": "rendezvous", "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "100m", "memory": "100Mi"},
            "limits": {"memory": "100Mi"},
        },
        "volumeMounts": [
            {"name": "scratch", "mountPath": "/scratch"},
            {
                "name": token,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            },
        ],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    token_volume = {
        "name": token,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                "scheduling.k8s.io/group-name": group,
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [container],
            "volumes": [{"name": "scratch", "emptyDir": {}}, token_volume],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "hostname": name,
            "subdomain": group,
            "tolerations": [dict(t) for t in ADMITTED_TOLERATIONS],
            "enableServiceLinks": True,
        },
    }
