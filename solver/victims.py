"""Who may preempt whom, prepared once per cycle for the preemption model.

Read after the placement decision: the gangs it leaves pending are the candidate
*preemptors*; running gangs are *victims* for the ones allowed to take from them
(``preemption_rules``: preempt within a queue, reclaim across queues).

A victim is a PodGroup at or above minMember with no pod already terminating (it is
being shrunk or evicted: taking more would compound one decision on another), in a
known queue, and not marked non-preemptible. Pods outside PodGroups (DaemonSets,
static pods, plain Deployments) are never victims. A gang any of whose pending pods
has ``preemptionPolicy: Never`` never preempts.

Victims' pods are grouped per (gang, node, spec), youngest first, so the model counts
pods removed per group and decoding picks the pods that lose the least work.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from solver.apart import with_apart
from solver.arrays import BoolArray, IntArray
from solver.config import ObjectiveWeights
from solver.decision import StageReport
from solver.model import Gang, Pod
from solver.objective import Coefficients
from solver.preemption_rules import (
    Kind,
    never_preempting,
    reclaimable,
    takes_kinds,
)
from solver.problem import Problem
from solver.units import model_demand, pod_share_units, units

SECONDS_PER_HOUR = 3600.0
MAX_PREEMPTORS = 8  # candidates per cycle, by priority then shortfall then age
# Victims' (gang, node, spec) groups in one model, the cheapest victims first: on a large
# cluster full of running gangs the model stays small enough for its share of a cycle.
MAX_VICTIM_GROUPS = 1_000


@dataclass
class Preemption:
    """What the model decided: evictions (pod -> why) and nominations (pod -> node)."""

    evictions: dict[str, str] = field(default_factory=dict)
    nominated: dict[str, int] = field(default_factory=dict)
    # Pods of gangs this cycle's placement admitted, taken back for a preemptor: the
    # placement and the preemption decided together.
    withdrawn: set[str] = field(default_factory=set)
    disruption: int = 0  # objective term: what the evictions cost (<= 0)
    # Decided jointly with placement (``solver.joint``): the objective with what the
    # nominated gangs will earn, which that model's bound bounds.
    joint_score: int | None = None
    stage: StageReport | None = None  # the CP-SAT call, when the model was solved


@dataclass(frozen=True)
class VictimGroup:
    victim: int  # index into Candidates.victims
    node: int
    pods: tuple[str, ...]  # youngest first: the first removed
    demand: IntArray  # one pod, model units
    share: int  # one pod, share units of its queue's dominant resource
    cost: int  # per pod removed: value it stops earning, plus disruption


@dataclass
class Victim:
    index: int
    name: str
    queue: int
    priority: int
    bound: int
    min_member: int
    value: int  # share units of one pod's dominant resource (the smallest member's)
    evict_cost: int = 0  # the priority it held: lost when evicted whole
    # A placement taken back: what admitting it earned (its priority and gang_start
    # terms), which the decision loses with it. Not disruption: no work is lost.
    withdraw_cost: int = 0
    placed: bool = False  # admitted by this cycle's placement, not bound: withdrawn, whole
    groups: list[int] = field(default_factory=list)

    @property
    def spare(self) -> int:
        """Pods it can lose and keep running."""
        return self.bound - self.min_member


@dataclass
class Preemptor:
    gang: int  # index into Problem.gangs
    eligible: frozenset[int]  # victims it may take from


@dataclass
class Candidates:
    preemptors: list[Preemptor]
    victims: list[Victim]
    groups: list[VictimGroup]
    free: IntArray  # (nodes, resources): room the placement decision left
    queue_room: list[IntArray]  # per queue: capability room the decision left
    gained: IntArray  # per queue: share units the decision's placements add
    ranks: dict[int, int]  # priority -> rank (``Problem.ranks``), 0 = lowest

    def victim_nodes(self) -> set[int]:
        return {g.node for g in self.groups}


def _pod_size(problem: Problem, pod: Pod) -> tuple[IntArray, IntArray, int]:
    """One pod's demand in model units (memory in MiB, rounded up), as ``prepare`` has it,
    in share units, and its value (the largest share); memoised per requests, as
    thousands of running pods share a few (real-shaped 1,000 nodes: 1,000 groups of
    running pods, 0.02 s to convert each group's). With the room it takes of the groups
    kept apart it is in (``solver.apart``): evicted, it frees that too (a host port)."""
    key = ("pod size", pod.requests.key(), pod.apart)
    cached = problem.memo.get(key)
    if cached is None:
        asks = with_apart(pod.demand(), pod)
        raw = np.array([asks.get(r, 0) for r in problem.resources], dtype=np.int64)
        demand = model_demand(raw, units(problem.resources))
        share = pod_share_units(demand, problem.totals)
        cached = (demand, share, max(1, int(share.max()) if len(share) else 1))
        problem.memo[key] = cached
    return cast(tuple[IntArray, IntArray, int], cached)


def _age_hours(pod: Pod, now_s: float) -> float:
    if pod.started_s is None:
        return 0.0
    return max(0.0, now_s - pod.started_s) / SECONDS_PER_HOUR


def candidates(
    problem: Problem,
    placed: dict[str, int],
    free: IntArray,
    queue_room: list[IntArray],
    coef: Coefficients,
    w: ObjectiveWeights,
) -> Candidates | None:
    """Preemptors and their victims after a decision placing ``placed`` (pod -> node);
    None when no pending gang may take from any running one."""
    admitted = _admitted(problem, placed)
    gained = _gained(problem, placed, coef)
    below = coef.deserved - coef.held - gained > 0  # per queue, after the decision
    above = (coef.held + gained - coef.deserved > 0) & reclaimable(problem)

    never = never_preempting(problem)
    pending = [
        g
        for g in problem.gangs
        if not g.running and g.index not in admitted and g.name not in never
    ]
    if not pending:
        return None
    # A running gang this decision grows is no victim: evicted whole, the pods it was
    # just given would run below minMember.
    of_pod = problem.class_of_pod()
    growing = {
        gang.name
        for pod in placed
        if (gang := problem.gangs[problem.classes[of_pod[pod]].gang]).running
    }
    withdrawable = _withdrawable(problem, admitted)
    offered = _victim_kinds(problem, growing, withdrawable)
    shortfall = coef.deserved - coef.held - gained
    pending.sort(key=lambda g: (-g.priority, -int(shortfall[g.queue]), g.created_s, g.name))
    # Who may preempt decides which victims are built: each queue and priority a
    # preemptor may take from is known from the gangs alone, and only victims of the
    # kinds the first MAX_PREEMPTORS may take from are made (5,000 real-shaped nodes:
    # 5,700 victims, of whose groups 1,000 are kept, built in 0.2 s).
    may = takes_kinds(offered, below, above)
    chosen = [g for g in pending if may(g.queue, g.priority)][:MAX_PREEMPTORS]
    wanted = set().union(*(may(g.queue, g.priority) for g in chosen))
    victims, groups = running_victims(problem, w, growing, wanted)
    _placed_victims(problem, placed, withdrawable, coef, w, victims, groups, wanted)
    if not victims:
        return None
    takes = takes_from(victims, below, above)
    preemptors = [Preemptor(g.index, takes(g.queue, g.priority)) for g in chosen]
    used = set().union(*(p.eligible for p in preemptors))
    if sum(len(victims[v].groups) for v in used) > MAX_VICTIM_GROUPS:
        used = cheapest_victims(victims, groups, used)
        preemptors = [
            Preemptor(p.gang, p.eligible & used)
            for p in preemptors
            if p.eligible & used
        ]
    # On the scale the placement objective and the joint model price priority on
    # (``Problem.ranks``): the same eviction costs the same whichever path decides it.
    ranks = problem.ranks
    for v in used:
        victim = victims[v]
        if not victim.placed:  # a placement taken back loses its priority term as such
            victim.evict_cost = (
                w.priority * ranks.get(victim.priority, 0) * victim.min_member * victim.value
            )
    return Candidates(
        preemptors=preemptors,
        victims=victims,
        groups=used_groups(victims, groups, used),
        free=free,
        queue_room=queue_room,
        gained=gained,
        ranks=ranks,
    )


def _withdrawable(problem: Problem, admitted: set[int]) -> set[int]:
    """Of the gangs this cycle's placement ``admitted``, those that may be taken back:
    their PodGroup's not marked non-preemptible (unnamed ones, pods of no PodGroup, are
    not)."""
    preemptible = {g.name: g.preemptible for g in problem.state.gangs}
    return {g for g in admitted if preemptible.get(problem.gangs[g].name, True)}


def _victim_kinds(
    problem: Problem, growing: Collection[str], withdrawable: set[int]
) -> set[Kind]:
    """The kinds of every victim ``running_victims`` and ``_placed_victims`` would make."""
    kinds = {(q, g.priority) for g, q, _ in _victim_gangs(problem) if g.name not in growing}
    return kinds | {(problem.gangs[g].queue, problem.gangs[g].priority) for g in withdrawable}


def takes_from(
    victims: list[Victim], below: BoolArray, above: BoolArray
) -> Callable[[int, int], frozenset[int]]:
    """For a gang of a queue and a priority, the victims it may take from: those of the
    kinds it may take from (``takes_kinds``). Thousands of pending gangs share a few
    (queue, priority) pairs: each set is made once (real-shaped 1,000 nodes: 0.1 s of a
    cycle at its limit went to asking again per gang)."""
    of_kind: dict[Kind, list[int]] = defaultdict(list)
    for v in victims:
        of_kind[v.queue, v.priority].append(v.index)
    kinds = takes_kinds(of_kind, below, above)
    known: dict[Kind, frozenset[int]] = {}

    def takes(queue: int, priority: int) -> frozenset[int]:
        if (queue, priority) not in known:
            known[queue, priority] = frozenset(
                v for kind in kinds(queue, priority) for v in of_kind[kind]
            )
        return known[queue, priority]

    return takes


def used_groups(
    victims: list[Victim], groups: list[VictimGroup], used: set[int]
) -> list[VictimGroup]:
    """Only the groups of the ``used`` victims (those some gang may take from), renumbered:
    each victim's ``groups`` index the list returned."""
    kept: list[VictimGroup] = []
    for victim in victims:
        mine = [groups[g] for g in victim.groups] if victim.index in used else []
        victim.groups = list(range(len(kept), len(kept) + len(mine)))
        kept += mine
    return kept


