"""The models of a prepared problem as the CP-SAT scheduler builds them: over classes of
nodes and over nodes; what a model prices a decision at; a solve's shared state."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from ortools.sat.python import cp_model

from solver import branching
from solver.bins import class_bins, node_bins, pair_capacity
from solver.config import ObjectiveWeights, SolverConfig
from solver.decision import Decision
from solver.encode import ROUNDING, Encoding, encode
from solver.model import ClusterState
from solver.objective import Coefficients, coefficients
from solver.problem import Problem, prepare
from solver.search import Search
from solver.shapes import group
from solver.solution import hint


def class_model(problem: Problem, rounding: int = ROUNDING) -> tuple[Coefficients, Encoding]:
    """Prices at the default weights, and the model over every pair of a pending pod
    class and a class of nodes."""
    coef = coefficients(problem, SolverConfig().weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    pairs = pair_capacity(problem, shapes, bins)
    return coef, encode(problem, shapes, bins, coef, pairs, rounding=rounding)


def node_model(
    problem: Problem, weights: ObjectiveWeights | None = None
) -> tuple[Coefficients, Encoding]:
    """Prices at ``weights`` (default: the defaults), and the model over every pair of a
    pending pod class and a node."""
    coef = coefficients(problem, weights or SolverConfig().weights)
    shapes = group(problem, coef)
    bins = node_bins(problem)
    return coef, encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins))


def model_price(
    state: ClusterState, decision: Decision, weights: ObjectiveWeights | None = None
) -> int:
    """The node-level model's objective with every variable fixed at ``decision``: what
    the solver itself makes of a decision, to compare with the solver-free score."""
    problem = prepare(state)
    coef, enc = node_model(problem, weights)
    index = {n.name: i for i, n in enumerate(problem.nodes)}
    hint(enc, {pod: index[node] for pod, node in decision.placements.items()}, coef)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    status = solver.solve(enc.model)
    assert status == cp_model.OPTIMAL, solver.status_name(status)
    return round(solver.objective_value)


def search_for(problem: Problem, config: SolverConfig, pool: ThreadPoolExecutor) -> Search:
    """A solve's shared state over ``problem``, its clock started now; ``pool`` runs its
    baseline."""
    coef = coefficients(problem, config.weights)
    return Search(problem, config, coef, time.perf_counter(), pool, threading.Event())


def without_branches(monkeypatch: pytest.MonkeyPatch) -> None:
    """No gang is branched on (``solver.branching``), whatever its fraction and stake: for
    tests of what the unbranched LP leads to."""
    monkeypatch.setattr(branching, "branch_variable", lambda enc, lp, weights: None)
