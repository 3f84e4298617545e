"""Topology spread over zones (``Pod.spreads``): kube-scheduler's PodTopologySpread filter
lets a pod carrying the constraint (``whenUnsatisfiable: DoNotSchedule``) into a domain of
its key when the pods it counts there, itself among them, are at most ``maxSkew`` above
the fewest it counts in any domain it may go to.

A gang is bound at once, so what must hold is that some order of scheduling passes the
filter: the carriers first, each into the domain with the fewest of those still to get
one, then the pods the constraint only counts (an MPI launcher), which it does not
filter. So each domain that gets a carrier must end at most ``maxSkew`` above the fewest,
counting the carriers and what runs (counts only grow while a cycle's pods are bound).
Before any scheduler reads the snapshot (``split``, from ``solver.problem.prepare``),
each group's carriers (``DomainSpread.group``) are shared out over the domains: each
carrier, the specs with the fewest domains to go to first (else the biggest first), to
the domain with the fewest where the skew holds and it fits the free room
(``solver.domain_room``; else, for a gang that may preempt, the room a preemption could
free, the fewest then read as 0: victims it counts may leave), and held there by node
affinity, as ``solver.together`` holds its groups. Every stage, the class model, greedy
and preemption, then honours it as it honours a node selector. While a hold's carriers
(bound once their victims are gone) wait, the pending pods their spread counts wait too
(``HOLD_FIRST``): bound before them, they would move their counts.

This holds where every carrier shared out is placed, and the pods only counted may go
after them: a gang's carriers are shared out only where they are alike in node selector,
affinity and tolerations, and where no pod of it the group counts carries another
spread over zones or keeps together with others (pod affinity: it may have to go first,
``validate_spread.goes_first``); else they wait, told why. A gang with a member to
spare below its minimum (elastic) may be placed without some of them: each domain then
takes only what keeps it within maxSkew of the fewest as it is now (no subset then
breaks it), and the carriers that fit nowhere so wait. Of the gangs carrying a
group's spread (two jobs sharing a selector), one is shared out a cycle, taking turns
every ``TURN_S`` of the snapshot clock, and the pods the group counts of other gangs
that carry a spread over zones wait that cycle: placed beside it, each gang's order
would need the other's first. A group that cannot be shared out in the room there waits,
told kube-scheduler's words.

The choice is made before the optimisation, not inside it: the bound and gap a decision
reports are those of the problem with the domains chosen. The validator checks the end
state itself (``solver.validate_spread``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from solver.apart import first_goes, group_turns, never_placed, spare_members, turn_offset
from solver.arrays import IntArray
from solver.domain_room import DomainRoom, fill, specs_of
from solver.model import DEFAULT_QUEUE, ClusterState, Gang, Pod
from solver.predicates import SPREAD_CONFLICT, held_to
from solver.scheduling_terms import DomainSpread, NodeRule
from solver.scheduling_terms import NodeSelectorTerm as Term
from solver.together import held_in
from solver.validate_spread import counted_over, goes_first

MAX_GROUPS = 128  # groups shared out a cycle (each a few passes over its domains' nodes)
NOT_ITS_TURN = NodeRule(
    reason="node(s) not tried this cycle for pods spread over zones: other pods go first",
    terms=(Term(),),
)
GOES_FIRST = NodeRule(
    reason=(
        "node(s) not tried this cycle: the pods of another gang, whose topology spread "
        "over zones counts this pod's, go first"
    ),
    terms=(Term(),),
)
NOT_SPLIT = NodeRule(
    reason=(
        "node(s) not tried for a topology spread over zones: gangsat checks one only for "
        "a gang that needs all the pods that carry it, alike in node selector, affinity "
        "and tolerations, where no pod of it the spread counts carries another spread "
        "over zones or keeps together with others (pod affinity)"
    ),
    terms=(Term(),),
)
NO_ROOM = NodeRule(reason=SPREAD_CONFLICT, terms=(Term(),))
HOLD_FIRST = NodeRule(
    reason=(
        "node(s) not tried this cycle: pods held for a preemption, whose topology spread "
        "over zones counts this pod, are bound first"
    ),
    terms=(Term(),),
)


def carried(pod: Pod, group: str) -> DomainSpread | None:
    """The spread of ``group`` the pod carries, if it carries one (not merely counted)."""
    return next((s for s in pod.spreads if s.group == group and s.carried), None)


def carries_any(pod: Pod) -> bool:
    return any(s.carried for s in pod.spreads)


def split(state: ClusterState) -> ClusterState:
    """``state`` with each group's pending carriers held to the domain chosen for each
    (see the module); ``state`` itself where no pending pod spreads over zones."""
    groups: dict[str, list[Pod]] = defaultdict(list)
    held: dict[str, list[Pod]] = defaultdict(list)  # a hold's pods, bound in the snapshot
    for pod in state.pods:
        if not pod.spreads or pod.terminating:
            continue
        for spread in pod.spreads:
            if pod.node_name is not None:
                held[spread.group].append(pod)
            elif not pod.gates:
                groups[spread.group].append(pod)
    # While a hold's carriers wait to be bound, nothing their spread counts may be bound
    # before them (their order puts them first): the pods it counts wait the hold.
    rules: dict[str, NodeRule] = {}
    for group, pods in groups.items():
        if any(carried(p, group) for p in held.get(group, ())):
            rules.update(dict.fromkeys((p.name for p in pods), HOLD_FIRST))
    groups = {
        g: pods
        for g, pods in groups.items()
        if g not in held or not any(carried(p, g) for p in held[g])
        if any(carried(p, g) for p in pods)
    }
    if not groups:
        return _held(state, rules)
    hopeless = never_placed(state, {p.gang for pods in groups.values() for p in pods if p.gang})
    order, chosen = group_turns(state, groups, MAX_GROUPS, hopeless)
    # Each turn another group first: a gang shared out in its own group every cycle (and
    # never placed) held another group's gang for ever.
    start = turn_offset(state.now_s, len(chosen))
    chosen = chosen[start:] + chosen[:start]
    room = DomainRoom(state, [p for g in chosen for p in groups[g]]) if chosen else None
    gangs = {g.name: g for g in state.gangs}
    sharing = _Sharing(state.now_s, room, gangs, spare_members(state), hopeless)
    sharing.rules.update(rules)
    for group in chosen:
        sharing.share(group, groups[group])
    rules, shared, considered = sharing.rules, sharing.shared, set(order)
    for group, pods in groups.items():  # carriers wait unless shared out in their group
        for pod in pods:
            if carried(pod, group) and shared.get(pod.name) != group and pod.name not in rules:
                rules[pod.name] = NOT_ITS_TURN if group in considered else NO_ROOM
    return _held(state, rules)


def _held(state: ClusterState, rules: Mapping[str, NodeRule]) -> ClusterState:
    """``state`` with each pod of ``rules`` held to its rule too."""
    if not rules:
        return state
    return state.model_copy(
        update={
            "pods": tuple(
                held_to(p, (rules[p.name],)) if p.name in rules else p for p in state.pods
            )
        }
    )


@dataclass
class _Sharing:
    """The groups of one cycle shared out in turn, and the rule each pod is held to."""

    now_s: float
    room: DomainRoom | None
    gangs: Mapping[str, Gang]
    spare: Mapping[str, int]
    hopeless: set[str]
    rules: dict[str, NodeRule] = field(default_factory=dict)
    shared: dict[str, str] = field(default_factory=dict)  # carrier -> its group

    def share(self, group: str, pods: Sequence[Pod]) -> None:
        """One gang of the group shared out, if one can be (see the module); the pods it
        counts of other gangs that carry a spread held this cycle, and its carriers that
        wait told why. A pod of no PodGroup is a gang of its own."""
        by_gang: dict[str, list[Pod]] = defaultdict(list)
        for pod in pods:
            by_gang[pod.gang or f"pod:{pod.name}"].append(pod)
        turns = sorted(
            (
                g
                for g, unit in by_gang.items()
                if g not in self.hopeless and any(carried(p, group) for p in unit)
            ),
            key=lambda g: first_goes(by_gang[g]),
        )
        start = turn_offset(self.now_s, len(turns), group)
        went, why = None, NOT_ITS_TURN
        for gang in turns[start:] + turns[:start]:
            unit = by_gang[gang]
            if any(p.name in self.rules for p in unit):
                continue  # held by a group shared out before
            others = (p for g, u in by_gang.items() if g != gang for p in u)
            if any(p.name in self.shared for p in others):
                why = GOES_FIRST  # it counts carriers another group placed this cycle
                break
            failed = self._share_gang(group, unit)
            if failed is None:
                went = gang
                break
            for pod in unit:
                if carried(pod, group):
                    self.rules[pod.name] = failed
        for gang, unit in by_gang.items():
            for pod in unit:
                if pod.name in self.rules or pod.name in self.shared:
                    continue
                if went is not None and gang != went and carries_any(pod):
                    self.rules[pod.name] = GOES_FIRST
                elif went is None and carried(pod, group):
                    self.rules[pod.name] = why

    def _share_gang(self, group: str, unit: Sequence[Pod]) -> NodeRule | None:
        """One gang's carriers of the group shared out (None), or the rule they wait by."""
        carriers = [p for p in unit if carried(p, group)]
        spread = carried(carriers[0], group)
        if spread is None or self.room is None:
            return NOT_SPLIT
        if any(s.carried and s.group != group for p in unit for s in p.spreads):
            return NOT_SPLIT  # its order would need the other group's carriers first
        if any(goes_first(p) for p in unit if not carried(p, group)):
            return NOT_SPLIT  # a pod counted that its carriers' affinity needs first
        if len({counted_over(p, carried(p, group)) for p in carriers}) > 1:
            return NOT_SPLIT  # read over other nodes, each would count other pods
        gang = self.gangs.get(unit[0].gang) if unit[0].gang is not None else None
        # A member to spare: any of its carriers may be left out, so each domain takes
        # only what keeps it within maxSkew of the fewest as it is now (``_Fill``).
        elastic = len(carriers) > 1 and (gang is None or self.spare.get(gang.name, 0) > 0)
        queue = gang.queue if gang is not None else DEFAULT_QUEUE
        assigned = share_out(carriers, spread, self.room, queue, elastic)
        if not assigned:
            return NO_ROOM
        for pod in carriers:
            if (domain := assigned.get(pod.name)) is None:
                self.rules[pod.name] = NO_ROOM
                continue
            self.rules[pod.name] = held_in(spread.key, (domain,), SPREAD_CONFLICT)
            self.shared[pod.name] = group
        return None


