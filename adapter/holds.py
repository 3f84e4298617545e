"""Room held for preempting gangs while their victims terminate.

A decision that evicts running pods nominates the pending gang that takes their room
(``Decision.nominated``). The victims take their termination grace period to go, so the
gang cannot be bound in the same cycle. Until they are gone the loop *holds* the room:
every snapshot the solver reads shows the held pods as bound to their nominated nodes
(assumed, as kube-scheduler assumes a pod before its bind lands), so no other gang takes
the freed room and the held gang is not placed a second time. Once every victim is gone
the held pods are bound as this cycle's placements, through the same validator and
all-or-nothing bind as any decision.

A hold is dropped (its gang pending again, decided afresh next cycle) when a held pod is
no longer pending or its node is gone, or when its victims have not gone within
``timeout_s`` of the snapshot clock (a stuck finalizer, a PodDisruptionBudget).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from solver.model import ClusterState, Pod

log = logging.getLogger(__name__)

HOLD_TIMEOUT_S = 300.0  # ten default 30 s grace periods


@dataclass(frozen=True)
class Hold:
    gang: str
    pods: dict[str, str]  # pod -> nominated node
    victim_nodes: dict[str, str]  # pod evicted for it -> the node it ran on
    since_s: float  # snapshot clock when the evictions were sent


@dataclass
class Holds:
    timeout_s: float = HOLD_TIMEOUT_S
    held: dict[str, Hold] = field(default_factory=dict)  # gang -> hold

    def __bool__(self) -> bool:
        return bool(self.held)

    def add(self, hold: Hold) -> None:
        self.held[hold.gang] = hold

    def drop(self, gang: str, why: str) -> None:
        if self.held.pop(gang, None) is not None:
            log.info("room held for gang %s released: %s", gang, why)

    def refresh(self, state: ClusterState, pods: Mapping[str, Pod]) -> dict[str, str]:
        """Drop the holds the snapshot makes void; returns gang -> why. ``pods``: the
        snapshot's by name (``by_name``)."""
        nodes = {n.name for n in state.nodes}
        dropped: dict[str, str] = {}
        for gang, hold in list(self.held.items()):
            why = None
            for pod, node in hold.pods.items():
                current = pods.get(pod)
                if current is None or current.node_name is not None or current.terminating:
                    why = f"pod {pod} is no longer pending"
                elif node not in nodes:
                    why = f"node {node} is gone"
                if why:
                    break
            late = state.now_s - hold.since_s > self.timeout_s
            if why is None and late and not self.victims_gone(hold, pods):
                why = f"victims still running after {self.timeout_s:g} s"
            if why is not None:
                dropped[gang] = why
                self.drop(gang, why)
        return dropped

    @staticmethod
    def by_name(state: ClusterState) -> dict[str, Pod]:
        """The snapshot's pods by name, built once per cycle for ``refresh`` and ``split``:
        a scan of every pod per hold cost tens of holds x tens of thousands of pods."""
        return {p.name: p for p in state.pods}

    @staticmethod
    def victims_gone(hold: Hold, pods: Mapping[str, Pod]) -> bool:
        """No victim still on the node it was evicted from (deleted, or pending again)."""
        return all(
            (pod := pods.get(name)) is None or pod.node_name != node
            for name, node in hold.victim_nodes.items()
        )

    def split(self, pods: Mapping[str, Pod]) -> tuple[list[Hold], list[Hold]]:
        """(holds whose victims are gone: bind them now, holds still waiting); ``pods``:
        the snapshot's by name (``by_name``)."""
        ready: list[Hold] = []
        waiting: list[Hold] = []
        for hold in self.held.values():
            (ready if self.victims_gone(hold, pods) else waiting).append(hold)
        return ready, waiting

    def assumed(self, state: ClusterState, holds: list[Hold]) -> ClusterState:
        """The snapshot with the held pods bound to their nominated nodes. Their gangs
        are not victims meanwhile: their pods are not really bound."""
        if not holds:
            return state
        bound = state.with_bindings({pod: node for h in holds for pod, node in h.pods.items()})
        names = {h.gang for h in holds}
        gangs = tuple(
            g.model_copy(update={"preemptible": False}) if g.name in names else g
            for g in state.gangs
        )
        return bound.model_copy(update={"gangs": gangs})
