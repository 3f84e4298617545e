"""Deserved shares: weighted water-filling of the cluster among queues.

As kube-batch's and Volcano's ``proportion``: each resource's total is poured into the
queues in proportion to their weights; a queue stops filling at what it asks for
(allocated + pending) or at its capability, and what it does not take flows on to the
others. Done per resource, in exact rational arithmetic, so the result does not depend
on the order of the queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from solver.model import CPU, DEFAULT_QUEUE, GPU, ClusterState, Node, Queue


def water_fill(total: int, weights: Sequence[int], caps: Sequence[int | None]) -> list[Fraction]:
    """Split ``total`` by ``weights``; no share exceeds its cap (None = uncapped)."""
    shares = [Fraction(0)] * len(weights)
    active = [i for i, w in enumerate(weights) if w > 0 and (caps[i] is None or caps[i] != 0)]
    remaining = Fraction(total)
    while active and remaining > 0:
        weight_sum = sum(weights[i] for i in active)
        # The queue that saturates first bounds how far every active queue can rise
        # this round; filling to that level and repeating is exact and ends within
        # len(weights) rounds.
        level = remaining / weight_sum
        saturating = []
        for i in active:
            cap = caps[i]
            if cap is not None:
                room = Fraction(cap) - shares[i]
                if room <= level * weights[i]:
                    saturating.append((room / weights[i], i))
        if saturating:
            level = min(lvl for lvl, _ in saturating)
        for i in active:
            shares[i] += level * weights[i]
        remaining = Fraction(total) - sum(shares)
        active = [i for i in active if (cap := caps[i]) is None or shares[i] < cap]
        if not saturating:
            break
    return shares


def deserved(
    totals: Sequence[int],
    weights: Sequence[int],
    demands: Sequence[Sequence[int]],
    capabilities: Sequence[Sequence[int | None]],
) -> list[list[Fraction]]:
    """Per queue, per resource: the deserved amount. ``demands[q][r]`` caps queue q."""
    result = [[Fraction(0)] * len(totals) for _ in weights]
    for r, total in enumerate(totals):
        caps: list[int | None] = []
        for q in range(len(weights)):
            cap = capabilities[q][r]
            want = demands[q][r]
            caps.append(want if cap is None else min(want, cap))
        for q, share in enumerate(water_fill(total, weights, caps)):
            result[q][r] = share
    return result


@dataclass(frozen=True)
class QueueShare:
    weight: int
    deserved: float  # of ``resource``, by water-filling over what the queues ask for
    allocated: int  # held by the queue's bound pods
    pending: int  # asked for by its pending pods

    @property
    def share(self) -> float:
        """allocated / deserved; 1.0 is exactly the fair share (0 if it deserves nothing)."""
        return self.allocated / self.deserved if self.deserved > 0 else 0.0


def fair_resource(nodes: Iterable[Node]) -> str:
    """The resource queues compete for: GPUs where the cluster has them, else CPU."""
    return GPU if any(n.allocatable[GPU] for n in nodes) else CPU


def deserved_by_queue(
    total: int, queues: Sequence[Queue], wants: Mapping[str, int], resource: str
) -> dict[str, float]:
    """Each queue's deserved amount of ``resource``: ``total`` water-filled by weight,
    capped by what the queue wants (holds plus waits for) and by its capability."""
    caps: list[int | None] = []
    for q in queues:
        want = wants.get(q.name, 0)
        cap = q.capability
        caps.append(min(want, cap[resource]) if cap is not None and resource in cap.root else want)
    shares = water_fill(total, [q.weight for q in queues], caps)
    return {q.name: float(share) for q, share in zip(queues, shares, strict=True)}


def queue_shares(state: ClusterState, resource: str) -> dict[str, QueueShare]:
    """Each queue's weight, deserved and allocated amount of ``resource`` in a snapshot."""
    gang_queue = {g.name: g.queue for g in state.gangs}
    queues = {q.name: q for q in state.queues}
    queues.setdefault(DEFAULT_QUEUE, Queue(name=DEFAULT_QUEUE))
    allocated = dict.fromkeys(queues, 0)
    pending = dict.fromkeys(queues, 0)
    for pod in state.pods:
        queue = gang_queue.get(pod.gang_name(), DEFAULT_QUEUE)
        if queue not in queues:
            continue
        into = allocated if pod.node_name is not None else pending
        # Pod.demand()'s amount, without its dict per pod (every pod, every cycle)
        into[queue] += pod.requests.pod_amount(resource)
    # As the solver totals it (``prepare``): nodes that take pods and report ready.
    total = sum(n.allocatable[resource] for n in state.nodes if n.in_service)
    wants = {name: allocated[name] + pending[name] for name in queues}
    deserved = deserved_by_queue(total, list(queues.values()), wants, resource)
    return {
        name: QueueShare(q.weight, deserved[name], allocated[name], pending[name])
        for name, q in queues.items()
    }
