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
domain where its pods fit into the free room (first fit), the tightest of those, so
that roomier domains are left for the groups after it, which do not count the room it
took. A group that fits in no domain's free room takes turns, one every ``TURN_S`` of
the snapshot's clock, among the domains where it would fit were they empty (evicting
lower-priority pods may make room there), else takes the domain where most of it fits.
Bound pods of a group fix its domains: it may use any of theirs. At most ``MAX_GROUPS``
groups are chosen a cycle, taking turns beyond (``_turns``); the others wait theirs.

The choice is made before the optimisation, not inside it: the bound and gap a decision
reports are those of the problem with the domains chosen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np

from solver.apart import never_placed
from solver.arrays import IntArray
from solver.equivalence import NodeViews
from solver.model import PODS, ClusterState, Gang, Pod
from solver.predicates import POD_AFFINITY_MISMATCH, held_to
from solver.scheduling_terms import NodeRule, NodeSelectorRequirement, NodeSelectorTerm

TURN_S = 10.0
MAX_GROUPS = 128
# The rule of a group whose domain is not chosen this cycle (``_turns``): no node.
NOT_ITS_TURN = NodeRule(
    reason=(
        "node(s) not tried for pods kept together (required pod affinity): "
        f"{MAX_GROUPS} other groups go first this cycle"
    ),
    terms=(NodeSelectorTerm(),),
)


def topology_key(group: str) -> str:
    """The topology key of a group's name (``<what it selects>@<key>``)."""
    return group.rpartition("@")[2]


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
    room = _Room(state, [p for members in groups.values() for p in members])
    spare = _spare_members(state, {g.name: g for g in state.gangs})
    rules: dict[str, list[NodeRule]] = defaultdict(list)
    for group, values in fixed.items():
        for pod in groups.get(group, ()):
            rules[pod.name].append(_held_in(topology_key(group), tuple(sorted(values))))
    chosen, waiting = _turns(state, [g for g in groups if g not in fixed], groups)
    for group in chosen:
        domain = _choose(group, groups[group], _need(groups[group], spare), room, state.now_s)
        rule = _held_in(topology_key(group), (domain,) if domain is not None else ())
        for pod in groups[group]:
            rules[pod.name].append(rule)
    for group in waiting:
        for pod in groups[group]:
            rules[pod.name].append(NOT_ITS_TURN)
    return state.model_copy(
        update={
            "pods": tuple(held_to(p, rules[p.name]) if p.name in rules else p for p in state.pods)
        }
    )


