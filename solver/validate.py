"""The solver-free oracle: does a decision respect the hard rules of a snapshot?

Flow: a scheduler (CP-SAT or a baseline) reads a ``ClusterState`` through
``solver.problem`` and returns a ``Decision``. ``check`` re-derives, from the raw state
alone, whether that decision may be bound: the tests use it as their oracle for every
scheduler, and the adapter runs it before binding anything to the cluster.

So that it can catch mistakes in the code it checks, this module reads only
``solver.model`` and the node predicates of ``solver.predicates``, plus plain integer
arithmetic; it never imports ``solver.problem`` or anything built on it. Scoring a
decision is ``solver.objective.score``: it must price exactly as the model does.

What counts as a new placement for each check:

* a placement naming an unknown pod, a pod already bound or a gated pod is reported and
  then ignored;
* the gang check (all-or-nothing) and the queue capability check count every placement
  of a known pending pod, whatever its node, because that is what the decision claims;
* the node capacity check counts the placements on nodes that exist.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from solver.model import DEFAULT_QUEUE, ClusterState, Decision, Gang, Node, Pod, Queue
from solver.predicates import insufficient, placement_reason

ViolationKind = Literal[
    "unknown-pod",
    "already-bound",
    "gated",
    "unknown-node",
    "predicate",
    "capacity",
    "partial-gang",
    "capability",
    "invalid-gang",
    "eviction",
    "nomination",
]


class Violation(BaseModel):
    """One broken rule. ``subject`` is the pod, node, gang or queue it concerns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ViolationKind
    subject: str
    message: str


def _sum(pods: Iterable[Pod]) -> defaultdict[str, int]:
    """Total demand (requests plus pod slots); absent names read as zero."""
    total: defaultdict[str, int] = defaultdict(int)
    for pod in pods:
        for name, quantity in pod.demand().items():
            total[name] += quantity
    return total


def _gang_problem(pod: Pod, gangs: Mapping[str, Gang], queues: Mapping[str, Queue]) -> str | None:
    """Why the pod's gang cannot be scheduled at all; None when it can."""
    if pod.gang is None:
        return None  # a gang of one in the default queue, which always exists
    gang = gangs.get(pod.gang)
    if gang is None:
        return f"PodGroup {pod.gang!r} not found"
    if gang.queue not in queues:
        return f"queue {gang.queue!r} of PodGroup {gang.name!r} not found"
    return None


def _queue_of(pod: Pod, gangs: Mapping[str, Gang], queues: Mapping[str, Queue]) -> str | None:
    if pod.gang is None:
        return DEFAULT_QUEUE
    gang = gangs.get(pod.gang)
    if gang is None or gang.queue not in queues:
        return None
    return gang.queue


def check(state: ClusterState, decision: Decision) -> list[Violation]:
    """Every hard rule ``decision`` breaks on ``state``; empty when it may be bound as is.

    Output order is deterministic: per-placement findings in pod-name order, then node
    capacity by node, invalid and partial gangs by gang, and capabilities by queue.
    """
    pods = {p.name: p for p in state.pods}
    nodes: dict[str, Node] = {n.name: n for n in state.nodes}
    gangs = {g.name: g for g in state.gangs}
    queues = {q.name: q for q in state.queues}
    queues.setdefault(DEFAULT_QUEUE, Queue(name=DEFAULT_QUEUE, weight=1))

    out: list[Violation] = []
    new_pods: list[Pod] = []  # known pending pods the decision places, in name order
    new_on_node: dict[str, list[Pod]] = defaultdict(list)

    for pod_name, node_name in sorted(decision.placements.items()):
        pod = pods.get(pod_name)
        if pod is None:
            out.append(
                Violation(
                    kind="unknown-pod",
                    subject=pod_name,
                    message=f"pod {pod_name!r} is placed on {node_name!r} but does not exist",
                )
            )
            continue
        if pod.node_name is not None:
            out.append(
                Violation(
                    kind="already-bound",
                    subject=pod_name,
                    message=(
                        f"pod {pod_name!r} is already bound to {pod.node_name!r}; "
                        f"it cannot also be bound to {node_name!r}"
                    ),
                )
            )
            continue
        if pod.gates:
            out.append(
                Violation(
                    kind="gated",
                    subject=pod_name,
                    message=(
                        f"pod {pod_name!r} has scheduling gates ({', '.join(pod.gates)}): "
                        "the API server refuses to bind it"
                    ),
                )
            )
            continue
        new_pods.append(pod)
        node = nodes.get(node_name)
        if node is None:
            out.append(
                Violation(
                    kind="unknown-node",
                    subject=pod_name,
                    message=f"pod {pod_name!r} is placed on unknown node {node_name!r}",
                )
            )
            continue
        new_on_node[node_name].append(pod)
        reason = placement_reason(pod, node)
        if reason is not None:
            out.append(
                Violation(
                    kind="predicate",
                    subject=pod_name,
                    message=f"pod {pod_name!r} may not run on node {node_name!r}: {reason}",
                )
            )

    out.extend(_capacity(state, nodes, new_on_node))
    out.extend(_gangs(state, gangs, queues, new_pods))
    out.extend(_capabilities(state, gangs, queues, new_pods))
    if decision.evictions or decision.nominated:
        out.extend(check_preemption(state, decision))
    return out


