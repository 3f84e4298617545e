"""Topology spread over zones (``Pod.spreads``): kube-scheduler's PodTopologySpread filter
lets a pod into a domain of the constraint's key (``whenUnsatisfiable: DoNotSchedule``)
when the pods it counts there, itself among them, are at most ``maxSkew`` above the
fewest it counts in any domain it may go to.

A gang is bound at once, so what must hold is the end state: each domain that gets a
pod at most ``maxSkew`` above the fewest. Then the filter passes every pod in some order
(each into the domain with the fewest of those still to get pods), and counts only grow
while a cycle's pods are bound. Before any scheduler reads the snapshot (``split``, from
``solver.problem.prepare``), each group's pending pods (those the constraint counts) are
shared out over the domains: each pod, the biggest first, to the domain with the fewest
where the skew holds and it fits the free room (``solver.domain_room``; else, for a
gang that may preempt, the room a preemption could free), and held there by node
affinity (a ``NodeRule``), as ``solver.together`` holds its groups. Every stage, the
class model, greedy and preemption, then honours it as it honours a node selector.

The end state holds only if every pod of the group is placed, so a group is shared out
only where it is the pending pods of one gang that needs them all (no member to spare
below its minimum), alike in node selector, affinity and spreads (one set of domains,
one count each), and in no other spread over zones; else its pods wait, told why. A
group that cannot be shared out in the room there is waits, told kube-scheduler's words.

The choice is made before the optimisation, not inside it: the bound and gap a decision
reports are those of the problem with the domains chosen. The validator checks the end
state itself (``solver.validate``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import lru_cache

from solver.apart import may_run, never_placed, take_turns
from solver.arrays import IntArray
from solver.domain_room import DomainRoom, fill, specs_of
from solver.model import DEFAULT_QUEUE, ClusterState, Gang, Pod
from solver.predicates import SPREAD_CONFLICT, held_to
from solver.scheduling_terms import DomainSpread, NodeRule, NodeSelectorRequirement
from solver.scheduling_terms import NodeSelectorTerm as Term

MAX_GROUPS = 128  # groups shared out a cycle (each a few passes over its domains' nodes)
NOT_ITS_TURN = NodeRule(
    reason="node(s) not tried this cycle for pods spread over zones: other groups go first",
    terms=(Term(),),
)
NOT_SPLIT = NodeRule(
    reason=(
        "node(s) not tried for a topology spread over zones: gangsat checks one only for "
        "the pods of one gang that needs them all, alike in node selector, affinity and "
        "spread constraints"
    ),
    terms=(Term(),),
)
NO_ROOM = NodeRule(reason=SPREAD_CONFLICT, terms=(Term(),))


def split(state: ClusterState) -> ClusterState:
    """``state`` with each group's pending pods held to the domain chosen for each (see
    the module); ``state`` itself where no pending pod spreads over zones."""
    groups: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.pods:
        if pod.spreads and pod.node_name is None and not pod.terminating and not pod.gates:
            for spread in pod.spreads:
                groups[spread.group].append(pod)
    if not groups:
        return state
    gangs = {g.name: g for g in state.gangs}
    members: dict[str, int] = defaultdict(int)
    for pod in state.pods:
        if pod.gang is not None and may_run(pod):
            members[pod.gang] += 1
    hopeless = never_placed(state, {p.gang for g in groups.values() for p in g if p.gang})
    order = sorted(
        (g for g in groups if any(p.gang not in hopeless for p in groups[g])),
        key=lambda g: min((-p.priority, p.created_s, p.name) for p in groups[g]),
    )
    chosen = set(take_turns(order, MAX_GROUPS, state.now_s))
    room = DomainRoom(state, [p for g in chosen for p in groups[g]]) if chosen else None
    waiting = set(order) - chosen
    rules: dict[str, NodeRule] = {}
    for group, pods in groups.items():
        rule = NOT_ITS_TURN if group in waiting else NO_ROOM
        if room is not None and group in chosen:
            if not _splittable(pods, gangs, members):
                rule = NOT_SPLIT
            elif (assigned := share_out(pods, pods[0].spreads[0], room, gangs)) is not None:
                key = pods[0].spreads[0].key
                rules.update({p.name: _in_domain(key, assigned[p.name]) for p in pods})
                continue
        rules.update(dict.fromkeys((p.name for p in pods), rule))
    return state.model_copy(
        update={
            "pods": tuple(
                held_to(p, (rules[p.name],)) if p.name in rules else p for p in state.pods
            )
        }
    )


def _splittable(pods: Sequence[Pod], gangs: Mapping[str, Gang], members: Mapping[str, int]) -> bool:
    first = pods[0]
    gang = gangs.get(first.gang) if first.gang is not None else None
    if gang is None or len(first.spreads) != 1:
        return False
    if members.get(gang.name, 0) > gang.min_running:
        return False  # a member to spare: the end state holds only if all are placed
    return (
        len({(p.gang, p.spreads, frozenset(p.node_selector.items()), p.affinity) for p in pods})
        == 1
    )


def share_out(
    pods: Sequence[Pod], spread: DomainSpread, room: DomainRoom, gangs: Mapping[str, Gang]
) -> dict[str, str] | None:
    """Per pod, its domain (see the module), or None where the group cannot be shared
    out. The room the pods take is taken from ``room.free`` where they fit it."""
    found = _fill(pods, spread, room, room.free)
    if found is not None:
        return found
    gang = gangs.get(pods[0].gang) if pods[0].gang is not None else None
    if not all(p.may_preempt for p in pods):
        return None
    queue = gang.queue if gang is not None else DEFAULT_QUEUE
    freeable = room.evictable(max(p.priority for p in pods), queue).copy()
    return _fill(pods, spread, room, freeable)


def _fill(
    pods: Sequence[Pod], spread: DomainSpread, room: DomainRoom, space: IntArray
) -> dict[str, str] | None:
    """Water-filling into ``space``, taken from only where every pod fits: pods of one
    spec at a time, each to the domain with the fewest that holds one more of them (a
    spec's room per domain read once, then taken first fit)."""
    _, values, rows_of = room.domains(spread.key)
    index = {v: i for i, v in enumerate(values)}
    surely = {d: n for d, n in spread.counted if d in index}  # what the fewest reads
    extra = dict(spread.extra)
    own = {d: n + extra.get(d, 0) for d, n in surely.items()}  # what a domain's own reads
    alike: dict[tuple[object, ...], list[Pod]] = defaultdict(list)
    for pod in sorted(pods, key=lambda p: p.name):
        alike[pod.spec_key()].append(pod)
    before: dict[str, IntArray] = {}  # the room of each domain touched, as it was
    assigned: dict[str, str] = {}
    for exemplar, _ in specs_of(room, pods):  # the biggest first
        rows = {d: rows_of[index[d]] for d in surely}
        holds = {d: int(room.per_node(exemplar, space[r], r).sum()) for d, r in rows.items()}
        took = dict.fromkeys(surely, 0)
        for pod in alike[exemplar.spec_key()]:
            d = _fewest_open(surely, own, spread, {d: holds[d] - took[d] for d in holds})
            if d is None:
                for domain, room_before in before.items():
                    space[rows_of[index[domain]]] = room_before
                return None
            took[d] += 1
            surely[d] += 1
            own[d] += 1
            assigned[pod.name] = d
        for d, n in took.items():
            if n:
                before.setdefault(d, space[rows[d]].copy())
                left = space[rows[d]]
                fill(room, [(exemplar, n)], left, rows[d])
                space[rows[d]] = left
    return assigned


def _fewest_open(
    surely: Mapping[str, int],
    own: Mapping[str, int],
    spread: DomainSpread,
    room_for: Mapping[str, int],
) -> str | None:
    """The domain with the fewest (by what its own count reads) that has room for one
    more pod and takes it with the end state within maxSkew, if any."""
    for d in sorted(surely, key=lambda d: (own[d], d)):
        fewest = 0 if spread.fewest_zero else min(n + (e == d) for e, n in surely.items())
        if own[d] + 1 - fewest <= spread.max_skew and room_for[d] > 0:
            return d
    return None


@lru_cache(maxsize=4096)
def _in_domain(key: str, value: str) -> NodeRule:
    requirement = NodeSelectorRequirement(key=key, operator="In", values=(value,))
    return NodeRule(reason=SPREAD_CONFLICT, terms=(Term(match_expressions=(requirement,)),))