def cheapest_victims(
    victims: list[Victim], groups: list[VictimGroup], used: set[int]
) -> set[int]:
    """The victims of lowest priority, then lowest eviction cost, then by name (ties are
    common: gangs of one template started together; by the order of a set of indices,
    which victims were built moved them), up to MAX_VICTIM_GROUPS."""

    def cost(v: int) -> tuple[int, int, str]:
        evicting = sum(groups[g].cost * len(groups[g].pods) for g in victims[v].groups)
        return (victims[v].priority, evicting, victims[v].name)

    kept: set[int] = set()
    total = 0
    for v in sorted(used, key=cost):
        total += len(victims[v].groups)
        if total > MAX_VICTIM_GROUPS:
            break
        kept.add(v)
    return kept


def _admitted(problem: Problem, placed: dict[str, int]) -> set[int]:
    of_pod = problem.class_of_pod()
    count = [0] * len(problem.gangs)
    for pod in placed:
        count[problem.classes[of_pod[pod]].gang] += 1
    return {g.index for g in problem.gangs if not g.running and g.reaches(count[g.index])}


def _gained(problem: Problem, placed: dict[str, int], coef: Coefficients) -> IntArray:
    """Per queue, share units of its dominant resource the decision's placements add."""
    of_pod = problem.class_of_pod()
    gained = np.zeros(len(problem.queues), dtype=np.int64)
    for pod in placed:
        c = of_pod[pod]
        gained[problem.gangs[problem.classes[c].gang].queue] += coef.pod_share[c]
    return gained


