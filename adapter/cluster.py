"""The Cluster protocol: what the scheduling loop needs from a cluster, and nothing more.

The embedded simulator (``adapter.sim``) implements it, and the Kubernetes backend will
(``adapter.kube`` has its object conversion and status bodies so far), so ``adapter.loop``
runs the same code on both. A backend reports
every failure it can recover from as ``ClusterError``; anything else is a bug.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from solver.model import ClusterState

GangPhase = Literal["Pending", "Running"]


# A bind held back, not failed: the gang's volumes are being made where the decision
# placed it (``adapter.kube.provisioning``); its pods wait, and are bound once they are.
WAITING_FOR_VOLUMES = "WaitingForVolumes"


class ClusterError(Exception):
    """A refused or failed cluster operation (conflict, vanished object, API error)."""

    def __init__(
        self,
        reason: str,
        message: str,
        uncertain: bool = False,
        retry_elsewhere: bool = False,
        bound_to: str | None = None,
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        # A bind whose outcome is unknown (timed out, then the pod could not be read):
        # it may have landed, so a gang rolled back must evict it too.
        self.uncertain = uncertain
        # The pod is still pending and another node may take it (its node vanished, or
        # refused it): the loop tries once more before it deletes any of the gang.
        self.retry_elsewhere = retry_elsewhere
        # Someone else bound the pod, to this node: it is a running member of its gang.
        self.bound_to = bound_to


class GangStatus(BaseModel):
    """What a PodGroup's status says after a cycle, in every dialect's terms."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gang: str
    phase: GangPhase
    bound: int
    min_member: int
    succeeded: int = 0  # members that ran to completion: they count towards min_member
    reason: str | None = None  # e.g. NotEnoughResources, BindFailed
    message: str = ""
    queue: str = "default"
    # A Running gang's pods left pending (an elastic job's extras, a member made again):
    # why they wait, which each is told.
    left_over: str = ""


class CycleReport(BaseModel):
    """What a cycle tells the cluster's users: gang statuses, new bindings, waiting pods."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    statuses: tuple[GangStatus, ...] = ()
    bound: dict[str, str] = Field(default_factory=dict, description="pod -> node, this cycle")
    waiting_pods: dict[str, str] = Field(
        default_factory=dict, description="pod -> why it is not considered (e.g. no PodGroup)"
    )
    preempted: dict[str, str] = Field(
        default_factory=dict, description="pod -> why it was evicted this cycle, for whom"
    )
    nominated: dict[str, str] = Field(
        default_factory=dict,
        description="pod -> node it will be bound to once the pods evicted for it are gone",
    )
    unnominated: tuple[str, ...] = Field(
        default=(),
        description="pending pods whose nomination lapsed (its hold was released): cleared",
    )


class Cluster(Protocol):
    def snapshot(self, again: bool = False) -> ClusterState:
        """One consistent, immutable view; pods the loop bound earlier show as bound.
        ``again``: a second view within the cycle (its second chance), whose binds it
        serves; what the cycle's decision was made on still names the pods that the
        cycle's later evictions are for (a namesake created since is not evicted)."""
        ...

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        """Bind pending pods to nodes, (pod, node) in the given order; a backend may send
        them concurrently. Returns the refused ones; every other pod is bound."""
        ...

    def unsettled(self) -> set[str]:
        """The pods whose bind failed as ``uncertain`` and is not settled yet: a snapshot
        shows each bound where the bind was sent until the backend learns whether it
        landed (then bound, or pending again)."""
        ...

    def where_bound(self, pods: Collection[str]) -> dict[str, str]:
        """Of ``pods``, those the backend holds bound and running (not terminating, not
        finished), each -> its node, in a snapshot or not: a pod bound to a Node deleted
        meanwhile is in none, and runs again once the Node is back."""
        ...

    def evict(self, pods: Sequence[str], reason: str) -> dict[str, ClusterError]:
        """Undo binds (delete the pods so their controllers recreate them pending).
        Returns the pods it could not evict."""
        ...

    def preempt(self, evictions: Mapping[str, str], again: bool = False) -> dict[str, ClusterError]:
        """Evict running pods (pod -> why) for a preempting gang, gracefully: each keeps
        its node's room while it terminates (and shows ``terminating`` meanwhile). A
        disruption budget may refuse one. ``again``: evictions sent again, of victims that
        lost pods to earlier ones. Returns the pods not evicted."""
        ...

    def report(self, report: CycleReport) -> None:
        """Publish what the cycle found (PodGroup status, pod conditions, Events); best
        effort, and it must not hold up the next cycle."""
        ...
