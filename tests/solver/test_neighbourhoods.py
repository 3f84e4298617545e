"""The node-level neighbourhoods: a few nodes freed at a time, the rest fixed."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from ortools.sat.python import cp_model

from adapter.sim import realistic
from solver import neighbourhoods
from solver.bins import node_bins, pair_capacity
from solver.config import SolverConfig
from solver.disaggregate import placer_from_counts
from solver.encode import Encoding, encode
from solver.model import ClusterState
from solver.neighbourhoods import improve
from solver.objective import coefficients, evaluate
from solver.problem import Problem, prepare
from solver.schedulers import schedule
from solver.search import Search, gang_greedy_placer
from solver.shapes import group
from solver.solution import decode_counts, solution_of
from solver.validate import check
from tests.builders import gang, node, pods_of, queue, state

CONFIG = SolverConfig(deterministic=True)


def _small_cluster() -> ClusterState:
    # Eight 4-core nodes, 38 cores asked: a gang as big as half the cluster, a pair and
    # six single 3-core pods, in two weighted queues. Not everything fits.
    return state(
        nodes=[node(f"n{i}").cap(cpu=4, memory="16Gi") for i in range(8)],
        pods=[
            *pods_of("big", 4, cpu=4),
            *pods_of("pair", 2, cpu=2),
            *[p for i in range(6) for p in pods_of(f"one{i}", 1, cpu=3)],
        ],
        gangs=[
            gang("big", 4).queue("a"),
            gang("pair", 2).queue("b"),
            *[gang(f"one{i}", 1).queue("b") for i in range(6)],
        ],
        queues=[queue("a", 2), queue("b", 1)],
    )


def _node_model(problem: Problem) -> Encoding:
    coef = coefficients(problem, CONFIG.weights)
    shapes = group(problem, coef)
    bins = node_bins(problem)
    return encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins))


def _improve(problem: Problem, enc: Encoding, values: np.ndarray, limit_s: float) -> np.ndarray:
    coef = coefficients(problem, CONFIG.weights)
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = Search(problem, CONFIG, coef, time.perf_counter(), pool, threading.Event())
        found = improve(search, enc, values, limit_s)
    assert [s.name for s in search.stages] == ["node-level-lns"]
    return found


def _objective(enc: Encoding, values: np.ndarray) -> int:
    return sum(
        c * int(values[v])
        for v, c in zip(enc.rows.objective_vars, enc.rows.objective_coeffs, strict=True)
    )


def test_from_nothing_placed_the_neighbourhoods_reach_the_proven_optimum() -> None:
    problem = prepare(_small_cluster())
    enc = _node_model(problem)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 30
    assert solver.solve(enc.model) == cp_model.OPTIMAL
    nothing = solution_of(enc, {}, coefficients(problem, CONFIG.weights))
    assert _objective(enc, nothing) < solver.objective_value
    found = _improve(problem, enc, nothing, 0.5)
    assert _objective(enc, found) == round(solver.objective_value)


def test_the_neighbourhoods_keep_the_incumbent_and_decide_what_the_nodes_hold() -> None:
    s = _small_cluster()
    problem = prepare(s)
    enc = _node_model(problem)
    coef = coefficients(problem, CONFIG.weights)
    greedy = gang_greedy_placer(problem)
    start = solution_of(enc, greedy.placed, coef)
    found = _improve(problem, enc, start, 0.2)
    assert _objective(enc, found) >= _objective(enc, start)
    # The model's objective is the decision's, and the decision breaks no rule.
    placer = placer_from_counts(problem, enc, decode_counts(enc, found.tolist()))
    assert sum(evaluate(problem, placer.placed, CONFIG.weights).values()) == _objective(enc, found)
    names = [n.name for n in problem.nodes]
    decision = schedule(s, "gang-greedy").model_copy(
        update={"placements": {pod: names[n] for pod, n in placer.placed.items()}}
    )
    assert check(s, decision) == []


def test_deterministic_neighbourhoods_decide_the_same_twice() -> None:
    problem = prepare(realistic.cluster(4, 40, 60))
    enc = _node_model(problem)
    start = solution_of(
        enc, gang_greedy_placer(problem).placed, coefficients(problem, CONFIG.weights)
    )
    first = _improve(problem, enc, start, 0.3)
    assert (first == _improve(problem, enc, start, 0.3)).all()
    assert _objective(enc, first) > _objective(enc, start)


def test_a_deterministic_solve_guards_each_cp_sat_call_by_its_own_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A neighbourhood of 0.05 s of deterministic time was guarded at 0.5 s of wall time:
    on a loaded machine its deterministic time ran at a tenth of the wall clock's pace,
    the guard cut it, and the same input gave another decision. Every call is now
    guarded by the solve's own guard left (10 times its limit, 5 s here)."""
    guards: list[float] = []
    solve = cp_model.CpSolver.solve

    def recorded(self: cp_model.CpSolver, *args: Any, **kwargs: Any) -> Any:
        guards.append(self.parameters.max_time_in_seconds)
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", recorded)
    config = CONFIG.model_copy(update={"time_limit_s": 0.5})
    decision = schedule(realistic.cluster(8, 40, 60), "cpsat", config)
    assert "node-level-lns" in {stage.name for stage in decision.stages}
    assert len(guards) > 10  # the stages and the neighbourhoods
    assert min(guards) > 1.0  # (each, at the least, what the solve's 5 s leave)


def test_a_real_shaped_small_cluster_is_searched_beside_the_whole_model() -> None:
    s = realistic.cluster(8, 40, 60)
    decision = schedule(s, "cpsat", CONFIG)
    stages = {stage.name: stage for stage in decision.stages}
    assert {"node-level-lns", "node-level"} <= set(stages)
    assert stages["node-level-lns"].bound is None  # a neighbourhood bounds nothing
    assert decision.objective is not None and stages["node-level-lns"].objective is not None
    assert decision.objective >= stages["node-level-lns"].objective
    assert check(s, decision) == []


def _rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sub-models solved."""
    solved: list[int] = []
    solve_around = neighbourhoods._solve_around

    def counted(*args: Any) -> Any:
        solved.append(1)
        return solve_around(*args)

    monkeypatch.setattr(neighbourhoods, "_solve_around", counted)
    return solved


def test_a_search_at_its_bound_or_stalled_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = prepare(_small_cluster())
    enc = _node_model(problem)
    solver = cp_model.CpSolver()
    assert solver.solve(enc.model) == cp_model.OPTIMAL
    optimum = np.asarray(solver.response_proto.solution, dtype=np.int64)
    rounds = _rounds(monkeypatch)
    coef = coefficients(problem, CONFIG.weights)
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = Search(problem, CONFIG, coef, time.perf_counter(), pool, threading.Event())
        search.bounds.append(round(solver.objective_value))
        improve(search, enc, optimum, 10.0)
        assert rounds == []  # at the bound: nothing to search
        search.bounds.clear()
        # No bound known, and deterministic: nothing better in STALL_ROUNDS rounds ends it
        # long before its time (10 s of deterministic time would be 200 rounds or more).
        assert (improve(search, enc, optimum, 10.0) == optimum).all()
        assert len(rounds) == neighbourhoods.STALL_ROUNDS
