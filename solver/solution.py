"""Between a model's variables and a decision: a decision as values of the variables
(``solution_of``, ``hint``), and a solution as counts of pods per bin and admitted gangs
(``decode_counts``, ``decode_admitted``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from solver.arrays import IntArray
from solver.encode import Encoding, demand_matrix, queue_of_pair
from solver.objective import Coefficients
from solver.shapes import Shape, split, task_positions


def hint(enc: Encoding, placements: Mapping[str, int], coef: Coefficients) -> None:
    """A complete hint from a decision (pod -> node index): every variable gets a value."""
    hint_values(enc, solution_of(enc, placements, coef))


def hint_values(enc: Encoding, values: IntArray) -> None:
    """``values`` (one per variable) as the model's hint."""
    proto_hint = enc.model.proto.solution_hint
    proto_hint.vars.extend(range(len(values)))
    proto_hint.values.extend(values.tolist())


def solution_of(enc: Encoding, placements: Mapping[str, int], coef: Coefficients) -> IntArray:
    """A decision (pod -> node index) as values of the model's variables.

    Pods of gangs that stay below minMember are left out: they would make it infeasible.
    """
    problem = enc.problem
    of_pod = problem.class_of_pod()
    placed = np.zeros(len(problem.gangs), dtype=np.int64)
    for pod in placements:
        placed[problem.classes[of_pod[pod]].gang] += 1
    reached = {g.index for g in problem.gangs if g.reaches(int(placed[g.index]))}
    shape_class_of = {m: sc.index for sc in enc.shapes.classes for m in sc.members}
    bin_of_node = {n: b for b, bin_ in enumerate(enc.bins) for n in bin_.nodes}
    index = {
        (int(c), int(b)): p
        for p, (c, b) in enumerate(zip(enc.pairs.cls, enc.pairs.bin, strict=True))
    }
    values = np.zeros(enc.size()[0], dtype=np.int64)
    opened: dict[int, set[int]] = {}
    for pod, node in placements.items():
        pod_class = problem.classes[of_pod[pod]]
        if pod_class.gang not in reached:
            continue
        p = index.get((shape_class_of[pod_class.index], bin_of_node.get(node, -1)))
        if p is not None and values[p] < enc.pairs.cap[p]:
            values[p] += 1
            if problem.empty[node]:
                opened.setdefault(bin_of_node[node], set()).add(node)
    for s, var in enc.admitted.items():
        values[var] = sum(1 for g in enc.shapes.shapes[s].gangs if g in reached)
    pair_queue = queue_of_pair(enc)
    share = np.array([sc.pod_share for sc in enc.shapes.classes], dtype=np.int64)
    gained = np.bincount(
        pair_queue,
        weights=share[enc.pairs.cls] * values[: len(enc.pairs)],
        minlength=len(problem.queues),
    )
    for b, var in enc.opened.items():
        values[var] = len(opened.get(b, ()))
    for q, var in enc.short.items():
        values[var] = max(0, int(coef.deserved[q] - coef.held[q] - gained[q]))
    # Its smallest value, as the objective prices it: left at 0, a hint broke the model's
    # rows and a neighbourhood's incumbent scored above its decision.
    for q, var in enc.over.items():
        values[var] = max(0, int(coef.held[q] + gained[q] - coef.deserved[q]))
    return values


def _admitted_count(enc: Encoding, shape: Shape, solution: Sequence[int]) -> int:
    """How many of the shape's gangs the solution admits (all of them, if running)."""
    var = enc.admitted.get(shape.index)
    return int(solution[var]) if var is not None else shape.size


def decode_counts(enc: Encoding, solution: Sequence[int]) -> dict[int, list[tuple[int, int]]]:
    """A solution -> per pod class of the admitted gangs, (bin, count) to place."""
    values = np.asarray(solution[: len(enc.pairs)], dtype=np.int64)
    counts: dict[int, dict[int, int]] = {}
    for p in np.flatnonzero(values):
        counts.setdefault(int(enc.pairs.cls[p]), {})[int(enc.pairs.bin[p])] = int(values[p])
    per_pod_class: dict[int, list[tuple[int, int]]] = {}
    for shape in enc.shapes.shapes:
        admitted = _admitted_count(enc, shape, solution)
        per_pod_class.update(split(enc.shapes, shape, admitted, counts))
    return per_pod_class


def decode_admitted(enc: Encoding, solution: Sequence[int]) -> set[int]:
    """The gangs a solution admits: the oldest ``admitted[shape]`` of each shape."""
    chosen: set[int] = set()
    for shape in enc.shapes.shapes:
        if not any(c in enc.class_span for c in shape.classes):
            continue
        chosen.update(shape.gangs[: _admitted_count(enc, shape, solution)])
    return chosen


ROUNDING_TOLERANCE = 1e-6  # of HiGHS' values: within it of an integer, they are it
# A shape's admitted gangs this close to one more are rounded up, their pods put back as
# any admitted gang's: rounded down, one gang the LP admitted at 0.96 took 9% of the
# decision's objective with it (real-shaped 1,000 nodes, seed 23: 5.6% from the bound;
# rounded up, 1.8-2.1%). Whatever its pods then take from others, the disaggregation places
# the higher priorities first and withdraws what does not fit. Seeds 0-35 at 1,000 nodes,
# one solve each, against rounding down: mean gap 1.88 -> 1.86% (0.5: 1.86%), worst
# 5.60 -> 2.83%; 200 nodes, seeds 0-23: 1.57 -> 1.51%.
ROUND_UP_ADMITTED = 0.75


