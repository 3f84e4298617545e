"""The bound over whole packings per node is valid (no integer decision scores above it)
and, where pods pack worse than summed capacity says, tighter than the LP's."""

from __future__ import annotations

import pytest

from benchmarks.instances import realistic
from benchmarks.optimum import solve_mip
from benchmarks.pattern_bound import pattern_bound
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import Decision
from solver.model import ClusterState
from solver.problem import Problem, prepare
from solver.relaxation import solve_lp
from tests.builders import gang, node, pod, state
from tests.solver.encodings import class_model, node_model


def _start(problem: Problem, decision: Decision) -> dict[str, int]:
    index = {n.name: i for i, n in enumerate(problem.nodes)}
    return {p: index[n] for p, n in decision.placements.items()}


def _two_shapes() -> ClusterState:
    """Three 4-cpu / 4 GiB nodes. ``big`` (all 5 or none): two 3-cpu / 1 GiB pods and
    three 2-cpu / 2 GiB ones; ``small``: one 1-cpu / 3 GiB pod.

    A node holds one 3-cpu pod (with the small pod beside it at most) or two 2-cpu pods:
    ``big`` needs 2 + 2 nodes, so only ``small`` runs. Summed (12 cpu, 12 GiB; rounded
    rows: 2 pods of 3 cpu and 5 of 2 or more, where 3 and 6 fit) ``big`` fits, and the
    LP admits 11/12 of it beside ``small``. Over whole packings a node gives ``big`` one
    3-cpu pod or two 2-cpu pods: 3.5 nodes a gang, so at most 6/7 of it.
    """
    pods = [pod(f"big-a{i}").req(cpu=3, memory="1Gi").gang("big") for i in range(2)]
    pods += [pod(f"big-c{i}").req(cpu=2, memory="2Gi").gang("big") for i in range(3)]
    pods.append(pod("small-0").req(cpu=1, memory="3Gi").gang("small"))
    return state(
        nodes=[node(f"n{i}").cap(cpu=4, memory="4Gi") for i in range(3)],
        pods=pods,
        gangs=[gang("big", 5), gang("small", 1)],
    )


def test_whole_packings_bound_what_summed_capacity_does_not() -> None:
    s = _two_shapes()
    problem = prepare(s)
    coef, classes = class_model(problem)
    lp = solve_lp(classes.rows, 10.0)
    assert lp is not None
    _, nodes = node_model(problem)
    exact = solve_mip(nodes.rows, 20.0)
    decision = solve(s, SolverConfig(time_limit_s=1.0))
    assert exact.objective is not None and decision.objective is not None
    assert decision.placements.keys() == {"small-0"}  # big fits nowhere whole
    assert decision.objective == exact.objective

    result = pattern_bound(nodes, coef, _start(problem, decision), 30.0)

    assert exact.objective <= result.bound < lp.bound
    assert result.converged and result.kinds == 1  # three empty alike nodes price as one


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bound_holds_on_real_shaped_clusters(seed: int) -> None:
    """Nodes part-used, labelled and tainted, gangs with selectors and tolerations: the
    bound is at least the node-level optimum and, once no packing adds anything, at most
    the node-level LP's."""
    s = realistic(seed, 6, 6)
    problem = prepare(s)
    coef, nodes = node_model(problem)
    exact = solve_mip(nodes.rows, 30.0)
    node_lp = solve_lp(nodes.rows, 10.0)
    decision = solve(s, SolverConfig(time_limit_s=0.3))
    assert exact.objective is not None and exact.bound is not None and node_lp is not None

    result = pattern_bound(nodes, coef, _start(problem, decision), 60.0)

    assert result.converged  # the last round priced nothing new
    assert exact.objective <= result.bound <= node_lp.bound
    assert decision.objective is not None and decision.objective <= result.bound