def running_victims(
    problem: Problem,
    w: ObjectiveWeights,
    skip: Collection[str] = (),
    kinds: Collection[Kind] | None = None,
) -> tuple[list[Victim], list[VictimGroup]]:
    """The running PodGroups that may lose pods (preemptible, none terminating, every pod
    on a known node, at least minMember bound; not in ``skip``), grouped per (node, pod
    spec). Fresh lists and victims each call (callers add to them and price them); the
    scan of every bound pod behind them is made once per cycle (``Problem.memo``): the
    joint stage's victims and the preemption model's candidates both need it (real-shaped
    1,000 nodes: 0.04 s each). ``kinds``: only victims of these (queue, priority), and
    only those are built (real-shaped 5,000 nodes: 1,218 victims, where building every
    running one took 0.08 s)."""
    victims: list[Victim] = []
    groups: list[VictimGroup] = []
    for gang, q, bound in _victim_gangs(problem):
        if gang.name in skip or (kinds is not None and (q, gang.priority) not in kinds):
            continue
        old, old_groups = _built(problem, w, gang, q, bound)
        victim = replace(old, index=len(victims), groups=[])
        for grp in old_groups:
            victim.groups.append(len(groups))
            groups.append(replace(grp, victim=victim.index))
        victims.append(victim)
    return victims, groups


VictimGang = tuple[Gang, int, list[Pod]]  # a running gang that may lose pods, its queue, pods