def check_preemption(state: ClusterState, decision: Decision) -> list[Violation]:
    """The rules of preemption: victims are running PodGroup pods of preemptible gangs,
    each left with no pod or at least minMember; a victim gets a nominated pod of a gang
    allowed to take from it (same queue: higher priority; another queue: reclaim) on
    every node it loses pods, or, evicted whole, on one of them; nominated gangs are
    whole and fit once the victims are gone."""
    pods = {p.name: p for p in state.pods}
    nodes = {n.name: n for n in state.nodes}
    gangs = {g.name: g for g in state.gangs}
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
        if 0 < left < gangs[name].min_member:
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
        need = gang.min_member if gang is not None else 1
        if held[name] + len(members) < need:
            bad("nomination", name, f"gang {name!r} would hold fewer than minMember {need}")

    # A victim evicted whole needs a taker on one of its nodes (its other pods go because
    # a gang cannot run in part); one shrunk, on every node where it loses pods.
    for victim in sorted(evicted_by_gang):
        v = gangs[victim]
        served = [
            any(
                t is not None and (t.queue != v.queue or t.priority > v.priority)
                for t in (gangs.get(p.gang or "") for p in on_node.get(node_name, []))
            )
            for node_name in sorted(n for n, vs in victims_on_node.items() if victim in vs)
        ]
        whole = running[victim] == evicted_by_gang[victim]
        if not (any(served) if whole else all(served)):
            bad(
                "eviction",
                victim,
                f"gang {victim!r} loses pods where no gang allowed to take from it (higher "
                "priority, or another queue reclaiming) is nominated",
            )
    out.extend(_room_after_evictions(state, decision, nodes, on_node))
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
        queue = _queue_of(pod, gangs, queues)
        if queue is not None and queues[queue].capability is not None:
            by_queue[queue].append(pod)
    if not by_queue:
        return []
    staying: dict[str, list[Pod]] = defaultdict(list)
    placed = [pods[name] for name in decision.placements if name in pods]
    for pod in [*state.bound_pods(), *placed]:
        queue = _queue_of(pod, gangs, queues)
        if queue in by_queue and pod.name not in decision.evictions:
            staying[queue].append(pod)
    out = []
    for queue_name, members in sorted(by_queue.items()):
        capability = queues[queue_name].capability
        if capability is None:
            continue
        held, added = _sum(staying.get(queue_name, [])), _sum(members)
        over = [
            r for r, cap in sorted(capability.items()) if added[r] and held[r] + added[r] > cap
        ]
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
    nodes: Mapping[str, Node],
    on_node: Mapping[str, list[Pod]],
) -> list[Violation]:
    pods = {p.name: p for p in state.pods}
    staying: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.bound_pods():
        if pod.name not in decision.evictions:
            staying[pod.node_name or ""].append(pod)
    for name, node_name in decision.placements.items():
        if name in pods:
            staying[node_name].append(pods[name])
    out = []
    for node_name in sorted(on_node):
        total = _sum([*staying.get(node_name, []), *on_node[node_name]])
        # Only what the nominated pods ask for: a node already over in a resource they do
        # not use (its allocatable shrank) takes them as a placement would.
        asked = _sum(on_node[node_name])
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


