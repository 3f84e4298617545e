"""The objective: one named, weighted term per concern, maximised.

Each term is written once, over *quantities* that are either CP-SAT linear expressions
(while encoding) or plain integers (when scoring a decision without a solver). So the
model the solver optimises and the score the validator reports cannot drift apart, and
a decision can explain what it paid for each concern.

Terms (weights from ``ObjectiveWeights``, quantities in share units):
- ``value``: each placed pod's dominant-resource share — utilisation.
- ``priority``: per newly admitted gang, its priority rank in whole clusters.
- ``fairness``: minus each queue's shortfall of its dominant resource below deserved.
- ``packing``: minus the share of nodes opened (empty before, used after).
- ``gpu_nodes``: minus the share of GPU nodes opened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from ortools.sat.python import cp_model

from solver.config import SHARE_SCALE, ObjectiveWeights
from solver.problem import Problem, share_units

Q = TypeVar("Q", int, cp_model.LinearExprT)

TERMS = ("value", "priority", "fairness", "packing", "gpu_nodes")


@dataclass(frozen=True)
class Quantities(Generic[Q]):
    placed: Callable[[int], Q]  # pod class -> pods placed this cycle
    admitted: Callable[[int], Q]  # gang -> 1 if it reaches minMember this cycle
    shortfall: Callable[[int], Q]  # queue -> share units below deserved (>= 0)
    nodes_opened: Q
    gpu_nodes_opened: Q


def fairness_target(problem: Problem, queue: int) -> tuple[int, int]:
    """(deserved, already held) of the queue's dominant resource, in share units."""
    q = problem.queues[queue]
    if q.dominant < 0:
        return 0, 0
    totals = problem.totals[q.dominant : q.dominant + 1]
    deserved = int(share_units(q.deserved[q.dominant : q.dominant + 1], totals)[0])
    held = int(share_units(q.used[q.dominant : q.dominant + 1], totals)[0])
    return deserved, held


def node_unit(problem: Problem) -> int:
    return SHARE_SCALE // max(1, problem.schedulable_node_count())


def gpu_node_unit(problem: Problem) -> int:
    return SHARE_SCALE // max(1, int(problem.gpu_node.sum()))


def weighted_terms(problem: Problem, q: Quantities[Q], w: ObjectiveWeights) -> dict[str, Q]:
    value = sum((cls.value * q.placed(cls.index) for cls in problem.classes), 0)
    priority = sum(
        (
            g.rank * SHARE_SCALE * q.admitted(g.index)
            for g in problem.gangs
            if g.rank and not g.running
        ),
        0,
    )
    shortfall = sum((q.shortfall(i) for i in range(len(problem.queues))), 0)
    return {
        "value": w.value * value,
        "priority": w.priority * priority,
        "fairness": -w.fairness * shortfall,
        "packing": -w.packing * node_unit(problem) * q.nodes_opened,
        "gpu_nodes": -w.gpu_node_open * gpu_node_unit(problem) * q.gpu_nodes_opened,
    }


def evaluate(
    problem: Problem, placements: Mapping[str, int], w: ObjectiveWeights
) -> dict[str, int]:
    """Score a decision (pod -> node index) without a solver; same terms as the model."""
    of_pod = problem.class_of_pod()
    per_class = np.zeros(len(problem.classes), dtype=np.int64)
    new_on = np.zeros(len(problem.nodes), dtype=np.int64)
    for pod, node in placements.items():
        per_class[of_pod[pod]] += 1
        new_on[node] += 1
    per_gang = np.zeros(len(problem.gangs), dtype=np.int64)
    per_queue_share = np.zeros(len(problem.queues), dtype=np.int64)
    for cls in problem.classes:
        gang = problem.gangs[cls.gang]
        per_gang[gang.index] += per_class[cls.index]
        dom = problem.queues[gang.queue].dominant
        if dom >= 0:
            per_queue_share[gang.queue] += int(cls.share[dom]) * int(per_class[cls.index])

    def shortfall(queue: int) -> int:
        deserved, held = fairness_target(problem, queue)
        return max(0, deserved - held - int(per_queue_share[queue]))

    opened = problem.empty & (new_on > 0)
    quantities: Quantities[int] = Quantities(
        placed=lambda c: int(per_class[c]),
        admitted=lambda g: int(per_gang[g] >= problem.gangs[g].need and per_gang[g] > 0),
        shortfall=shortfall,
        nodes_opened=int(opened.sum()),
        gpu_nodes_opened=int((opened & problem.gpu_node).sum()),
    )
    return {name: int(v) for name, v in weighted_terms(problem, quantities, w).items()}
