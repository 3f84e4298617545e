"""A decision as values of the model's variables: a solution of the model, priced alike."""

from __future__ import annotations

import numpy as np
import pytest

from solver.bins import node_bins, pair_capacity
from solver.config import ObjectiveWeights
from solver.encode import encode
from solver.objective import coefficients, evaluate
from solver.problem import prepare
from solver.search import gang_greedy_placer
from solver.shapes import group
from solver.solution import solution_of
from tests.builders import gang, node, pods_of, queue, state


@pytest.mark.parametrize("overuse", [0, 200])
def test_a_decision_is_a_solution_of_the_node_model_with_the_same_objective(overuse: int) -> None:
    # One queue of weight 1 takes the whole cluster (the other has nothing pending): above
    # its deserved share, so with an overuse weight its excess is priced.
    s = state(
        nodes=[node(f"n{i}").cap(cpu=4, memory="16Gi") for i in range(3)],
        pods=[*pods_of("a", 3, cpu=4), *pods_of("b", 1, cpu=8)],
        gangs=[gang("a", 3).queue("a"), gang("b", 1).queue("b")],
        queues=[queue("a", 1), queue("b", 3)],
    )
    problem = prepare(s)
    weights = ObjectiveWeights(overuse=overuse)
    coef = coefficients(problem, weights)
    shapes = group(problem, coef)
    bins = node_bins(problem)
    enc = encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins))
    placed = gang_greedy_placer(problem).placed
    assert len(placed) == 3  # a is placed, b (8 cores) fits no node
    values = solution_of(enc, placed, coef)
    rows = enc.rows
    assert all(rows.low[v] <= values[v] <= rows.high[v] for v in range(len(values)))
    for variables, coeffs, low, high in zip(
        rows.row_vars, rows.row_coeffs, rows.row_low, rows.row_high, strict=True
    ):
        total = int(np.dot(values[list(variables)], coeffs))
        assert low <= total <= high
    objective = sum(
        c * int(values[v]) for v, c in zip(rows.objective_vars, rows.objective_coeffs, strict=True)
    )
    assert objective == sum(evaluate(problem, placed, weights).values())
    # Queue a holds the whole cluster: its excess has a variable, priced, only with the weight.
    assert any(values[var] > 0 for var in enc.over.values()) == (overuse > 0)