def _turns(
    state: ClusterState, free_groups: list[str], groups: Mapping[str, list[Pod]]
) -> tuple[list[str], list[str]]:
    """The groups whose domain is chosen this cycle, and those that wait their turn: at
    most ``MAX_GROUPS`` (each choice is a few passes over every node: 1,152 groups on
    5,000 nodes took 0.85 s), half to the groups of the pods that go first (priority,
    then age), the other half taking turns among the rest every ``TURN_S`` of the
    snapshot clock. Groups of gangs no room places (``never_placed``) take no slot."""
    gangs = {p.gang for g in free_groups for p in groups[g] if p.gang is not None}
    hopeless = never_placed(state, gangs)
    order = sorted(
        (g for g in free_groups if any(p.gang not in hopeless for p in groups[g])),
        key=lambda g: min((-p.priority, p.created_s, p.name) for p in groups[g]),
    )
    if len(order) <= MAX_GROUPS:
        chosen = order
    else:
        head, rest = order[: MAX_GROUPS // 2], order[MAX_GROUPS // 2 :]
        room = MAX_GROUPS - len(head)
        start = int(state.now_s // TURN_S) * room % len(rest)
        chosen = head + (rest[start:] + rest[:start])[:room]
    taken = set(chosen)
    return chosen, [g for g in free_groups if g not in taken]


@cache
def _held_in(key: str, values: tuple[str, ...]) -> NodeRule:
    """Node affinity to ``values`` of ``key``; none (an empty term matches no node) held
    to no node. (Made once: most groups share a few domains, and a new rule's hash,
    read by every set it goes in, costs more than the rest of its choice.)"""
    if not values:
        return NodeRule(reason=POD_AFFINITY_MISMATCH, terms=(NodeSelectorTerm(),))
    requirement = NodeSelectorRequirement(key=key, operator="In", values=values)
    term = NodeSelectorTerm(match_expressions=(requirement,))
    return NodeRule(reason=POD_AFFINITY_MISMATCH, terms=(term,))


def _spare_members(state: ClusterState, gangs: Mapping[str, Gang]) -> dict[str, int]:
    """Per gang, the members it may run without (members that may run less minMember)."""
    members: dict[str, int] = defaultdict(int)
    for pod in state.pods:
        gang, runs = pod.gang, pod.node_name is not None or not pod.gates
        if gang is not None and gang in gangs and not pod.terminating and runs:
            members[gang] += 1
    return {name: members[name] - gang.min_running for name, gang in gangs.items()}


def _need(pods: Sequence[Pod], spare: Mapping[str, int]) -> int:
    """How many of a group's pods their gangs cannot run without (one at least)."""
    of_gang: dict[str | None, int] = defaultdict(int)
    for pod in pods:
        of_gang[pod.gang] += 1
    need = sum(
        max(0, count - max(0, spare.get(gang, 0) if gang is not None else 0))
        for gang, count in of_gang.items()
    )
    return max(1, need)


class _Room:
    """Every node's free room (allocatable less what its bound pods hold; none on a node
    out of service) and the domains of each topology key, read once per snapshot: a
    group's choice then costs array passes over the nodes, not a loop over them."""

    def __init__(self, state: ClusterState, pending: Sequence[Pod]) -> None:
        nodes = list(state.nodes)
        self.views = NodeViews(nodes, pending)
        names = sorted(
            {r for n in nodes for r in n.allocatable.root}
            | {r for p in pending for r, _ in p.requests.pod_demand_items()}
        )
        self.r_index = {name: i for i, name in enumerate(names)}
        allocatable = np.array(
            [[n.allocatable[r] for r in names] for n in nodes], dtype=np.int64
        ).reshape(len(nodes), len(names))
        allocatable[~np.array([n.in_service for n in nodes], dtype=np.bool_)] = 0
        self.allocatable = allocatable
        n_index = {n.name: i for i, n in enumerate(nodes)}
        rows: list[int] = []
        sets: list[int] = []
        vectors: dict[tuple[tuple[str, int], ...], int] = {}
        for pod in state.pods:
            if pod.node_name is not None and (row := n_index.get(pod.node_name)) is not None:
                rows.append(row)
                sets.append(vectors.setdefault(pod.requests.pod_demand_items(), len(vectors)))
        held = np.zeros((len(vectors), len(names)), dtype=np.int64)
        for demand, i in vectors.items():
            for resource, amount in demand:
                if (column := self.r_index.get(resource)) is not None:
                    held[i, column] = amount
        self.free = allocatable.copy()
        np.subtract.at(
            self.free, np.array(rows, dtype=np.int64), held[np.array(sets, dtype=np.int64)]
        )
        self._nodes = nodes
        self._domains: dict[str, tuple[IntArray, list[str], list[IntArray]]] = {}
        self._demands: dict[tuple[tuple[str, int], ...], IntArray] = {}

    def domains(self, key: str) -> tuple[IntArray, list[str], list[IntArray]]:
        """Per node, the index of its domain of ``key`` (-1: none); the domains' values;
        and each domain's nodes (rows)."""
        if key not in self._domains:
            labels = [n.labels.get(key) for n in self._nodes]
            values = sorted({v for v in labels if v is not None})
            index = {v: i for i, v in enumerate(values)}
            of = np.array([index[v] if v is not None else -1 for v in labels], dtype=np.int64)
            order = np.argsort(of, kind="stable")
            starts = np.searchsorted(of[order], np.arange(len(values) + 1))
            members = [order[starts[d] : starts[d + 1]] for d in range(len(values))]
            self._domains[key] = (of, values, members)
        return self._domains[key]

    def demand(self, pod: Pod) -> IntArray:
        """A pod's demand as a row (its requests and pod slot), made once per request set."""
        items = pod.requests.pod_demand_items()
        if (out := self._demands.get(items)) is None:
            out = self._demands[items] = np.zeros(len(self.r_index), dtype=np.int64)
            for resource, amount in items:
                out[self.r_index[resource]] = amount
        return out

    def per_node(self, pod: Pod, room: IntArray, rows: IntArray) -> IntArray:
        """How many of ``pod`` each of the nodes ``rows`` takes, in ``room`` (theirs)."""
        demand = self.demand(pod)
        asked = np.flatnonzero(demand)
        fits = (np.maximum(room[:, asked], 0) // demand[asked]).min(axis=1)
        if pod.apart:
            fits = np.minimum(fits, 1)  # a node of its own
        return np.where(self.views.feasible_nodes(pod)[rows], fits, 0)


def _specs(pods: Sequence[Pod]) -> list[tuple[Pod, int]]:
    """A group's pods by spec (an exemplar, its count), the biggest first."""
    counts: dict[tuple[object, ...], list[Pod]] = defaultdict(list)
    for pod in pods:
        counts[pod.spec_key()].append(pod)
    return sorted(
        ((same[0], len(same)) for same in counts.values()),
        key=lambda pair: (-sum(v for _, v in pair[0].requests.pod_demand_items()), pair[0].name),
    )


def _fill(room: _Room, specs: Sequence[tuple[Pod, int]], space: IntArray, rows: IntArray) -> int:
    """Place the group's pods into ``space`` (the room of the nodes ``rows``, taken as
    they go), first fit in node order; returns how many fitted."""
    fitted = 0
    for exemplar, count in specs:
        fits = room.per_node(exemplar, space, rows)
        before = np.cumsum(fits) - fits
        take = np.minimum(fits, np.maximum(0, count - before))
        space -= take[:, None] * room.demand(exemplar)[None, :]
        fitted += int(take.sum())
    return fitted


def _choose(group: str, pods: Sequence[Pod], need: int, room: _Room, now_s: float) -> str | None:
    """The domain chosen for a group not yet bound anywhere (None: no node has the key);
    the room its pods take there is taken from ``room.free`` when they fit."""
    of, values, members = room.domains(topology_key(group))
    if not values:
        return None
    specs, count = _specs(pods), len(values)
    inside = np.flatnonzero(of >= 0)

    def at_most(space: IntArray) -> IntArray:
        # Per domain, how many of the group fit, each spec counted alone: an upper bound
        # that rules most domains out in one pass (a domain per node, as a hostname).
        out = np.zeros(count, dtype=np.int64)
        for exemplar, n in specs:
            fits = room.per_node(exemplar, space[inside], inside)
            per_domain = np.bincount(of[inside], weights=fits, minlength=count)
            out += np.minimum(per_domain, n).astype(np.int64)
        return out

    candidates = [int(d) for d in np.flatnonzero(at_most(room.free) >= need)]
    if len(candidates) > 1:
        resource = _asked_most(room, specs)
        weights = np.maximum(room.free[inside, resource], 0)
        left = np.bincount(of[inside], weights=weights, minlength=count)
        candidates.sort(key=lambda d: (left[d], values[d]))
    for d in candidates:
        space = room.free[members[d]].copy()
        if _fill(room, specs, space, members[d]) >= need:  # the tightest domain it fits
            room.free[members[d]] = space
            return values[d]
    empty = [
        d
        for d in np.flatnonzero(at_most(room.allocatable) >= need)
        if _fill(room, specs, room.allocatable[members[d]].copy(), members[d]) >= need
    ]
    if empty:
        return values[empty[int(now_s // TURN_S) % len(empty)]]
    return values[int(np.argmax(at_most(room.free)))]


def _asked_most(room: _Room, specs: Sequence[tuple[Pod, int]]) -> int:
    """The column of the resource the group asks most of, as a share of what the
    cluster has (the pod slot aside)."""
    asked = sum(
        (room.demand(p) * count for p, count in specs), np.zeros(len(room.r_index), np.int64)
    )
    share = asked / np.maximum(room.allocatable.sum(axis=0), 1)
    if (slot := room.r_index.get(PODS)) is not None and share.sum() > share[slot]:
        share[slot] = 0
    return int(np.argmax(share))
