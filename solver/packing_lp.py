"""A class of nodes' share of a decision packed from its LP relaxation, rounded down.

The greedy packings (``packing.pack_greedy``, best-fit decreasing) strand room where a
class's nodes differ by what already runs on them. An exact packing (``packing.pack``)
does better but needs seconds on the classes that lose most (real-shaped 1,000 nodes,
seed 5: 67 nodes x 39 pod classes, 392 pods asked, the greedy placed 292, CP-SAT 371 in
3 s and nothing in 0.1 s). The assignment LP (pods of each class per node, within each
node's room) solves in milliseconds; an optimal vertex has at most as many fractional
values as rows, so rounded down it keeps most pods (368 of the 392 there, with the rest
packed greedily into the room left). It is no better everywhere (it lost to the greedy
on 10 of the 23 classes the greedy left short there), so the caller keeps the better.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from scipy.sparse import csr_matrix

from solver.arrays import IntArray
from solver.packing import pack_greedy
from solver.relaxation import Matrices, solve_matrices
from solver.units import fit_per_node

# Largest LP built (pod classes x nodes), checked before anything is built: a class of
# thousands of alike nodes is packed well by the greedy, which copies a node's fill to its
# likes; 1,000 items x 5,000 nodes took 1.1-5.6 s to build the columns of. Real-shaped
# 1,000-node classes have up to 5,000 pairs, 2,000-node ones up to 13,000.
MAX_PAIRS = 20_000
# Rounded down from just below an integer, a value HiGHS meant as that integer.
TOLERANCE = 1e-6
# LPs solved per packing: the second over the room and the counts the first left, where,
# rounded down in turn, it can place some of the pods the first rounding dropped
# (real-shaped 1,000 nodes, seed 5, its 33-node class that loses most: 279 of 291 pods
# after one round, 281 after two; an exact packing 280 in 0.1 s, 286 in 1 s). Stop 65,
# gap to the bound, one round -> two, seeds chosen on none: real-1000 seeds 16-31 mean
# 1.41 -> 1.37%, worst 2.30 -> 2.25%; real-200 seeds 0-15 1.18 -> 1.14%, worst 2.03 ->
# 1.66%; real-2000 seeds 0-5 1.51 -> 1.30%. Four rounds did worse than two on real-1000
# seeds 0-15 (1.29 against 1.27%): each takes the LP budget later classes' packings
# need. Seeds move both ways by up to 0.4 points.
ROUNDS = 2
AGAIN_MIN_S = 0.01  # less time left than this: no further round (HiGHS' least limit)


def fits_lp(items: int, nodes: int) -> bool:
    """Whether an LP of this many items and nodes is built at all."""
    return 0 < items * nodes <= MAX_PAIRS


def pack_lp_rounded(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
    allocatable: IntArray,
    time_limit_s: float,
) -> list[dict[int, int]] | None:
    """Per item (demand, count), how many go on each node (row of ``free``): the LP
    optimum rounded down, the LP of what that leaves rounded down in turn (``ROUNDS``),
    then what is left packed greedily (``pack_greedy``) into the room left. None where
    the LP is too large (``fits_lp``), nothing fits, or the first LP is not solved within
    the limit (the limit is all the rounds'; a later round unsolved, placing nothing or
    without ``AGAIN_MIN_S`` left ends them, what the earlier placed standing)."""
    if not fits_lp(len(counts), len(free)):
        return None
    room = np.maximum(free, 0).astype(np.int64)
    demand = np.array(demands, dtype=np.int64).reshape(len(counts), room.shape[1])
    wanted = np.array(counts, dtype=np.int64)
    placed: list[dict[int, int]] = [{} for _ in counts]
    deadline = time.perf_counter() + time_limit_s
    for round_ in range(ROUNDS):
        # fits[i, n]: pods of item i that node n holds alone.
        fits = np.array([fit_per_node(d, room) for d in demand], dtype=np.int64)
        fits = np.minimum(fits.reshape(len(counts), len(room)), wanted[:, None])
        item, node = np.nonzero(fits > 0)
        if not len(item) and not round_:
            return None
        left_s = deadline - time.perf_counter()
        if not len(item) or (round_ and left_s < AGAIN_MIN_S):
            break
        plan = _rounded(room, demand, wanted, values, item, node, fits[item, node], left_s)
        if plan is None:
            if round_:
                break  # what the earlier rounds placed stands
            return None
        if not plan.any():
            break
        np.subtract.at(wanted, item, plan)
        np.subtract.at(room, node, demand[item] * plan[:, None])
        for i, n, k in zip(item.tolist(), node.tolist(), plan.tolist(), strict=True):
            if k > 0:
                placed[i][n] = placed[i].get(n, 0) + k
    rest = pack_greedy(room, list(demand), wanted.tolist(), values, allocatable)
    for i, more in enumerate(rest):
        for n, k in more.items():
            placed[i][n] = placed[i].get(n, 0) + k
    return placed


def _rounded(
    room: IntArray,
    demand: IntArray,
    wanted: IntArray,
    values: Sequence[int],
    item: IntArray,
    node: IntArray,
    high: IntArray,
    time_limit_s: float,
) -> IntArray | None:
    """Per column (item, node), the LP's pods rounded down; None where not solved."""
    items, resources = demand.shape
    columns = np.arange(len(item))
    # Rows: one per item (at most its count), then one per node and resource asked.
    row_parts = [item]
    col_parts = [columns]
    data_parts = [np.ones(len(item))]
    for r in range(resources):
        uses = demand[item, r] > 0
        row_parts.append(items + node[uses] * resources + r)
        col_parts.append(columns[uses])
        data_parts.append(demand[item[uses], r].astype(np.float64))
    n_rows = items + len(room) * resources
    matrix = csr_matrix(
        (np.concatenate(data_parts), (np.concatenate(row_parts), np.concatenate(col_parts))),
        shape=(n_rows, len(item)),
    )
    found = solve_matrices(
        Matrices(
            cost=np.asarray(values, dtype=np.float64)[item],
            matrix=matrix,
            low=np.full(n_rows, -np.inf),
            high=np.concatenate([wanted, room.reshape(-1)]).astype(np.float64),
            col_low=np.zeros(len(item)),
            col_high=high.astype(np.float64),
        ),
        time_limit_s,
    )
    if found is None:
        return None
    plan = np.floor(np.clip(found[1], 0, high) + TOLERANCE).astype(np.int64)
    return _within_rows(room, demand, wanted, np.asarray(values), item, node, plan)