def _victim_gangs(problem: Problem) -> list[VictimGang]:
    """Every running gang that is a victim, with its queue and bound pods (one scan of the
    bound pods per cycle, ``Problem.memo``)."""
    key = ("victim gangs",)
    if key not in problem.memo:
        state = problem.state
        q_index = {q.name: q.index for q in problem.queues}
        n_index = problem.node_index()
        members: dict[str, list[Pod]] = defaultdict(list)
        terminating: set[str] = set()
        for pod in state.pods:
            if pod.gang is None or pod.node_name is None:
                continue
            if pod.terminating:
                terminating.add(pod.gang)
            members[pod.gang].append(pod)
        found: list[VictimGang] = []
        for gang in state.gangs:
            bound = members.get(gang.name, [])
            q = q_index.get(gang.queue)
            if (
                not gang.preemptible
                or gang.name in terminating
                or q is None
                or not bound
                or len(bound) < gang.min_running
                or any(p.node_name not in n_index for p in bound)
            ):
                continue
            found.append((gang, q, bound))
        problem.memo[key] = found
    return cast(list[VictimGang], problem.memo[key])


def _built(
    problem: Problem, w: ObjectiveWeights, gang: Gang, q: int, bound: list[Pod]
) -> tuple[Victim, list[VictimGroup]]:
    """The victim ``gang`` makes and its groups (theirs ``victim`` and its ``index`` left
    to the caller), built once per cycle (``Problem.memo``)."""
    key = ("victims built", w)
    if key not in problem.memo:
        problem.memo[key] = {}
    built = cast(dict[str, tuple[Victim, list[VictimGroup]]], problem.memo[key])
    if gang.name in built:
        return built[gang.name]
    state = problem.state
    dominant = problem.queues[q].dominant
    by_group: dict[tuple[object, ...], list[Pod]] = defaultdict(list)
    for pod in bound:
        by_group[(pod.node_name, pod.requests.key(), pod.apart)].append(pod)
    victim = Victim(
        index=-1,
        name=gang.name,
        queue=q,
        priority=gang.priority,
        bound=len(bound),
        # Its members that succeeded count. One with per-task minimums goes whole or
        # not at all: a shrink could take a task below its own.
        min_member=len(bound) if gang.task_minimums else gang.min_running,
        value=0,
    )
    groups: list[VictimGroup] = []
    values = []
    for (node, _, _), same in sorted(by_group.items(), key=lambda kv: str(kv[0])):
        same.sort(key=lambda p: (-(p.started_s or 0.0), p.name))
        demand, share, value = _pod_size(problem, same[0])
        node_i = problem.node_index()[str(node)]
        # Where the node holds more than its allocatable, an eviction first repays
        # that: credited as room, it let a preemptor be nominated where it cannot fit.
        credited = np.where(problem.overcommitted[node_i], 0, demand)
        values.append(value)
        age = max(_age_hours(p, state.now_s) for p in same)
        cost = int(value * (w.value + w.disruption + w.disruption_per_hour * age))
        groups.append(
            VictimGroup(
                victim=-1,
                node=node_i,
                pods=tuple(p.name for p in same),
                demand=credited,
                share=int(share[dominant]) if dominant >= 0 else 0,
                cost=cost,
            )
        )
    victim.value = min(values)
    built[gang.name] = (victim, groups)
    return victim, groups


def _placed_victims(
    problem: Problem,
    placed: dict[str, int],
    admitted: set[int],
    coef: Coefficients,
    w: ObjectiveWeights,
    victims: list[Victim],
    groups: list[VictimGroup],
    kinds: Collection[Kind],
) -> None:
    """Gangs this cycle's placement admitted that may be taken back (``_withdrawable``),
    as victims taken back whole: a gang of lower priority may have taken the free room a
    preemptor needed. Taking a placement back costs only the value it would have earned
    (no work is lost). Only gangs of ``kinds`` (queue, priority)."""
    admitted = {
        g for g in admitted if (problem.gangs[g].queue, problem.gangs[g].priority) in kinds
    }
    if not admitted:
        return
    of_pod = problem.class_of_pod()
    by_gang: dict[int, dict[tuple[int, int], list[str]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for pod, node in placed.items():
        c = of_pod[pod]
        if problem.classes[c].gang in admitted:
            by_gang[problem.classes[c].gang][(node, c)].append(pod)
    for g, cells in sorted(by_gang.items()):
        info = problem.gangs[g]
        count = sum(len(pods) for pods in cells.values())
        victim = Victim(
            index=len(victims),
            name=info.name,
            queue=info.queue,
            priority=info.priority,
            bound=count,
            min_member=count,  # whole or not at all
            value=min(problem.classes[c].value for _, c in cells),
            placed=True,
            withdraw_cost=int(coef.admitted[g]) + coef.started,
        )
        for (node, c), pods in sorted(cells.items()):
            cls = problem.classes[c]
            victim.groups.append(len(groups))
            groups.append(
                VictimGroup(
                    victim=victim.index,
                    node=node,
                    pods=tuple(pods),
                    demand=cls.demand,
                    share=int(coef.pod_share[c]),
                    cost=w.value * cls.value,
                )
            )
        victims.append(victim)
