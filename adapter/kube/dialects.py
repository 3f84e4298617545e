"""The PodGroup and Queue dialects gangsat reads, and how a pod joins a group in each.

A cluster may run any mix; every dialect becomes the same domain ``Gang`` and ``Queue``.

- kube-batch ``scheduling.sigs.dev`` / ``scheduling.incubator.k8s.io`` (the seed's, and
  gangsat's default) and Volcano ``scheduling.volcano.sh``: PodGroup ``spec.minMember``,
  ``spec.queue``, ``spec.priorityClassName``; Queue ``spec.weight``, ``spec.capability``;
  pods join with the annotation ``scheduling.k8s.io/group-name`` (Volcano also
  ``scheduling.volcano.sh/group-name``).
- scheduler-plugins ``scheduling.x-k8s.io``: PodGroup ``spec.minMember``; pods join with
  the label ``scheduling.x-k8s.io/pod-group``; no queues (the ``default`` queue), and
  no priority field: a gang has its pods' highest priority (``members``). Its releases
  before v0.24, and Koordinator still, serve the same PodGroup as
  ``scheduling.sigs.k8s.io`` and join pods with the label
  ``pod-group.scheduling.sigs.k8s.io``: read alike (unread, their gangs were bound
  pod by pod, partially).
- gangs the pods alone declare, with no PodGroup object (``DECLARED``): the labels
  ``pod-group.scheduling.sigs.k8s.io/name`` and ``/min-available`` (scheduler-plugins'
  lightweight coscheduling, as Alibaba Cloud ACK documents gang scheduling), or
  Koordinator's annotations ``gang.scheduling.koordinator.sh/name`` and
  ``/min-available``; in the ``default`` queue, at their pods' highest priority, with no
  status to write (``members.Declared``). Gangs Koordinator's annotation
  ``gang.scheduling.koordinator.sh/groups`` lists together start together
  (``gang_groups``).
- the upstream Workload API ``scheduling.k8s.io`` (KEP-4671: v1alpha2 in 1.36, v1beta1
  and v1alpha3 in 1.37): PodGroup ``spec.schedulingPolicy`` ``gang.minCount`` (``basic``:
  each pod on its own, a gang of one), ``spec.priority`` / ``spec.priorityClassName``;
  pods join with ``spec.schedulingGroup.podGroupName``. The API has no queues (left to
  batch schedulers by design): the PodGroup's annotation ``scheduling.sigs.dev/queue-name``
  names one of gangsat's Queues, else the ``default`` queue.
  1.35's v1alpha1 had no PodGroup objects: a ``Workload`` lists ``spec.podGroups[]``
  (``name``, ``policy`` gang/basic) and pods point at one with ``spec.workloadRef``
  (``name``, ``podGroup``, ``podGroupReplicaKey``). Each (workload, pod group, replica
  key) the pods name is one gang, ``<workload>/<podGroup>[/<replicaKey>]``; it has no
  status to write (the API has none), so only its pods are told why they wait.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from adapter.kube.fields import BadObject, Obj, api_group, created_s, int_field, meta, quantities
from solver.model import DEFAULT_QUEUE, OPEN_QUEUE, Gang, Queue, Resources

KUBE_BATCH_GROUPS = frozenset({"scheduling.sigs.dev", "scheduling.incubator.k8s.io"})
VOLCANO_GROUP = "scheduling.volcano.sh"
COSCHEDULING_GROUPS = frozenset({"scheduling.x-k8s.io", "scheduling.sigs.k8s.io"})
WORKLOAD_GROUP = "scheduling.k8s.io"
PODGROUP_GROUPS = KUBE_BATCH_GROUPS | COSCHEDULING_GROUPS | {VOLCANO_GROUP, WORKLOAD_GROUP}
QUEUE_GROUPS = KUBE_BATCH_GROUPS | {VOLCANO_GROUP}

GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
# Gangs the pods alone declare, with no PodGroup object: (where, name key, minimum key).
# scheduler-plugins' lightweight coscheduling, as Alibaba Cloud's ACK documents its gang
# scheduling, in labels; Koordinator's in annotations.
DECLARED = (
    (
        "labels",
        "pod-group.scheduling.sigs.k8s.io/name",
        "pod-group.scheduling.sigs.k8s.io/min-available",
    ),
    (
        "annotations",
        "gang.scheduling.koordinator.sh/name",
        "gang.scheduling.koordinator.sh/min-available",
    ),
)
QUEUE_ANNOTATION = "scheduling.sigs.dev/queue-name"  # a Workload API PodGroup's queue


def group_of(pod: Obj) -> str | None:
    """The PodGroup a pod (or a pod template) names, in any dialect, without namespace."""
    return _joined(pod)[0]


def _joined(pod: Obj) -> tuple[str | None, tuple[str, str, str] | None]:
    """``group_of``, and where the pod alone declares that gang, the ``DECLARED`` entry
    that names it: only the keys of that entry say its minimum. They are read last: a
    pod joined another way (a PodGroup, a Workload) is of that gang."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    for key in GROUP_ANNOTATIONS:
        if annotations.get(key):
            return str(annotations[key]), None
    labels = metadata.get("labels") or {}
    for key in GROUP_LABELS:
        if labels.get(key):
            return str(labels[key]), None
    spec = pod.get("spec") or {}
    joined = spec.get("schedulingGroup")
    name = joined.get("podGroupName") if isinstance(joined, Mapping) else None
    if name:
        return str(name), None
    ref = spec.get("workloadRef")
    if isinstance(ref, Mapping) and ref.get("name") and ref.get("podGroup"):
        parts = (ref["name"], ref["podGroup"], ref.get("podGroupReplicaKey"))
        return "/".join(str(part) for part in parts if part), None
    for entry in DECLARED:
        declared = (metadata.get(entry[0]) or {}).get(entry[1])
        if declared:
            return str(declared), entry
    return None, None


