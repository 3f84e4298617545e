"""A domain ``ClusterState`` as the objects an API server would store for it: the inverse of
the Kubernetes adapter's conversion, so that the loop's own snapshot, decision and report
run on the real-shaped instances the solver benchmark decides
(``benchmarks.instances.realistic``).

Written as the cluster's controllers and admission would leave them: nodes with the
kubelet's capacity, conditions, addresses and node info (``footprint.node_manifest``'s);
pods with their Job or DaemonSet owner, ``spec.priority`` copied from their
PriorityClass, the two DefaultTolerationSeconds tolerations, a bound pod's phase and
start time; Volcano PodGroups (``scheduling.volcano.sh/v1beta1``, pods join with the
``scheduling.k8s.io/group-name`` annotation) at the phase Volcano leaves them, with a
Succeeded pod for each member that ran to completion; Queues; a PriorityClass per
priority value, the built-in ``system-*`` ones among them as a list returns them (a
create of those would be refused). Creation times are whole seconds, as an API server
stores them.

A node not ready has the taint the node lifecycle controller gives it (one without it in
the domain reads back with it). Not carried, for
the adapter does not read it: a bound pod's start (the adapter takes a
bound pod's age from its creation). What the domain does not hold is not invented: a
pod's limits are its requests (its extended resources must have them). A pod asking
for ``pods`` has no Kubernetes form (no container may request pod slots): refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapter.kube.fields import stamp
from adapter.quantity import quantity
from benchmarks.cluster_setup import ADMITTED_TOLERATIONS
from benchmarks.footprint import node_manifest
from solver.model import CPU, PODS, ClusterState, Gang, Node, Pod, Queue, Resources
from solver.scheduling_terms import NodeSelectorRequirement, both

Obj = dict[str, Any]

VOLCANO = "scheduling.volcano.sh/v1beta1"
NOT_READY = "node.kubernetes.io/not-ready"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
TASK_ANNOTATION = "volcano.sh/task-spec"
NON_PREEMPTIBLE_ANNOTATION = "gangsat.io/preemptible"
# The domain's clock starts here: ``created_s`` 0 is this instant.
EPOCH = datetime(2026, 12, 1, tzinfo=UTC)
# Kubernetes' built-in classes, by value; any other value gets a class of its own.
BUILT_IN_CLASSES = {2_000_001_000: "system-node-critical", 2_000_000_000: "system-cluster-critical"}
# What the kubelet keeps back (system-reserved, eviction threshold): capacity is more.
RESERVED = {CPU: 90, "memory": 1_016_832 * 1024, "ephemeral-storage": 0, "pods": 0}


@dataclass
class ApiObjects:
    """The objects, by kind, in the order the state lists them."""

    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    podgroups: list[Obj] = field(default_factory=list)
    queues: list[Obj] = field(default_factory=list)
    priority_classes: list[Obj] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(
            map(len, (self.nodes, self.pods, self.podgroups, self.queues, self.priority_classes))
        )


def timestamp(seconds: float) -> str:
    """``seconds`` after ``EPOCH``, as an API server writes a time (whole seconds)."""
    return stamp(datetime.fromtimestamp(EPOCH.timestamp() + math.floor(seconds), UTC))


def quantities(resources: Resources | Mapping[str, int]) -> dict[str, str]:
    root = resources.root if isinstance(resources, Resources) else resources
    return {name: quantity(name, amount) for name, amount in sorted(root.items())}


def priority_class_name(value: int) -> str:
    if value in BUILT_IN_CLASSES:
        return BUILT_IN_CLASSES[value]
    return f"priority-{value}" if value >= 0 else f"priority-minus-{-value}"


def _metadata(
    name: str, uid: str, created_s: float, namespace: str | None = None, **more: Any
) -> Obj:
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata |= {
        "uid": uid,
        "resourceVersion": "1",
        "creationTimestamp": timestamp(created_s),
        **more,
    }
    return metadata


def node_object(node: Node, index: int) -> Obj:
    obj = node_manifest(index)  # a cloud's kubelet's node; what the domain says, below
    metadata = obj["metadata"]
    obj["metadata"] = _metadata(
        node.name,
        f"node-{index}",
        0.0,
        labels=dict(node.labels),
        annotations=metadata["annotations"],
    )
    spec = obj["spec"]
    zone = node.labels.get("topology.kubernetes.io/zone", "zone")
    spec["providerID"] = f"aws:///{zone}/i-{index:017x}"
    taints = [
        {"key": t.key, **({"value": t.value} if t.value else {}), "effect": str(t.effect)}
        for t in node.taints
    ]
    if not node.ready and not any(t.key == NOT_READY for t in node.taints):
        taints.append({"key": NOT_READY, "effect": "NoSchedule"})  # the lifecycle controller's
    if taints:
        spec["taints"] = taints
    if node.unschedulable:
        spec["unschedulable"] = True
    status = obj["status"]
    status["allocatable"] = quantities(node.allocatable)
    status["capacity"] = quantities(
        {name: amount + RESERVED.get(name, 0) for name, amount in node.allocatable.root.items()}
    )
    for condition in status["conditions"]:
        if condition["type"] == "Ready":
            condition["status"] = "True" if node.ready else "False"
    for address in status["addresses"]:
        if address["type"] != "InternalIP":
            address["address"] = node.name
    status["nodeInfo"]["architecture"] = node.labels.get("kubernetes.io/arch", "amd64")
    return obj


def _requirement(r: NodeSelectorRequirement) -> Obj:
    out: Obj = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


def pod_object(pod: Pod, index: int, scheduler: str = "gangsat") -> Obj:
    """``scheduler``: the one the pod asks for, but a bound DaemonSet pod's (the default
    scheduler's)."""
    namespace, _, name = pod.name.rpartition("/")
    namespace = namespace or pod.namespace
    if pod.requests[PODS]:
        raise ValueError(f"pod {pod.name} asks for pod slots, which no container can")
    requests = quantities(pod.requests)
    # Extended resources must have limits equal to their requests; memory is limited too.
    limits = {k: v for k, v in requests.items() if k != CPU and k != "ephemeral-storage"}
    container: Obj = {
        "name": "main",
        "image": "registry.example/team/train:v1",
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    spec: Obj = {
        "containers": [container],
        "restartPolicy": "Always" if pod.daemon else "Never",
        "schedulerName": "default-scheduler"
        if pod.daemon and pod.node_name is not None
        else scheduler,
        "priority": pod.priority,
        "tolerations": [
            {
                k: v
                for k, v in (
                    ("key", t.key),
                    ("operator", t.operator),
                    ("value", t.value),
                    ("effect", str(t.effect)),
                )
                if v
            }
            for t in pod.tolerations
        ]
        + [dict(t) for t in ADMITTED_TOLERATIONS],
    }
    if pod.priority:
        spec["priorityClassName"] = priority_class_name(pod.priority)
    if not pod.may_preempt:
        spec["preemptionPolicy"] = "Never"
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    # What its volumes or bound pods' anti-affinity add (``NodeRule``) is written as
    # node affinity: the nodes it allows are the same.
    affinity = pod.affinity
    for rule in pod.node_rules:
        affinity = both(affinity, rule.terms)
    if affinity:
        terms = [
            {
                k: v
                for k, v in (
                    ("matchExpressions", [_requirement(r) for r in term.match_expressions]),
                    ("matchFields", [_requirement(r) for r in term.match_fields]),
                )
                if v
            }
            for term in affinity
        ]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    if pod.gates:
        spec["schedulingGates"] = [{"name": gate} for gate in pod.gates]
    annotations: dict[str, str] = {}
    owner: Obj
    if pod.gang is not None:
        annotations[GROUP_ANNOTATION] = pod.gang.rpartition("/")[2]
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": pod.gang.rpartition("/")[2]}
    else:
        kind = "DaemonSet" if pod.daemon else "ReplicaSet"
        owner = {"apiVersion": "apps/v1", "kind": kind, "name": name.rsplit("-", 1)[0]}
    owner |= {"uid": f"owner-{owner['kind']}-{owner['name']}", "controller": True}
    if pod.task is not None:
        annotations[TASK_ANNOTATION] = pod.task
    metadata = _metadata(
        name,
        f"pod-{index}",
        pod.created_s,
        namespace,
        labels={"app": owner["name"]},
        ownerReferences=[owner],
    )
    if annotations:
        metadata["annotations"] = annotations
    if pod.terminating:
        metadata["deletionTimestamp"] = timestamp(pod.created_s)
        metadata["deletionGracePeriodSeconds"] = 30
    obj: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if pod.node_name is not None:
        spec["nodeName"] = pod.node_name
        started = pod.started_s if pod.started_s is not None else pod.created_s
        obj["status"] = {"phase": "Running", "startTime": timestamp(started)}
    else:
        obj["status"] = {"phase": "Pending"}
        if pod.nominated_node is not None:
            obj["status"]["nominatedNodeName"] = pod.nominated_node
    return obj


def podgroup_object(gang: Gang, index: int, pods: int = 0, running: int = 0) -> Obj:
    """As Volcano leaves it: Running with ``running`` members at minMember, Inqueue where
    its job controller has made ``pods`` (it makes them only once Inqueue), else
    Pending."""
    namespace, _, name = gang.name.rpartition("/")
    spec: Obj = {"minMember": gang.min_member, "queue": gang.queue}
    if gang.priority:
        spec["priorityClassName"] = priority_class_name(gang.priority)
    if gang.min_task_member:
        spec["minTaskMember"] = dict(gang.min_task_member)
    metadata = _metadata(name, f"podgroup-{index}", gang.created_s, namespace or "default")
    if not gang.preemptible:
        metadata["annotations"] = {NON_PREEMPTIBLE_ANNOTATION: "false"}
    phase = "Running" if running >= gang.min_member else "Inqueue" if pods else "Pending"
    status: Obj = {"phase": phase}
    if running:
        status["running"] = running
    if gang.succeeded:
        status["succeeded"] = gang.succeeded
    return {
        "apiVersion": VOLCANO,
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def succeeded_pods(gang: Gang, node: str, scheduler: str, index: int) -> list[Obj]:
    """A pod for each member of ``gang`` that ran to completion (on ``node``), in its task
    where the gang counts it in one: what the adapter counts them from. Numbered from
    ``index`` (their uids)."""
    namespace = gang.name.rpartition("/")[0]
    tasks = [t for t, n in sorted(gang.succeeded_by_task.items()) for _ in range(n) if t]
    tasks += [""] * (gang.succeeded - len(tasks))
    out = []
    for i, task in enumerate(tasks):
        member = Pod(
            name=f"{gang.name}-done-{i}",
            namespace=namespace or "default",
            priority=gang.priority,
            gang=gang.name,
            task=task or None,
            node_name=node,
            created_s=gang.created_s,
        )
        obj = pod_object(member, index + i, scheduler)
        obj["status"] = {"phase": "Succeeded"}
        out.append(obj)
    return out


def queue_object(queue: Queue, index: int) -> Obj:
    spec: Obj = {"weight": queue.weight, "reclaimable": queue.reclaimable}
    if queue.capability is not None:
        spec["capability"] = quantities(queue.capability)
    return {
        "apiVersion": VOLCANO,
        "kind": "Queue",
        "metadata": _metadata(queue.name, f"queue-{index}", 0.0),
        "spec": spec,
        "status": {"state": "Open"},
    }


def priority_class_object(value: int) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": _metadata(priority_class_name(value), f"priorityclass-{value}", 0.0),
        "value": value,
        "preemptionPolicy": "PreemptLowerPriority",
    }


def api_objects(state: ClusterState, scheduler: str = "gangsat") -> ApiObjects:
    """``state``'s objects. Its pods and gangs are named ``namespace/name`` (as the adapter
    names them); a gang's PodGroup is in its namespace. Pods not of a DaemonSet ask for
    ``scheduler``."""
    members: dict[str, int] = {}
    running: dict[str, int] = {}
    for pod in state.pods:
        if pod.gang is not None:
            members[pod.gang] = members.get(pod.gang, 0) + 1
            if pod.node_name is not None and not pod.terminating:
                running[pod.gang] = running.get(pod.gang, 0) + 1
    pods = [pod_object(p, i, scheduler) for i, p in enumerate(state.pods)]
    for g in state.gangs:
        if g.succeeded and state.nodes:
            pods += succeeded_pods(g, state.nodes[0].name, scheduler, len(pods))
    values = {p.priority for p in state.pods if p.priority} | {
        g.priority for g in state.gangs if g.priority
    }
    return ApiObjects(
        nodes=[node_object(n, i) for i, n in enumerate(state.nodes)],
        pods=pods,
        podgroups=[
            podgroup_object(g, i, members.get(g.name, 0), running.get(g.name, 0))
            for i, g in enumerate(state.gangs)
        ],
        queues=[queue_object(q, i) for i, q in enumerate(state.queues)],
        priority_classes=[priority_class_object(v) for v in sorted(values)],
    )
