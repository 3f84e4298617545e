"""kube-batch's preempt and reclaim actions, greedily: the baseline the CP-SAT preemption
model (``solver.preemption``) is measured against, on the same candidates and rules.

Preemptors in the order ``solver.victims`` gives (priority, shortfall, age); for each,
its eligible victims cheapest first (lowest priority, then youngest), evicted whole one
by one until the gang fits in the room left plus the room freed (first fit, as
``Placer.try_gang``), and under its queue's capability (what the queue's own victims
free and its earlier preemptors take counted). A victim of a queue above its deserved
share is skipped when its eviction would push that queue below it, and a queue
reclaims only while its earlier preemptors leave it below its own. When the gang fits,
victims it turns out not to need are kept (newest choice first); when it cannot fit
even with every eligible victim gone, nothing is evicted for it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from solver.arrays import IntArray
from solver.config import SolverConfig
from solver.evictions import split_withdrawn
from solver.objective import Coefficients
from solver.placement import Placer, Policy
from solver.preemption_rules import reason
from solver.problem import GangInfo, Problem
from solver.units import fit_per_node
from solver.victims import Candidates, Preemption, candidates

# Placement attempts per preemptor: each places the gang on every node (2-3 ms on 1,000
# nodes); a gang that fits nowhere after this many victims is left for the next cycle.
MAX_FITS = 12


def greedy_preempt(
    problem: Problem, placer: Placer, coef: Coefficients, config: SolverConfig
) -> Preemption:
    """The actions after the decision ``placer`` holds."""
    cand = candidates(
        problem, placer.placed, placer.free, placer.queue_room, coef, config.weights
    )
    if cand is None:
        return Preemption()
    return split_withdrawn(cand, greedy_choice(problem, cand, coef))


def apply_withdrawals(
    problem: Problem, placer: Placer, choice: Preemption, policy: Policy = Policy.PACK
) -> None:
    """Take the withdrawn placements out of ``placer``. When no running pod is evicted,
    the nominated gangs need not wait for anything: they become placements too. Then
    the withdrawn gangs are placed again where the room left allows (``_elsewhere``,
    by ``policy``: the baselines' own)."""
    if not choice.withdrawn:
        return
    of_pod = problem.class_of_pod()
    withdrawn = {problem.classes[of_pod[pod]].gang for pod in choice.withdrawn}
    # Who took the room, read before the nominations become placements.
    takers = {problem.classes[of_pod[pod]].gang for pod in choice.nominated}
    placer.unplace(sorted(choice.withdrawn))
    choice.withdrawn = set()
    if not choice.evictions:
        placer.place_like(choice.nominated)
        choice.nominated = {}
    _elsewhere(problem, placer, choice, withdrawn, takers, policy)


def _elsewhere(
    problem: Problem,
    placer: Placer,
    choice: Preemption,
    gangs: set[int],
    takers: set[int],
    policy: Policy,
) -> None:
    """A gang withdrawn for a preemptor's room may fit in other room: placed there whole,
    it runs this cycle instead of waiting for the next (real-shaped clusters, 200 and
    1,000 nodes: 0-11 gangs withdrawn per cycle, none of which found room: their pending
    work is 1.3-2x the free room). The pods still nominated hold their
    room while they are placed (their nodes, short of the victims' room until it is
    freed, take nothing more). Gangs of a queue that may be reclaiming (a taker's, with a
    victim, running or withdrawn, of another queue) stay out: they would count toward
    the share it reclaims up to."""
    taking = {problem.gangs[g].queue for g in takers}
    victims = {problem.gangs[g].queue for g in gangs} | _queues_of(problem, choice.evictions)
    reclaiming = {q for q in taking if victims - {q}}
    again = [g for g in gangs if g not in takers and problem.gangs[g].queue not in reclaiming]
    if not again:
        return
    held = placer.place_like(choice.nominated)
    for g in sorted(again, key=lambda g: (-problem.gangs[g].priority, problem.gangs[g].name)):
        placer.try_gang(problem.gangs[g], policy)
    placer.unplace(held)


def _queues_of(problem: Problem, pods: Collection[str]) -> set[int]:
    """The queues of the running gangs ``pods`` belong to."""
    if not pods:
        return set()
    index = {q.name: q.index for q in problem.queues}
    queue_of = {g.name: g.queue for g in problem.state.gangs}
    return {
        index[queue_of[p.gang]]
        for p in problem.state.pods
        if p.name in pods and p.gang is not None and queue_of.get(p.gang) in index
    }


def greedy_choice(problem: Problem, cand: Candidates, coef: Coefficients) -> Preemption:
    free = cand.free.copy()
    # The room no victim frees, less what the preemptors took of it: a gang may use the
    # room of victims it may take from and this, never another victim's
    # (``solver.freed_room``). Preemptors charge their own victims' room first.
    plain = cand.free.copy()
    taken_on: dict[int, set[int]] = {}  # node -> victims taken there
    queue_room = [room.copy() for room in cand.queue_room]
    held = (coef.held + cand.gained).astype(np.int64)  # per queue, share units
    taken: set[int] = set()
    out = Preemption()
    for pre in cand.preemptors:
        gang = problem.gangs[pre.gang]
        # Only victims on nodes the gang may use free room it can take.
        usable = np.zeros(len(problem.nodes), dtype=np.bool_)
        for c in gang.classes:
            usable |= problem.classes[c].feasible
        helps = [
            v
            for v in pre.eligible
            if any(usable[cand.groups[g].node] for g in cand.victims[v].groups)
        ]
        order = sorted(
            (v for v in helps if v not in taken),
            key=lambda v: (cand.victims[v].priority, -_age_key(cand, v), cand.victims[v].name),
        )
        # No fit is tried before the nodes the gang may use hold minMember pods of its
        # smallest class, counted node by node (a necessary condition, and cheap).
        smallest = np.min([problem.classes[c].demand for c in gang.classes], axis=0)
        usable_room = free.copy()
        for n, there in taken_on.items():
            if not there <= pre.eligible:
                usable_room[n] = plain[n]
        no_node = np.zeros(len(free), dtype=np.int64)
        gone = _Gone(usable_room.copy(), queue_room[gang.queue].copy(), no_node)
        fits = np.where(usable, fit_per_node(smallest, gone.room), 0)
        chosen: list[int] = []
        placement: dict[str, int] | None = None
        left = held.copy()
        tries = 0
        for v in order:
            q = cand.victims[v].queue
            if q != gang.queue and held[gang.queue] >= coef.deserved[gang.queue]:
                continue  # earlier preemptors brought the gang's queue to its share
            if q != gang.queue and left[q] - _share(cand, v) < coef.deserved[q]:
                continue  # reclaim stops at the victim queue's deserved share
            left[q] -= _share(cand, v)
            chosen.append(v)
            gone.change(problem, cand, gang.queue, v, 1)
            rows = [cand.groups[g].node for g in cand.victims[v].groups]
            fits[rows] = np.where(usable[rows], fit_per_node(smallest, gone.room[rows]), 0)
            if int(np.minimum(fits, gang.need).sum()) < gang.need:
                continue
            tries += 1
            if tries > MAX_FITS:
                break
            placement = _fit(problem, cand, gang, gone)
            if placement is not None:
                break
        if placement is None:
            continue
        dropped: set[int] = set()
        used = set(placement.values())
        for v in reversed(chosen[:-1]):
            if _moot(problem, cand, gang.queue, v, used):
                gone.change(problem, cand, gang.queue, v, -1)
                dropped.add(v)
                continue
            without = gone.copy()
            without.change(problem, cand, gang.queue, v, -1)
            again = _fit(problem, cand, gang, without)
            if again is not None:
                dropped.add(v)
                placement, gone, used = again, without, set(again.values())
        chosen = [v for v in chosen if v not in dropped]
        # Each victim must free room the gang is placed in, on at least one of its nodes.
        groups = [cand.victims[v].groups for v in chosen]
        if not all(any(cand.groups[g].node in used for g in gs) for gs in groups):
            continue
        own = gone.room - usable_room  # what its victims free, node by node
        free += own
        # Every victim's queue gets its capability back, not only the preemptor's: a
        # reclaim frees room under the victim queue's cap for that queue's next preemptor.
        for q in {gang.queue, *(cand.victims[v].queue for v in chosen)}:
            queue_room[q] = _queue_freed(problem, cand, queue_room[q], q, chosen)
        use = np.zeros_like(free)
        for pod, node in placement.items():
            c = problem.class_of_pod()[pod]
            use[node] += problem.classes[c].demand
            queue_room[gang.queue] -= problem.classes[c].demand
            held[gang.queue] += int(coef.pod_share[c])
            out.nominated[pod] = node
        free -= use
        beyond = np.maximum(use - own, 0)  # what its own victims' room did not hold
        plain -= np.minimum(beyond, np.maximum(plain, 0))
        for v in chosen:
            taken.add(v)
            victim = cand.victims[v]
            for g in victim.groups:
                taken_on.setdefault(cand.groups[g].node, set()).add(v)
            held[victim.queue] -= _share(cand, v)
            for g in victim.groups:
                grp = cand.groups[g]
                if not victim.placed:  # a placement taken back costs only its value
                    out.disruption -= grp.cost * len(grp.pods)
                for pod in grp.pods:
                    out.evictions[pod] = reason(problem, victim.queue, victim.priority, gang)
            out.disruption -= victim.evict_cost
    return out


def _moot(problem: Problem, cand: Candidates, queue: int, v: int, used: set[int]) -> bool:
    """Whether ``_fit`` without victim ``v`` gives the placement again, for certain, so
    that the victim is dropped without a try: no pod of it is on a node the placement
    ``used``, and it gives back nothing of ``queue``'s capability. Without it, its nodes
    have less room and fewer victims gone, so they sort no earlier in ``_fit``'s node
    order, every other node's place and room are as they were, and the capability room
    is the same (so is where it runs out): the nodes ``_fit`` fills before it stops come
    first in both. (Chosen one by one until a gang fits, a preemptor of 8 pods on
    real-shaped 5,000 nodes held 670 victims; trying each took 0.1 s of its cycle.)"""
    if cand.victims[v].queue == queue and _given_back(problem, cand, queue, v).any():
        return False
    return not any(cand.groups[g].node in used for g in cand.victims[v].groups)


def _age_key(cand: Candidates, v: int) -> int:
    """Larger for younger victims: their eviction costs less work (cost grows with age)."""
    return -sum(cand.groups[g].cost for g in cand.victims[v].groups)


def _share(cand: Candidates, v: int) -> int:
    return sum(cand.groups[g].share * len(cand.groups[g].pods) for g in cand.victims[v].groups)


def _queue_freed(
    problem: Problem, cand: Candidates, room: IntArray, queue: int, victims: list[int]
) -> IntArray:
    """``queue``'s capability room with ``victims`` gone (``_given_back``)."""
    return room + sum((_given_back(problem, cand, queue, v) for v in victims), np.zeros_like(room))


def _given_back(problem: Problem, cand: Candidates, queue: int, v: int) -> IntArray:
    """What victim ``v`` gone gives back of ``queue``'s capability: what it holds if it is
    of the queue (other queues' victims free only node room), but where the queue is
    above its capability (``QueueInfo.over``)."""
    counted = ~problem.queues[queue].over()
    given = np.zeros(len(counted), dtype=np.int64)
    if cand.victims[v].queue == queue:
        for g in cand.victims[v].groups:
            given += np.where(counted, cand.groups[g].demand * len(cand.groups[g].pods), 0)
    return given


@dataclass
class _Gone:
    """The room a preemptor sees with some victims gone: each node's, its queue's
    capability room (as ``_queue_freed`` gives it), and per node how many of them free
    room there. Kept as victims are added and taken back: made again from every victim
    chosen at each try, it took 0.4 s of a real-shaped 5,000-node cycle."""

    room: IntArray
    queue_room: IntArray
    nodes: IntArray

    def change(self, problem: Problem, cand: Candidates, queue: int, v: int, sign: int) -> None:
        """Victim ``v`` gone (``sign`` 1) or back (-1)."""
        for g in cand.victims[v].groups:
            grp = cand.groups[g]
            self.room[grp.node] += grp.demand * len(grp.pods) * sign
            self.nodes[grp.node] += sign
        self.queue_room = self.queue_room + _given_back(problem, cand, queue, v) * sign

    def copy(self) -> _Gone:
        return _Gone(self.room.copy(), self.queue_room.copy(), self.nodes.copy())


def _fit(
    problem: Problem, cand: Candidates, gang: GangInfo, gone: _Gone
) -> dict[str, int] | None:
    """Where the gang's minMember pods go in the room ``gone`` leaves, or None: its
    classes in turn, as ``Placer.try_gang`` takes them, each counted node by node, the
    victims' nodes first (placing through a Placer cost 2-3 ms a try on 1,000 nodes)."""
    room = gone.room.copy()
    queue_room = gone.queue_room
    freed = gone.nodes
    placement: dict[str, int] = {}
    used: dict[int, int] = {}  # per class, pods placed so far

    def place(c: int, most: int) -> int:
        """Up to ``most`` more pods of class ``c``; how many went."""
        cls = problem.classes[c]
        nonlocal queue_room
        start = used.get(c, 0)
        wanted = min(cls.count - start, most)
        fits = np.where(cls.feasible, fit_per_node(cls.demand, room), 0)
        nodes = sorted(np.flatnonzero(fits).tolist(), key=lambda n: (freed[n] <= 0, -fits[n], n))
        pods = iter(cls.pods[start : start + wanted])
        asked = cls.demand > 0
        went = 0
        for n in nodes:
            if went >= wanted:
                break
            take = min(int(fits[n]), wanted - went)
            if asked.any():  # the queue's capability (huge where uncapped)
                room_left = np.maximum(queue_room[asked], 0) // cls.demand[asked]
                take = min(take, int(room_left.min()))
                if take <= 0:
                    break  # the capability is spent: no later node takes a pod either
            for _ in range(take):
                placement[next(pods)] = n
            room[n] -= cls.demand * take
            queue_room = queue_room - cls.demand * take
            went += take
        used[c] = start + went
        return went

    for task_classes, task_need in gang.task_needs:  # each task's minimum first
        got = 0
        for c in task_classes:
            got += place(c, task_need - got)
            if got >= task_need:
                break
        if got < task_need:
            return None
    for c in gang.classes:
        if len(placement) >= gang.need:
            break
        place(c, gang.need - len(placement))
    return placement if len(placement) >= gang.need else None