# Digits enough for any gang (and far below int()'s limit on the length of a string).
MAX_DIGITS = 9


def declared_minimum(pod: Obj) -> int | None:
    """The minMember a pod declares for its gang (``DECLARED``), None where its gang is
    not one it declares; raises ``BadObject`` where that minimum is missing or no integer
    of at least 1 (bound alone, such a pod could be part of a partial gang)."""
    _, entry = _joined(pod)
    if entry is None:
        return None
    where, _, minimum_key = entry
    raw = ((pod.get("metadata") or {}).get(where) or {}).get(minimum_key)
    # ASCII digits only, as Go's strconv reads them (str.isdigit() takes "²", which int()
    # refuses, and "٣"), and few enough for int().
    digits = raw if isinstance(raw, str) and raw.isascii() and raw.isdigit() else ""
    if not (digits and len(digits) <= MAX_DIGITS and int(digits) >= 1):
        raise BadObject(f"{where} {minimum_key} must be an integer >= 1, got {raw!r}")
    return int(digits)


def workload_template(gang: str) -> str | None:
    """For a gang a pod names through ``spec.workloadRef`` (``namespace/workload/podGroup
    [/replicaKey]``), the Workload pod group it is an instance of; else None. No other
    dialect's name has a second slash: object names cannot contain one."""
    parts = gang.split("/")
    return "/".join(parts[:3]) if len(parts) >= 3 else None


# A PodGroup annotated "false" with either is never a victim of preemption or reclaim
# (Volcano users already mark jobs so), nor one whose spec says ``preemptable: false``
# (Volcano's PodGroup field).
NON_PREEMPTIBLE = ("gangsat.io/preemptible", "volcano.sh/preemptable")


