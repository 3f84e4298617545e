"""From a preemption model's answer to evictions: which pods go (youngest first), why and
for whom, what they cost, and which victims turn out not to be needed (kept: nothing is
evicted "in case"); placements of this cycle taken back are withdrawn, not evicted.
Shared by ``solver.preemption`` and ``solver.joint``; ``solver.victims`` says who may be
a victim at all."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from solver.arrays import IntArray
from solver.preemption_rules import reason
from solver.problem import Problem
from solver.victims import Candidates, Preemption, Victim, VictimGroup


def evictions_of(
    problem: Problem,
    victims: list[Victim],
    groups: list[VictimGroup],
    removed: dict[int, int],
    takers: Callable[[int, int], list[int]],
) -> tuple[dict[str, str], int] | None:
    """Pods removed per group (``removed``, youngest first), each with why, and what they
    cost; None if a victim has no taker. A placement taken back costs the value it would
    have earned, priced as placed.

    ``takers(victim, node)`` lists the gangs a victim's pods on ``node`` may be evicted
    for (nominated there and allowed to take from it; for pods that go only because the
    victim goes whole, those nominated on any of its nodes), in preference order; each
    group names the one named least so far (the first on a tie). Naming always the
    first, two gangs of a queue nominated on a node whose two victims they took named
    one of them only: a reclaiming gang no Event named, and a queue that looked, from
    its victims, to have reclaimed past its share (the property test of
    ``tests/solver/test_reclaim.py``, seen on a fresh clone). Named from any of its
    nodes, a victim shrunk on one node named a gang nominated on another, of a queue
    that had reclaimed nothing, and the gang that took its room went unnamed (fuzzed)."""
    evictions: dict[str, str] = {}
    cost = 0
    gone: dict[int, int] = defaultdict(int)
    named: Counter[int] = Counter()
    for g, count in removed.items():
        if not count:
            continue
        grp = groups[g]
        victim = victims[grp.victim]
        gone[grp.victim] += count
        if not victim.placed:
            cost += grp.cost * count
        candidates = takers(grp.victim, grp.node)
        if not candidates:
            return None
        gang = min(candidates, key=named.__getitem__)
        named[gang] += 1
        why = reason(problem, victim.queue, victim.priority, problem.gangs[gang])
        evictions.update(dict.fromkeys(grp.pods[:count], why))
    cost += sum(victims[v].evict_cost for v, n in gone.items() if n >= victims[v].bound)
    return evictions, cost


def named_takers(nodes: Sequence[int], on: Callable[[int], list[int]]) -> list[int]:
    """The takers ``on`` lists on the first of ``nodes`` (where the pods go), else on any
    of the others (the victim's nodes: pods that go because the victim goes whole), each
    once."""
    here = list(dict.fromkeys(on(nodes[0])))
    if here:
        return here
    return list(dict.fromkeys(gang for n in nodes[1:] for gang in on(n)))


def placed_load(
    problem: Problem, placed: Iterable[tuple[int, int, int]]
) -> tuple[IntArray, IntArray]:
    """What ``placed`` (pod class, node, count) adds per node and per queue."""
    load = np.zeros_like(problem.free)
    queue_load = np.zeros((len(problem.queues), len(problem.resources)), dtype=np.int64)
    for c, node, count in placed:
        cls = problem.classes[c]
        load[node] += cls.demand * count
        queue_load[problem.gangs[cls.gang].queue] += cls.demand * count
    return load, queue_load


def restore_unneeded(
    problem: Problem,
    victims: list[Victim],
    groups: list[VictimGroup],
    removed: dict[int, int],
    free: IntArray,
    load: IntArray,
    queue_room: IntArray,
    queue_load: IntArray,
    keeps: Callable[[dict[int, int], Iterable[int]], bool] | None = None,
) -> dict[int, int]:
    """``removed`` (pods per victim group) with the victims whose room the decision does
    not need restored, the costliest first: a solution found in time is not always
    optimal, and nothing is evicted "in case". ``keeps``: whether the decision still
    holds with the removals given, on the nodes given (whose freed room each pod may use:
    ``joint.hall_holds``); a victim is restored only where it does.

    A victim is restored when what it holds still fits once what the decision places is
    counted: on each of its nodes (``free``, per node before any removal, against
    ``load``, what the decision places there) and under its queue's capability
    (``queue_room`` against ``queue_load``, per queue; uncapped resources are not read).
    Node room alone is not enough: a preemptor of the victim's own queue may need the
    capability the victim held, not its node's room."""
    freed = np.zeros_like(free)
    queue_freed = np.zeros_like(queue_load)
    by_victim: dict[int, list[int]] = defaultdict(list)
    for g, count in removed.items():
        if count:
            grp = groups[g]
            by_victim[grp.victim].append(g)
            freed[grp.node] += grp.demand * count
            queue_freed[victims[grp.victim].queue] += grp.demand * count
    kept = dict(removed)

    def cost(v: int) -> int:
        return sum(groups[g].cost * removed[g] for g in by_victim[v])

    for v in sorted(by_victim, key=cost, reverse=True):
        back: dict[int, IntArray] = defaultdict(lambda: np.zeros(free.shape[1], np.int64))
        for g in by_victim[v]:
            back[groups[g].node] += groups[g].demand * removed[g]
        q = victims[v].queue
        capped = problem.queues[q].capability >= 0
        queue_back = np.sum(list(back.values()), axis=0)
        on_nodes = all((free[n] + freed[n] - room - load[n] >= 0).all() for n, room in back.items())
        in_queue = (queue_load[q] - queue_freed[q] + queue_back <= queue_room[q])[capped].all()
        if on_nodes and in_queue and keeps is not None:
            on_nodes = keeps({**kept, **dict.fromkeys(by_victim[v], 0)}, back.keys())
        if on_nodes and in_queue:
            for n, room in back.items():
                freed[n] -= room
            queue_freed[q] -= queue_back
            for g in by_victim[v]:
                kept[g] = 0
    return kept


def split_withdrawn(cand: Candidates, choice: Preemption) -> Preemption:
    """``choice`` with the pods of placed victims moved from evictions to withdrawn."""
    placed = {
        pod for v in cand.victims if v.placed for g in v.groups for pod in cand.groups[g].pods
    }
    taken = {pod for pod in choice.evictions if pod in placed}
    if not taken:
        return choice
    choice.withdrawn = taken
    choice.evictions = {pod: why for pod, why in choice.evictions.items() if pod not in taken}
    return choice
