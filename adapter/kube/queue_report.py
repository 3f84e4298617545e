"""What each Queue object's status should say after a cycle: how many of its PodGroups
are pending and running, and what their bound pods request (``allocated_by_queue``), in the
Queue's own dialect (``adapter.kube.status.queue_status``). The reporter writes those
that differ from what the object already says."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapter.cluster import GangStatus
from adapter.kube.cache import ClusterCache, key_of
from adapter.kube.dialects import COSCHEDULING_GROUPS
from adapter.kube.fields import stored_status
from adapter.kube.pod_tally import PodTally
from adapter.kube.resources import DIALECTS, Resource
from adapter.kube.status import queue_status
from adapter.quantity import quantity
from solver.model import DEFAULT_QUEUE, IMPLICIT_GANG_PREFIX


@dataclass(frozen=True)
class QueueWrite:
    resource: Resource
    name: str
    body: dict[str, Any]
    sig: tuple[Any, ...]  # what it says, to skip a write already sent


def allocated_by_queue(tally: PodTally, gang_queue: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per queue, what its PodGroups' bound pods request, as quantities. Pods outside a
    PodGroup (DaemonSets, other schedulers' pods) are no queue's."""
    counts: Counter[tuple[str, int]] = Counter()  # (queue, id of a request set)
    for (gang, requests), count in tally.bound.items():
        counts[gang_queue.get(gang, DEFAULT_QUEUE), requests] += count
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    for (queue_name, requests), count in counts.items():
        for name, amount in tally.request_sets[requests].items():
            totals[queue_name][name] += amount * count
    return {
        q: {name: quantity(name, amount) for name, amount in sorted(used.items()) if amount}
        for q, used in totals.items()
    }


def queue_writes(
    cache: ClusterCache,
    statuses: Sequence[GangStatus],
    allocation: Callable[[], dict[str, dict[str, str]]],
) -> list[QueueWrite]:
    """The Queue statuses that differ from what their objects say. ``allocation`` totals
    every bound pod's requests by queue (``allocated_by_queue``, from the report's tally of
    the pods): summed only when there is a Queue object to write it to."""
    queues = [
        (resource, cache.of(resource))
        for resource in DIALECTS
        if resource.kind == "Queue" and resource.group not in COSCHEDULING_GROUPS
    ]
    if not any(objects for _, objects in queues):
        return []
    used = allocation()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for s in statuses:
        if not s.gang.startswith(IMPLICIT_GANG_PREFIX):
            counts[s.queue][s.phase.lower()] += 1
    writes = []
    for resource, objects in queues:
        for obj in objects:
            name = key_of(obj)
            c = counts.get(name, Counter())
            current = stored_status(obj)
            body = queue_status(
                resource.group,
                c["pending"],
                c["running"],
                used.get(name, {}),
                current.get("allocated"),
            )
            if {k: current.get(k, 0) for k in body} != body:
                sig = ("Queue", body["pending"], body["running"], str(body.get("allocated")))
                writes.append(QueueWrite(resource, name, body, sig))
    return writes
