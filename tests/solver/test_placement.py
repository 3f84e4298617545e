"""Placing pods on real nodes, and saying why a gang does not fit."""

from __future__ import annotations

import pytest

from adapter.sim import realistic
from solver.config import SolverConfig
from solver.model import ClusterState
from solver.placement import Placer
from solver.problem import prepare
from solver.schedulers import schedule

CONFIG = SolverConfig(deterministic=True)


@pytest.mark.parametrize("s", [realistic.cluster(0, 40, 60), realistic.cluster(1, 200, 300)])
def test_explanations_shared_across_gangs_of_a_spec_are_each_gangs_own(s: ClusterState) -> None:
    """Why a gang waits is worked out once per pod spec where it can be: each answer must
    be what a placer that explains only that gang says."""
    decision = schedule(s, "cpsat", CONFIG)
    problem = prepare(s)
    node_index = {n.name: i for i, n in enumerate(problem.nodes)}
    of_pod = problem.class_of_pod()
    waiting = [g for g in problem.gangs if g.name in decision.unschedulable][:40]
    assert len(waiting) >= 10
    for gang in waiting:
        fresh = Placer(problem)
        for pod, node_name in decision.placements.items():
            fresh.place(problem.classes[of_pod[pod]], node_index[node_name])
        assert fresh.explain(gang) == decision.unschedulable[gang.name], gang.name
