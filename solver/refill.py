"""A placement's gangs taken out one at a time, the room each leaves refilled by the top-up,
kept where the objective gains: the move the exchanges (``displace.exchanged``) do not
make, one placed gang making way for several waiting ones.

An exchange places a valuable waiting gang by taking out gangs worth less than it. Where
one placed gang holds room that several waiting gangs, each worth less than it, would use
better together, no exchange frees it: real-shaped 200 nodes, seed 35, a decision 3.5%
from its bound held an 8-GPU pod worth 2.1% of the bound on a node type that 1- and
2-GPU pods (0.4-0.5% each, feasible on 4-80 nodes) wanted, and CP-SAT, given the node-level
model and a minute, found 2.6% more mostly by such trades. Each try here takes a gang out,
tops the room up (``topup.topped_up``: both of its orders) and keeps the better of the
two placements: 1-2 ms at 200 nodes, 5-10 ms at 1,000 (up to 35 ms), about 35 ms at
5,000; a try started just before the deadline ends that much past it (the cycle keeps a
reserve for decoding, ``search.DECODE_RESERVE``).
"""

from __future__ import annotations

import time

from solver.config import ObjectiveWeights
from solver.objective import objective_of
from solver.placement import Placer
from solver.topup import gang_prices, topped_up


def refilled(placer: Placer, weights: ObjectiveWeights, until: float) -> Placer | None:
    """One pass over the gangs ``placer`` places (not those already running), the least
    worth per share of the cluster first (``topup.gang_prices``: where a trade is likeliest
    to gain), each taken out of the best placement so far and its room topped up, kept
    where the objective rises; stops at ``until`` (a ``time.perf_counter`` instant). The
    best placement found, a new one, or None where no try gained."""
    problem = placer.problem
    prices = gang_prices(problem, weights)
    density = prices.base / prices.size
    placed = [
        g
        for g in problem.schedulable_gangs()
        if not g.running and any(placer.next_pod[c] for c in g.classes)
    ]
    placed.sort(key=lambda g: (float(density[g.index]), g.index))
    best, score = placer, objective_of(placer, weights)
    for gang in placed:
        if time.perf_counter() >= until:
            break
        trial = best.copy()
        trial.withdraw(gang)
        trial = topped_up(problem, trial, weights, until)
        trial_score = objective_of(trial, weights)
        if trial_score > score:
            best, score = trial, trial_score
    return None if best is placer else best
