"""Manifests and checks for the tests against the fake API server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from adapter.kube.dialects import (
    COSCHEDULING_GROUPS,
    GROUP_ANNOTATIONS,
    GROUP_LABELS,
    KUBE_BATCH_GROUPS,
    QUEUE_ANNOTATION,
    WORKLOAD_GROUP,
)
from adapter.kube.resources import DIALECTS
from benchmarks.fake_apiserver import FakeApiError, FakeApiServer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def ships_inline_status(group: str, plural: str) -> bool:
    """Whether a dialect's CRD ships upstream without a status subresource: Volcano's
    PodGroup (its Queue has one), and the older kube-batch group's PodGroup and Queue
    (scheduling.incubator.k8s.io v1alpha1, as kube-batch's charts ship them)."""
    return (group, plural) == ("scheduling.volcano.sh", "podgroups") or (
        group == "scheduling.incubator.k8s.io"
    )


# Groups whose PodGroup (and Queue) CRDs come with or without a status subresource, by
# who installed them: kube-batch's two (kube-batch, early Volcano, gangsat) and the older
# Coscheduling group (scheduler-plugins before v0.24, Koordinator).
INSTALLED_EITHER_WAY = KUBE_BATCH_GROUPS | {"scheduling.sigs.k8s.io"}


def wait_until(condition: Callable[[], Any], timeout_s: float = 5.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or condition}")


def node(name: str, cpu: str = "2", memory: str = "4Gi", **extra: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110", **extra}},
    }


def podgroup(
    name: str, min_member: Any, queue: str | None = None, group: str = "scheduling.sigs.dev"
) -> dict[str, Any]:
    """A PodGroup in the dialect of API group ``group`` (its first version gangsat reads)."""
    version = next(r.version for r in DIALECTS if r.group == group and r.kind == "PodGroup")
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    spec: dict[str, Any]
    if group == WORKLOAD_GROUP:
        spec = {"schedulingPolicy": {"gang": {"minCount": min_member}}}
        if queue is not None:
            metadata["annotations"] = {QUEUE_ANNOTATION: queue}
    else:
        spec = {"minMember": min_member}
        if queue is not None:
            spec["queue"] = queue
    return {
        "apiVersion": f"{group}/{version}",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": spec,
    }


def volcano_queue(name: str, state: str | None = None) -> dict[str, Any]:
    """A Volcano Queue of weight 1; ``state``: its ``status.state`` (Volcano's controller
    keeps it: Open, Closing, Closed)."""
    queue: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
    }
    if state is not None:
        queue["status"] = {"state": state}
    return queue


def gang_pods(
    group: str,
    n: int,
    cpu: str = "1",
    memory: str = "1Gi",
    scheduler: str = "gangsat",
    dialect: str = "scheduling.sigs.dev",
) -> list[dict[str, Any]]:
    """``n`` pods of PodGroup ``group``, joining it as the ``dialect`` API group's pods do."""
    pods = []
    for i in range(n):
        metadata: dict[str, Any] = {"name": f"{group}-{i}", "namespace": "default"}
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
        }
        if dialect == WORKLOAD_GROUP:
            spec["schedulingGroup"] = {"podGroupName": group}
        elif dialect in COSCHEDULING_GROUPS:
            # Each group's own label: the newer group's, or the one releases before v0.24
            # (and Koordinator) set.
            label = GROUP_LABELS[0] if dialect == "scheduling.x-k8s.io" else GROUP_LABELS[1]
            metadata["labels"] = {label: group}
        else:
            metadata["annotations"] = {GROUP_ANNOTATIONS[0]: group}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    return pods


def apply(server: FakeApiServer, objects: list[dict[str, Any]]) -> None:
    """Store objects as `kubectl apply` would; a Job becomes its pods, as its controller
    would create them (the fake has no controllers)."""
    for obj in objects:
        if obj.get("kind") == "Job":
            template = obj["spec"]["template"]
            for i in range(int(obj["spec"].get("parallelism", 1))):
                server.put(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            **template.get("metadata", {}),
                            "name": f"{obj['metadata']['name']}-{i}",
                            "namespace": obj["metadata"].get("namespace", "default"),
                        },
                        "spec": template["spec"],
                    }
                )
        else:
            server.put(obj)


def manifests(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def bound_pods(server: FakeApiServer) -> dict[str, str]:
    """pod key -> node, as the API server has them."""
    return {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
        for p in server.objects("", "pods")
        if (p.get("spec") or {}).get("nodeName")
    }


def live_pods(server: FakeApiServer) -> dict[str, str]:
    """``bound_pods`` less those being deleted: a rolled-back pod holds its node for its
    grace period, as a kubelet ends it, but is no running member any more."""
    return {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
        for p in server.objects("", "pods")
        if (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def binds(server: FakeApiServer) -> list[str]:
    """Every Binding request the server received, as pod keys, in order."""
    return [
        f"{r.namespace}/{r.name}"
        for r in list(server.requests)
        if r.resource == "pods" and r.subresource == "binding"
    ]


def bindings(server: FakeApiServer) -> dict[str, list[str]]:
    """Per pod, the nodes of every Binding of it that reached the server, the one that
    bound it first (``binds`` counts requests, failed ones included). A pod bound twice
    has two accepted; one bound and sent again after its answer was lost has a refused
    bind (409) to the same node."""
    records = list(server.bindings)
    accepted = [b for b in records if b.status == 201]
    nodes: dict[str, list[str]] = {b.pod: [b.node] for b in accepted}
    assert len(nodes) == len(accepted), "a pod bound twice"
    for b in records:
        if b.status != 201:
            nodes.setdefault(b.pod, []).append(b.node)
    return nodes


def refusing(
    server: FakeApiServer, method: str, fragment: str, status: int, message: str
) -> threading.Event:
    """The fake refuses ``method`` requests whose path holds ``fragment`` (with
    ``status``) while the returned event is set; clear it to let them through."""
    on = threading.Event()
    on.set()

    def refuse(verb: str, path: str) -> None:
        if on.is_set() and verb == method and fragment in path:
            raise FakeApiError(status, message)

    server.hooks.append(refuse)
    return on
