"""The room a candidate leaves, filled with gangs that have no pod placed: the last step
of every candidate placed from counts.

A candidate rounded from an LP, or packed class by class, leaves gangs out: fractions of
gangs the rounding dropped, pods a class of nodes could not hold. Filled only as
kube-batch allocates (the queue with the lowest weighted share first, its gangs by
priority then age), the room went by the queues' shares *before* the cycle, blind to
what the candidate had already given each queue and to what a gang adds to the
objective: real-shaped 600 nodes x 2,400 gangs, seed 475, the rounded LP's candidate
ended 3.6% of the bound short in fairness where the LP's optimum was 1.3% short.
``fill_by_worth`` prices each gang as the objective does (value, priority, and the
fairness it buys while its queue is still short, read again as queues fill) per share of
the cluster it takes, the greedy order of a knapsack: that candidate then ended 1.7%
short, and 0.974 of the bound instead of 0.953. Worth per share can also place small
dense gangs where one large gang scored more, so kube-batch's order fills a copy as well
and the better of the two stands (``topped_up``), but in a cycle already past its
deadline.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from solver.arrays import FloatArray, IntArray
from solver.baselines import allocate_gangs, one_class_shape
from solver.config import ObjectiveWeights
from solver.objective import class_indices, coefficients, objective_of, shortfall
from solver.placement import Placer, Policy
from solver.problem import GangInfo, Problem
from solver.units import fit_per_node


@dataclass(frozen=True)
class GangPrices:
    """Per gang: what it adds but fairness (all its pods placed), the share units of its
    queue's dominant resource it takes, and the largest share of the cluster's
    allocatable it asks for."""

    base: FloatArray
    units: FloatArray
    size: FloatArray


def topped_up(
    problem: Problem, placer: Placer, weights: ObjectiveWeights, until: float | None = None
) -> Placer:
    """Fill what room is left with the gangs that have no pod placed yet, unless that
    lowers the objective: with overuse or opening priced above value, the room a solver
    left empty may be empty on purpose. Past ``until`` (a ``time.perf_counter`` instant:
    the cycle is out of time), by worth only: real-shaped 5,000 nodes, seeds 0-5, that
    fill scored more on 5 seeds and 0.009% less on the other, and each fill took
    0.01-0.03 s of a cycle already past its limit."""
    before = set(placer.placed)
    # A class's placed pods are the first next_pod of it: the gangs with any placed, read
    # off the classes rather than pod by pod (5,000 nodes: 55,000 pods, 10 ms).
    placed_classes = np.flatnonzero(np.asarray(placer.next_pod, dtype=np.int64) > 0)
    placed_gangs = set(class_indices(problem)[0][placed_classes].tolist())
    rest = [g for g in problem.schedulable_gangs() if g.index not in placed_gangs]
    fits: dict[int, int] = {}
    per_node: dict[bytes, IntArray] = {}
    rest = [g for g in rest if _may_fit(placer, g, fits, per_node)]
    start = objective_of(placer, weights)
    # Neither order wins everywhere (real-shaped 120 nodes x 480 gangs, seeds 0-11, whole
    # cycles against kube-batch's order alone: by worth alone x0.9992, lower on 5 seeds,
    # one 5.4% -> 6.0% from its bound; the better of the two x1.0008, higher on 7, lower
    # on none), so both fill and the better stands.
    by_queue = placer.copy() if until is None or time.perf_counter() < until else None
    fill_by_worth(problem, placer, rest, weights)
    filled = [placer]
    if by_queue is not None:
        allocate_gangs(problem, by_queue, rest, Policy.PACK)
        filled.append(by_queue)
    best, score = max(((p, objective_of(p, weights)) for p in filled), key=lambda pair: pair[1])
    if score < start:
        best.unplace([pod for pod in best.placed if pod not in before])
    return best


def fill_by_worth(
    problem: Problem, placer: Placer, gangs: list[GangInfo], weights: ObjectiveWeights
) -> None:
    """Each of ``gangs`` tried whole, most worth per share of the cluster first; a gang's
    fairness is what its queue still lacks of its deserved share, at most its own."""
    coef = coefficients(problem, weights)
    prices = gang_prices(problem, weights)
    short = shortfall(problem, weights, placer.next_pod)

    def density(g: GangInfo) -> float:
        return worth(g, prices, short, coef.shortfall) / float(prices.size[g.index])

    heap = [(-density(g), g.index) for g in gangs]
    heapq.heapify(heap)
    failed: set[tuple[int, int, int, int]] = set()
    of_pod = problem.class_of_pod()
    while heap:
        stored, g = heapq.heappop(heap)
        gang = problem.gangs[g]
        # Worth only falls (a queue's shortfall only shrinks): a gang whose worth fell
        # below the next one's goes back in, at its new worth.
        now = -density(gang)
        if now > stored and heap and now > heap[0][0]:
            heapq.heappush(heap, (now, g))
            continue
        # Room only shrinks here (an attempt commits or rolls back whole), so a gang of
        # one pod class like one that did not fit does not fit either.
        shape = one_class_shape(problem, gang)
        if shape in failed:
            continue
        placed = placer.try_gang(gang, Policy.PACK)
        if placed:
            units = sum(int(coef.pod_share[of_pod[pod]]) for pod in placed)
            short[gang.queue] = max(0, int(short[gang.queue]) - units)
        elif shape is not None:
            failed.add(shape)


def worth(gang: GangInfo, prices: GangPrices, short: IntArray, per_unit: int) -> float:
    """What the gang adds placed whole: its base price, and the fairness it buys of its
    queue's ``short`` share units (at ``per_unit``, the shortfall's negative price)."""
    bought = min(float(short[gang.queue]), float(prices.units[gang.index]))
    return float(prices.base[gang.index]) - per_unit * bought


def gang_prices(problem: Problem, weights: ObjectiveWeights) -> GangPrices:
    """Memoised on the problem: every candidate of a cycle is topped up at the same prices."""
    cached = problem.memo.get(("gang-prices", weights))
    if isinstance(cached, GangPrices):
        return cached
    coef = coefficients(problem, weights)
    gang_of_class = class_indices(problem)[0]
    count = np.array([cls.count for cls in problem.classes], dtype=np.int64)
    gangs = len(problem.gangs)
    base = (coef.admitted + coef.started).astype(np.float64)
    base += np.bincount(gang_of_class, weights=coef.pod * count, minlength=gangs)
    units = np.bincount(gang_of_class, weights=coef.pod_share * count, minlength=gangs)
    demand = np.zeros((gangs, len(problem.resources)), dtype=np.float64)
    if len(problem.classes):
        asked = np.array([cls.demand for cls in problem.classes], dtype=np.float64)
        np.add.at(demand, gang_of_class, asked * count[:, None])
    totals = np.maximum(problem.totals, 1).astype(np.float64)
    # A gang asking for nothing takes no share: the smallest positive one, not a division
    # by zero. Nor does a column of no total (pods kept apart, ``solver.apart``).
    shares = np.where(problem.totals > 0, demand / totals, 0.0)
    size = np.maximum(shares.max(axis=1, initial=0.0), 1e-12)
    prices = GangPrices(base=base, units=units.astype(np.float64), size=size)
    problem.memo[("gang-prices", weights)] = prices
    return prices


def _may_fit(
    placer: Placer, gang: GangInfo, fits: dict[int, int], per_node: dict[bytes, IntArray]
) -> bool:
    """Whether the room left could hold the gang's need, node by node, class by class: a
    necessary condition, so a full cluster's hundreds of waiting gangs are not each placed
    and rolled back. ``fits`` caches, per pod spec, how many fit in the room left;
    ``per_node``, per demand, how many fit on each node (real-shaped 1,000 nodes: ~600
    specs, ~80 demands)."""
    problem = placer.problem
    fit = 0
    for c in gang.classes:
        cls = problem.classes[c]
        if cls.spec not in fits:
            key = cls.demand.tobytes()
            if key not in per_node:
                per_node[key] = fit_per_node(cls.demand, placer.free)
            fits[cls.spec] = int(per_node[key][cls.feasible].sum())
        fit += min(cls.count, fits[cls.spec])
        if fit >= gang.need:
            return True
    return fit >= gang.need and fit > 0
