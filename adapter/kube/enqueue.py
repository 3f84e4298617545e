"""Volcano's Inqueue phase, which its job controller waits for before it creates pods.

Volcano's job controller creates a Job's pods only once the Job's PodGroup has left
Pending; Volcano's scheduler moves it to Inqueue (its `enqueue` action) when the gang's
``spec.minResources`` fit. Under gangsat nothing else does, so a Volcano Job would never
get a pod. Here a Volcano PodGroup still Pending is moved to Inqueue when its
minResources fit in what the schedulable nodes have free, less what PodGroups already
Inqueue without pods claim (their pods are on the way) — Volcano's admission without its
overcommit factor. A PodGroup without minResources is admitted at once. One with some
pods is taken too, as Volcano's enqueue takes every pending job: its controller may have
more pods to create (or re-create), and does so only once it is Inqueue. gangsat never
writes Pending over Inqueue (``adapter.kube.status``). Nor is one moved whose queue is
closed (``Queue.admits``): an admin drains a queue so, and its Jobs are not started; nor
one whose queue does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from adapter.kube.fields import stored_status
from adapter.quantity import resources
from solver.model import DEFAULT_QUEUE, ClusterState
from solver.predicates import insufficient

Obj = Mapping[str, Any]


REQUESTS = "requests."
# Quota names Volcano's job controller also writes (it sums the pods' quota usage,
# Kubernetes' pod evaluator): limits are no request, and object counts no resource.
NOT_REQUESTS = ("limits.", "count/")


def min_resources(podgroup: Obj) -> dict[str, int] | None:
    """``spec.minResources`` in the solver's units; None when unreadable (not admitted).

    As Volcano's job controller writes it, it holds quota names beside resource names
    (``requests.cpu`` and ``cpu``, ``limits.memory``, ``count/pods``): ``requests.X`` reads
    as X (the larger, where both are given), limits and counts are dropped."""
    spec = podgroup.get("spec")
    raw = spec.get("minResources") if isinstance(spec, Mapping) else None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        return None
    need: dict[str, int] = {}
    for key, value in raw.items():
        if str(key).startswith(NOT_REQUESTS):
            continue
        name = str(key).removeprefix(REQUESTS)
        try:
            [(name, amount)] = resources({name: value}).items()
        # An unparseable quantity, an invalid resource name, or no quantity at all (a
        # list, a map: a CRD without a schema stores anything).
        except (ValueError, TypeError):
            return None
        need[name] = max(need.get(name, 0), amount)
    return need


def free_room(state: ClusterState) -> dict[str, int]:
    """What the schedulable nodes have free, summed by resource."""
    used: dict[str, dict[str, int]] = {}
    for pod in state.bound_pods():
        held = used.setdefault(str(pod.node_name), {})
        for r, q in pod.demand().items():  # with its pod slot, as every fit counts it
            held[r] = held.get(r, 0) + q
    room: dict[str, int] = {}
    for node in state.nodes:
        if not node.in_service:
            continue
        for r, q in node.allocatable.items():
            room[r] = room.get(r, 0) + max(0, q - used.get(node.name, {}).get(r, 0))
    return room


def to_enqueue(
    podgroups: Iterable[tuple[str, Obj]], state: ClusterState, with_pods: set[str]
) -> list[str]:
    """The keys of the Volcano PodGroups (key, object) to move from Pending to Inqueue."""
    claimed: list[dict[str, int]] = []  # minResources of PodGroups Inqueue without pods
    waiting: list[tuple[str, str, dict[str, int]]] = []  # (created, key, minResources)
    closed = {q.name for q in state.queues if not q.admits()}
    # A queue that does not exist admits nothing either, as Volcano's enqueue skips such a
    # Job: moved to Inqueue, its controller made pods that waited for the queue, and its
    # minResources were claimed meanwhile from the room others could use.
    known = {q.name for q in state.queues} | {DEFAULT_QUEUE}
    for key, obj in podgroups:
        phase = stored_status(obj).get("phase") or "Pending"
        need = min_resources(obj)
        spec = obj.get("spec")
        queue = (spec.get("queue") if isinstance(spec, Mapping) else None) or DEFAULT_QUEUE
        # A queue that is no name (a CRD without a schema keeps one) refuses the PodGroup.
        open_queue = isinstance(queue, str) and queue in known and queue not in closed
        if phase == "Inqueue" and need and key not in with_pods:
            claimed.append(need)
        elif phase == "Pending" and need is not None and open_queue:
            created = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
            waiting.append((created, key, need))
    if not waiting:
        # Summing the free room walks every bound pod: not every cycle, for nothing.
        return []
    room = free_room(state)
    for need in claimed:
        for r, q in need.items():  # claimed by pods on their way
            room[r] = room.get(r, 0) - q
    admitted = []
    for _, key, need in sorted(waiting, key=lambda w: (w[0], w[1])):  # oldest first
        if not insufficient(need, room):
            for r, q in need.items():
                room[r] -= q
            admitted.append(key)
    return admitted
