"""The solver-free oracle: does a decision respect the hard rules of a snapshot?

Flow: a scheduler (CP-SAT or a baseline) reads a ``ClusterState`` through
``solver.problem`` and returns a ``Decision``. ``check`` re-derives, from the raw state
alone, whether that decision may be bound: the tests use it as their oracle for every
scheduler, and the adapter runs it before binding anything to the cluster.

So that it can catch mistakes in the code it checks, this module reads only
``solver.model``, the node predicates of ``solver.predicates``, the rules of preemption
(``solver.validate_preemption``) and plain integer arithmetic; it never imports
``solver.problem`` or anything built on it. Scoring a
decision is ``solver.objective.score``: it must price exactly as the model does.

What counts as a new placement for each check:

* a placement naming an unknown pod, a pod already bound, a gated or a terminating pod
  is reported and then ignored;
* the gang check (all-or-nothing) and the queue capability check count every placement
  of a known pending pod, whatever its node, because that is what the decision claims;
* the node capacity check counts the placements on nodes that exist.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from solver.decision import Decision
from solver.model import (
    DEFAULT_QUEUE,
    ClusterState,
    Gang,
    Node,
    Pod,
    Queue,
    apart_room,
    topology_key,
)
from solver.predicates import insufficient, placement_reason
from solver.validate_preemption import check_preemption
from solver.validate_spread import check_spreads
from solver.violations import Violation, demand_sum, queue_of

__all__ = ["Violation", "check", "check_preemption"]


def _gang_problem(pod: Pod, gangs: Mapping[str, Gang], queues: Mapping[str, Queue]) -> str | None:
    """Why the pod's gang cannot be scheduled at all; None when it can."""
    if pod.gang is None:
        name = DEFAULT_QUEUE  # a gang of one in the default queue, which always exists
    else:
        gang = gangs.get(pod.gang)
        if gang is None:
            return f"PodGroup {pod.gang!r} not found"
        if gang.queue not in queues:
            return f"queue {gang.queue!r} of PodGroup {gang.name!r} not found"
        name = gang.queue
    if not (queue := queues[name]).admits():
        return f"queue {name!r} is {queue.state}: it takes no new pods"
    return None


