"""Exact packing of one node class's share of a decision onto its nodes.

The aggregated model places counts of pod classes on a class of nodes as if the class
were one big node (with per-spec and rounded caps). On real clusters a class holds nodes
with different pods already running, and pods ask for cpu, memory and storage in
different proportions, so a greedy packing (best-fit decreasing) can fail where a packing
exists: measured on real-shaped 200-node clusters, 3-5% of the aggregate's objective was
lost there. This small CP-SAT model (pod classes x the class's nodes) finds a packing,
or the most valuable partial one, within a few milliseconds.

Where there is no time for it, ``pack_greedy`` fills the nodes one at a time with the
items whose demand best matches each node's room (a dot-product heuristic for vector
bin packing): pod by pod, best-fit decreasing strands one resource on a node while
another runs out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import BoolArray, IntArray
from solver.problem import Problem
from solver.search import deterministic_guard
from solver.units import NO_LIMIT_FIT, fit_per_node


def pod_worth(problem: Problem, c: int) -> int:
    """What a pod of class ``c`` is worth to a packing: its value, by its priority."""
    return problem.classes[c].value * (1 + problem.gangs[problem.classes[c].gang].rank)


def packing_model(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
) -> tuple[cp_model.CpModel, list[dict[int, cp_model.IntVar]]]:
    """``pack``'s model: per item, a count per node (row of ``free``) it fits, at most the
    item's count in all; each node's room per resource; the value placed maximised.
    Returned with the variables, per item (row -> variable)."""
    model = cp_model.CpModel()
    free = np.maximum(free, 0)
    variables: list[dict[int, cp_model.IntVar]] = []
    load: dict[tuple[int, int], list[tuple[cp_model.IntVar, int]]] = {}
    objective = []
    for i, (demand, count, value) in enumerate(zip(demands, counts, values, strict=True)):
        asked = np.flatnonzero(demand > 0)
        fits = fit_per_node(demand, free)
        per_node: dict[int, cp_model.IntVar] = {}
        for n in np.flatnonzero(fits > 0).tolist():
            var = model.new_int_var(0, min(count, int(fits[n])), f"x{i}@{n}")
            per_node[n] = var
            objective.append(value * var)
            for r in asked.tolist():
                load.setdefault((n, r), []).append((var, int(demand[r])))
        if per_node:
            model.add(sum(per_node.values()) <= count)
        variables.append(per_node)
    for (n, r), terms in load.items():
        if len(terms) > 1:
            model.add(sum(c * v for v, c in terms) <= int(free[n, r]))
    model.maximize(sum(objective))
    return model, variables


def pack(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
    time_limit_s: float,
    deterministic: bool = False,
) -> list[dict[int, int]] | None:
    """Per item (demand, count), how many go on each node (row of ``free``), or None.

    Maximises the value placed (all of it when the counts fit); None when CP-SAT found
    nothing within the limit (placing nothing is always feasible, so only on timeout).
    ``deterministic``: the limit counts CP-SAT's deterministic time, not the wall's.
    """
    model, variables = packing_model(free, demands, counts, values)
    solver = cp_model.CpSolver()
    limit = max(0.005, time_limit_s)
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = 1
    if deterministic:
        # The limit in CP-SAT's deterministic time, so the packing does not depend on the
        # load; the wall clock only guards, as for the cycle's own solves.
        solver.parameters.max_deterministic_time = limit
        solver.parameters.max_time_in_seconds = deterministic_guard(limit)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [
        {n: value for n, var in per_node.items() if (value := int(solver.value(var))) > 0}
        for per_node in variables
    ]


def pack_greedy(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
    allocatable: IntArray,
) -> list[dict[int, int]]:
    """Per item (demand, count), how many go on each node (row of ``free``), greedily.

    Nodes are filled fullest first, each until no item fits, with the item whose demand,
    as shares of ``allocatable`` (one node's), has the largest dot product with the
    node's room, times its value per share of a node. A pod that matches the room's
    shape leaves room another pod can use; value per size keeps the valuable small pods
    ahead of the cheap large ones. Real-shaped 1,000-node class decisions (rounded LP,
    seeds 0-3, per class of nodes, against priority-first best-fit decreasing): worth
    left unplaced 1.75 / 1.3 / 1.4 / 0.9% against 2.6 / 2.7 / 1.8 / 1.3% (an exact packing
    given 0.5 s per class: 1.1 / 0.8 / 0.7 / 0.7%), in as long.

    A node's fill is copied at once to the nodes next in order, up to the first that it
    does not fit or leaves with room for a pod still to place, as far as the counts go:
    thousands of alike nodes (the scheduler_perf gangs on 5,000 nodes) took 0.8 s filled
    one by one, where best-fit decreasing takes 0.13 s. Nodes that all differ are filled
    one by one (4,000 random rooms, 2 kinds: 0.33 s; the 5,000-node cycle of `gangsat-bench
    cycle`, 40,000 pods running: decide 333 and 320 ms against 327 and 297 before)."""
    # Items alike in demand and value are one to the packing (one pod class per gang:
    # 3,000 gangs of 3 are one kind), packed as one and shared out in the items' order.
    kinds: dict[tuple[bytes, int], int] = {}
    kind_of = [
        kinds.setdefault((np.asarray(d, dtype=np.int64).tobytes(), int(v)), len(kinds))
        for d, v in zip(demands, values, strict=True)
    ]
    first = {k: i for i, k in reversed(list(enumerate(kind_of)))}
    total = [0] * len(kinds)
    for i, k in enumerate(kind_of):
        total[k] += int(counts[i])
    by_kind = _pack_kinds(
        free,
        [np.asarray(demands[first[k]], dtype=np.int64) for k in range(len(kinds))],
        total,
        [int(values[first[k]]) for k in range(len(kinds))],
        allocatable,
    )
    placed: list[dict[int, int]] = [{} for _ in counts]
    nodes = [sorted(plan.items()) for plan in by_kind]
    at = [0] * len(kinds)  # per kind, the next of its nodes with pods to share out
    for i, k in enumerate(kind_of):
        wanted = int(counts[i])
        while wanted and at[k] < len(nodes[k]):
            n, there = nodes[k][at[k]]
            take = min(wanted, there)
            placed[i][n] = take
            wanted -= take
            if take == there:
                at[k] += 1
            else:
                nodes[k][at[k]] = (n, there - take)
    return placed


def _pack_kinds(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
    allocatable: IntArray,
) -> list[dict[int, int]]:
    """``pack_greedy`` of items each unlike the others."""
    room = np.maximum(free, 0).astype(np.int64)
    item = _Items(np.array(demands, dtype=np.int64).reshape(len(counts), room.shape[1]))
    left = np.array(counts, dtype=np.int64)
    inverse = 1.0 / np.maximum(allocatable, 1)
    shares = item.demand * inverse
    per_share = np.asarray(values, dtype=np.float64) / np.maximum(shares.max(axis=1), 1e-12)
    placed: list[dict[int, int]] = [{} for _ in counts]
    order = np.argsort((room * inverse).sum(axis=1), kind="stable")
    done = np.zeros(len(room), dtype=np.bool_)
    for position, n in enumerate(order.tolist()):
        if done[n]:
            continue
        done[n] = True
        fill: dict[int, int] = {}
        node_room = room[n]
        while True:
            most = item.most(node_room)
            fits = np.minimum(most, left) > 0  # neither is below 0
            fitting = np.count_nonzero(fits)
            if not fitting:
                break
            score = np.where(fits, (shares @ (node_room * inverse)) * per_share, -np.inf)
            i = int(np.argmax(score))
            take = item.take(i, int(left[i]), int(most[i]), alone=fitting == 1)
            node_room -= item.demand[i] * take
            left[i] -= take
            fill[i] = fill.get(i, 0) + take
        if not fill:
            continue
        for i, k in fill.items():
            placed[i][n] = k
        if any(int(left[i]) < k for i, k in fill.items()):
            continue  # an item's pods used up: no copy (5,000 nodes: 366 of 1,007 fills)
        copies = item.copies(fill, left, room, order[position + 1 :][~done[order[position + 1 :]]])
        if len(copies):
            room[copies] -= sum(item.demand[i] * k for i, k in fill.items())
            done[copies] = True
            for i, k in fill.items():
                left[i] -= k * len(copies)
                placed[i].update(dict.fromkeys(copies.tolist(), k))
    return placed


class _Items:
    """The items' demands, and what ``pack_greedy`` decides from them alone."""

    def __init__(self, demand: IntArray) -> None:
        self.demand = demand
        # An item asking for nothing fits anywhere, any number of times: placed at once.
        self.nothing: BoolArray = demand.sum(axis=1) == 0
        self._asked = demand > 0
        self._divisor = np.where(self._asked, demand, 1)

    def most(self, node_room: IntArray) -> IntArray:
        """Per item, how many fit in ``node_room`` (``fit_per_node`` of every item at
        once: one step of a node's fill read it per item, 30% of the packing's time)."""
        fit: IntArray = np.where(self._asked, node_room // self._divisor, NO_LIMIT_FIT).min(axis=1)
        return fit

    def take(self, i: int, left: int, most: int, alone: bool) -> int:
        """Half of what fits of item ``i`` (all of it where no other item fits), then
        scored again: the same mix as pod by pod on real-shaped 1,000 nodes, in far fewer
        steps where a node takes tens of small pods. An item asking for nothing fits
        NO_LIMIT_FIT times: all of it at once."""
        return min(left, most if alone else max(1, most // 2))

    def copies(
        self, fill: dict[int, int], left: IntArray, room: IntArray, after: IntArray
    ) -> IntArray:
        """The nodes next in ``after``'s order, up to the first that cannot take ``fill``
        and then no pod of any item still to place, as many as ``left`` has fills for.
        Only the next ones: copied to any later node that fits, a tight node's fill went
        to roomier nodes, and the tighter nodes skipped were left the large pods that
        did not fit them (random rooms, 1,000 nodes: 4% of the worth lost)."""
        total = sum(self.demand[i] * k for i, k in fill.items())
        most = min(min(int(left[i]) // k for i, k in fill.items()), len(after))
        live = self.demand[(left > 0) & ~self.nothing]
        run, window = 0, 1
        # Read in growing windows: the run is usually short where nodes differ, and
        # reading every later node for each node filled made 4,000 nodes take 20 s.
        while run < most:
            rest = room[after[run : run + window]] - total
            fits = (rest >= 0).all(axis=1)
            if len(live):
                fits &= ~(rest[:, None, :] >= live[None, :, :]).all(axis=2).any(axis=1)
            if not fits.all():
                run += int(np.argmin(fits))
                break
            run += len(fits)
            window *= 2
        chosen: IntArray = after[: min(run, most)]
        return chosen
