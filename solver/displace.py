"""A gang the disaggregation left a few pods short, completed by taking out whole gangs
worth less from the nodes its missing pods may use.

Summed over a class of nodes, the LP's counts can ask for more than the nodes pack (one
node's spare cpu, another's spare memory); the disaggregation then leaves pods out, and
a gang short of one pod of 35 is withdrawn whole (real-shaped 1,000 nodes: 20-48
admitted gangs short after every pass, many by one pod). Taking out a one-pod job
instead, whose room the missing pod fits in, keeps the 35; the job may still find room
elsewhere (the top-up that follows tries every gang with no pod placed).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.arrays import BoolArray, IntArray
from solver.config import ObjectiveWeights
from solver.objective import class_indices, coefficients, objective_of, shortfall
from solver.packing import pod_worth
from solver.placement import Placer
from solver.problem import GangInfo, Problem
from solver.topup import gang_prices, topped_up, worth

# Of the nodes that could hold a missing pod once gangs are taken out, this many (those
# needing the least room freed) are priced: the cheapest gangs to take out are sought
# there only.
CANDIDATE_NODES = 16
# Waiting gangs tried, worth most first, by ``exchanged``. Real-shaped heavy backlogs
# (nine instances from 120 x 480 to 1,000 x 1,500 where decisions were 2-5% from their
# bounds): 12 tried by their pods' worth, x1.0000 against none; 30, x1.0002; 30 priced
# with the fairness they buy, x1.0014 (higher on 4, lower on 1; 200 x 600, seed 10:
# 5.29 -> 4.29% from the bound); 60 so, x1.0008.
EXCHANGE_GANGS = 30
# ... and their pods, at most, in all, where no clock stops them (deterministic solves):
# on 1,000 nodes, a 1,000-pod gang completed in place of a hundred 10-pod gangs took
# 0.1 s, and thirty such gangs 0.84 s (ad-hoc).
EXCHANGE_PODS = 1_000


@dataclass
class _Placed:
    """The pods placed when the repair started, as arrays. Pods the repair places are
    not in it: they complete gangs and are never taken out again."""

    pods: list[str]
    node: IntArray
    cls: IntArray  # pod class
    gang: IntArray
    demand: IntArray  # per pod, per resource
    alive: BoolArray  # not taken out since


@dataclass
class _Move:
    """What one completion changed, to undo it."""

    taken_out: dict[str, int]  # pod -> node, of the gangs taken out
    rows: list[int]  # their rows in ``_Placed``
    added: list[str]  # the short gang's pods placed


def complete_by_displacing(
    placer: Placer, short: Sequence[int], weights: ObjectiveWeights, until: float | None
) -> list[int]:
    """Each gang of ``short`` (in order) completed where gangs worth less in all than its
    own pods can be taken out to make room, and the objective gains; returns the gangs
    still short. Which gangs to take out, cheapest first, is read from what their pods
    are worth to a packing (``packing.pod_worth``); the objective itself (fairness and
    opened nodes too) decides whether the move stands: rank-weighted value alone took
    gangs from queues below their share. No gang is started after ``until``, and one
    still being completed then is undone (a 1,000-pod gang took 0.1 s on 1,000 nodes)."""
    problem = placer.problem
    if not short:
        return []
    if until is not None and time.perf_counter() > until:
        return list(short)  # none would start: nor is what they read built (5,000 nodes: 15 ms)
    worth_of_class = np.array(
        [pod_worth(problem, c) for c in range(len(problem.classes))], dtype=np.int64
    )
    placed = _placed(problem, placer)
    gang_worth = np.zeros(len(problem.gangs), dtype=np.int64)
    np.add.at(gang_worth, placed.gang, worth_of_class[placed.cls])
    protected = np.zeros(len(problem.gangs), dtype=np.bool_)
    protected[list(short)] = True
    still: list[int] = []
    for g in short:
        if until is not None and time.perf_counter() > until:
            still.append(g)
            continue
        gang = problem.gangs[g]
        full = sum(int(worth_of_class[c]) * problem.classes[c].count for c in gang.classes)
        eligible = placed.alive & ~protected[placed.gang] & (gang_worth[placed.gang] < full)
        before = objective_of(placer, weights)
        move = _complete(placer, gang, placed, eligible, gang_worth, full, until)
        if move is not None and objective_of(placer, weights) > before:
            protected[g] = True  # completed: its pods stay
            continue
        if move is not None:
            _undo(placer, placed, move)
        still.append(g)
    return still


def exchanged(
    placer: Placer,
    weights: ObjectiveWeights,
    until: float | None,
    tried: set[int] | None = None,
) -> Placer | None:
    """A copy of ``placer`` where the waiting gangs worth most (no pod placed, up to
    EXCHANGE_GANGS, priced as the top-up prices them: fairness too) are each placed whole
    by taking out gangs worth less, the room left then topped up; None where that scores
    no more. Gangs in ``tried`` are passed over, and those chosen are added to it.

    A rounded LP drops the gangs it admitted in part, and on real clusters those are
    often the largest and most valuable (real-shaped 120 nodes x 480 gangs, seed 4: three
    GPU gangs worth 14%, 11% and 7% of the bound, admitted 0.5, 0.25 and 0.44); the
    top-up then fills their room with what fits, and no stage after it asks whether one
    of them would have been worth that room. Here it is asked, gang by gang."""
    problem = placer.problem
    prices = gang_prices(problem, weights)
    short = shortfall(problem, weights, placer.next_pod)
    per_unit = coefficients(problem, weights).shortfall
    passed = tried if tried is not None else set()
    waiting = [
        g
        for g in problem.schedulable_gangs()
        if not g.running
        and g.index not in passed
        and not any(placer.next_pod[c] for c in g.classes)
    ]
    ranked = sorted(waiting, key=lambda g: (-worth(g, prices, short, per_unit), g.index))
    chosen: list[int] = []
    pods = 0
    for g in ranked:
        if len(chosen) == EXCHANGE_GANGS:
            break
        size = sum(problem.classes[c].count for c in g.classes)
        if until is None and pods + size > EXCHANGE_PODS:
            continue
        chosen.append(g.index)
        pods += size
    if not chosen:
        return None
    passed.update(chosen)
    trial = placer.copy()
    if len(complete_by_displacing(trial, chosen, weights, until)) == len(chosen):
        return None
    trial = topped_up(problem, trial, weights)
    return trial if objective_of(trial, weights) > objective_of(placer, weights) else None


def _placed(problem: Problem, placer: Placer) -> _Placed:
    of_pod = problem.class_of_pod()
    pods = list(placer.placed)
    cls = np.fromiter((of_pod[p] for p in pods), np.int64, len(pods))
    gang_of_class = class_indices(problem)[0]
    demand = np.array([c.demand for c in problem.classes], dtype=np.int64).reshape(
        len(problem.classes), len(problem.resources)
    )
    return _Placed(
        pods=pods,
        node=np.fromiter((placer.placed[p] for p in pods), np.int64, len(pods)),
        cls=cls,
        gang=gang_of_class[cls],
        demand=demand[cls],
        alive=np.ones(len(pods), dtype=np.bool_),
    )


def _complete(
    placer: Placer,
    gang: GangInfo,
    placed: _Placed,
    eligible: BoolArray,
    gang_worth: IntArray,
    budget: int,
    until: float | None = None,
) -> _Move | None:
    """``gang`` completed, a pod at a time, taking out eligible gangs worth less than
    ``budget`` in all, with what it changed; on failure, or at ``until``, None,
    everything as it was."""
    classes = placer.problem.classes
    move = _Move(taken_out={}, rows=[], added=[])
    spent = 0
    # Per node, the room eligible gangs' pods hold there.
    movable = np.zeros_like(placer.free)
    np.add.at(movable, placed.node[eligible], placed.demand[eligible])
    while not placer.reached(gang):
        if until is not None and time.perf_counter() > until:
            break
        cls = next(
            (classes[c] for c in gang.classes if placer.next_pod[c] < classes[c].count), None
        )
        if cls is None:
            break
        demand = cls.demand
        fits_now = cls.feasible & (placer.free >= demand).all(axis=1)
        if fits_now.any() and placer.queue_allows(cls):
            move.added += placer.place_on(cls, int(np.flatnonzero(fits_now)[0]), 1)
            continue
        could = np.flatnonzero(cls.feasible & (placer.free + movable >= demand).all(axis=1))
        if not len(could):
            break
        lacking = np.maximum(demand - placer.free[could], 0).sum(axis=1)
        best: tuple[int, int, list[int]] | None = None  # cost, node, gangs
        for node in could[np.argsort(lacking, kind="stable")[:CANDIDATE_NODES]].tolist():
            choice = _cheapest(placer, placed, eligible, gang_worth, int(node), demand)
            if choice is not None and (best is None or choice[0] < best[0]):
                best = (choice[0], int(node), choice[1])
        if best is None or spent + best[0] >= budget:
            break
        cost, node, gangs = best
        rows = np.flatnonzero(eligible & np.isin(placed.gang, gangs))
        for row in rows.tolist():
            move.taken_out[placed.pods[row]] = int(placed.node[row])
        placer.unplace([placed.pods[r] for r in rows.tolist()])
        placed.alive[rows] = False
        eligible[rows] = False
        np.subtract.at(movable, placed.node[rows], placed.demand[rows])
        move.rows += rows.tolist()
        spent += cost
        if not placer.queue_allows(cls) or not (placer.free[node] >= demand).all():
            break
        move.added += placer.place_on(cls, node, 1)
    if placer.reached(gang):
        return move
    _undo(placer, placed, move)
    eligible[move.rows] = True
    return None


def _undo(placer: Placer, placed: _Placed, move: _Move) -> None:
    placer.unplace(move.added)
    placer.place_like(move.taken_out)
    # place_like puts a class's first pods back, the same names, maybe on each other's
    # nodes.
    for row in move.rows:
        placed.node[row] = placer.placed[placed.pods[row]]
    placed.alive[move.rows] = True


def _cheapest(
    placer: Placer,
    placed: _Placed,
    eligible: BoolArray,
    gang_worth: IntArray,
    node: int,
    demand: IntArray,
) -> tuple[int, list[int]] | None:
    """The gangs on ``node`` whose pods taken out (all of each gang's, everywhere) make room
    for ``demand``, cheapest first; with their worth, or None if all do not."""
    here = eligible & (placed.node == node)
    gangs = np.unique(placed.gang[here])
    order = gangs[np.argsort(gang_worth[gangs], kind="stable")]
    room = placer.free[node].copy()
    chosen: list[int] = []
    cost = 0
    for h in order.tolist():
        room += placed.demand[here & (placed.gang == h)].sum(axis=0)
        chosen.append(h)
        cost += int(gang_worth[h])
        if (room >= demand).all():
            return cost, chosen
    return None