def rounded_down(values: npt.NDArray[np.float64]) -> list[int]:
    """An LP optimum as a solution: every value rounded down, once past HiGHS' feasibility
    tolerance (2.9999999 is 3), and none below 0. Counts rounded down still fit every
    capacity row, but may leave an admitted gang fewer pods than it needs
    (``rounded_for_gangs`` puts them back where it can)."""
    # Not below 0: -1 admitted of a shape would admit all its gangs but one.
    down = np.maximum(np.floor(values + ROUNDING_TOLERANCE), 0)
    rounded: list[int] = down.astype(np.int64).tolist()
    return rounded


def rounded_for_gangs(enc: Encoding, values: npt.NDArray[np.float64]) -> list[int]:
    """``rounded_down`` (a shape's admitted count rounded up past ROUND_UP_ADMITTED),
    then each admitted gang's pods that rounding took below its need
    (and its tasks' minimums) put back: the most fractional of the shape's counts
    rounded up instead (each once), within each class's pods per admitted gang and each
    queue's capability. A lone admitted gang that cannot be made whole so keeps its
    counts rounded down (the disaggregation may still find room for what it lacks).

    The LP splits a gang's pods over classes of nodes in fractions (15.6 on one class,
    0.4 on another); rounded down, an admitted gang of 16 asks for 15, and the
    disaggregation's repair then often finds no node for the 16th among nodes the other
    counts filled, and withdraws the gang. Real-shaped 1,000 nodes, seed 15: 9 of the
    20 gangs the decision lost. A count rounded up may ask a class of nodes for a little
    more than its capacity row holds: its packing then leaves out other pods.
    """
    rounded = rounded_down(values)
    for var in enc.admitted.values():
        if values[var] - rounded[var] >= ROUND_UP_ADMITTED and rounded[var] < enc.rows.high[var]:
            rounded[var] += 1
    _trimmed_to_admitted(enc, values, rounded)
    pairs = enc.pairs
    frac = values[: len(pairs)] - np.floor(values[: len(pairs)] + ROUNDING_TOLERANCE)
    demand = demand_matrix(enc)[pairs.cls]
    pair_queue = queue_of_pair(enc)
    used = np.zeros((len(enc.problem.queues), demand.shape[1]), dtype=np.int64)
    np.add.at(used, pair_queue, demand * np.asarray(rounded[: len(pairs)], dtype=np.int64)[:, None])
    room = {q.index: q.room() - used[q.index] for q in enc.problem.queues}

    def put_back(span: list[int], missing: int, admitted: int, added: list[int]) -> int:
        """Up to ``missing`` of ``span``'s fractional counts rounded up, most fractional
        first (ties in the pairs' order); returns how many are still missing."""
        # Only fractional counts: each lies below its pair's cap (an LP bound), so one
        # more fits it; an integral count may be at its cap.
        # Once each: rounded up again, a count would pass its LP value's ceiling (a task's
        # minimum and then the shape's need may both ask for it).
        candidates = (v for v in span if frac[v] > ROUNDING_TOLERANCE and v not in added)
        for v in sorted(candidates, key=lambda v: -frac[v]):
            if missing <= 0:
                break
            c = int(pairs.cls[v])
            start, end = enc.class_span[c]
            left = room[int(pair_queue[v])]
            if (
                sum(rounded[start:end]) >= enc.shapes.classes[c].per_gang * admitted
                or (left < demand[v]).any()
            ):
                continue
            rounded[v] += 1
            left -= demand[v]
            added.append(v)
            missing -= 1
        return missing

    for s, var in enc.admitted.items():
        admitted = rounded[var]
        if admitted <= 0:
            continue
        added: list[int] = []
        short = 0
        for task_classes, task_need in task_positions(enc.problem, enc.shapes, s):
            of_task = enc.classes_span(task_classes)
            missing = task_need * admitted - sum(rounded[v] for v in of_task)
            short += max(0, put_back(of_task, missing, admitted, added))
        span = enc.shape_span(s)
        missing = enc.shapes.shapes[s].need * admitted - sum(rounded[v] for v in span)
        short += max(0, put_back(span, missing, admitted, added))
        if short and admitted == 1:
            # A lone gang still short: the pods put back would take room for a gang the
            # disaggregation withdraws unless it finds what is missing. Alike gangs are
            # dealt pods in turn (``shapes.split``): there a pod put back can make one
            # more of them whole.
            for v in added:
                rounded[v] -= 1
                room[int(pair_queue[v])] += demand[v]
    return rounded


def _trimmed_to_admitted(
    enc: Encoding, values: npt.NDArray[np.float64], rounded: list[int]
) -> None:
    """Counts above what a shape's admitted gangs have of a class (the LP admitted a
    fraction of a gang more than rounding does), least first: no gang takes them, and
    counted, they would hide the pods another class is missing."""
    for s, var in enc.admitted.items():
        for c in enc.shapes.shapes[s].classes:
            if c not in enc.class_span:
                continue
            start, end = enc.class_span[c]
            extra = sum(rounded[start:end]) - enc.shapes.classes[c].per_gang * rounded[var]
            if extra <= 0:
                continue
            for v in sorted(range(start, end), key=lambda v: values[v]):
                if extra <= 0:
                    break
                take = min(extra, rounded[v])
                rounded[v] -= take
                extra -= take