def _within_rows(
    room: IntArray,
    demand: IntArray,
    wanted: IntArray,
    values: IntArray,
    item: IntArray,
    node: IntArray,
    plan: IntArray,
) -> IntArray:
    """``plan`` brought within every node's room and every item's count: the LP's point,
    rounded, passes a row only by HiGHS' tolerance, so a pod or so is taken out, the
    least worth first, and on a node only pods asking for what it lacks."""
    taken = np.bincount(item, weights=plan, minlength=len(wanted)).astype(np.int64)
    for i in np.flatnonzero(taken > wanted).tolist():
        excess = int(taken[i] - wanted[i])
        for k in np.flatnonzero(item == i).tolist():
            cut = min(excess, int(plan[k]))
            plan[k] -= cut
            excess -= cut
            if excess == 0:
                break
    load = np.zeros_like(room)
    np.add.at(load, node, demand[item] * plan[:, None])
    cheapest_first = np.argsort(values[item], kind="stable")
    for n in np.flatnonzero((load > room).any(axis=1)).tolist():
        for k in cheapest_first[node[cheapest_first] == n].tolist():
            over = load[n] > room[n]
            while plan[k] > 0 and over.any() and (demand[item[k]][over] > 0).any():
                plan[k] -= 1
                load[n] -= demand[item[k]]
                over = load[n] > room[n]
    return plan