def check(state: ClusterState, decision: Decision) -> list[Violation]:
    """Every hard rule ``decision`` breaks on ``state``; empty when it may be bound as is.

    Output order is deterministic: per-placement findings in pod-name order, then node
    capacity by node, invalid and partial gangs by gang, and capabilities by queue.
    """
    pods = state.pods_by_name()
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
        if pod.terminating:
            out.append(
                Violation(
                    kind="terminating",
                    subject=pod_name,
                    message=f"pod {pod_name!r} is being deleted: it is no pod to bind",
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

    placed: dict[str, list[Pod]] = defaultdict(list)
    for pod in new_pods:
        placed[pod.gang_name()].append(pod)
    on_nodes, of_gangs = _bound_where(state, new_on_node, placed)
    out.extend(_capacity(nodes, new_on_node, on_nodes))
    out.extend(_kept_apart(state, pods, decision))
    out.extend(_kept_together(state, pods, nodes, decision))
    out.extend(check_spreads(pods, nodes, decision))
    out.extend(_gangs(gangs, queues, placed, of_gangs))
    out.extend(_capabilities(state, gangs, queues, new_pods))
    if decision.evictions or decision.nominated:
        out.extend(check_preemption(state, decision))
    return out


def _bound_where(
    state: ClusterState, new_on_node: Mapping[str, list[Pod]], placed: Mapping[str, list[Pod]]
) -> tuple[dict[str, list[Pod]], dict[str, list[Pod]]]:
    """The bound pods on the nodes the decision adds to, and the members of the gangs it
    adds to (a terminating pod is no member any more), in one pass over every pod."""
    on_nodes: dict[str, list[Pod]] = defaultdict(list)
    of_gangs: dict[str, list[Pod]] = defaultdict(list)
    if not placed:  # (nor any node): a decision that places nothing reads no pod here
        return on_nodes, of_gangs
    for pod in state.pods:
        if (node := pod.node_name) is None:
            continue
        if node in new_on_node:
            on_nodes[node].append(pod)
        if (name := pod.gang_name()) in placed and not pod.terminating:
            of_gangs[name].append(pod)
    return on_nodes, of_gangs


def _capacity(
    nodes: Mapping[str, Node],
    new_on_node: Mapping[str, list[Pod]],
    bound_on_node: Mapping[str, list[Pod]],
) -> list[Violation]:
    out: list[Violation] = []
    for node_name in sorted(new_on_node):
        node = nodes[node_name]
        held = demand_sum(bound_on_node.get(node_name, []))
        new = demand_sum(new_on_node[node_name])
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


def _kept_apart(
    state: ClusterState, pods: Mapping[str, Pod], decision: Decision
) -> list[Violation]:
    """A pod the decision places or nominates on a node where pods of a group it is kept
    apart from (``Pod.apart``) run (not evicted) or go too, more than the group's room
    (``apart_room``): a broken capacity of that node, as the problem models it. Bound
    pods of a group past its room already are no finding of this decision's."""
    new: dict[str, list[Pod]] = defaultdict(list)
    for pod_name, node_name in sorted({**decision.placements, **decision.nominated}.items()):
        pod = pods.get(pod_name)
        if pod is not None and pod.apart and pod.node_name is None:
            new[node_name].append(pod)
    if not new:
        return []
    seen: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for pod in state.pods:  # node -> group -> its pods there
        if pod.apart and pod.node_name in new and pod.name not in decision.evictions:
            for group in pod.apart:
                seen[pod.node_name][group].append(pod.name)
    out: list[Violation] = []
    for node_name, placed in sorted(new.items()):
        for pod in placed:
            for group in pod.apart:
                there = seen[node_name][group]
                there.append(pod.name)
                if len(there) <= apart_room(group):
                    continue
                message = (
                    f"node {node_name!r}: pods {there[0]!r} to {pod.name!r}, {len(there)} of "
                    f"{group}, where the node takes at most {apart_room(group)} (required "
                    "pod anti-affinity, topology spread or host port)"
                )
                # A nomination's voids the preemption, as its room's findings do.
                kind = "nomination" if pod.name in decision.nominated else "capacity"
                out.append(Violation(kind=kind, subject=node_name, message=message))
    return out


def _kept_together(
    state: ClusterState, pods: Mapping[str, Pod], nodes: Mapping[str, Node], decision: Decision
) -> list[Violation]:
    """Pods of a group kept together (``Pod.together``, its name ending in its topology
    key) the decision places or nominates in more than one domain, or on a node without
    the key, or, where pods of the group run (not evicted), outside their domains; or in
    a domain where a group it is kept from (``Pod.exclusive_of``) runs or goes."""
    new: dict[str, dict[str, str | None]] = defaultdict(dict)  # group -> pod -> its domain
    shuns: list[tuple[str, Pod, Node]] = []
    for pod_name, node_name in sorted({**decision.placements, **decision.nominated}.items()):
        pod = pods.get(pod_name)
        if pod is None or not pod.together or pod.node_name is not None:
            continue
        if (node := nodes.get(node_name)) is None:
            continue  # (an unknown node, reported as such)
        for group in pod.together:
            new[group][pod_name] = node.labels.get(topology_key(group))
        if pod.exclusive_of:
            shuns.append((pod_name, pod, node))
    if not new:
        return []
    read = new.keys() | {x for _, pod, _ in shuns for x in pod.exclusive_of}
    running: dict[str, set[str | None]] = defaultdict(set)
    for pod in state.pods:
        if pod.together and pod.node_name is not None and not pod.terminating:
            if pod.name in decision.evictions or (node := nodes.get(pod.node_name)) is None:
                continue
            for group in set(pod.together) & read:
                running[group].add(node.labels.get(topology_key(group)))
    out: list[Violation] = []
    for pod_name, pod, node in shuns:
        for other in pod.exclusive_of:
            domain = node.labels.get(topology_key(other))
            if domain is not None and domain in {*new.get(other, {}).values(), *running[other]}:
                message = (
                    f"pod {pod_name!r} goes to domain {domain!r} of group {other}, which its "
                    "required pod anti-affinity keeps it from"
                )
                kind = "nomination" if pod_name in decision.nominated else "predicate"
                out.append(Violation(kind=kind, subject=pod_name, message=message))
    for group, domains in sorted(new.items()):
        allowed = {v for v in running[group] if v is not None}
        if not allowed:
            allowed = {v for v in domains.values() if v is not None}
            allowed = allowed if len(allowed) == 1 else set()
        for pod_name, domain in sorted(domains.items()):
            if domain not in allowed:
                where = f"domain {domain!r}" if domain is not None else "a node without the key"
                message = (
                    f"pod {pod_name!r} goes to {where}, apart from the pods it is kept with "
                    f"(required pod affinity, {group}; in {sorted(allowed) or 'several'})"
                )
                kind = "nomination" if pod_name in decision.nominated else "predicate"
                out.append(Violation(kind=kind, subject=pod_name, message=message))
    return out


def _gangs(
    gangs: Mapping[str, Gang],
    queues: Mapping[str, Queue],
    placed: Mapping[str, list[Pod]],
    of_gangs: Mapping[str, list[Pod]],
) -> list[Violation]:
    """``placed``: the decision's new pods by gang; ``of_gangs``: those gangs' bound
    members (``_bound_where``)."""
    bound: dict[str, int] = defaultdict(int, {n: len(ms) for n, ms in of_gangs.items()})
    out: list[Violation] = []
    for gang_name in sorted(placed):
        members = placed[gang_name]
        problem = _gang_problem(members[0], gangs, queues)
        if problem is not None:
            names = ", ".join(p.name for p in members)
            out.append(
                Violation(
                    kind="invalid-gang",
                    subject=gang_name,
                    message=f"{problem}: {len(members)} pod(s) must not be placed ({names})",
                )
            )
            continue
        gang = gangs.get(gang_name)
        min_member = gang.min_running if gang is not None and members[0].gang is not None else 1
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
        elif gang is not None and gang.task_minimums and bound[gang_name] < min_member:
            # It starts with this decision: each task's members, bound, new and succeeded.
            per_task: Counter[str | None] = Counter(p.task for p in of_gangs.get(gang_name, []))
            per_task.update(p.task for p in members)
            per_task.update(gang.succeeded_by_task)
            short = [
                f"task {task!r} {per_task[task]} < {least}"
                for task, least in sorted(gang.task_minimums.items())
                if per_task[task] < least
            ]
            if short:
                out.append(
                    Violation(
                        kind="partial-gang",
                        subject=gang_name,
                        message=(
                            f"gang {gang_name!r} would run without its tasks' minimums "
                            f"(minTaskMember): {', '.join(short)}"
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
        queue = queue_of(pod, gangs, queues)
        if queue is not None:
            new[queue].append(pod)
    capped = {name for name in new if queues[name].capability is not None}
    held_pods: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.bound_pods() if capped else ():  # only queues with a capability
        queue = queue_of(pod, gangs, queues)
        if queue in capped:
            held_pods[queue].append(pod)

    out: list[Violation] = []
    for queue_name in sorted(new):
        capability = queues[queue_name].capability
        if capability is None:
            continue
        held = demand_sum(held_pods.get(queue_name, []))
        added = demand_sum(new[queue_name])
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
