"""Exact packing of one node class's share of a decision onto its nodes.

The aggregated model places counts of pod classes on a class of nodes as if the class
were one big node (with per-spec and rounded caps). On real clusters a class holds nodes
with different pods already running, and pods ask for cpu, memory and storage in
different proportions, so a greedy packing (best-fit decreasing) can fail where a packing
exists: measured on real-shaped 200-node clusters, 3-5% of the aggregate's objective was
lost there. This small CP-SAT model (pod classes x the class's nodes) finds a packing,
or the most valuable partial one, within a few milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import IntArray
from solver.problem import fit_per_node
from solver.search import DETERMINISTIC_WALL_FACTOR


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
    solver = cp_model.CpSolver()
    limit = max(0.005, time_limit_s)
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = 1
    if deterministic:
        # The limit in CP-SAT's deterministic time, so the packing does not depend on the
        # load; the wall clock only guards, as for the cycle's own solves.
        solver.parameters.max_deterministic_time = limit
        solver.parameters.max_time_in_seconds = limit * DETERMINISTIC_WALL_FACTOR
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [
        {n: value for n, var in per_node.items() if (value := int(solver.value(var))) > 0}
        for per_node in variables
    ]
