"""A cycle's evictions for preemption and reclaim, and the holds they make: the room
the victims leave kept for the gangs nominated to it until they are gone
(``adapter.holds``), and the evictions those holds wait on sent again where they failed."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Mapping

from adapter.cluster import Cluster, ClusterError
from adapter.gangs import Gangs
from adapter.holds import Hold, Holds
from adapter.results import CycleResult
from solver.decision import Decision
from solver.model import ClusterState, Pod

log = logging.getLogger(__name__)

# The validator's findings that void a decision's evictions (and so its holds).
PREEMPTION_FINDINGS = frozenset({"eviction", "nomination"})


def preempt(
    cluster: Cluster,
    state: ClusterState,
    gangs: Gangs,
    decision: Decision,
    holds: Holds,
    result: CycleResult,
) -> None:
    """Send the decision's evictions and hold the room for the gangs nominated to it.

    Sent only when the validator found nothing wrong with them (a finding voids them all:
    an eviction cannot be taken back). A gang one of whose victims kept every pod (a
    PodDisruptionBudget's 429, a dry run refused) is not held: it is decided afresh next
    cycle, when what did go is free. A victim that lost some pods but not others (the
    API server failing one eviction past its retries) runs below minMember whatever comes
    next: its preemptor is held, and those pods are evicted again while it waits
    (``evict_again``). Before, nothing held the room its pods had left, another gang took
    it, and the victim ran on below minMember."""
    findings = [v for v in result.violations if v.kind in PREEMPTION_FINDINGS]
    if findings:
        result.preemption_rejected = f"{findings[0].kind}: {findings[0].message}"
        log.error("not evicting: the decision's preemption breaks a rule: %s", findings[0])
        return
    try:
        failures = cluster.preempt(decision.evictions)
    except Exception as e:  # a backend bug must not stop the loop: nothing is held
        log.exception("evicting for preemption failed")
        failures = {pod: ClusterError(type(e).__name__, str(e)) for pod in decision.evictions}
    for pod, why in decision.evictions.items():
        if pod in failures:
            result.preempt_failed[pod] = str(failures[pod])
        else:
            result.preempted[pod] = why
    node_of = {p.name: p.node_name for p in state.pods if p.name in decision.evictions}
    capped = {q.name for q in state.queues if q.capability is not None}
    # Gangs that lost a pod to this decision, for whichever preemptor: judged by one
    # preemptor's victims alone, a gang broken for another looked intact, and the pods it
    # kept were never evicted again (a chaos probe). An eviction whose answers were lost
    # may have gone: judged intact, its gang ran below minMember where it had (a chaos
    # probe); judged broken, at worst the rest of it goes as the decision wanted.
    broken = {
        gangs.gang(p) for p in decision.evictions if p not in failures or failures[p].uncertain
    }
    by_gang: dict[str, dict[str, str]] = defaultdict(dict)
    for pod, node in decision.nominated.items():
        by_gang[gangs.gang(pod)][pod] = node
    for gang, pods in by_gang.items():
        nodes = set(pods.values())
        victims = {p: n for p, n in node_of.items() if n in nodes and n is not None}
        queue = gangs.queue_of(gang)
        if not victims or queue in capped:
            # Nominated where no victim runs, or in a queue with a capability, it waits
            # for the capability its own queue's victims give back: for them too, wherever
            # they run. Bound once only those on its nodes were gone, it was over the cap
            # (the validator refused it, the hold was released), and another gang took
            # the room its victims had left.
            victims |= {
                p: n
                for p, n in node_of.items()
                if n is not None and gangs.queue_of(gangs.gang(p)) == queue
            }
        refused = sorted(p for p in victims if p in failures)
        intact = [p for p in refused if gangs.gang(p) not in broken]
        if intact:
            error = failures[intact[0]]
            log.warning("gang %s not held: eviction of %s failed (%s)", gang, intact[0], error)
            # A victim that lost some pods runs below minMember all the same.
            for p in refused:
                if gangs.gang(p) in broken:
                    holds.resend[p] = (decision.evictions[p], victims[p])
            continue
        holds.add(
            Hold(
                gang=gang,
                pods=pods,
                victim_nodes=victims,
                since_s=state.now_s,
                resend={p: decision.evictions[p] for p in refused},
            )
        )
    # A refused pod of a broken victim on no preemptor's nodes (evicted so that its gang
    # went whole) is sent again all the same: no preemptor's, it went nowhere, and its
    # gang ran below minMember for good (a chaos probe).
    resent = {*holds.resend, *(p for hold in holds.held.values() for p in hold.resend)}
    for pod, why in decision.evictions.items():
        ran_on = node_of.get(pod)
        if pod in failures and pod not in resent and ran_on and gangs.gang(pod) in broken:
            holds.resend[pod] = (why, ran_on)


def evict_again(
    cluster: Cluster,
    holds: Holds,
    pods: Mapping[str, Pod],
    result: CycleResult,
    gangs: Gangs | None = None,
    unsettled: Collection[str] = (),
    now_s: float = 0.0,
) -> None:
    """The evictions that failed of victims left below minMember (``Hold.resend``, and
    ``Holds.resend`` for those no hold waits on), sent again: each pod still running
    where it was evicted from; the others are done with. So are, per ``gangs`` (the
    snapshot's) and this cycle's binds, those of a gang short in the snapshot that the
    binds made whole (its controller made the evicted pods again): the pod to evict was
    counted as a member as the gang was completed, and evicted right after, it left the
    gang below minMember again (a chaos probe); a hold waiting on one is released (it
    would wait out its timeout), and decided afresh. And those no hold waits on of a gang
    whole in the snapshot. Those of a gang that binds of unknown outcome may have made
    whole (``unsettled``: the backend's doubts as the snapshot was taken; and this
    cycle's) wait, unsent, until the binds are settled, up to ``DOUBT_WAIT_S`` of the
    snapshot clock ``now_s``; a hold waiting on one is released. Sent at once, the bind
    landed, and the gang ran its new pod alone (a chaos probe)."""
    judged: dict[str, str] = {}
    if gangs is not None and (holds.held or holds.resend):
        judged = _judged(cluster, holds, gangs, result, unsettled)
        for gang, hold in list(holds.held.items()):
            # Its victims to evict again: its own, and a new leader's (``Holds.recover``
            # puts them in ``Holds.resend``: the recovered hold waited out its timeout).
            again = [*hold.resend, *(p for p in hold.victim_nodes if p in holds.resend)]
            kept = next((p for p in again if judged.get(gangs.gang(p)) in RELEASING), None)
            if kept is not None:
                why = f"its victim {gangs.gang(kept)} {judged[gangs.gang(kept)]}: {kept} stays"
                holds.drop(gang, why)
                result.released[gang] = why
        holds.resend = {
            p: sent for p, sent in holds.resend.items() if judged.get(gangs.gang(p)) not in WHOLE
        }
    for hold in holds.held.values():
        where = {p: (why, hold.victim_nodes.get(p, "")) for p, why in hold.resend.items()}
        hold.resend.clear()
        hold.resend.update(
            {p: why for p, (why, _) in _sent_again(cluster, where, pods, result, hold.gang).items()}
        )
    # Not for good: a pod bound again in doubt each cycle kept its victim's eviction
    # waiting for ever (a review).
    waits = {
        pod: sent
        for pod, sent in holds.resend.items()
        if gangs is not None
        and judged.get(gangs.gang(pod)) == MAYBE_WHOLE
        and now_s - holds.doubt_since.setdefault(pod, now_s) <= DOUBT_WAIT_S
    }
    if due := {p: sent for p, sent in holds.resend.items() if p not in waits}:
        waits |= _sent_again(cluster, due, pods, result, None)
    holds.resend = waits
    holds.doubt_since = {p: t for p, t in holds.doubt_since.items() if p in holds.resend}


# How long an eviction waits for binds of unknown outcome to be settled: twice the time
# the watch cache gives such a bind to show (``kube.cache.DOUBT_TTL_S``), and within the
# two minutes its victim's mark lasts (``holds.MARK_STALE_S``).
DOUBT_WAIT_S = 60.0
MADE_WHOLE = "was made whole again"
WAS_WHOLE = "is whole"
MAYBE_WHOLE = "may have been made whole by a bind of unknown outcome"
WHOLE = frozenset({MADE_WHOLE, WAS_WHOLE})
RELEASING = frozenset({MADE_WHOLE, MAYBE_WHOLE})


def _judged(
    cluster: Cluster, holds: Holds, gangs: Gangs, result: CycleResult, unsettled: Collection[str]
) -> dict[str, str]:
    """The gangs of the pods to evict again that are not short, each -> ``MADE_WHOLE``
    (short in the snapshot, at its minimum with this cycle's binds, and those the backend
    holds bound though their answers failed), ``WAS_WHOLE`` (at it in the snapshot) or
    ``MAYBE_WHOLE`` (at it only should binds still unsettled have landed: ``unsettled``,
    of earlier cycles, which the snapshot shows bound, and this cycle's). The earlier
    ones as the snapshot was taken: one settled since (the pod pending again) is still
    bound in it, and read as settled, its gang was judged whole."""
    victims = {gangs.gang(p) for p in holds.resend}
    victims |= {gangs.gang(p) for hold in holds.held.values() for p in hold.resend}
    victims &= gangs.need.keys()
    if not victims:
        return {}
    members = [p for p in result.bound if gangs.gang(p) in victims]
    if failed := [p for p in result.failed_binds if gangs.gang(p) in victims]:
        members += cluster.where_bound(failed)  # their answers failed, not every bind
    extra = gangs.by_gang(members)
    doubts = (p for p in {*unsettled, *cluster.unsettled()} if gangs.gang(p) in victims)
    doubted = gangs.by_gang(doubts)
    judged: dict[str, str] = {}
    for gang in victims:
        more = extra.get(gang, [])
        assumed: list[str] = []
        unseen: list[str] = []
        for p in doubted.get(gang, ()):
            if p not in more and (pod := gangs.pods.get(p)) is not None:
                (unseen if pod.node_name is None else assumed).append(p)
        if gangs.runs_short(gang, [*more, *unseen]):
            continue
        if gangs.runs_short(gang, more, without=assumed):
            judged[gang] = MAYBE_WHOLE
        else:
            judged[gang] = MADE_WHOLE if gangs.runs_short(gang) else WAS_WHOLE
    return judged


def _sent_again(
    cluster: Cluster,
    evictions: Mapping[str, tuple[str, str]],
    pods: Mapping[str, Pod],
    result: CycleResult,
    gang: str | None,
) -> dict[str, tuple[str, str]]:
    """``evictions`` (pod -> (why, the node it was evicted from)) of pods still running
    there, sent; returns those refused again, to send at the next cycle. A pod of no
    snapshot is sent where the backend still holds it bound there (to a Node deleted
    meanwhile, which may come back with it): dropped, it ran on below minMember once its
    node was back (a chaos probe)."""
    absent = [p for p in evictions if p not in pods]
    held_on = cluster.where_bound(absent) if absent else {}
    due = {
        p: why
        for p, (why, node) in evictions.items()
        if (
            held_on.get(p) == node
            if (pod := pods.get(p)) is None
            else pod.node_name == node and not pod.terminating
        )
    }
    if not due:
        return {}
    try:
        failures = cluster.preempt(due, again=True)
    except Exception as e:  # a backend bug must not stop the loop
        log.exception("evicting again for gang %s failed", gang or "none held")
        failures = {p: ClusterError(type(e).__name__, str(e)) for p in due}
    for p, why in due.items():
        if p in failures:
            result.preempt_failed[p] = str(failures[p])
        else:
            result.preempted[p] = why
    return {p: evictions[p] for p in due if p in failures}
