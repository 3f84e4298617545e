"""The Cluster protocol: what the scheduling loop needs from a cluster, and nothing more.

The embedded simulator (``adapter.sim``) implements it, and the Kubernetes backend will
(``adapter.kube`` has its object conversion and status bodies so far), so ``adapter.loop``
runs the same code on both. A backend reports
every failure it can recover from as ``ClusterError``; anything else is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from solver.model import ClusterState

GangPhase = Literal["Pending", "Running"]


class ClusterError(Exception):
    """A refused or failed cluster operation (conflict, vanished object, API error)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class GangStatus(BaseModel):
    """What a PodGroup's status says after a cycle, in every dialect's terms."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gang: str
    phase: GangPhase
    bound: int
    min_member: int
    reason: str | None = None  # e.g. NotEnoughResources, BindFailed
    message: str = ""


class Cluster(Protocol):
    def snapshot(self) -> ClusterState:
        """One consistent, immutable view; pods the loop bound earlier show as bound."""
        ...

    def bind(self, pod: str, node: str) -> None:
        """Bind a pending pod; ``ClusterError`` if refused."""
        ...

    def evict(self, pod: str, reason: str) -> None:
        """Undo a bind (delete the pod so its controller recreates it pending)."""
        ...

    def report(self, statuses: Sequence[GangStatus]) -> None:
        """Publish gang statuses (PodGroup status, events); best effort."""
        ...
