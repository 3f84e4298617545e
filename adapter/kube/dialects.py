"""The PodGroup and Queue dialects gangsat reads, and how a pod joins a group in each.

A cluster may run any mix; every dialect becomes the same domain ``Gang`` and ``Queue``.

- kube-batch ``scheduling.sigs.dev`` / ``scheduling.incubator.k8s.io`` (the seed's, and
  gangsat's default) and Volcano ``scheduling.volcano.sh``: PodGroup ``spec.minMember``,
  ``spec.queue``, ``spec.priorityClassName``; Queue ``spec.weight``, ``spec.capability``;
  pods join with the annotation ``scheduling.k8s.io/group-name`` (Volcano also
  ``scheduling.volcano.sh/group-name``).
- scheduler-plugins ``scheduling.x-k8s.io``: PodGroup ``spec.minMember``; pods join with
  the label ``scheduling.x-k8s.io/pod-group``; no queues (the ``default`` queue).
- the upstream Workload API ``scheduling.k8s.io`` (KEP-4671: v1alpha2 in 1.36, v1beta1
  and v1alpha3 in 1.37): PodGroup ``spec.schedulingPolicy`` ``gang.minCount`` (``basic``:
  each pod on its own, a gang of one), ``spec.priority`` / ``spec.priorityClassName``;
  pods join with ``spec.schedulingGroup.podGroupName``. The API has no queues (left to
  batch schedulers by design): the PodGroup's annotation ``scheduling.sigs.dev/queue-name``
  names one of gangsat's Queues, else the ``default`` queue.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from adapter.kube.fields import BadObject, Obj, api_group, created_s, int_field, meta, quantities
from solver.model import DEFAULT_QUEUE, Gang, Queue, Resources

KUBE_BATCH_GROUPS = frozenset({"scheduling.sigs.dev", "scheduling.incubator.k8s.io"})
VOLCANO_GROUP = "scheduling.volcano.sh"
COSCHEDULING_GROUP = "scheduling.x-k8s.io"
WORKLOAD_GROUP = "scheduling.k8s.io"
PODGROUP_GROUPS = KUBE_BATCH_GROUPS | {VOLCANO_GROUP, COSCHEDULING_GROUP, WORKLOAD_GROUP}
QUEUE_GROUPS = KUBE_BATCH_GROUPS | {VOLCANO_GROUP}

GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_ANNOTATION = "scheduling.sigs.dev/queue-name"  # a Workload API PodGroup's queue


def group_of(pod: Obj) -> str | None:
    """The PodGroup a pod (or a pod template) names, in any dialect, without namespace."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    for key in GROUP_ANNOTATIONS:
        if annotations.get(key):
            return str(annotations[key])
    label = (metadata.get("labels") or {}).get(GROUP_LABEL)
    if label:
        return str(label)
    joined = (pod.get("spec") or {}).get("schedulingGroup")
    name = joined.get("podGroupName") if isinstance(joined, Mapping) else None
    return str(name) if name else None


def without_group(pod: Obj) -> Obj:
    """The pod as a member of no group (every dialect's way of joining removed)."""
    metadata = dict(pod.get("metadata") or {})
    metadata["annotations"] = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if k not in GROUP_ANNOTATIONS
    }
    metadata["labels"] = {
        k: v for k, v in (metadata.get("labels") or {}).items() if k != GROUP_LABEL
    }
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "schedulingGroup"}
    return {**pod, "metadata": metadata, "spec": spec}


def podgroup(obj: Obj, priorities: Mapping[str, int]) -> Gang:
    """A PodGroup of any dialect (``obj["apiVersion"]`` says which)."""
    namespace, name = meta(obj)
    spec = obj.get("spec") or {}
    if api_group(str(obj.get("apiVersion") or "")) == WORKLOAD_GROUP:
        min_member, queue, priority = _workload_podgroup(obj, spec, priorities)
    else:
        min_member = int_field(spec.get("minMember"), "spec.minMember", 1, default=1)
        queue = spec.get("queue") or DEFAULT_QUEUE
        priority = priorities.get(spec.get("priorityClassName") or "", 0)
    if not isinstance(queue, str):
        raise BadObject(f"spec.queue must be a name, got {json.dumps(queue)}")
    return Gang(
        name=f"{namespace}/{name}",
        min_member=min_member,
        queue=queue,
        priority=priority,
        created_s=created_s(obj),
    )


def _workload_podgroup(obj: Obj, spec: Obj, priorities: Mapping[str, int]) -> tuple[int, Any, int]:
    policy = spec.get("schedulingPolicy")
    if not isinstance(policy, Mapping) or not ("gang" in policy or "basic" in policy):
        raise BadObject("spec.schedulingPolicy must set gang or basic")
    gang = policy.get("gang")
    if gang is None:
        min_member = 1  # basic: each pod is scheduled on its own
    elif isinstance(gang, Mapping):
        min_member = int_field(gang.get("minCount"), "spec.schedulingPolicy.gang.minCount", 1)
    else:
        raise BadObject("spec.schedulingPolicy.gang must be a mapping")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    queue = annotations.get(QUEUE_ANNOTATION) or DEFAULT_QUEUE
    priority = spec.get("priority")
    if isinstance(priority, bool) or not isinstance(priority, int):
        # The admission controller fills it in from the class; a manifest may not have.
        priority = priorities.get(spec.get("priorityClassName") or "", 0)
    return min_member, queue, priority


def queue(obj: Obj) -> Queue:
    _, name = meta(obj)
    spec = obj.get("spec") or {}
    weight = int_field(spec.get("weight"), "spec.weight", 1, default=1)
    capability = spec.get("capability")
    return Queue(
        name=name,
        weight=weight,
        capability=Resources(quantities(capability, "spec.capability")) if capability else None,
    )
