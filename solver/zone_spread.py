"""Topology spread over zones (``Pod.spreads``): kube-scheduler's PodTopologySpread filter
lets a pod into a domain of the constraint's key (``whenUnsatisfiable: DoNotSchedule``)
when the pods it counts there, itself among them, are at most ``maxSkew`` above the
fewest it counts in any domain it may go to.

A gang is bound at once, so what must hold is the end state: each domain that gets a pod
carrying the constraint at most ``maxSkew`` above the fewest. Then the filter passes
every such pod in some order (each into the domain with the fewest of those still to get
pods), and counts only grow while a cycle's pods are bound. Before any scheduler reads
the snapshot (``split``, from ``solver.problem.prepare``), each group's pending pods
(those a constraint counts, ``DomainSpread.group``) are shared out over the domains: each
pod, the specs with the fewest domains to go to first, then the biggest, to the domain
with the fewest where the skew holds and it fits the free room (``solver.domain_room``;
else, for a gang that may preempt, the room a preemption could free), and held there by
node affinity, as ``solver.together`` holds its groups. Every stage, the class model,
greedy and preemption, then honours it as it honours a node selector. Pods the
constraint counts but that do not carry it (an MPI launcher) count where they go, but
not towards the fewest (they may land on nodes the filter does not count), and go where
no carrier goes where they can.

The end state holds only if every pod shared out is placed: a gang's pods are shared out
only where it needs them all (no member to spare below its minimum) or the group holds
one of them, and its carriers are alike in node selector, affinity and spread and carry
no other spread over zones; else they wait, told why. Of the gangs a group counts, one
is shared out a cycle (priority then age, taking turns, with a turn where none goes
while the group counts pods of gangs that do not carry it), and the others' pods the
group counts wait the cycle: placed beside it, they would move its counts. A group that
cannot be shared out in the room there waits, told kube-scheduler's words.

The choice is made before the optimisation, not inside it: the bound and gap a decision
reports are those of the problem with the domains chosen. The validator checks the end
state itself (``solver.validate``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from solver.apart import group_turns, spare_members, turn_offset
from solver.arrays import IntArray
from solver.domain_room import DomainRoom, fill, specs_of
from solver.model import ClusterState, Gang, Pod
from solver.predicates import SPREAD_CONFLICT, held_to
from solver.scheduling_terms import DomainSpread, NodeRule
from solver.scheduling_terms import NodeSelectorTerm as Term
from solver.together import held_in

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
        "a gang that needs all its pods the spread counts, whose pods that carry it are "
        "alike in node selector, affinity and spread constraints"
    ),
    terms=(Term(),),
)
NO_ROOM = NodeRule(reason=SPREAD_CONFLICT, terms=(Term(),))


def carried(pod: Pod, group: str) -> DomainSpread | None:
    """The spread of ``group`` the pod carries, if it carries one (not merely counted)."""
    return next((s for s in pod.spreads if s.group == group and s.carried), None)


def split(state: ClusterState) -> ClusterState:
    """``state`` with each group's pending pods held to the domain chosen for each (see
    the module); ``state`` itself where no pending pod spreads over zones."""
    groups: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.pods:
        if pod.spreads and pod.node_name is None and not pod.terminating and not pod.gates:
            for spread in pod.spreads:
                groups[spread.group].append(pod)
    groups = {g: pods for g, pods in groups.items() if any(carried(p, g) for p in pods)}
    if not groups:
        return state
    order, chosen = group_turns(state, groups, MAX_GROUPS)
    room = DomainRoom(state, [p for g in chosen for p in groups[g]]) if chosen else None
    sharing = _Sharing(state, room, {g.name: g for g in state.gangs}, spare_members(state))
    for group in chosen:
        sharing.share(group, groups[group])
    rules, waiting = sharing.rules, set(order)
    for group, pods in groups.items():  # the carriers of a group not chosen wait
        for pod in pods:
            if pod.name not in rules and carried(pod, group):
                rules[pod.name] = NOT_ITS_TURN if group in waiting else NO_ROOM
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

    state: ClusterState
    room: DomainRoom | None
    gangs: Mapping[str, Gang]
    spare: Mapping[str, int]
    rules: dict[str, NodeRule] = field(default_factory=dict)
    placed: set[str] = field(default_factory=set)  # pods shared out to a domain

    def share(self, group: str, pods: Sequence[Pod]) -> None:
        """One gang of the group shared out, if one can be (see the module); the pods
        of the group's other gangs held this cycle, its carriers that wait told why."""
        by_gang: dict[str | None, list[Pod]] = defaultdict(list)
        for pod in pods:
            by_gang[pod.gang].append(pod)
        carrying = sorted(
            (g for g, unit in by_gang.items() if any(carried(p, group) for p in unit)),
            key=lambda g: min((-p.priority, p.created_s, p.name) for p in by_gang[g]),
        )
        turns: list[str | None] = list(carrying)
        if len(by_gang) > len(carrying):
            turns.append(None)  # a turn for the pods it counts of gangs that carry it not
        start = turn_offset(self.state.now_s, len(turns))
        went, why = None, NOT_ITS_TURN
        for gang in turns[start:] + turns[:start]:
            if gang is None:
                break
            unit = by_gang[gang]
            if any(p.name in self.rules for p in unit):
                continue  # held by a group shared out before
            if any(p.name in self.placed for p in pods if p.gang != gang):
                why = GOES_FIRST  # it counts pods another group placed this cycle
                break
            failed = self._share_gang(group, unit)
            if failed is None:
                went = gang
                break
            for pod in unit:
                if carried(pod, group):
                    self.rules[pod.name] = failed
        for pod in pods:
            if pod.name in self.rules:
                continue
            if went is not None and pod.gang != went:
                self.rules[pod.name] = GOES_FIRST
            elif went is None and carried(pod, group):
                self.rules[pod.name] = why

    def _share_gang(self, group: str, unit: Sequence[Pod]) -> NodeRule | None:
        """One gang's pods of the group shared out (None), or the rule its carriers wait
        by."""
        carriers = [p for p in unit if carried(p, group)]
        spread = carried(carriers[0], group)
        gang = self.gangs.get(unit[0].gang) if unit[0].gang is not None else None
        if spread is None or self.room is None or gang is None or not _alike(carriers, group):
            return NOT_SPLIT
        if self.spare.get(gang.name, 0) > 0 and len(unit) > 1:
            return NOT_SPLIT  # a member to spare: the end state holds only if all are placed
        counted_only = [p for p in unit if not carried(p, group)]
        assigned = share_out(carriers, counted_only, spread, self.room, gang)
        if assigned is None:
            return NO_ROOM
        for pod in unit:
            self.rules[pod.name] = held_in(spread.key, (assigned[pod.name],), SPREAD_CONFLICT)
            self.placed.add(pod.name)
        return None


