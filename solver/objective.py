"""The objective: one named, weighted term per concern, maximised.

``coefficients`` is the one place that prices every quantity of a decision; the CP-SAT
encoder writes those numbers into the model, and ``evaluate`` multiplies them with the
quantities of any decision (no solver). So the model the solver optimises and the score
the validator reports cannot drift apart, and a decision can say what it paid for what.

Terms (quantities in share units, weights from ``ObjectiveWeights``):
- ``value``: per placed pod of an admitted gang, its dominant-resource share. Pods of a
  gang that stays below minMember earn nothing: they hold resources and do no work.
- ``priority``: per newly admitted gang, its priority rank times the value of its
  minMember pods — a higher class outweighs a lower one of similar size.
- ``gang_start``: per newly admitted gang, one average node's share.
- ``fairness``: minus each queue's shortfall of its dominant resource below deserved.
- ``overuse``: minus each queue's excess of its dominant resource above deserved.
- ``packing``: minus the share of nodes opened (empty before, used after).
- ``gpu_nodes``: minus the share of GPU nodes opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.arrays import BoolArray, IntArray
from solver.config import SHARE_SCALE, ObjectiveWeights
from solver.decision import Decision
from solver.model import ClusterState
from solver.problem import Problem, prepare
from solver.units import share_units

if TYPE_CHECKING:  # placement prices through this module; it is not imported at run time
    from solver.placement import Placer


@dataclass(frozen=True)
class Coefficients:
    """What one unit of each model quantity adds to the objective, weights applied."""

    pod: IntArray  # per pod class, per pod placed
    admitted: IntArray  # per gang, when it reaches minMember this cycle (priority)
    started: int  # per gang reaching minMember this cycle, whatever its priority
    shortfall: int  # per share unit a queue falls short (negative)
    excess: int  # per share unit a queue ends above its deserved share (negative)
    node_opened: int  # per node opened (negative)
    gpu_node_opened: int  # per GPU node opened, on top of node_opened (negative)
    deserved: IntArray  # per queue, share units of its dominant resource
    held: IntArray  # per queue, share units it already holds
    pod_share: IntArray  # per pod class, share units of its queue's dominant resource


def coefficients(problem: Problem, w: ObjectiveWeights) -> Coefficients:
    """Memoised on the problem: every candidate of a cycle is priced the same way."""
    cached = problem.memo.get(("coefficients", w))
    if isinstance(cached, Coefficients):
        return cached
    coef = _coefficients(problem, w)
    problem.memo[("coefficients", w)] = coef
    return coef


def _coefficients(problem: Problem, w: ObjectiveWeights) -> Coefficients:
    values = np.array([cls.value for cls in problem.classes], dtype=np.int64)
    admitted = np.zeros(len(problem.gangs), dtype=np.int64)
    for g in problem.gangs:
        if g.rank and not g.running:
            cheapest = min(int(values[c]) for c in g.classes)
            admitted[g.index] = w.priority * g.rank * g.need * cheapest
    deserved = np.zeros(len(problem.queues), dtype=np.int64)
    held = np.zeros(len(problem.queues), dtype=np.int64)
    for q in problem.queues:
        if q.dominant >= 0:
            dom = slice(q.dominant, q.dominant + 1)
            deserved[q.index] = share_units(q.deserved[dom], problem.totals[dom])[0]
            held[q.index] = share_units(q.used[dom], problem.totals[dom])[0]
    dominant = [problem.queues[problem.gangs[cls.gang].queue].dominant for cls in problem.classes]
    pod_share = np.array(
        [cls.share[d] if d >= 0 else 0 for cls, d in zip(problem.classes, dominant, strict=True)],
        dtype=np.int64,
    )
    nodes = max(1, problem.schedulable_node_count())
    gpu_nodes = max(1, int(problem.gpu_node.sum()))
    pod = w.value * values
    # Packing chooses where, never whether: opening a node (and a GPU node) costs less
    # than the cheapest pod is worth, so a pod that fits is never left pending to keep a
    # node empty (a 10m pod on a cluster of empty nodes was, at the default weights).
    cap = max(0, int(pod.min()) - 1) if len(pod) else 0
    node_opened = min(w.packing * (SHARE_SCALE // nodes), cap)
    gpu_node_opened = min(w.gpu_node_open * (SHARE_SCALE // gpu_nodes), cap - node_opened)
    return Coefficients(
        pod=pod,
        admitted=admitted,
        started=w.gang_start * (SHARE_SCALE // nodes),
        shortfall=-w.fairness,
        excess=-w.overuse,
        node_opened=-node_opened,
        gpu_node_opened=-gpu_node_opened,
        deserved=deserved,
        held=held,
        pod_share=pod_share,
    )


def evaluate(
    problem: Problem, placements: Mapping[str, int], w: ObjectiveWeights
) -> dict[str, int]:
    """Score a decision (pod -> node index) without a solver; the model's terms exactly."""
    of_pod = problem.class_of_pod()
    count = len(placements)
    # The dict's own lookup mapped in C, not a generator's frame per pod (21,000 pods
    # placed at 5,000 nodes: 1.8 -> 1.4 ms a score).
    classes = np.fromiter(map(of_pod.__getitem__, placements), np.int64, count)
    per_class = np.bincount(classes, minlength=len(problem.classes)).astype(np.int64)
    nodes = np.fromiter(placements.values(), np.int64, count)
    opened = problem.empty & (np.bincount(nodes, minlength=len(problem.nodes)) > 0)
    return terms(problem, w, per_class, opened)


