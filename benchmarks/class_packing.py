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

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.arrays import IntArray
from solver.encode import Encoding
from solver.packing import packing_model, pod_worth
from solver.problem import Problem
from solver.solution import decode_counts

WORKERS = 2  # offline: both cores of a small machine


@dataclass(frozen=True)
class Held:
    """What a packing of items onto nodes holds: the most worth found placed, and the
    most any packing can place (CP-SAT's proven bound)."""

    found: int
    at_most: int


def held(
    free: IntArray,
    demands: Sequence[IntArray],
    counts: Sequence[int],
    values: Sequence[int],
    time_limit_s: float,
) -> Held:
    model, _ = packing_model(free, demands, counts, values)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = WORKERS
    status = solver.solve(model)
    asked = sum(v * c for v, c in zip(values, counts, strict=True))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Held(found=0, at_most=asked)  # nothing proved: placing nothing is feasible
    # The bound of an integer objective, rounded down past CP-SAT's float.
    at_most = min(asked, int(solver.best_objective_bound + 1e-6))
    return Held(found=round(solver.objective_value), at_most=at_most)


@dataclass(frozen=True)
class ClassPacking:
    bin: int  # the class of nodes (index of ``enc.bins``)
    nodes: int
    items: int  # pod classes asked of it
    asked: int  # worth asked (``packing.pod_worth`` per pod)
    held: Held

    @property
    def short(self) -> int:
        """Worth asked that no packing of the class's nodes can place."""
        return self.asked - self.held.at_most


def class_packings(
    problem: Problem, enc: Encoding, solution: Sequence[int], time_limit_s: float
) -> list[ClassPacking]:
    """Each class of nodes that ``solution`` (a solution of the class model ``enc``: its
    count variables first) gives pods to, packed exactly for up to ``time_limit_s``."""
    items: dict[int, list[tuple[int, int]]] = {}
    for c, where in decode_counts(enc, solution).items():
        for b, count in where:
            if count > 0:
                items.setdefault(b, []).append((c, count))
    found = []
    for b, bin_items in sorted(items.items()):
        nodes = list(enc.bins[b].nodes)
        values = [pod_worth(problem, c) for c, _ in bin_items]
        counts = [n for _, n in bin_items]
        demands = [problem.classes[c].demand for c, _ in bin_items]
        result = held(problem.free[nodes], demands, counts, values, time_limit_s)
        asked = sum(v * n for v, n in zip(values, counts, strict=True))
        found.append(ClassPacking(b, len(nodes), len(bin_items), asked, result))
    return found


@dataclass(frozen=True)
class Overstated:
    """Over a decision's classes: how many cannot hold what they are asked, and the
    worth no packing places, as a share of the worth asked (in all, and in the worst
    class)."""

    short: int
    classes: int
    share: float
    worst: float


def overstated(packings: Sequence[ClassPacking]) -> Overstated:
    asked = sum(p.asked for p in packings)
    return Overstated(
        short=sum(p.short > 0 for p in packings),
        classes=len(packings),
        share=sum(p.short for p in packings) / asked if asked else 0.0,
        worst=max((p.short / p.asked for p in packings if p.asked), default=0.0),
    )
