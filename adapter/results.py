"""What one scheduling cycle did (``CycleResult``), and the status of every gang it
reports from that (``gang_statuses``): shared by the loop, its backends, metrics and
run logs."""

from __future__ import annotations

from dataclasses import dataclass, field

from adapter.cluster import GangStatus
from adapter.gangs import Gangs
from solver.model import ClusterState, Decision
from solver.validate import Violation


@dataclass
class CycleResult:
    """What one cycle did; ``error`` is set when it could not decide at all."""

    scheduler: str
    decision: Decision | None = None
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node, bound this cycle
    failed_binds: dict[str, str] = field(default_factory=dict)  # pod -> why
    failure_reasons: dict[str, str] = field(default_factory=dict)  # pod -> ClusterError.reason
    rolled_back: dict[str, str] = field(default_factory=dict)  # gang -> why
    evicted: list[str] = field(default_factory=list)  # pods bound, then evicted in rollback
    eviction_causes: dict[str, str] = field(default_factory=dict)  # pod -> ClusterError.reason
    repaired: dict[str, str] = field(default_factory=dict)  # pod -> node, bound at a 2nd try
    stranded: dict[str, str] = field(default_factory=dict)  # pod -> eviction failure
    stranded_on: dict[str, str] = field(default_factory=dict)  # pod -> node it was bound to
    rejected: dict[str, str] = field(default_factory=dict)  # gang -> validator finding
    preempted: dict[str, str] = field(default_factory=dict)  # pod -> why, evicted for a gang
    preempt_failed: dict[str, str] = field(default_factory=dict)  # pod -> eviction refusal
    preemption_rejected: str = ""  # the validator's finding, when no eviction was sent
    holding: dict[str, str] = field(default_factory=dict)  # gang -> what its hold waits for
    released: dict[str, str] = field(default_factory=dict)  # gang -> why its hold was dropped
    violations: list[Violation] = field(default_factory=list)
    statuses: list[GangStatus] = field(default_factory=list)
    pending_pods: int = 0
    error: str | None = None
    snapshot_s: float = 0.0
    decide_s: float = 0.0
    bind_s: float = 0.0
    report_s: float = 0.0
    total_s: float = 0.0

    def admitted(self) -> list[str]:
        """Gangs the decision admitted that this cycle bound and kept."""
        if self.decision is None:
            return []
        dropped = self.rolled_back.keys() | self.rejected.keys()
        return [g for g in self.decision.admitted if g not in dropped]


def gang_statuses(state: ClusterState, gangs: Gangs, result: CycleResult) -> list[GangStatus]:
    """Each gang's status as the cycle left it: Running at minMember (members that
    succeeded count), else Pending with the first reason that holds, in the order a user
    acts on them (a failed bind, a refused decision, a preemption under way, no room)."""
    held = dict(gangs.held)
    for pod in [*result.bound, *result.stranded]:
        held[gangs.gang(pod)] = held.get(gangs.gang(pod), 0) + 1
    decision = result.decision
    reasons = decision.unschedulable if decision else {}
    # Each gang's first failed pod, found in one pass: per gang, a scan of every failure
    # was quadratic in a cycle whose binds all failed (thousands of gangs and pods).
    first_failed: dict[str, str] = {}
    for pod in sorted(result.failed_binds):
        first_failed.setdefault(gangs.gang(pod), pod)
    statuses = []
    for gang in state.gangs:
        bound = held.get(gang.name, 0)
        failed = first_failed.get(gang.name)
        reason: str | None
        if bound >= gang.min_running:  # members that succeeded count: Running
            reason, message = None, ""
        elif gang.name in result.rolled_back:
            reason, message = "BindFailed", result.rolled_back[gang.name]
        elif failed is not None:
            reason = "BindFailed"
            message = f"bind of {failed} failed ({result.failed_binds[failed]})"
        elif gang.name in result.rejected:
            reason, message = "InvalidDecision", result.rejected[gang.name]
        elif gang.name in result.holding:
            reason, message = "Preempting", result.holding[gang.name]
        elif gang.name in reasons:
            reason, message = "NotEnoughResources", reasons[gang.name]
        elif result.error:
            reason, message = "SchedulerError", result.error
        else:
            reason, message = "Waiting", "not considered this cycle"
        statuses.append(
            GangStatus(
                gang=gang.name,
                phase="Running" if reason is None else "Pending",
                bound=bound,
                min_member=gang.min_member,
                succeeded=gang.succeeded,
                reason=reason,
                message=message,
                queue=gang.queue,
            )
        )
    return statuses