def _alike(carriers: Sequence[Pod], group: str) -> bool:
    """Carriers of one spread, read over the same nodes (node selector and affinity), and
    of no other spread over zones."""
    if any(sum(s.carried for s in p.spreads) != 1 for p in carriers):
        return False
    shapes = {(carried(p, group), frozenset(p.node_selector.items()), p.affinity) for p in carriers}
    return len(shapes) == 1


def share_out(
    carriers: Sequence[Pod],
    counted_only: Sequence[Pod],
    spread: DomainSpread,
    room: DomainRoom,
    gang: Gang,
) -> dict[str, str] | None:
    """Per pod, its domain (see the module), or None where the gang's pods cannot be
    shared out. The room they take is taken from ``room.free`` where they fit it."""
    found = _Fill(spread, room, room.free).pods(carriers, counted_only)
    if found is not None or not all(p.may_preempt for p in (*carriers, *counted_only)):
        return found
    priority = max(p.priority for p in (*carriers, *counted_only))
    freeable = room.evictable(priority, gang.queue).copy()
    return _Fill(spread, room, freeable).pods(carriers, counted_only)


class _Fill:
    """Water-filling of one gang's pods into ``space`` (the room of every node), taken
    from only where every pod fits. Counts are arrays over the key's domains: a pod's
    choice is a few array passes, not a loop over them (a rack key: 2,500 domains)."""

    def __init__(self, spread: DomainSpread, room: DomainRoom, space: IntArray) -> None:
        self.spread, self.room, self.space = spread, room, space
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
        self.receives = np.zeros(n, dtype=np.bool_)  # domains a carrier goes to
        self.before: dict[int, IntArray] = {}  # each domain's room touched, as it was

    def pods(self, carriers: Sequence[Pod], counted_only: Sequence[Pod]) -> dict[str, str] | None:
        assigned: dict[str, str] = {}
        for pods, carry in ((carriers, True), (counted_only, False)):
            for exemplar, alike in self._specs(pods):
                left = self._holds(exemplar)
                took = np.zeros_like(left)
                for pod in alike:
                    d = self._domain(left, carry)
                    if d is None:
                        for domain, was in self.before.items():
                            self.space[self.rows_of[domain]] = was
                        return None
                    left[d] -= 1
                    took[d] += 1
                    self.own[d] += 1
                    if carry:
                        self.surely[d] += 1
                        self.receives[d] = True
                    assigned[pod.name] = self.values[d]
                for d in np.flatnonzero(took).tolist():
                    rows = self.rows_of[d]
                    self.before.setdefault(d, self.space[rows].copy())
                    room = self.space[rows]
                    fill(self.room, [(exemplar, int(took[d]))], room, rows)
                    self.space[rows] = room
        return assigned

    def _specs(self, pods: Sequence[Pod]) -> list[tuple[Pod, list[Pod]]]:
        """The pods by spec: those with the fewest domains to go to first (a pod held to
        one zone by its volume), then the biggest."""
        alike: dict[tuple[object, ...], list[Pod]] = defaultdict(list)
        for pod in sorted(pods, key=lambda p: p.name):
            alike[pod.spec_key()].append(pod)
        specs = [e for e, _ in specs_of(self.room, pods)]
        reach = {id(e): int((self._holds(e) > 0).sum()) for e in specs}
        specs.sort(key=lambda e: reach[id(e)])  # stable: the biggest first among equals
        return [(e, alike[e.spec_key()]) for e in specs]

    def _holds(self, exemplar: Pod) -> IntArray:
        """Per domain, how many pods of the spec its nodes hold in ``space``."""
        rows = np.flatnonzero(self.of >= 0)
        fits = self.room.per_node(exemplar, self.space[rows], rows)
        held = np.bincount(self.of[rows], weights=fits, minlength=len(self.values))
        return held.astype(np.int64)

    def _domain(self, left: IntArray, carry: bool) -> int | None:
        """The domain the next pod goes to: for a carrier, the one with the fewest whose
        end state stays within maxSkew; for a pod only counted, one no carrier goes to
        where it can, else one where the skew holds; in either, with room for it (in the
        values' order among equals)."""
        counts, surely, own, skew = self.counts, self.surely, self.own, self.spread.max_skew
        lowest = int(surely[counts].min()) if counts.any() else 0
        fewest = 0 if self.spread.fewest_zero else lowest
        open_ = left > 0
        if carry:
            # A carrier in the only domain at the fewest raises the fewest with it.
            alone = int((surely[counts] == lowest).sum()) == 1 and not self.spread.fewest_zero
            after = fewest + (alone & counts & (surely == lowest))
            ok = open_ & counts & (own + 1 - after <= skew)
            rank = own
        else:
            ok = open_ & (~self.receives | (own + 1 - fewest <= skew))
            rank = own + self.receives * (int(own.max(initial=0)) + 1)
        if not ok.any():
            return None
        return int(np.argmin(np.where(ok, rank, np.iinfo(np.int64).max)))
