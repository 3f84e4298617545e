"""A queue as the schedulers read it: weight, capability, what it holds and asks for, and
the share it deserves of the cluster's schedulable room."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.arrays import BoolArray, IntArray
from solver.fairness import deserved
from solver.model import PODS, Queue
from solver.units import model_unit, share_units

NO_CAP = -1


@dataclass
class QueueInfo:
    index: int
    name: str
    weight: int
    capability: IntArray  # per resource, NO_CAP where uncapped
    used: IntArray  # held by bound pods
    demand: IntArray  # used + pending pods of schedulable gangs
    deserved: IntArray  # water-filled, rounded down
    dominant: int  # resource index of the queue's dominant demand share, -1 if none

    def room(self) -> IntArray:
        """What the queue may still take before its capability; huge where uncapped."""
        big = np.iinfo(np.int64).max // 4
        return np.where(self.capability == NO_CAP, big, np.maximum(self.capability - self.used, 0))

    def over(self) -> BoolArray:
        """Per resource, whether what the queue holds is already above its capability (a
        lowered one). Its room there is 0, not negative: what its own victims free is
        then not counted, since it would first have to cover the excess."""
        over: BoolArray = (self.capability != NO_CAP) & (self.used > self.capability)
        return over


def queue_infos(
    names: list[str],
    by_name: dict[str, Queue],
    r_index: dict[str, int],
    used: IntArray,
    demand: IntArray,
    totals: IntArray,
) -> list[QueueInfo]:
    """Each queue (``names``, in the problem's order) as the schedulers read it: its
    capability and usage in model units, and its deserved share, water-filled from the
    weights over what every queue asks (``solver.fairness``)."""
    caps: list[list[int | None]] = []
    for name in names:
        capability = by_name[name].capability
        caps.append(
            [
                capability[r] // model_unit(r)
                if capability is not None and r in capability.root
                else None
                for r in r_index
            ]
        )
    weights = [by_name[name].weight for name in names]
    fair = deserved([int(t) for t in totals], weights, demand.tolist(), caps)
    infos = []
    for q, name in enumerate(names):
        shares = share_units(demand[q], totals)
        # The pod slot is a resource only when nothing else is asked for.
        candidates = [
            (int(shares[r]), -r) for r, res in enumerate(r_index) if res != PODS and shares[r] > 0
        ] or [(int(shares[r]), -r) for r in range(len(r_index)) if shares[r] > 0]
        infos.append(
            QueueInfo(
                index=q,
                name=name,
                weight=weights[q],
                capability=np.array([NO_CAP if c is None else c for c in caps[q]], dtype=np.int64),
                used=used[q].copy(),
                demand=demand[q].copy(),
                deserved=np.array([int(x) for x in fair[q]], dtype=np.int64),
                dominant=-max(candidates)[1] if candidates else -1,
            )
        )
    return infos
