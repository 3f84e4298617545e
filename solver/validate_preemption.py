"""The rules of preemption, checked on the raw state as ``solver.validate`` checks
placements (it calls ``check_preemption`` when a decision evicts or nominates): victims
are running PodGroup pods of preemptible gangs, each left with no pod or at least
minMember; a victim loses pods only where a gang allowed to take from it is nominated;
pods use only the room of victims they may take from; nominated gangs are whole and fit
once the victims are gone. Reads only ``solver.model``, the node predicates and
``solver.freed_room``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

from solver.decision import Decision
from solver.freed_room import hall_rows
from solver.model import DEFAULT_QUEUE, ClusterState, Gang, Node, Pod, Queue
from solver.predicates import placement_reason
from solver.violations import Violation, ViolationKind, demand_sum, queue_of


def check_preemption(state: ClusterState, decision: Decision) -> list[Violation]:
    """The rules of preemption: victims are running PodGroup pods of preemptible gangs,
    each left with no pod or at least minMember; a victim gets a nominated pod of a gang
    allowed to take from it (same queue: higher priority; another queue: reclaim) on
    every node it loses pods, or, evicted whole, on one of them; nominated gangs are
    whole and fit once the victims are gone."""
    pods = {p.name: p for p in state.pods}
    nodes = {n.name: n for n in state.nodes}
    gangs = {g.name: g for g in state.gangs}
    closed = {q.name for q in state.queues if not q.reclaimable}
    out: list[Violation] = []

    def bad(kind: ViolationKind, subject: str, message: str) -> None:
        out.append(Violation(kind=kind, subject=subject, message=message))

    evicted_by_gang: dict[str, int] = defaultdict(int)
    victims_on_node: dict[str, set[str]] = defaultdict(set)
    for name in sorted(decision.evictions):
        pod = pods.get(name)
        gang = gangs.get(pod.gang) if pod is not None and pod.gang is not None else None
        if pod is None or pod.node_name is None or pod.terminating:
            bad("eviction", name, f"pod {name!r} is not running: nothing to evict")
        elif gang is None:
            bad("eviction", name, f"pod {name!r} is in no PodGroup: never a victim")
        elif not gang.preemptible:
            bad("eviction", name, f"gang {gang.name!r} is marked non-preemptible")
        else:
            evicted_by_gang[gang.name] += 1
            victims_on_node[pod.node_name].add(gang.name)
    running: dict[str, int] = defaultdict(int)
    for pod in state.bound_pods():
        if pod.gang is not None and not pod.terminating:
            running[pod.gang] += 1
    # What a victim gains this decision counts: evicted whole, the one pod of it placed
    # elsewhere would run alone.
    gaining: dict[str, int] = defaultdict(int)
    for name in (*decision.placements, *decision.nominated):
        pod = pods.get(name)
        if pod is not None and pod.gang is not None:
            gaining[pod.gang] += 1
    for name, count in sorted(evicted_by_gang.items()):
        left = running[name] - count + gaining[name]
        if 0 < left < gangs[name].min_running:
            bad(
                "eviction",
                name,
                f"gang {name!r} would keep {left} pod(s), below minMember "
                f"{gangs[name].min_member}: a victim is shrunk to minMember or evicted whole",
            )

    nominated_by_gang: dict[str, list[Pod]] = defaultdict(list)
    on_node: dict[str, list[Pod]] = defaultdict(list)
    for name, node_name in sorted(decision.nominated.items()):
        pod = pods.get(name)
        node = nodes.get(node_name)
        if pod is None or pod.node_name is not None or pod.gates or name in decision.placements:
            bad("nomination", name, f"pod {name!r} is not a pending pod this decision leaves")
        elif node is None:
            bad("nomination", name, f"pod {name!r} is nominated to unknown node {node_name!r}")
        elif not pod.may_preempt:
            bad("nomination", name, f"pod {name!r} has preemptionPolicy Never")
        elif (reason := placement_reason(pod, node)) is not None:
            bad("nomination", name, f"pod {name!r} may not run on {node_name!r}: {reason}")
        else:
            nominated_by_gang[pod.gang_name()].append(pod)
            on_node[node_name].append(pod)
    held: dict[str, int] = defaultdict(int)
    for pod in state.bound_pods():
        held[pod.gang_name()] += 1
    for placed in decision.placements:
        if placed in pods:
            held[pods[placed].gang_name()] += 1
    for name, members in sorted(nominated_by_gang.items()):
        gang = gangs.get(name)
        need = gang.min_running if gang is not None else 1
        if held[name] + len(members) < need:
            bad("nomination", name, f"gang {name!r} would hold fewer than minMember {need}")

    # A victim evicted whole needs a taker on one of its nodes (its other pods go because
    # a gang cannot run in part); one shrunk, on every node where it loses pods.
    for victim in sorted(evicted_by_gang):
        v = gangs[victim]
        served = [
            any(
                t is not None and may_take(t, v, closed)
                for t in (taker_gang(p, gangs) for p in on_node.get(node_name, []))
            )
            for node_name in sorted(n for n, vs in victims_on_node.items() if victim in vs)
        ]
        whole = running[victim] == evicted_by_gang[victim]
        if not (any(served) if whole else all(served)):
            bad(
                "eviction",
                victim,
                f"gang {victim!r} loses pods where no gang allowed to take from it (higher "
                "priority, or another queue reclaiming from a reclaimable one) is nominated",
            )
    out.extend(_room_after_evictions(state, decision, pods, nodes, on_node))
    out.extend(_room_per_victim(state, decision, pods, gangs, nodes, victims_on_node, closed))
    nominated = [pod for members in nominated_by_gang.values() for pod in members]
    out.extend(_capability_after_evictions(state, decision, pods, gangs, nominated))
    return out


def _capability_after_evictions(
    state: ClusterState,
    decision: Decision,
    pods: Mapping[str, Pod],
    gangs: Mapping[str, Gang],
    nominated: list[Pod],
) -> list[Violation]:
    """Nominated gangs fit under their queue's capability once the victims are gone:
    what stays bound, this decision's placements and the nominations, for each resource
    the nominations add to (a queue already over a lowered capability is not the
    decision's doing, unless it adds to it)."""
    queues = {q.name: q for q in state.queues}
    queues.setdefault(DEFAULT_QUEUE, Queue(name=DEFAULT_QUEUE, weight=1))
    by_queue: dict[str, list[Pod]] = defaultdict(list)
    for pod in nominated:
        queue = queue_of(pod, gangs, queues)
        if queue is not None and queues[queue].capability is not None:
            by_queue[queue].append(pod)
    if not by_queue:
        return []
    staying: dict[str, list[Pod]] = defaultdict(list)
    placed = [pods[name] for name in decision.placements if name in pods]
    for pod in [*state.bound_pods(), *placed]:
        queue = queue_of(pod, gangs, queues)
        if queue in by_queue and pod.name not in decision.evictions:
            staying[queue].append(pod)
    out = []
    for queue_name, members in sorted(by_queue.items()):
        capability = queues[queue_name].capability
        if capability is None:
            continue
        held, added = demand_sum(staying.get(queue_name, [])), demand_sum(members)
        over = [r for r, cap in sorted(capability.items()) if added[r] and held[r] + added[r] > cap]
        if over:
            out.append(
                Violation(
                    kind="nomination",
                    subject=queue_name,
                    message=(
                        f"queue {queue_name!r}: nominated pods exceed its capability once "
                        f"the victims are gone ({', '.join(over)})"
                    ),
                )
            )
    return out


def _room_after_evictions(
    state: ClusterState,
    decision: Decision,
    pods: Mapping[str, Pod],
    nodes: Mapping[str, Node],
    on_node: Mapping[str, list[Pod]],
) -> list[Violation]:
    staying: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.bound_pods():
        if pod.name not in decision.evictions:
            staying[pod.node_name or ""].append(pod)
    for name, node_name in decision.placements.items():
        if name in pods:
            staying[node_name].append(pods[name])
    out = []
    for node_name in sorted(on_node):
        total = demand_sum([*staying.get(node_name, []), *on_node[node_name]])
        # Only what the nominated pods ask for: a node already over in a resource they do
        # not use (its allocatable shrank) takes them as a placement would.
        asked = demand_sum(on_node[node_name])
        over = [
            r
            for r, q in sorted(total.items())
            if asked.get(r, 0) > 0 and q > nodes[node_name].allocatable[r]
        ]
        if over:
            out.append(
                Violation(
                    kind="nomination",
                    subject=node_name,
                    message=(
                        f"node {node_name!r}: nominated pods do not fit once the victims are "
                        f"gone ({', '.join(over)})"
                    ),
                )
            )
    return out


def taker_gang(pod: Pod, gangs: Mapping[str, Gang]) -> Gang | None:
    """The gang a nominated pod takes for: its PodGroup, or for a pod outside any, the
    gang of one the solver makes it (default queue, its own priority)."""
    if pod.gang is None:
        # Valid by construction, and of the one name ``Gang`` refuses from its users.
        return Gang.model_construct(
            name=pod.gang_name(), min_member=1, queue=DEFAULT_QUEUE, priority=pod.priority
        )
    return gangs.get(pod.gang)


def may_take(taker: Gang, victim: Gang, closed: Collection[str]) -> bool:
    """Whether ``taker`` may take from ``victim`` at all: a higher priority in its queue,
    or another queue reclaiming (whose shares this oracle does not weigh) from one not
    ``closed`` to reclaim (``Queue.reclaimable``)."""
    if taker.queue == victim.queue:
        return taker.priority > victim.priority
    return victim.queue not in closed


def _room_per_victim(
    state: ClusterState,
    decision: Decision,
    pods: Mapping[str, Pod],
    gangs: Mapping[str, Gang],
    nodes: Mapping[str, Node],
    victims_on_node: Mapping[str, set[str]],
    closed: Collection[str],
) -> list[Violation]:
    """Where victims lose pods, the node's new pods use its free room and the room of the
    victims they may take from, never another's: Hall's condition over the victims' sets
    (``solver.freed_room``), per resource the pods ask for."""
    bound: dict[str, list[Pod]] = defaultdict(list)
    freed: dict[tuple[str, str], list[Pod]] = defaultdict(list)  # (node, victim gang)
    for pod in state.bound_pods():
        bound[pod.node_name or ""].append(pod)
        if pod.name in decision.evictions and pod.gang is not None:
            freed[(pod.node_name or "", pod.gang)].append(pod)
    arriving: dict[str, list[Pod]] = defaultdict(list)
    for name, node_name in (*decision.placements.items(), *decision.nominated.items()):
        if name in pods and node_name in victims_on_node:
            arriving[node_name].append(pods[name])
    out = []
    for node_name in sorted(arriving):
        node = nodes.get(node_name)
        if node is None:
            continue
        names = sorted(victims_on_node[node_name])
        victims = frozenset(range(len(names)))
        own = [
            frozenset(
                i
                for i, v in enumerate(names)
                if (t := taker_gang(pod, gangs)) is not None and may_take(t, gangs[v], closed)
            )
            for pod in arriving[node_name]
        ]
        held = demand_sum(bound.get(node_name, []))  # victims too: U's room adds theirs
        for u, takes in hall_rows(own, victims):
            members = [pod for pod, t in zip(arriving[node_name], takes, strict=True) if t]
            room = demand_sum(p for i in u for p in freed[(node_name, names[i])])
            asked = demand_sum(members)
            over = [
                r
                for r, q in sorted(asked.items())
                if q > 0 and held[r] + q > node.allocatable[r] + room[r]
            ]
            if over:
                out.append(
                    Violation(
                        kind="nomination",
                        subject=node_name,
                        message=(
                            f"node {node_name!r}: pods use room that victims they may not "
                            f"take from free ({', '.join(over)})"
                        ),
                    )
                )
                break
    return out