def podgroup(obj: Obj, priorities: Mapping[str, int], default_priority: int = 0) -> Gang:
    """A PodGroup of any dialect (``obj["apiVersion"]`` says which). Without a known
    priority class it has the cluster's default priority (the ``globalDefault`` class's
    value, else 0), as Volcano's and kube-batch's snapshots give it."""
    namespace, name = meta(obj)
    spec = obj.get("spec") or {}
    if api_group(str(obj.get("apiVersion") or "")) == WORKLOAD_GROUP:
        min_member, queue, priority = _workload_podgroup(obj, spec, priorities, default_priority)
    else:
        # 0, which neither CRD refuses, asks for no gang: each pod on its own, as Volcano
        # and Coscheduling schedule it (and as an unset minMember is read).
        min_member = max(1, int_field(spec.get("minMember"), "spec.minMember", 0, default=1))
        queue = spec.get("queue") or DEFAULT_QUEUE
        priority = priorities.get(spec.get("priorityClassName") or "", default_priority)
    if not isinstance(queue, str):
        raise BadObject(f"spec.queue must be a name, got {json.dumps(queue)}")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    per_task = spec.get("minTaskMember") or {}
    if not isinstance(per_task, Mapping):
        raise BadObject(f"spec.minTaskMember must map tasks to counts, got {json.dumps(per_task)}")
    return Gang(
        name=f"{namespace}/{name}",
        min_member=min_member,
        min_task_member={
            str(task): int_field(count, f"spec.minTaskMember.{task}", 0)
            for task, count in per_task.items()
        },
        queue=queue,
        priority=priority,
        created_s=created_s(obj),
        preemptible=spec.get("preemptable") is not False
        and not any(str(annotations.get(key, "")).lower() == "false" for key in NON_PREEMPTIBLE),
    )


def _min_count(policy: Any, where: str) -> int:
    if not isinstance(policy, Mapping) or not ("gang" in policy or "basic" in policy):
        raise BadObject(f"{where} must set gang or basic")
    gang = policy.get("gang")
    if gang is None:
        return 1  # basic: each pod is scheduled on its own
    if not isinstance(gang, Mapping):
        raise BadObject(f"{where}.gang must be a mapping")
    return int_field(gang.get("minCount"), f"{where}.gang.minCount", 1)


def _workload_podgroup(
    obj: Obj, spec: Obj, priorities: Mapping[str, int], default_priority: int
) -> tuple[int, Any, int]:
    min_member = _min_count(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    queue = annotations.get(QUEUE_ANNOTATION) or DEFAULT_QUEUE
    priority = spec.get("priority")
    if isinstance(priority, bool) or not isinstance(priority, int):
        # The admission controller fills it in from the class; a manifest may not have.
        priority = priorities.get(spec.get("priorityClassName") or "", default_priority)
    return min_member, queue, priority


def workload_templates(obj: Obj) -> dict[str, Gang]:
    """A 1.35 (v1alpha1) Workload's pod groups, ``namespace/workload/podGroup`` -> the
    gang each of its instances is (named by the pods that join it)."""
    namespace, name = meta(obj)
    groups = (obj.get("spec") or {}).get("podGroups")
    if not isinstance(groups, list) or not groups:
        raise BadObject("spec.podGroups must list the Workload's pod groups")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    templates = {}
    for i, group in enumerate(groups):
        where = f"spec.podGroups[{i}]"
        if not isinstance(group, Mapping) or not group.get("name"):
            raise BadObject(f"{where}.name is missing")
        key = f"{namespace}/{name}/{group['name']}"
        templates[key] = Gang(
            name=key,
            min_member=_min_count(group.get("policy"), f"{where}.policy"),
            queue=str(annotations.get(QUEUE_ANNOTATION) or DEFAULT_QUEUE),
            created_s=created_s(obj),
        )
    return templates


def queue(obj: Obj) -> Queue:
    _, name = meta(obj)
    spec = obj.get("spec") or {}
    weight = int_field(spec.get("weight"), "spec.weight", 1, default=1)
    capability = spec.get("capability")
    reclaimable = spec.get("reclaimable", True)
    if not isinstance(reclaimable, bool):
        raise BadObject(f"spec.reclaimable must be true or false, got {json.dumps(reclaimable)}")
    # A cap above any machine's amount is no cap: how some write "unlimited" (Volcano's
    # root queue in volcano#4350 caps memory at 7630840000Gi). Refused, it took the Queue,
    # and every gang in it waited for a queue "not found".
    caps = quantities(capability, "spec.capability", caps=True)
    # Volcano's controller keeps the state in the status (Open, Closing, Closed, Unknown);
    # an admin closes a queue to drain it. Read as given, so a user sees it named.
    state = (obj.get("status") or {}).get("state")
    return Queue(
        name=name,
        weight=weight,
        capability=Resources(caps) if caps else None,
        reclaimable=reclaimable,
        state=state if isinstance(state, str) and state else OPEN_QUEUE,
    )
