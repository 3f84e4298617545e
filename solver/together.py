"""Pods kept together: required pod affinity among pending pods (``Pod.together``), as a
training job asks for one zone, rack or block for all its workers.

kube-scheduler's InterPodAffinity lets a pod onto a node whose topology domain (the
nodes sharing its value of the term's ``topologyKey``) runs a pod the term selects. The
first pod of a series, whose term selects itself where no pod the term selects runs
yet, may go to any node with the key, and each pod after it then follows it there. A
gang placed at once therefore lands in one domain: each group (the pods sharing a name
in ``Pod.together``, which ends in ``@<topologyKey>``) is placed in one domain or not
at all.

Which domain is chosen here, before any scheduler reads the snapshot (``settle``, from
``solver.problem.prepare``), and written as node affinity every pod of the group holds
to (a ``NodeRule``), so that every stage, the class model, greedy, preemption, honours
it as it honours a node selector. Groups go in priority then age order; each takes the
domain where all its pods fit into the free room (first fit; ``solver.domain_room``),
the tightest of those, so that roomier domains are left for the groups after it, which
do not count the room it took; else one where the pods its gang cannot run without fit.
A group that fits in no domain's free room takes turns, one every ``TURN_S`` of the
snapshot's clock, among the domains where it would fit were the pods a preemption or
reclaim may evict gone (``DomainRoom.evictable``), else takes the domain where most of
it fits (and takes it from no group kept from it).
Bound pods of a group fix its domains: it may use any of theirs. A group is chosen
outside the domains taken by the groups it is kept from (``Pod.exclusive_of``: jobs each
asking for a zone of their own, JobSet's exclusive placement). A pod of several groups
(terms on a zone and on a rack, or two terms selecting overlapping pods) has each
group after the first chosen among the nodes the domains chosen before allow. At most
``MAX_GROUPS`` groups are chosen a cycle, taking turns beyond (``_turns``); the others
wait theirs.

The choice is made before the optimisation, not inside it: the bound and gap a decision
reports are those of the problem with the domains chosen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

import numpy as np

from solver.apart import group_turns, spare_members, turn_offset
from solver.arrays import BoolArray, IntArray
from solver.domain_room import DomainRoom, asked_most, fill, specs_of
from solver.model import DEFAULT_QUEUE, ClusterState, Pod, topology_key
from solver.predicates import POD_AFFINITY_MISMATCH, held_to
from solver.scheduling_terms import NodeRule, NodeSelectorRequirement, NodeSelectorTerm

MAX_GROUPS = 128
# Domains a group's choice checks by placing its pods (the cheap upper bound having
# ruled the others out): with a hostname key every node is a domain.
TRIES = 8
# The rule of a group whose domain is not chosen this cycle (``_turns``): no node.
NOT_ITS_TURN = NodeRule(
    reason=(
        "node(s) not tried this cycle for pods kept together (required pod affinity): "
        "other groups go first"
    ),
    terms=(NodeSelectorTerm(),),
)


def settle(state: ClusterState) -> ClusterState:
    """``state`` with each group's pending pods held to the domain chosen for it (see the
    module); ``state`` itself where no pending pod is kept together."""
    groups: dict[str, list[Pod]] = defaultdict(list)
    fixed: dict[str, set[str]] = defaultdict(set)  # group -> domains of its bound pods
    nodes = {n.name: n for n in state.nodes}  # (bound pods' nodes: any, in service or not)
    for pod in state.pods:
        if not pod.together or pod.terminating:
            continue
        node = nodes.get(pod.node_name) if pod.node_name is not None else None
        for group in pod.together:
            if pod.node_name is None and not pod.gates:
                groups[group].append(pod)
            elif node is not None and (value := node.labels.get(topology_key(group))):
                fixed[group].add(value)
    if not groups:
        return state
    room = DomainRoom(state, [p for members in groups.values() for p in members])
    rules: dict[str, list[NodeRule]] = defaultdict(list)
    allowed: dict[str, BoolArray] = {}  # per pod, the nodes its groups' domains leave

    taken: dict[str, tuple[str, ...]] = {}  # per group held, its domains

    def hold(group: str, values: Iterable[str], takes: bool = True) -> None:
        key, chosen = topology_key(group), tuple(sorted(values))
        rule, nodes_in = held_in(key, chosen), room.in_domains(key, chosen)
        if takes:
            taken[group] = chosen
        for pod in groups[group]:
            rules[pod.name].append(rule)
            before = allowed.get(pod.name)
            allowed[pod.name] = nodes_in if before is None else before & nodes_in

    for group in fixed.keys() & groups.keys():
        hold(group, fixed[group])
    for group in fixed.keys() - groups.keys():
        # No pod of it waits, but the groups kept from it stay out of its domains (pods
        # a hold shows bound on the nodes it nominated them to).
        taken[group] = tuple(sorted(fixed[group]))
    chosen, waiting = _turns(state, [g for g in groups if g not in fixed], groups)
    spare = spare_members(state)
    queue_of = {g.name: g.queue for g in state.gangs}
    for group in chosen:
        members = groups[group]
        masks = [allowed[p.name] for p in members if p.name in allowed]
        # Not in a domain a group it is kept from took (and they, when chosen later, not
        # in its): the jobs of an exclusive placement, each in a zone of its own.
        shunned = {x for p in members for x in p.exclusive_of if taken.get(x)}
        masks += [~room.in_domains(topology_key(x), taken[x]) for x in sorted(shunned)]
        within = np.logical_and.reduce(masks) if masks else None
        need = _need(members, spare)
        domain, fits = _choose(group, members, need, room, state.now_s, within, queue_of)
        # A domain it fits in nowhere, not even by preemption, is no domain it takes from
        # the groups kept from it: it would hold an exclusive job's only domain for ever.
        hold(group, (domain,) if domain is not None else (), takes=fits)
    for group, why in waiting.items():
        for pod in groups[group]:
            rules[pod.name].append(why)
    return state.model_copy(
        update={
            "pods": tuple(held_to(p, rules[p.name]) if p.name in rules else p for p in state.pods)
        }
    )


def _turns(
    state: ClusterState, free_groups: list[str], groups: Mapping[str, list[Pod]]
) -> tuple[list[str], dict[str, NodeRule]]:
    """The groups whose domain is chosen this cycle, and the rule of each other group:
    at most ``MAX_GROUPS`` are chosen (each choice is a few passes over every node), by
    ``take_turns`` among the groups in the order their pods go (priority, then age); the
    others wait their turn. Groups of gangs no room places (``never_placed``) take no
    slot, and no node."""
    order, chosen = group_turns(state, {g: groups[g] for g in free_groups}, MAX_GROUPS)
    taken, considered = set(chosen), set(order)
    waiting = {
        g: NOT_ITS_TURN if g in considered else held_in(topology_key(g), ())
        for g in free_groups
        if g not in taken
    }
    return chosen, waiting


@lru_cache(maxsize=4096)
def held_in(key: str, values: tuple[str, ...], reason: str = POD_AFFINITY_MISMATCH) -> NodeRule:
    """Node affinity to the domains ``values`` of topology ``key`` (none: no node, an
    empty term matching none), counted as kube-scheduler counts a node failing a pod's
    affinity (or, ``reason``, another filter). Made once per domains: most groups share
    a few, and a new rule's hash, read by every set it goes in, costs more than the rest
    of a group's choice."""
    if not values:
        return NodeRule(reason=reason, terms=(NodeSelectorTerm(),))
    requirement = NodeSelectorRequirement(key=key, operator="In", values=values)
    term = NodeSelectorTerm(match_expressions=(requirement,))
    return NodeRule(reason=reason, terms=(term,))


