"""The class-packing probe proves what a class of nodes cannot hold of what the class
model asks of it: summed room sees none of it."""

from __future__ import annotations

import numpy as np

from benchmarks.class_packing import class_packings, held, overstated
from solver.bins import class_bins, pair_capacity
from solver.config import SolverConfig
from solver.encode import Encoding, encode
from solver.model import ClusterState
from solver.objective import coefficients
from solver.packing import pack_greedy, pod_worth
from solver.problem import Problem, prepare
from solver.relaxation import solve_lp
from solver.shapes import group
from solver.solution import rounded_for_gangs
from tests.builders import gang, node, pods_of, state

# Two nodes of 4 GPUs and 32 cpu. A pod of 2 GPUs and 30 cpu leaves its node 2 GPUs but
# 2 cpu: room for one pod of 1 GPU and 2 cpu, so one GPU is stranded.
FREE = np.array([[4, 32], [4, 32]], dtype=np.int64)
BIG = np.array([2, 30], dtype=np.int64)
SMALL = np.array([1, 2], dtype=np.int64)


def test_a_stranded_gpu_is_proved_short_where_summed_room_holds_every_pod() -> None:
    assert (FREE.sum(axis=0) >= BIG + 6 * SMALL).all()  # what the class model sums
    result = held(FREE, [BIG, SMALL], [1, 6], [10, 1], time_limit_s=5.0)
    assert (result.asked, result.at_most, result.found) == (16, 15, 15)
    assert result.short == 1  # one small pod fits on neither node


def test_what_fits_is_held_whole_and_what_fits_nowhere_is_short_whole() -> None:
    assert held(FREE, [BIG, SMALL], [1, 5], [10, 1], time_limit_s=5.0).short == 0
    nowhere = held(FREE, [np.array([5, 1], dtype=np.int64)], [2], [3], time_limit_s=5.0)
    assert (nowhere.asked, nowhere.at_most) == (6, 0)


def _stranding_cluster() -> ClusterState:
    return state(
        nodes=[node(n).cap(cpu=32, memory="64Gi", gpu=4, pods=110) for n in ("n1", "n2")],
        pods=[
            *pods_of("big", 1, cpu=30, memory="1Gi", gpu=2),
            *pods_of("small", 6, cpu=2, memory="1Gi", gpu=1),
        ],
        gangs=[gang("big", min_member=1), gang("small", min_member=6)],
    )


def _rounded_class_lp(problem: Problem) -> tuple[Encoding, list[int]]:
    coef = coefficients(problem, SolverConfig().weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    enc = encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins), True)
    lp = solve_lp(enc.rows, 30.0)
    assert lp is not None
    return enc, rounded_for_gangs(enc, lp.values)


def test_a_class_asked_for_what_its_nodes_cannot_hold_is_proved_short() -> None:
    problem = prepare(_stranding_cluster())
    enc, rounded = _rounded_class_lp(problem)
    (one,) = class_packings(problem, enc, rounded, time_limit_s=5.0)
    big, small = (pod_worth(problem, c.index) for c in problem.classes)
    # The class LP admits both gangs whole on the one class of two alike nodes: summed
    # room holds them. No packing of the two nodes holds the sixth small pod.
    assert one.nodes == 2 and one.kinds == 2
    assert one.held.asked == big + 6 * small
    assert one.held.at_most == one.held.found == big + 5 * small
    # Any packing a scheduler could find places no more than the proof allows.
    plan = pack_greedy(
        problem.free[[0, 1]],
        [c.demand for c in problem.classes],
        [1, 6],
        [big, small],
        problem.allocatable[0],
    )
    assert big * sum(plan[0].values()) + small * sum(plan[1].values()) <= one.held.at_most
    summary = overstated([one])
    assert (summary.short_classes, summary.classes) == (1, 1)
    assert summary.share == summary.worst == small / (big + 6 * small)
