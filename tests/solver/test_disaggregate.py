"""From node-class counts to nodes: what cannot be packed costs the least valuable gangs."""

from __future__ import annotations

from solver.config import SolverConfig
from solver.disaggregate import disaggregate
from solver.encode import class_bins, encode, pair_capacity
from solver.objective import coefficients
from solver.problem import prepare
from solver.shapes import group
from tests.builders import gang, node, pod, state


def test_counts_a_class_cannot_hold_cost_the_lower_priority_gang() -> None:
    """Two nodes of 4 cpu, one class. Counts that fit the class's summed 8 cpu but not its
    nodes: the high-priority gang's two 2.5-cpu pods need both nodes, and then the
    low-priority 3-cpu pod fits on neither. Placing the largest pod first would keep it
    and withdraw the gang that matters more."""
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            *(pod(f"high-{i}").req(cpu="2500m").gang("high") for i in range(2)),
            pod("low-0").req(cpu=3).gang("low"),
        ],
        gangs=[gang("high", 2).priority(1000), gang("low", 1)],
    )
    weights = SolverConfig().weights
    problem = prepare(s)
    assert len(problem.node_classes) == 1
    coef = coefficients(problem, weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    enc = encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins))
    counts = {cls.index: [(0, cls.count)] for cls in problem.classes}
    admitted = {g.index for g in problem.gangs}
    placer = disaggregate(problem, enc, counts, admitted, weights)
    assert sorted(placer.placed) == ["high-0", "high-1"]
    assert {placer.placed["high-0"], placer.placed["high-1"]} == {0, 1}
