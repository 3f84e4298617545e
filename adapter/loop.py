"""The one scheduling loop: snapshot -> decide -> validate -> bind -> report -> metrics.

``run_cycle`` is all a backend needs: the simulator calls it on its virtual clock, the
Kubernetes backend on a timer. Its promise, whatever the cluster does: a gang is bound
whole or not at all. A decision the validator rejects is not bound; a gang whose bind
fails part-way has the pods bound this cycle evicted again; every failure becomes a
reported condition on the gang, never an exception out of the loop.

The stock-scheduler baseline (``greedy``) is bound pod by pod without that rule — it is
what gangsat is measured against, deadlocks included.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from adapter.cluster import Cluster, ClusterError, GangStatus
from adapter.metrics import LoopMetrics
from solver.config import SolverConfig
from solver.model import ClusterState, Decision
from solver.schedulers import SCHEDULERS
from solver.validate import Violation, check

log = logging.getLogger(__name__)

NOT_GANG_AWARE = frozenset({"greedy"})


class LoopSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scheduler: str = Field(default="cpsat", description="a key of solver.schedulers.SCHEDULERS")
    solver: SolverConfig = Field(default_factory=SolverConfig)
    atomic_gangs: bool | None = Field(
        default=None,
        description="bind gangs all-or-nothing; default: yes unless the scheduler is greedy",
    )

    def atomic(self) -> bool:
        if self.atomic_gangs is not None:
            return self.atomic_gangs
        return self.scheduler not in NOT_GANG_AWARE


@dataclass
class CycleResult:
    """What one cycle did; ``error`` is set when it could not decide at all."""

    scheduler: str
    decision: Decision | None = None
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node, bound this cycle
    failed_binds: dict[str, str] = field(default_factory=dict)  # pod -> why
    rolled_back: dict[str, str] = field(default_factory=dict)  # gang -> why
    evicted: list[str] = field(default_factory=list)  # pods bound, then evicted in rollback
    stranded: dict[str, str] = field(default_factory=dict)  # pod -> eviction failure
    rejected: dict[str, str] = field(default_factory=dict)  # gang -> validator finding
    violations: list[Violation] = field(default_factory=list)
    statuses: list[GangStatus] = field(default_factory=list)
    pending_pods: int = 0
    error: str | None = None
    snapshot_s: float = 0.0
    decide_s: float = 0.0
    bind_s: float = 0.0
    total_s: float = 0.0

    def admitted(self) -> list[str]:
        """Gangs this cycle bound and kept (not rolled back or rejected)."""
        if self.decision is None:
            return []
        return [g for g in self.decision.admitted if g not in self.rolled_back]


def _gang_of(state: ClusterState) -> tuple[dict[str, str], dict[str, int]]:
    gang_of = {p.name: p.gang_name() for p in state.pods}
    need = {g.name: g.min_member for g in state.gangs}
    return gang_of, need


def _rejected_gangs(
    state: ClusterState, decision: Decision, violations: list[Violation], atomic: bool
) -> dict[str, str]:
    """Gangs not to bind: any gang a hard violation touches loses all its placements.

    A broken node capacity or queue capability rejects every gang placed onto it this
    cycle, since the validator cannot say which of them the solver should have left out.
    """
    gang_of, _ = _gang_of(state)
    placed_by_gang: dict[str, list[str]] = defaultdict(list)
    for pod, node in decision.placements.items():
        placed_by_gang[gang_of.get(pod, "pod:" + pod)].append(node)
    queue_of = {g.name: g.queue for g in state.gangs}
    rejected: dict[str, str] = {}
    for v in violations:
        if v.kind == "partial-gang" and not atomic:
            continue
        if v.kind == "capacity":
            hit = [g for g, nodes in placed_by_gang.items() if v.subject in nodes]
        elif v.kind == "capability":
            hit = [g for g in placed_by_gang if queue_of.get(g) == v.subject]
        elif v.subject in gang_of:
            hit = [gang_of[v.subject]]
        elif v.kind == "unknown-pod":
            hit = ["pod:" + v.subject]
        else:
            hit = [v.subject]
        for gang in hit:
            rejected.setdefault(gang, f"{v.kind}: {v.message}")
    return rejected


def _bind(
    cluster: Cluster, state: ClusterState, decision: Decision, result: CycleResult, atomic: bool
) -> None:
    gang_of, need = _gang_of(state)
    held: dict[str, int] = defaultdict(int)
    for bound_pod in state.bound_pods():
        held[bound_pod.gang_name()] += 1
    by_gang: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pod, node in sorted(decision.placements.items()):
        gang = gang_of.get(pod, "pod:" + pod)
        if gang not in result.rejected:
            by_gang[gang].append((pod, node))
    for gang, placements in by_gang.items():
        done: list[str] = []
        need_now = need.get(gang, 1)
        for i, (pod, node) in enumerate(placements):
            try:
                cluster.bind(pod, node)
            except ClusterError as e:
                result.failed_binds[pod] = str(e)
                untried = len(placements) - i - 1
                if atomic and held[gang] + len(done) + untried < need_now:
                    break  # the rest cannot save the gang; do not hold more of the cluster
                continue
            done.append(pod)
            result.bound[pod] = node
        if atomic and held[gang] + len(done) < need_now:
            failed = next(p for p, _ in placements if p in result.failed_binds)
            result.rolled_back[gang] = (
                f"bind of {failed} failed ({result.failed_binds[failed]}); "
                f"{len(done)} pod(s) bound this cycle were evicted"
            )
            for pod in done:
                del result.bound[pod]
                try:
                    cluster.evict(pod, "gang rollback: " + result.rolled_back[gang])
                    result.evicted.append(pod)
                except ClusterError as e:
                    # The next snapshot shows it bound; the gang is then short and the
                    # status says why, so an operator (or the next cycle) can act.
                    result.stranded[pod] = str(e)
                    log.error("could not evict %s after a failed gang bind: %s", pod, e)


def _statuses(state: ClusterState, result: CycleResult) -> list[GangStatus]:
    held: dict[str, int] = defaultdict(int)
    for bound_pod in state.bound_pods():
        held[bound_pod.gang_name()] += 1
    gang_of, _ = _gang_of(state)
    for pod in result.bound:
        held[gang_of[pod]] += 1
    for pod in result.stranded:
        held[gang_of[pod]] += 1
    decision = result.decision
    reasons = decision.unschedulable if decision else {}
    statuses = []
    for gang in state.gangs:
        bound = held[gang.name]
        if bound >= gang.min_member:
            statuses.append(
                GangStatus(gang=gang.name, phase="Running", bound=bound, min_member=gang.min_member)
            )
            continue
        failed = sorted(p for p in result.failed_binds if gang_of.get(p) == gang.name)
        if gang.name in result.rolled_back:
            reason, message = "BindFailed", result.rolled_back[gang.name]
        elif failed:
            reason = "BindFailed"
            message = f"bind of {failed[0]} failed ({result.failed_binds[failed[0]]})"
        elif gang.name in result.rejected:
            reason, message = "InvalidDecision", result.rejected[gang.name]
        elif gang.name in reasons:
            reason, message = "NotEnoughResources", reasons[gang.name]
        elif result.error:
            reason, message = "SchedulerError", result.error
        else:
            reason, message = "Waiting", "not considered this cycle"
        statuses.append(
            GangStatus(
                gang=gang.name,
                phase="Pending",
                bound=bound,
                min_member=gang.min_member,
                reason=reason,
                message=message,
            )
        )
    return statuses


def run_cycle(
    cluster: Cluster, settings: LoopSettings, metrics: LoopMetrics | None = None
) -> CycleResult:
    """One scheduling cycle. Never raises for cluster or solver failures."""
    result = CycleResult(scheduler=settings.scheduler)
    started = time.perf_counter()
    try:
        state = cluster.snapshot()
    except ClusterError as e:
        result.error = f"snapshot failed: {e}"
        result.total_s = time.perf_counter() - started
        if metrics:
            metrics.observe(result)
        return result
    result.snapshot_s = time.perf_counter() - started
    result.pending_pods = len(state.pending_pods())
    atomic = settings.atomic()
    try:
        decision = SCHEDULERS[settings.scheduler](state, settings.solver)
    except Exception as e:  # a solver bug must not stop scheduling; it is logged loudly
        log.exception("scheduler %s failed", settings.scheduler)
        result.error = f"scheduler {settings.scheduler} failed: {type(e).__name__}: {e}"
        decision = None
    result.decide_s = time.perf_counter() - started - result.snapshot_s
    if decision is not None:
        result.decision = decision
        result.violations = check(state, decision)
        result.rejected = _rejected_gangs(state, decision, result.violations, atomic)
        for gang, why in result.rejected.items():
            log.error("not binding gang %s: the decision breaks a hard rule: %s", gang, why)
        bind_started = time.perf_counter()
        _bind(cluster, state, decision, result, atomic)
        result.bind_s = time.perf_counter() - bind_started
    result.statuses = _statuses(state, result)
    try:
        cluster.report(result.statuses)
    except ClusterError as e:
        log.warning("could not report gang statuses: %s", e)
    result.total_s = time.perf_counter() - started
    if metrics:
        metrics.observe(result)
    return result
