"""What a node-class decision asks of each class of nodes that its nodes cannot hold, proved.

The class model (``solver.encode`` over ``bins.class_bins``) sums a class's room and caps
each pod spec by what fits node by node; it knows nothing of how pods of different
specs share one node. So its counts may ask a class for more than any packing of its
nodes holds: on real-shaped 1,000-node clusters, pods of 2 GPUs and 214 GiB strand a
GPU on each 4-GPU node they take, which summed room hands to other pods. The cycle's
disaggregation then leaves those pods out, and the gangs they belong to with them.

Offline, each class's share of a decision is packed exactly (``packing.packing_model``,
the cycle's own exact packing, given seconds): CP-SAT's bound on the worth it places is
a proof of what the class can hold at most, whatever the packing. Reported per class:
the worth asked, the most found packed and that proven bound; the worth no packing can
place is what the class model overstates the class by. A measurement for
``gangsat-bench optimum --class-packing``, not something a cycle could run.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import IntArray
from solver.encode import Encoding
from solver.packing import packing_model, pod_worth
from solver.problem import Problem
from solver.solution import decode_counts

# Offline, but a fixed count rather than CP-SAT's default of every core: what a proof
# reaches in its time then depends less on the machine it ran on.
WORKERS = 2


@dataclass(frozen=True)
class Held:
    """What a packing of items onto nodes holds: the worth asked, the most found placed,
    and the most any packing can place (CP-SAT's proven bound)."""

    asked: int
    found: int
    at_most: int

    @property
    def short(self) -> int:
        """Worth asked that no packing can place."""
        return self.asked - self.at_most


def held(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
    time_limit_s: float,
) -> Held:
    """Items (demand, count, value per pod) packed exactly onto nodes (rows of
    ``free``) for up to ``time_limit_s``. Where CP-SAT proves nothing in that time,
    nothing is claimed short."""
    model, _ = packing_model(free, demands, counts, values)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = WORKERS
    status = solver.solve(model)
    asked = sum(v * c for v, c in zip(values, counts, strict=True))
    bound = solver.best_objective_bound
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE) or not math.isfinite(bound):
        return Held(asked=asked, found=0, at_most=asked)  # placing nothing is feasible
    # An integer objective's bound, rounded down only past CP-SAT's float tolerance.
    at_most = min(asked, int(bound + 1e-6))
    return Held(asked=asked, found=round(solver.objective_value), at_most=at_most)


@dataclass(frozen=True)
class ClassPacking:
    """One class of nodes (index of ``enc.bins``), the kinds of pod asked of it (alike in
    demand and worth, ``packing.pod_worth``), and what a packing of its nodes holds."""

    bin: int
    nodes: int
    kinds: int
    held: Held


def class_packings(
    problem: Problem, enc: Encoding, solution: Sequence[int], time_limit_s: float
) -> list[ClassPacking]:
    """Each class of nodes that ``solution`` (a solution of the class model ``enc``: its
    count variables first) gives pods to, packed exactly for up to ``time_limit_s``.

    The counts are the disaggregation's (``decode_counts``: per pod class, one per gang),
    summed over pod classes alike in demand and worth: to a packing they are one kind
    (as ``packing.pack_greedy`` takes them), and one variable per kind and node, not per
    gang, leaves CP-SAT no symmetric copies to prove its bound through."""
    demand_of: dict[tuple[bytes, int], IntArray] = {}
    counts: dict[int, Counter[tuple[bytes, int]]] = {}
    for c, where in decode_counts(enc, solution).items():
        demand = np.asarray(problem.classes[c].demand, dtype=np.int64)
        kind = (demand.tobytes(), pod_worth(problem, c))
        demand_of[kind] = demand
        for b, count in where:
            counts.setdefault(b, Counter())[kind] += count
    found = []
    for b, of_bin in sorted(counts.items()):
        nodes = list(enc.bins[b].nodes)
        kinds = list(of_bin)
        result = held(
            problem.free[nodes],
            [demand_of[kind] for kind in kinds],
            [of_bin[kind] for kind in kinds],
            [worth for _, worth in kinds],
            time_limit_s,
        )
        found.append(ClassPacking(b, len(nodes), len(kinds), result))
    return found


@dataclass(frozen=True)
class Overstated:
    """Over a decision's classes: how many are proved unable to hold what they are asked
    (at least that many: a proof cut short by its time limit claims less), and the worth
    no packing places, as a share of the worth asked (in all, and in the worst class)."""

    short_classes: int
    classes: int
    share: float
    worst: float


def overstated(packings: Sequence[ClassPacking]) -> Overstated:
    asked = sum(p.held.asked for p in packings)
    return Overstated(
        short_classes=sum(p.held.short > 0 for p in packings),
        classes=len(packings),
        share=sum(p.held.short for p in packings) / asked if asked else 0.0,
        worst=max((p.held.short / p.held.asked for p in packings if p.held.asked), default=0.0),
    )