def _capacity(
    state: ClusterState, nodes: Mapping[str, Node], new_on_node: Mapping[str, list[Pod]]
) -> list[Violation]:
    bound_on_node: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.pods:
        if pod.node_name is not None and pod.node_name in new_on_node:  # nodes it adds to
            bound_on_node[pod.node_name].append(pod)
    out: list[Violation] = []
    for node_name in sorted(new_on_node):
        node = nodes[node_name]
        held = _sum(bound_on_node.get(node_name, []))
        new = _sum(new_on_node[node_name])
        for resource in sorted(new):
            alloc = node.allocatable[resource]
            if new[resource] == 0 or held[resource] + new[resource] <= alloc:
                continue
            free = {resource: alloc - held[resource]}
            words = "; ".join(insufficient({resource: new[resource]}, free))
            out.append(
                Violation(
                    kind="capacity",
                    subject=node_name,
                    message=(
                        f"node {node_name!r}: {words}: {held[resource]} {resource} bound + "
                        f"{new[resource]} new = {held[resource] + new[resource]} "
                        f"> {alloc} allocatable"
                    ),
                )
            )
    return out


def _gangs(
    state: ClusterState,
    gangs: Mapping[str, Gang],
    queues: Mapping[str, Queue],
    new_pods: list[Pod],
) -> list[Violation]:
    placed: dict[str, list[Pod]] = defaultdict(list)
    for pod in new_pods:
        placed[pod.gang_name()].append(pod)
    bound: dict[str, int] = defaultdict(int)
    for pod in state.bound_pods():
        # Only the gangs this decision adds to; a terminating pod is no member any more.
        if (name := pod.gang_name()) in placed and not pod.terminating:
            bound[name] += 1

    out: list[Violation] = []
    for gang_name in sorted(placed):
        members = placed[gang_name]
        problem = _gang_problem(members[0], gangs, queues)
        names = ", ".join(p.name for p in members)
        if problem is not None:
            out.append(
                Violation(
                    kind="invalid-gang",
                    subject=gang_name,
                    message=f"{problem}: {len(members)} pod(s) must not be placed ({names})",
                )
            )
            continue
        gang = gangs.get(gang_name)
        min_member = gang.min_member if gang is not None and members[0].gang is not None else 1
        total = bound[gang_name] + len(members)
        if total < min_member:
            out.append(
                Violation(
                    kind="partial-gang",
                    subject=gang_name,
                    message=(
                        f"gang {gang_name!r} would hold {total} pod(s) "
                        f"({bound[gang_name]} bound + {len(members)} new), "
                        f"below minMember {min_member}"
                    ),
                )
            )
    return out


def _capabilities(
    state: ClusterState,
    gangs: Mapping[str, Gang],
    queues: Mapping[str, Queue],
    new_pods: list[Pod],
) -> list[Violation]:
    new: dict[str, list[Pod]] = defaultdict(list)
    for pod in new_pods:
        queue = _queue_of(pod, gangs, queues)
        if queue is not None:
            new[queue].append(pod)
    capped = {name for name in new if queues[name].capability is not None}
    held_pods: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.bound_pods() if capped else ():  # only queues with a capability
        queue = _queue_of(pod, gangs, queues)
        if queue in capped:
            held_pods[queue].append(pod)

    out: list[Violation] = []
    for queue_name in sorted(new):
        capability = queues[queue_name].capability
        if capability is None:
            continue
        held = _sum(held_pods.get(queue_name, []))
        added = _sum(new[queue_name])
        for resource, cap in sorted(capability.items()):
            # Only resources this decision adds to: a queue already over a lowered
            # capability is not the decision's doing.
            if added[resource] == 0 or held[resource] + added[resource] <= cap:
                continue
            out.append(
                Violation(
                    kind="capability",
                    subject=queue_name,
                    message=(
                        f"queue {queue_name!r}: {held[resource]} {resource} held + "
                        f"{added[resource]} new = {held[resource] + added[resource]} "
                        f"> capability {cap}"
                    ),
                )
            )
    return out