def _need(pods: Sequence[Pod], spare: Mapping[str, int]) -> int:
    """How many of a group's pods their gangs cannot run without (one at least); a
    gang's spare members are counted once per group (its other groups may take them)."""
    of_gang: dict[str | None, int] = defaultdict(int)
    for pod in pods:
        of_gang[pod.gang] += 1
    need = sum(
        max(0, count - max(0, spare.get(gang, 0) if gang is not None else 0))
        for gang, count in of_gang.items()
    )
    return max(1, need)


def _choose(
    group: str,
    pods: Sequence[Pod],
    need: int,
    room: DomainRoom,
    now_s: float,
    within: BoolArray | None,
    queues: Mapping[str, str],
) -> tuple[str | None, bool]:
    """The domain chosen for a group not yet bound anywhere, among the nodes ``within``
    allows (None: any; None where no node has the key), and whether the group fits there
    (in its free room, or once what a preemption may evict is gone); the room its pods
    take there is taken from ``room.free`` when they fit it."""
    of, values, members = room.domains(topology_key(group))
    if within is not None:
        of = np.where(within, of, -1)
    if not values or not (of >= 0).any():
        return None, False
    specs, count, inside = specs_of(room, pods), len(values), np.flatnonzero(of >= 0)

    def at_most(space: IntArray) -> IntArray:
        # Per domain, how many of the group fit, each spec counted alone: an upper bound
        # that rules most domains out in one pass (a domain per node, as a hostname).
        out = np.zeros(count, dtype=np.int64)
        for exemplar, n in specs:
            fits = room.per_node(exemplar, space[inside], inside)
            per_domain = np.bincount(of[inside], weights=fits, minlength=count)
            out += np.minimum(per_domain, n).astype(np.int64)
        return out

    def rows_of(d: int) -> IntArray:
        rows = members[d]
        return rows if within is None else rows[within[rows]]

    def fits(d: int, space: IntArray, target: int) -> IntArray | None:
        rows = rows_of(d)
        taken = space[rows].copy()
        return taken if fill(room, specs, taken, rows) >= target else None

    # The whole group first: a gang placed at its minimum in a tight domain would keep
    # its other pods there, by the rule its bound pods make, where another took them all.
    targets = list(dict.fromkeys((len(pods), need)))
    bound = at_most(room.free)
    for target in targets:
        candidates = np.flatnonzero(bound >= target)  # in the values' order
        if len(candidates) > 1:
            resource = asked_most(room, specs)
            weights = np.maximum(room.free[inside, resource], 0)
            left = np.bincount(of[inside], weights=weights, minlength=count)
            candidates = candidates[np.argsort(left[candidates], kind="stable")]
        for d in candidates[:TRIES].tolist():
            if (taken := fits(d, room.free, target)) is not None:  # the tightest it fits
                room.free[rows_of(d)] = taken
                return values[d], True
    # Else a turn among the domains it would fit, were what a preemption may evict gone.
    gang = pods[0].gang
    queue = queues.get(gang, DEFAULT_QUEUE) if gang is not None else DEFAULT_QUEUE
    freeable = room.evictable(max(p.priority for p in pods), queue)
    reachable = at_most(freeable)
    for target in targets:
        fitting: list[int] = np.flatnonzero(reachable >= target).tolist()
        if fitting:
            start = turn_offset(now_s, len(fitting))
            for d in (fitting[start:] + fitting[:start])[:TRIES]:
                if fits(d, freeable, target) is not None:
                    return values[d], True
    present = np.bincount(of[inside], minlength=count) > 0  # domains with a node allowed
    return values[int(np.argmax(np.where(present, bound, -1)))], False
