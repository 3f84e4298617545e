"""What one scheduling cycle did (``CycleResult``), and the status of every gang it
reports from that (``gang_statuses``): shared by the loop, its backends, metrics and
run logs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from adapter.cluster import WAITING_FOR_VOLUMES, GangStatus
from adapter.gangs import Gangs
from solver.decision import Decision
from solver.model import DEFAULT_QUEUE, IMPLICIT_GANG_PREFIX, ClusterState, Gang
from solver.validate import Violation


@dataclass
class CycleResult:
    """What one cycle did; ``error`` is set when it could not decide at all."""

    scheduler: str
    decision: Decision | None = None
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node, bound this cycle
    failed_binds: dict[str, str] = field(default_factory=dict)  # pod -> why
    failure_reasons: dict[str, str] = field(default_factory=dict)  # pod -> ClusterError.reason
    deferred: dict[str, str] = field(default_factory=dict)  # pod -> why its bind waits
    rolled_back: dict[str, str] = field(default_factory=dict)  # gang -> why
    evicted: list[str] = field(default_factory=list)  # pods bound, then evicted in rollback
    eviction_causes: dict[str, str] = field(default_factory=dict)  # pod -> ClusterError.reason
    repaired: dict[str, str] = field(default_factory=dict)  # pod -> node, bound at a 2nd try
    stranded: dict[str, str] = field(default_factory=dict)  # pod -> eviction failure
    stranded_on: dict[str, str] = field(default_factory=dict)  # pod -> node it was bound to
    # Gang -> (its pods bound this cycle, kept; its binds of unknown outcome, on which it
    # is whole): no rollback until those are settled (``rollbacks``).
    in_doubt: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # gang -> validator finding
    preempted: dict[str, str] = field(default_factory=dict)  # pod -> why, evicted for a gang
    preempt_failed: dict[str, str] = field(default_factory=dict)  # pod -> eviction refusal
    preemption_rejected: str = ""  # the validator's finding, when no eviction was sent
    holding: dict[str, str] = field(default_factory=dict)  # gang -> what its hold waits for
    # Gang -> why it waits for its volumes, its room held (``holds``; its binds deferred).
    provisioning: dict[str, str] = field(default_factory=dict)
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
        dropped = self.rolled_back.keys() | self.rejected.keys() | self.in_doubt.keys()
        dropped |= self.provisioning.keys()  # bound once its volumes are made
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
    left_over = decision.left_over if decision else {}
    # Each gang's first failed pod, found in one pass: per gang, a scan of every failure
    # was quadratic in a cycle whose binds all failed (thousands of gangs and pods).
    first_failed: dict[str, str] = {}
    for pod in sorted(result.failed_binds):
        first_failed.setdefault(gangs.gang(pod), pod)
    # Bound this cycle, per gang of a Koordinator GangGroup (a task of its snapshot gang).
    by_member: Counter[str | None] = Counter(
        gangs.task_of.get(pod)
        for pod in ([*result.bound, *result.stranded] if gangs.grouped else ())
        if gangs.gang(pod) in gangs.grouped
    )

    def pending(name: str) -> tuple[str, str]:
        failed = first_failed.get(name)
        if name in result.rolled_back:
            return "BindFailed", result.rolled_back[name]
        if name in result.in_doubt:
            kept, doubted = result.in_doubt[name]
            return "BindFailed", (
                f"bind of {doubted[0]} failed ({result.failed_binds[doubted[0]]}) and may "
                f"still land: {len(kept)} pod(s) bound this cycle are kept until that is "
                "known, and deleted if the gang is still short then"
            )
        if failed is not None:
            return "BindFailed", f"bind of {failed} failed ({result.failed_binds[failed]})"
        if name in result.provisioning:
            return WAITING_FOR_VOLUMES, result.provisioning[name]
        if name in result.rejected:
            return "InvalidDecision", result.rejected[name]
        if name in result.holding:
            return "Preempting", result.holding[name]
        if name in reasons:
            return "NotEnoughResources", reasons[name]
        if result.error:
            return "SchedulerError", result.error
        return "Waiting", "not considered this cycle"

    statuses = []
    for gang in state.gangs:
        bound = held.get(gang.name, 0)
        reason: str | None
        if bound >= gang.min_running:  # members that succeeded count: Running
            reason, message = None, ""
            extra = left_over.get(gang.name, "")
        else:
            reason, message = pending(gang.name)
            extra = ""
            if reason == "Waiting" and decision is not None and gang.name not in gangs.waiting:
                # Short with no pod to place (members failed, were deleted, or are yet to
                # be made): Volcano's NotEnoughTasks, where "not considered" said nothing.
                reason = "NotEnoughTasks"
                if leaving := gangs.leaving.get(gang.name, 0):
                    # Evicted (preempted, reclaimed) or deleted: said so, where "failed or
                    # deleted" left a preempted gang's users to guess.
                    message = (
                        f"{bound} of minMember {gang.min_member} pod(s) bound and {leaving} "
                        "terminating (evicted or deleted; their Events say why)"
                    )
                else:
                    message = (
                        f"{bound} of minMember {gang.min_member} pod(s) bound and no other "
                        "pod of it to place: its other members failed, were deleted or are "
                        "yet to be made, or wait for something their Events name"
                    )
        status = GangStatus(
            gang=gang.name,
            phase="Running" if reason is None else "Pending",
            bound=bound,
            min_member=gang.min_member,
            succeeded=gang.succeeded,
            reason=reason,
            message=message,
            queue=gang.queue,
            left_over=extra,
        )
        if gang.members:
            statuses += member_statuses(gang, status, gangs.task_held.get(gang.name), by_member)
        else:
            statuses.append(status)
    # A pod of no PodGroup is a gang of one that ``state.gangs`` does not list: one that
    # waits for a reason is told it as well, as kube-scheduler tells every pod it cannot
    # place (before, such a pod was told nothing, cycle after cycle).
    alone = {
        name
        for name in (*reasons, *first_failed, *result.rejected, *result.holding)
        if name.startswith(IMPLICIT_GANG_PREFIX) and not held.get(name)
    }
    for name in sorted(alone):
        reason, message = pending(name)
        statuses.append(
            GangStatus(
                gang=name,
                phase="Pending",
                bound=0,
                min_member=1,
                reason=reason,
                message=message,
                queue=DEFAULT_QUEUE,
            )
        )
    return statuses


def member_statuses(
    gang: Gang,
    status: GangStatus,
    held: Counter[str | None] | None,
    bound_now: Counter[str | None],
) -> list[GangStatus]:
    """A Koordinator GangGroup's status (``Gang.members``: one gang of the snapshot whose
    tasks are its gangs), as one per gang: each counts its own pods (``held``: per task,
    bound before the cycle and succeeded; ``bound_now``: bound this cycle) against its own
    minimum, and says the group's reason while short."""
    held = held or Counter()
    names = ", ".join(gang.members)
    out = []
    for member in gang.members:
        least = gang.min_task_member.get(member, 1)
        succeeded = gang.succeeded_by_task.get(member, 0)
        bound = held[member] - succeeded + bound_now[member]
        reason: str | None = None
        message = ""
        if bound + succeeded < least:
            reason = status.reason or "NotEnoughResources"
            message = f"gang group [{names}]: {status.message or status.left_over}"
        out.append(
            status.model_copy(
                update={
                    "gang": member,
                    "phase": "Running" if reason is None else "Pending",
                    "bound": bound,
                    "min_member": least,
                    "succeeded": succeeded,
                    "reason": reason,
                    "message": message,
                    "left_over": status.left_over if reason is None else "",
                }
            )
        )
    return out