def terms(
    problem: Problem, w: ObjectiveWeights, per_class: IntArray, opened: BoolArray
) -> dict[str, int]:
    """``evaluate`` from what it reads of a decision: pods placed per pod class, and the
    nodes opened (empty before, used after). A repair that moves a few gangs prices each
    move from these in O(classes), not O(pods placed)."""
    coef = coefficients(problem, w)
    _, _, need = class_indices(problem)
    reached, counted = _counted(problem, per_class)
    newly = reached & (need > 0)
    gained = _gained(problem, coef, counted)
    shortfall = np.maximum(0, coef.deserved - coef.held - gained)
    excess = np.maximum(0, coef.held + gained - coef.deserved)
    return {
        "value": int(coef.pod @ counted),
        "priority": int(coef.admitted @ newly.astype(np.int64)),
        "gang_start": coef.started * int(newly.sum()),
        "fairness": coef.shortfall * int(shortfall.sum()),
        "overuse": coef.excess * int(excess.sum()),
        "packing": coef.node_opened * int(opened.sum()),
        "gpu_nodes": coef.gpu_node_opened * int((opened & problem.gpu_node).sum()),
    }


def shortfall(problem: Problem, w: ObjectiveWeights, per_class: Sequence[int]) -> IntArray:
    """Per queue, the share units it lacks of its deserved share with ``per_class`` pods
    placed (as ``terms`` counts them: pods of gangs that reach minMember)."""
    coef = coefficients(problem, w)
    _, counted = _counted(problem, np.asarray(per_class, dtype=np.int64))
    short: IntArray = np.maximum(0, coef.deserved - coef.held - _gained(problem, coef, counted))
    return short


def objective_of(placer: Placer, w: ObjectiveWeights) -> int:
    """``evaluate`` of what ``placer`` holds, from its counts: O(classes), not O(pods)."""
    problem = placer.problem
    opened = problem.empty & (placer.free != problem.free).any(axis=1)
    per_class = np.array(placer.next_pod, dtype=np.int64)
    return sum(terms(problem, w, per_class, opened).values())


def _counted(problem: Problem, per_class: IntArray) -> tuple[BoolArray, IntArray]:
    """Per gang whether it reaches minMember, and per pod class the pods that count:
    those of gangs that do (pods below minMember hold room and do no work)."""
    gang_of_class, _, need = class_indices(problem)
    per_gang = np.bincount(gang_of_class, weights=per_class, minlength=len(problem.gangs))
    reached = (per_gang >= need) & ((per_gang > 0) | (need == 0))
    counted = np.where(reached[gang_of_class], per_class, 0) if len(per_class) else per_class
    return reached, counted


def _gained(problem: Problem, coef: Coefficients, counted: IntArray) -> IntArray:
    """Per queue, share units of its dominant resource the counted pods take."""
    _, queue_of_class, _ = class_indices(problem)
    gained: IntArray = np.bincount(
        queue_of_class, weights=coef.pod_share * counted, minlength=len(problem.queues)
    ).astype(np.int64)
    return gained


def class_indices(problem: Problem) -> tuple[IntArray, IntArray, IntArray]:
    """Per pod class its gang and queue, per gang its need: memoised on the problem."""
    cached = problem.memo.get(("objective-indices",))
    if isinstance(cached, tuple):
        return cached
    gang_of_class = np.array([cls.gang for cls in problem.classes], dtype=np.int64)
    queue_of_gang = np.array([g.queue for g in problem.gangs], dtype=np.int64)
    need = np.array([g.need for g in problem.gangs], dtype=np.int64)
    indices = (gang_of_class, queue_of_gang[gang_of_class], need)
    problem.memo[("objective-indices",)] = indices
    return indices


def score(state: ClusterState, decision: Decision, w: ObjectiveWeights) -> dict[str, int]:
    """The objective, per term, of any decision on a snapshot: what the validator reports.

    Placements naming unknown pods or nodes are not priced (``validate.check`` reports
    them); a decision from any scheduler is scored exactly as the CP-SAT model prices it.
    """
    problem = prepare(state)
    node_index = problem.node_index()
    of_pod = problem.class_of_pod()
    placements = {
        pod: node_index[node]
        for pod, node in decision.placements.items()
        if pod in of_pod and node in node_index
    }
    return evaluate(problem, placements, w)
