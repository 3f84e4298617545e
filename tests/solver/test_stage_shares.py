"""How a cycle's time is split between the node-class stage and the node-level one."""

from __future__ import annotations

from typing import Any

import pytest

import solver.cpsat
from benchmarks import instances
from solver.bins import feasible_pair_estimate
from solver.config import SolverConfig
from solver.objective import coefficients
from solver.problem import prepare
from solver.shapes import group
from solver.validate import check

CONFIG = SolverConfig(time_limit_s=1.0, deterministic=True)


@pytest.mark.parametrize(("nodes", "gangs", "whole"), [(40, 60, False), (100, 150, True)])
def test_the_node_classes_take_all_the_time_unless_a_node_level_stage_over_every_shape_follows(
    monkeypatch: pytest.MonkeyPatch, nodes: int, gangs: int, whole: bool
) -> None:
    """Real-shaped 100 nodes lie between the node-level limit and twice it: the classes
    had 0.4 of the time there, and the node-level model over the shapes they admitted
    the rest, for decisions 5% from the bound on average (12% on seed 1)."""
    cluster = instances.realistic(1, nodes, gangs)
    problem = prepare(cluster)
    estimate = feasible_pair_estimate(group(problem, coefficients(problem, CONFIG.weights)))
    limit = CONFIG.max_node_level_pairs
    assert (limit < estimate <= 2 * limit) if whole else estimate <= limit
    shares: list[float] = []
    original = solver.cpsat._node_class_stage

    def recorded(search: Any, shapes: Any, share: float, repack: bool, ahead: bool) -> None:
        shares.append(share)
        assert repack == whole  # repacking, too, is left to a node-level stage over all
        assert ahead != whole  # its whole search ahead is read by that stage only
        original(search, shapes, share, repack, ahead)

    monkeypatch.setattr(solver.cpsat, "_node_class_stage", recorded)
    decision = solver.cpsat.solve(cluster, CONFIG)
    assert check(cluster, decision) == []
    assert shares == [1.0 if whole else CONFIG.aggregate_time_share]


def test_a_decision_within_the_gap_limit_of_a_bound_ends_the_cycle() -> None:
    """The scheduler_perf gangs on 200 real-shaped nodes: the LP-guided search's decision
    is 0.07% below the class LP's bound (its opened nodes are fractional), and is the
    optimum. Proving it took two more searches (at 1,000 nodes, the node-level model:
    0.43 s of both cores, for the same decision); within ``relative_gap_limit`` the cycle
    ends on it, and reports it FEASIBLE with its gap."""
    cluster = instances.realistic_perf(0, 200, 200)
    close = solver.cpsat.solve(cluster, CONFIG)
    exact = solver.cpsat.solve(cluster, CONFIG.model_copy(update={"relative_gap_limit": 0.0}))
    assert close.gap is not None and 0 < close.gap <= CONFIG.relative_gap_limit
    assert close.status == "FEASIBLE" and exact.status == "OPTIMAL"
    assert len(close.stages) < len(exact.stages)
    assert close.objective is not None and exact.objective is not None
    assert close.objective >= exact.objective * (1 - CONFIG.relative_gap_limit)
    assert check(cluster, close) == []
