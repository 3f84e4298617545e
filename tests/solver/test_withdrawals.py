"""Placements of this cycle taken back for a preemptor: priced as the placement priced
them, and never a decision below the placement it replaced when nothing is evicted."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import SolveStatus
from solver.greedy_preemption import greedy_preempt
from solver.last_stage import with_withdrawals
from solver.model import ClusterState
from solver.objective import coefficients
from solver.placement import Placer
from solver.problem import prepare
from solver.search import Search
from solver.validate import check
from tests.builders import gang, node, pod, state


def _low_or_high() -> ClusterState:
    """n1 holds either low (2 x 2 cpu, priority 0) or high's one placeable pod (3 cpu,
    priority 1; its other pod fits nowhere, so its priority term is small). n2, which no
    pending pod tolerates, only raises the queue's deserved share: low is worth more."""
    return state(
        nodes=[
            node("n1").cap(cpu=4, memory="8Gi"),
            node("n2").cap(cpu=4, memory="8Gi").taint("dedicated", "x"),
        ],
        pods=[
            pod("low-0").req(cpu=2).gang("low"),
            pod("low-1").req(cpu=2).gang("low"),
            pod("high-0").req(cpu=3).gang("high"),
            pod("high-1").req(cpu="100m").gang("high").selector(zone="nowhere"),
        ],
        gangs=[gang("low", 2).created(0), gang("high", 1).priority(1).created(1)],
    )


@pytest.mark.parametrize("joint", [True, False])
def test_a_placement_is_not_taken_back_for_a_gang_worth_less(joint: bool) -> None:
    """The preemption model credited high's queue with its fairness gain but not what
    taking low back lost there, nor low's gang_start term: it swapped low for high."""
    st_ = _low_or_high()
    config = SolverConfig(time_limit_s=0.5, deterministic=True)
    without = solve(st_, config)
    assert without.placements == {"low-0": "n1", "low-1": "n1"}
    with_preemption = solve(st_, config.model_copy(update={"preemption": True}), joint=joint)
    assert with_preemption.placements == without.placements
    assert with_preemption.objective == without.objective
    assert not with_preemption.evictions and not with_preemption.nominated


def test_a_withdrawal_that_evicts_nothing_and_scores_less_is_not_applied() -> None:
    """Gang-greedy's actions take low back for high, which fits once low is gone (what the
    preemption model's hint is, and what stands when the model finds nothing in time)."""
    st_ = _low_or_high()
    problem = prepare(st_)
    config = SolverConfig(preemption=True)
    coef = coefficients(problem, config.weights)
    best = Placer(problem)
    [low] = [g for g in problem.gangs if g.name == "low"]
    assert best.try_gang(low) == ["low-0", "low-1"]
    choice = greedy_preempt(problem, best, coef, config)
    assert choice.withdrawn == {"low-0", "low-1"} and not choice.evictions
    with ThreadPoolExecutor(1) as pool:
        search = Search(problem, config, coef, time.perf_counter(), pool, threading.Event())
        final, kept, status = with_withdrawals(search, best, choice, SolveStatus.OPTIMAL)
    assert set(final.placed) == {"low-0", "low-1"}
    assert not kept.withdrawn and not kept.nominated and not kept.evictions
    assert status is SolveStatus.OPTIMAL
    assert check(st_, solve(st_, config)) == []