def share_out(
    carriers: Sequence[Pod],
    spread: DomainSpread,
    room: DomainRoom,
    queue: str,
    elastic: bool = False,
) -> dict[str, str] | None:
    """Per carrier, its domain (see the module), or None where they cannot be shared
    out: in the free room (taken from ``room.free`` where they fit), else, where they may
    preempt, in the room a preemption could free. Each in two orders: the specs with the
    fewest domains to go to first (a pod held to one zone by its volume), else the
    biggest first (a pod held to the zone with the most, which must go before its mates
    raise the fewest). ``elastic``: those that fit, the others left out (a gang that may
    run without them)."""
    preempting = all(p.may_preempt for p in carriers)
    for free in (True, False) if preempting else (True,):
        priority = max(p.priority for p in carriers)
        space = room.free if free else room.evictable(priority, queue).copy()
        # Victims may be pods the spread counts: gone, they lower the fewest (a hold's
        # end state, within maxSkew when decided, broke once its victims left).
        read = spread if free else spread.model_copy(update={"fewest_zero": True})
        for reach_first in (True, False):
            fill = _Fill(read, room, space, elastic)
            if (found := fill.pods(carriers, reach_first)) is not None:
                return found
    return None


class _Fill:
    """Water-filling of one gang's carriers into ``space`` (the room of every node), taken
    from only where every one fits. Counts are arrays over the key's domains: a pod's
    choice is a few array passes, not a loop over them (a rack key: 2,500 domains)."""

    def __init__(
        self, spread: DomainSpread, room: DomainRoom, space: IntArray, elastic: bool = False
    ) -> None:
        self.spread, self.room, self.space, self.elastic = spread, room, space, elastic
        self.of, self.values, self.rows_of = room.domains(spread.key)
        index = {v: i for i, v in enumerate(self.values)}
        n = len(self.values)
        self.counts = np.zeros(n, dtype=np.bool_)  # the domains the spread counts
        self.surely = np.zeros(n, dtype=np.int64)  # what the fewest reads
        for d, count in spread.counted:
            if d in index:
                self.counts[index[d]], self.surely[index[d]] = True, count
        self.own = self.surely.copy()  # what a domain's own count reads
        for d, count in spread.extra:
            if d in index:
                self.own[index[d]] += count
        self.before: dict[int, IntArray] = {}  # the room of each domain touched, as it was
        # Elastic, any carrier may be left out: the fewest is the one now, never raised.
        self.floor = int(self.surely[self.counts].min()) if self.counts.any() else 0

    def pods(self, carriers: Sequence[Pod], reach_first: bool) -> dict[str, str] | None:
        """Per carrier, its domain (elastic: of those that fit), or None, ``space`` as it
        was."""
        assigned: dict[str, str] = {}
        for exemplar, alike in self._specs(carriers, reach_first):
            left = self._holds(exemplar)
            took = np.zeros_like(left)
            for pod in alike:
                d = self._domain(left - took)
                if d is None and self.elastic:
                    continue
                if d is None:
                    for domain, was in self.before.items():
                        self.space[self.rows_of[domain]] = was
                    return None
                took[d] += 1
                self.own[d] += 1
                self.surely[d] += 1
                assigned[pod.name] = self.values[d]
            for d in np.flatnonzero(took).tolist():
                rows = self.rows_of[d]
                self.before.setdefault(d, self.space[rows].copy())
                room = self.space[rows]
                fill(self.room, [(exemplar, int(took[d]))], room, rows)
                self.space[rows] = room
        return assigned

    def _specs(self, pods: Sequence[Pod], reach_first: bool) -> list[tuple[Pod, list[Pod]]]:
        """The pods by spec, the biggest first, or (``reach_first``) those with the fewest
        domains to go to first, then the biggest."""
        alike: dict[tuple[object, ...], list[Pod]] = defaultdict(list)
        for pod in sorted(pods, key=lambda p: p.name):
            alike[pod.spec_key()].append(pod)
        specs = [e for e, _ in specs_of(self.room, pods)]
        if reach_first:
            reach = {id(e): int((self._holds(e) > 0).sum()) for e in specs}
            specs.sort(key=lambda e: reach[id(e)])  # stable: the biggest first among equals
        return [(e, alike[e.spec_key()]) for e in specs]

    def _holds(self, exemplar: Pod) -> IntArray:
        """Per domain, how many pods of the spec its nodes hold in ``space``."""
        rows = np.flatnonzero(self.of >= 0)
        fits = self.room.per_node(exemplar, self.space[rows], rows)
        held = np.bincount(self.of[rows], weights=fits, minlength=len(self.values))
        return held.astype(np.int64)

    def _domain(self, left: IntArray) -> int | None:
        """The domain the next carrier goes to: with room for it, the one with the fewest
        (in the values' order among equals) whose end state stays within maxSkew."""
        counts, surely, own = self.counts, self.surely, self.own
        lowest = int(surely[counts].min()) if counts.any() else 0
        fewest = 0 if self.spread.fewest_zero else self.floor if self.elastic else lowest
        # A carrier in the only domain at the fewest raises the fewest with it.
        alone = int((surely[counts] == lowest).sum()) == 1
        alone = alone and not self.spread.fewest_zero and not self.elastic
        after = fewest + (alone & counts & (surely == lowest))
        ok = (left > 0) & counts & (own + 1 - after <= self.spread.max_skew)
        if not ok.any():
            return None
        return int(np.argmin(np.where(ok, own, np.iinfo(np.int64).max)))
