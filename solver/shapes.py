"""Identical gangs merged into *shapes*: the exact symmetry reduction the model is built on.

Gangs with the same queue, priority rank, need and pending pods (spec and count per pod
class) are interchangeable (``GangInfo.shape``, set by ``prepare``), so the model
decides *how many* gangs of a shape to admit (``admitted[s]`` in 0..n) and counts pods
per shape class rather than per gang. The
reduction is exact: any counts with need x admitted <= placed <= pods-per-gang x
admitted split back into that many whole gangs, each between need and its size
(``split``), oldest gangs first. A thousand gangs of three identical pods — the
Kubernetes scheduler_perf shape — become one shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from solver.arrays import BoolArray, IntArray
from solver.baselines import gang_order_key
from solver.objective import Coefficients
from solver.problem import Problem


@dataclass(frozen=True)
class ShapeClass:
    """Position j of a shape: one pod class per member gang, all of one spec."""

    index: int
    shape: int
    members: tuple[int, ...]  # pod class of each member gang, in the shape's gang order
    per_gang: int  # pending pods of this class in one gang
    demand: IntArray
    feasible: BoolArray
    spec: int
    pod_price: int  # objective coefficient per pod placed
    pod_share: int  # share units of the queue's dominant resource per pod

    @property
    def count(self) -> int:
        return self.per_gang * len(self.members)


@dataclass(frozen=True)
class Shape:
    index: int
    gangs: tuple[int, ...]  # member gangs, oldest (first admitted) first
    classes: tuple[int, ...]  # shape classes
    need: int
    running: bool
    queue: int
    admit_price: int  # objective coefficient per gang admitted

    @property
    def size(self) -> int:
        return len(self.gangs)


@dataclass(frozen=True)
class Shapes:
    shapes: list[Shape]
    classes: list[ShapeClass]


def group(problem: Problem, coef: Coefficients) -> Shapes:
    by_shape: dict[int, list[int]] = {}
    for gang in sorted(problem.schedulable_gangs(), key=gang_order_key):
        by_shape.setdefault(gang.shape, []).append(gang.index)
    shapes: list[Shape] = []
    classes: list[ShapeClass] = []
    for members in by_shape.values():
        first = problem.gangs[members[0]]
        shape_classes = []
        for j, c in enumerate(first.classes):
            cls = problem.classes[c]
            shape_classes.append(len(classes))
            classes.append(
                ShapeClass(
                    index=len(classes),
                    shape=len(shapes),
                    members=tuple(problem.gangs[g].classes[j] for g in members),
                    per_gang=cls.count,
                    demand=cls.demand,
                    feasible=cls.feasible,
                    spec=cls.spec,
                    pod_price=int(coef.pod[c]),
                    pod_share=int(coef.pod_share[c]),
                )
            )
        shapes.append(
            Shape(
                index=len(shapes),
                gangs=tuple(members),
                classes=tuple(shape_classes),
                need=first.need,
                running=first.running,
                queue=first.queue,
                admit_price=int(coef.admitted[first.index]) + coef.started,
            )
        )
    return Shapes(shapes, classes)


def task_positions(problem: Problem, shapes: Shapes, s: int) -> list[tuple[list[int], int]]:
    """The shape's per-task minimums: the shape classes of each task with one still
    unmet, and how many of them each of its gangs places (``GangInfo.task_needs``)."""
    shape = shapes.shapes[s]
    first = problem.gangs[shape.gangs[0]]
    position = {c: j for j, c in enumerate(first.classes)}
    return [
        ([shape.classes[position[c]] for c in task_classes], need)
        for task_classes, need in first.task_needs
    ]


def split(
    shapes: Shapes, shape: Shape, admitted: int, counts: Mapping[int, Mapping[int, int]]
) -> dict[int, list[tuple[int, int]]]:
    """Counts of a shape's classes per bin -> per pod class of its gangs, (bin, count).

    ``counts[shape class][bin]``. The first ``admitted`` gangs take the pods, dealt
    round-robin across the gangs and continuing across classes, so gang totals differ by
    at most one: each reaches need when the shape's total does.
    """
    result: dict[int, list[tuple[int, int]]] = {}
    if admitted <= 0:
        return result
    turn = 0  # the gang the next pod is dealt to
    for sc_index in shape.classes:
        sc = shapes.classes[sc_index]
        by_bin = counts.get(sc_index, {})
        total = sum(by_bin.values())
        # Dealing ``total`` pods from gang ``turn`` on: every gang gets total // admitted,
        # and the total % admitted gangs dealt to first get one more.
        offset = (np.arange(admitted) - turn) % admitted
        quota = total // admitted + (offset < total % admitted)
        turn = (turn + total) % admitted
        # Walk the bins, filling each gang's quota in order.
        bins = [(b, n) for b, n in sorted(by_bin.items()) if n > 0]
        bin_i = 0
        left_in_bin = bins[0][1] if bins else 0
        for i in range(admitted):
            want = int(quota[i])
            member = sc.members[i]
            while want > 0:
                take = min(want, left_in_bin)
                result.setdefault(member, []).append((bins[bin_i][0], take))
                want -= take
                left_in_bin -= take
                if left_in_bin == 0 and bin_i + 1 < len(bins):
                    bin_i += 1
                    left_in_bin = bins[bin_i][1]
    return result
