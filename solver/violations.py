"""What the validators report: one broken rule per ``Violation``, and the sums they
share. Below ``solver.validate`` and ``solver.validate_preemption``; reads only
``solver.model``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from solver.model import DEFAULT_QUEUE, Gang, Pod, Queue

ViolationKind = Literal[
    "unknown-pod",
    "already-bound",
    "gated",
    "terminating",
    "unknown-node",
    "predicate",
    "capacity",
    "partial-gang",
    "capability",
    "invalid-gang",
    "eviction",
    "nomination",
]


class Violation(BaseModel):
    """One broken rule. ``subject`` is the pod, node, gang or queue it concerns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ViolationKind
    subject: str
    message: str


def demand_sum(pods: Iterable[Pod]) -> defaultdict[str, int]:
    """Total demand (requests plus pod slots); absent names read as zero."""
    total: defaultdict[str, int] = defaultdict(int)
    for pod in pods:
        for name, quantity in pod.requests.pod_demand_items():
            total[name] += quantity
    return total


def queue_of(pod: Pod, gangs: Mapping[str, Gang], queues: Mapping[str, Queue]) -> str | None:
    if pod.gang is None:
        return DEFAULT_QUEUE
    gang = gangs.get(pod.gang)
    if gang is None or gang.queue not in queues:
        return None
    return gang.queue
