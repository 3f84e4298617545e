"""The class-packing probe proves what a class of nodes cannot hold of what the class
model asks of it: summed room sees none of it."""

from __future__ import annotations

import numpy as np

from benchmarks.class_packing import class_packings, held, overstated
from benchmarks.instances import realistic
from solver.bins import class_bins, pair_capacity
from solver.config import SolverConfig
from solver.encode import encode
from solver.objective import coefficients
from solver.packing import pod_worth
from solver.problem import prepare
from solver.relaxation import solve_lp
from solver.shapes import group
from solver.solution import decode_counts, rounded_for_gangs

# Two nodes of 4 GPUs and 32 cpu. A pod of 2 GPUs and 30 cpu leaves its node 2 GPUs but
# 2 cpu: room for one pod of 1 GPU and 2 cpu, so one GPU is stranded.
FREE = np.array([[4, 32], [4, 32]], dtype=np.int64)
BIG = np.array([2, 30], dtype=np.int64)
SMALL = np.array([1, 2], dtype=np.int64)


def test_a_stranded_gpu_is_proved_short_where_summed_room_holds_every_pod() -> None:
    counts, values = [1, 6], [10, 1]
    assert (FREE.sum(axis=0) >= BIG + 6 * SMALL).all()  # what the class model sums
    result = held(FREE, [BIG, SMALL], counts, values, time_limit_s=5.0)
    assert result.at_most == 15  # 16 asked: one small pod fits on neither node
    assert result.found == 15


def test_what_fits_is_held_whole() -> None:
    result = held(FREE, [BIG, SMALL], [1, 5], [10, 1], time_limit_s=5.0)
    assert result.found == result.at_most == 15


def test_each_class_asked_is_packed_and_bounded_by_what_it_is_asked() -> None:
    problem = prepare(realistic(3, 12, 16))
    coef = coefficients(problem, SolverConfig().weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    enc = encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins), True)
    lp = solve_lp(enc.rows, 30.0)
    assert lp is not None
    rounded = rounded_for_gangs(enc, lp.values)
    packings = class_packings(problem, enc, rounded, time_limit_s=2.0)
    worth = sum(
        pod_worth(problem, c) * n
        for c, where in decode_counts(enc, rounded).items()
        for _, n in where
    )
    assert packings and sum(p.asked for p in packings) == worth
    for p in packings:
        assert 0 <= p.held.found <= p.held.at_most <= p.asked
        assert p.nodes == len(enc.bins[p.bin].nodes)
    summary = overstated(packings)
    assert summary.classes == len(packings)
    assert summary.short == sum(p.short > 0 for p in packings)
    assert 0.0 <= summary.share <= summary.worst <= 1.0
