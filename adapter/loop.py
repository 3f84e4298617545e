"""The one scheduling loop: snapshot -> decide -> validate -> bind -> report -> metrics.

``run_cycle`` is all a backend needs: the simulator calls it on its virtual clock; the
Kubernetes backend, when written, calls it on a timer. Its promise, whatever the cluster
does: a gang is bound whole or not at all. A decision the validator rejects is not
bound; a gang whose bind fails part-way has the pods bound this cycle evicted again;
every failure becomes a reported condition on the gang, never an exception out of the
loop.

The stock-scheduler baseline (``greedy``) is bound pod by pod without that rule — it is
what gangsat is measured against, deadlocks included.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from adapter.cluster import WAITING_FOR_VOLUMES, Cluster, ClusterError, CycleReport
from adapter.evicting import PREEMPTION_FINDINGS, evict_again, preempt
from adapter.gangs import Gangs
from adapter.holds import Hold, Holds
from adapter.metrics import LoopMetrics
from adapter.repair import place_again
from adapter.results import CycleResult, gang_statuses
from adapter.rollbacks import Stranded
from solver.config import SolverConfig
from solver.decision import Decision
from solver.model import ClusterState
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


POD_FINDINGS = frozenset(
    {"unknown-pod", "already-bound", "gated", "terminating", "unknown-node", "predicate"}
)
GANG_FINDINGS = frozenset({"invalid-gang", "partial-gang"})


def _rejected_gangs(
    gangs: Gangs, decision: Decision, violations: list[Violation], atomic: bool
) -> dict[str, str]:
    """Gangs not to bind: any gang a hard violation touches loses all its placements.

    A broken node capacity or queue capability rejects every gang placed onto it this
    cycle, since the validator cannot say which of them the solver should have left out.
    """
    # Indexed once: a decision that breaks many nodes' capacity (a solver bug) must not
    # cost violations x gangs.
    on_node: dict[str, set[str]] = defaultdict(set)
    in_queue: dict[str, set[str]] = defaultdict(set)
    for pod, node in decision.placements.items():
        gang = gangs.gang(pod)
        on_node[node].add(gang)
        in_queue[gangs.queue_of(gang)].add(gang)
    rejected: dict[str, str] = {}
    for v in violations:
        if (v.kind == "partial-gang" and not atomic) or v.kind in PREEMPTION_FINDINGS:
            continue  # preemption findings void the evictions (``evicting.preempt``), not the binds
        if v.kind in POD_FINDINGS:
            hit = [gangs.gang(v.subject)]
        elif v.kind in GANG_FINDINGS:
            hit = [v.subject]
        elif v.kind == "capacity":
            hit = sorted(on_node.get(v.subject, ()))
        elif v.kind == "capability":  # the subject is a queue
            hit = sorted(in_queue.get(v.subject, ()))
        else:  # a finding this loop does not know: nothing of the decision is bound
            hit = sorted({g for gs in on_node.values() for g in gs})
        for gang in hit:
            rejected.setdefault(gang, f"{v.kind}: {v.message}")
    return rejected


def _bind(
    cluster: Cluster,
    gangs: Gangs,
    decision: Decision,
    result: CycleResult,
    atomic: bool,
    config: SolverConfig,
    held: Callable[[ClusterState], ClusterState] | None = None,
    stranded_in: Mapping[str, int] | None = None,
) -> None:
    """Bind every placement of the gangs not rejected in one batch (a backend may send
    them concurrently: binding is where a scheduler meets the API server's limit); give
    members that failed for a reason another node may cure a second chance (in the room
    ``held`` leaves of a snapshot); then evict what this cycle bound of each gang still
    short of minMember — the last resort — but of a gang whole should its binds of
    unknown outcome have landed, where a later cycle can finish the rollback
    (``stranded_in`` given: see ``rollbacks``): its pods are kept until that is known
    (``result.in_doubt``)."""
    gang_of = {pod: gangs.gang(pod) for pod in decision.placements}  # once per placement
    placements = [
        (pod, node)
        for pod, node in sorted(decision.placements.items(), key=lambda pn: (gang_of[pn[0]], pn[0]))
        if gang_of[pod] not in result.rejected
    ]
    failures = cluster.bind(placements)
    may_wait = stranded_in is not None  # a later cycle can finish a rollback
    stranded_in = stranded_in or {}  # gang -> its pods remembered as stranded
    done_by_gang: dict[str, list[str]] = defaultdict(list)
    for pod, node in placements:
        if pod in failures and failures[pod].reason == WAITING_FOR_VOLUMES:
            result.deferred[pod] = failures[pod].message
            result.provisioning.setdefault(gang_of[pod], failures[pod].message)
        elif pod in failures:
            result.failed_binds[pod] = str(failures[pod])
            result.failure_reasons[pod] = failures[pod].reason
        else:
            result.bound[pod] = node
            done_by_gang[gang_of[pod]].append(pod)
    if not atomic:
        return

    elsewhere: Counter[str] = Counter()  # per gang, pods bound meanwhile by someone else

    def short() -> dict[str, list[str]]:
        """Gangs still below minMember (or a task's minimum), with their members that
        failed. One pass over the failures: a lost lease fails every bind of a large
        cycle."""
        failed: dict[str, list[str]] = defaultdict(list)
        elsewhere.clear()
        taken: dict[str, list[str]] = defaultdict(list)  # those pods, of gangs with tasks
        for pod, error in failures.items():
            gang = gangs.gang(pod)
            if error.bound_to:
                elsewhere[gang] += 1
                if gang in gangs.task_need:
                    taken[gang].append(pod)
            else:
                failed[gang].append(pod)

        still: dict[str, list[str]] = {}
        for g, f in failed.items():
            done = done_by_gang.get(g, [])
            if not _holds_minimum(gangs, g, len(done) + elsewhere[g], (*done, *taken[g])):
                still[g] = f
        return still

    tried_on = dict(placements)  # pod -> the node its last bind went to
    again = [p for f in short().values() for p in f if failures[p].retry_elsewhere]
    if again:
        if result.deferred:  # nor that of gangs whose binds wait for their volumes
            room = {pod: tried_on[pod] for pod in result.deferred}
            held = partial(_and_bound, held, room)
        repaired, refused, went_to = place_again(cluster, again, config, held)
        tried_on.update(went_to)
        for pod, node in repaired.items():
            # Bound after all: a failed bind no more (its first refusal stays counted by
            # reason, in failure_reasons).
            del failures[pod]
            del result.failed_binds[pod]
            result.bound[pod] = node
            result.repaired[pod] = node
            done_by_gang[gangs.gang(pod)].append(pod)
        failures.update(refused)
        for pod, error in refused.items():
            result.failed_binds[pod] = str(error)
            result.failure_reasons[pod] = error.reason
    to_evict: list[str] = []
    for gang, failed in short().items():
        done = done_by_gang.get(gang, [])
        if not done and all(failures[p].reason == WAITING_FOR_VOLUMES for p in failed):
            continue  # nothing bound: its binds wait for its volumes (``result.deferred``)
        # A bind of unknown outcome is evicted where it could leave the gang part-bound
        # should it have landed; not where any one of them landing makes the gang whole
        # (a pod of no PodGroup, minMember 1): deleted, a pod no controller recreates was
        # lost, where the doubt would have lapsed and left it pending.
        # Pods an earlier rollback could not delete are no members to count on: they
        # are deleted after the binds while the gang is short (``rollbacks``).
        members = gangs.held.get(gang, 0) - stranded_in.get(gang, 0) + elsewhere[gang]
        alone = not done and gang not in gangs.task_need and members + 1 >= gangs.need.get(gang, 1)
        maybe = [] if alone else [pod for pod in failed if failures[pod].uncertain]
        cause = failures[failed[0]]
        # Whole should they land, with the pods stranded earlier (deleted once the gang
        # is known to be short, as they would be now). Not a GangGroup: each of its gangs
        # waits for its own doubts only, and is judged with the others before theirs are
        # settled (``rollbacks``).
        landed = len(done) + elsewhere[gang] + len(maybe)
        waits = may_wait and gang not in gangs.grouped
        if maybe and waits and _holds_minimum(gangs, gang, landed, (*done, *maybe)):
            # Deleted now, a gang of pods no controller makes again was lost where its
            # bind had landed, the gang whole (fault injection: a bind committed, every
            # answer lost); the doubt is settled within the backend's time to learn it.
            result.in_doubt[gang] = (tuple(done), tuple(maybe))
            log.warning(
                "gang %s is short of minMember unless %d bind(s) of unknown outcome landed "
                "(%s): keeping its %d pod(s) bound this cycle until that is known",
                gang,
                len(maybe),
                failures[maybe[0]],
                len(done),
            )
            continue
        result.rolled_back[gang] = f"bind of {failed[0]} failed ({cause})"
        for pod in done:
            del result.bound[pod]
            result.repaired.pop(pod, None)
        for pod in done + maybe:
            result.eviction_causes[pod] = cause.reason
        if done or maybe:
            log.warning(
                "gang %s is short of minMember: deleting %d pod(s) bound this cycle (%s)",
                gang,
                len(done) + len(maybe),
                cause,
            )
        to_evict += done + maybe
    if not to_evict:
        return
    refused = _evicted(cluster, to_evict, result)
    for pod, error in refused.items():
        # Bound still, its gang short: deleted again after later cycles' binds
        # (``rollbacks.Stranded``), and meanwhile the status says why.
        result.stranded[pod] = str(error)
        result.stranded_on[pod] = tried_on[pod]
    for gang, pods in Counter(gangs.gang(p) for p in result.evicted).items():
        result.rolled_back[gang] += f"; {pods} pod(s) bound this cycle were evicted"
    for gang, pods in Counter(gangs.gang(p) for p in result.stranded).items():
        result.rolled_back[gang] += f"; {pods} pod(s) bound could not be evicted yet"


def _and_bound(
    held: Callable[[ClusterState], ClusterState] | None, room: Mapping[str, str], s: ClusterState
) -> ClusterState:
    """``s`` with ``held``'s room taken, and ``room`` (pod -> node) bound."""
    return (held(s) if held is not None else s).with_bindings(room)


def _deferred(result: CycleResult, gangs: Gangs, decision: Decision) -> dict[str, dict[str, str]]:
    """Per gang whose binds wait for its volumes (``result.deferred``), its pods and the
    nodes the decision placed them on."""
    placed: dict[str, dict[str, str]] = defaultdict(dict)
    for pod in result.deferred:
        placed[gangs.gang(pod)][pod] = decision.placements[pod]
    return placed


def _holds_minimum(gangs: Gangs, gang: str, more: int, pods: Iterable[str]) -> bool:
    """Whether ``gang`` holds minMember with ``more`` members than the snapshot's, and
    each task's minimum with ``pods`` (of those) too. A gang already running is checked
    for minMember only, as the validator checks it: its extras' failed binds do not undo
    the extras that bound."""
    held, need = gangs.held.get(gang, 0), gangs.need.get(gang, 1)
    if held + more < need:
        return False
    if gang not in gangs.task_need or held >= need:
        return True
    return not gangs.short_of_a_task(gang, Counter(gangs.task_of.get(p) for p in pods))


def _evicted(cluster: Cluster, pods: list[str], result: CycleResult) -> dict[str, ClusterError]:
    """Delete ``pods`` of gangs rolled back, noting those deleted; the ones refused."""
    refused = cluster.evict(pods, "gang rollback: a member could not be bound")
    for pod in pods:
        if pod in refused:
            log.error("could not evict %s of a gang rolled back: %s", pod, refused[pod])
        else:
            result.evicted.append(pod)
    return refused


def _roll_back_again(
    cluster: Cluster,
    state: ClusterState,
    gangs: Gangs,
    stranded: Stranded,
    result: CycleResult,
    completing: Collection[str],
    unsettled: Collection[str],
) -> None:
    """Delete again the pods earlier rollbacks could not, or kept for binds of unknown
    outcome none of which is ``unsettled`` now, where their gang is still short after
    this cycle's binds and not ``completing``; those that fail again stay stranded."""
    due = stranded.due(state, gangs, result.bound, completing, unsettled, cluster.where_bound)
    if not due:
        return
    log.warning("deleting %d pod(s) of gangs still short that earlier rollbacks left", len(due))
    refused = _evicted(cluster, due, result)
    for pod in due:
        if pod not in refused:
            del stranded.pods[pod]


def _explained(decision: Decision, gangs: Gangs) -> Decision:
    """Why the gangs the decision leaves waiting wait, worked out once its binds are sent:
    explanations only feed the report, which follows the binds (1,000 real-shaped nodes:
    0.08-0.14 s no longer between the decision and the first bind). Not beside the binds:
    on 2 cores, where the API server shares them, explaining in a thread of its own slowed
    the binds as much (500 nodes, 20 gangs/s: creation-to-bound p99 +0.1 s). If explaining
    fails, which is logged and unbinds nothing, each gang left waiting says so."""
    try:
        return decision.explained()
    except Exception as e:  # a solver bug: the binds stand, the statuses say what is known
        log.exception("could not explain why the gangs left waiting wait")
        why = f"not admitted this cycle; why could not be worked out: {type(e).__name__}: {e}"
        admitted = set(decision.admitted)
        return decision.with_reasons({g: why for g in gangs.need if g not in admitted})


def _with_held(
    decision: Decision, ready: list[Hold], waiting: list[Hold], gangs: Gangs
) -> Decision:
    """The decision with the held gangs whose victims are gone bound this cycle, and
    nothing of the gangs still waiting for theirs: their held pods look bound to the
    solver and the validator (the room is theirs), but are not, so more of their pods
    bound now would run without them, below minMember."""
    waits = {h.gang for h in waiting}
    if waits and any(gangs.gang(pod) in waits for pod in decision.placements):
        kept = {p: n for p, n in decision.placements.items() if gangs.gang(p) not in waits}
        admitted = tuple(g for g in decision.admitted if g not in waits)
        decision = decision.model_copy(update={"placements": kept, "admitted": admitted})
    if not ready:
        return decision
    placements = {**decision.placements}
    for hold in ready:
        placements.update(hold.pods)
    admitted = (*decision.admitted, *(h.gang for h in ready if h.gang not in decision.admitted))
    return decision.model_copy(update={"placements": placements, "admitted": admitted})


def run_cycle(
    cluster: Cluster,
    settings: LoopSettings,
    metrics: LoopMetrics | None = None,
    holds: Holds | None = None,
    stranded: Stranded | None = None,
) -> CycleResult:
    """One scheduling cycle. Never raises for cluster or solver failures.

    ``holds`` carries the room held for preempting gangs from cycle to cycle; without it,
    a decision's evictions are not sent (nothing could bind the gangs they are for).
    ``stranded``: the pods rollbacks could not delete, deleted again after the binds
    (``rollbacks``)."""
    result = CycleResult(scheduler=settings.scheduler)
    started = time.perf_counter()
    # Asked before the snapshot: a bind settled after it would be judged on a view that
    # still shows it bound (assumed), though it may have lapsed.
    doubts = (stranded is not None and stranded.doubts) or (holds is not None and holds.resending())
    unsettled = cluster.unsettled() if doubts else set()
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
    gangs = Gangs.of(state)
    atomic = settings.atomic()
    # Held gangs whose victims are gone bind now; the others keep their room: the solver
    # sees both as bound, the validator the waiting ones.
    ready: list[Hold] = []
    waiting: list[Hold] = []
    solver_state = checked_state = state
    if holds is not None and not holds.recovered:
        holds.recover(state, gangs)  # a new leader keeps the room nominated before it
    if holds:
        pods = holds.by_name(state)
        result.released = holds.refresh(state, pods)
        ready, waiting = holds.split(pods)
        solver_state = holds.assumed(state, ready + waiting)
        checked_state = holds.assumed(state, waiting)
    # Explanations are worked out once the binds are sent (_explained).
    config = settings.solver.model_copy(update={"defer_explanations": True})
    if holds is None:
        config = config.model_copy(update={"preemption": False})
    # The cycle's limit counts from the cycle's start, as the solver's counts its own
    # preparing: real-shaped 5,000 nodes spent 0.35 s on the snapshot and the gang index,
    # then the decision took its whole limit on top.
    config = config.after(time.perf_counter() - started)
    try:
        decision = SCHEDULERS[settings.scheduler](solver_state, config)
    except Exception as e:  # a solver bug must not stop scheduling; it is logged loudly
        log.exception("scheduler %s failed", settings.scheduler)
        result.error = f"scheduler {settings.scheduler} failed: {type(e).__name__}: {e}"
        decision = None
    result.decide_s = time.perf_counter() - started - result.snapshot_s
    if decision is not None:
        decision = _with_held(decision, ready, waiting, gangs)
        result.decision = decision
        result.violations = check(checked_state, decision)
        result.rejected = _rejected_gangs(gangs, decision, result.violations, atomic)
        for gang, why in result.rejected.items():
            log.error("not binding gang %s: the decision breaks a hard rule: %s", gang, why)
        bind_started = time.perf_counter()
        # A second chance may not take the room held for gangs waiting for their victims.
        held = partial(holds.assumed, holds=waiting) if holds and waiting else None
        _bind(
            cluster,
            gangs,
            decision,
            result,
            atomic,
            settings.solver,
            held,
            stranded.by_gang() if stranded is not None else None,
        )
        if stranded is not None and atomic:
            # A gang nominated to preempt (this cycle, or held since) is being completed:
            # its stranded pods wait for the hold's end. A GangGroup's are remembered by
            # their own gang, not by the group's (``Stranded.add``).
            nominated = [*decision.nominated]
            completing: set[str] = set()
            if holds is not None:
                nominated += [pod for hold in holds.held.values() for pod in hold.pods]
                completing |= holds.held.keys()
            completing |= {g for p in nominated for g in (gangs.gang(p), gangs.own_gang(p))}
            completing |= result.provisioning.keys()  # held below
            # Kept this cycle for binds of unknown outcome: their stranded pods wait too.
            completing |= {
                gangs.own_gang(pod)
                for kept, doubted in result.in_doubt.values()
                for pod in (*kept, *doubted)
            }
            _roll_back_again(cluster, state, gangs, stranded, result, completing, unsettled)
            stranded.add(result.stranded, gangs, result.stranded_on)
            for kept, of_unknown_outcome in result.in_doubt.values():
                stranded.await_doubts(kept, gangs, result.bound, of_unknown_outcome)
        if holds is not None:
            since = {hold.gang: hold.since_s for hold in ready if hold.volumes}
            for hold in ready:
                # Refused, or a bind failed and the gang was rolled back: its nominations
                # are stale (a new leader would hold the room again).
                bound = all(pod in result.bound for pod in hold.pods)
                why = "bound" if bound else "refused" if hold.gang in result.rejected else "short"
                holds.drop(hold.gang, why, bound=bound)
            # Gangs whose binds wait for their volumes keep the room chosen (a hold made
            # again keeps its start: a provisioner that never makes them times it out).
            for gang, placed in _deferred(result, gangs, decision).items():
                start = since.get(gang, state.now_s)
                if state.now_s - start > holds.timeout_s:  # given back each time, say
                    result.released[gang] = f"volumes not made after {holds.timeout_s:g} s"
                    continue
                holds.add(Hold(gang, placed, {}, start, volumes=True))
            # The evictions earlier holds wait on that failed, before this cycle's holds.
            evict_again(cluster, holds, holds.by_name(state), result, gangs, unsettled, state.now_s)
            if decision.evictions:
                preempt(cluster, checked_state, gangs, decision, holds, result)
            # Holds made this cycle too read the snapshot's pods (``Holds.by_name``).
            pods = holds.by_name(state)
            for hold in holds.held.values():
                volumes, why = holds.waits_for(hold, pods)
                (result.provisioning if volumes else result.holding)[hold.gang] = why
        result.bind_s = time.perf_counter() - bind_started
        result.decision = _explained(decision, gangs)
        # Deciding's own work, done after the binds: counted as deciding, not binding.
        result.decide_s += time.perf_counter() - bind_started - result.bind_s
    result.statuses = gang_statuses(state, gangs, result)
    report_started = time.perf_counter()
    try:
        cluster.report(
            CycleReport(
                statuses=tuple(result.statuses),
                bound=result.bound,
                waiting_pods=decision.waiting_pods if decision is not None else {},
                preempted=result.preempted,
                nominated={
                    pod: node
                    for hold in (holds.held.values() if holds is not None else ())
                    for pod, node in hold.pods.items()
                },
                unnominated=holds.take_cleared(state) if holds is not None else (),
            )
        )
    except ClusterError as e:
        log.warning("could not report gang statuses: %s", e)
    result.report_s = time.perf_counter() - report_started
    result.total_s = time.perf_counter() - started
    if metrics:
        metrics.observe(result)
    return result
