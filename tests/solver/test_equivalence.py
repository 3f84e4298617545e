"""Which nodes the pending pods can tell apart: only by the label values they name."""

from __future__ import annotations

import numpy as np

from solver.equivalence import node_classes, node_view, read_label_keys
from solver.model import Node, Pod
from solver.problem import prepare
from solver.scheduling_terms import NodeSelectorRequirement, NodeSelectorTerm
from tests.builders import node, pod, state

HOST = "kubernetes.io/hostname"


def _hosts(n: int) -> list[Node]:
    return [node(f"n{i}").cap(cpu=4, memory="8Gi").label({HOST: f"n{i}"}).build() for i in range(n)]


def _reading(operator: str, *values: str) -> Pod:
    term = NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(key=HOST, operator=operator, values=values),)
    )
    return pod("p").req(cpu=1).build().model_copy(update={"affinity": (term,)})


def test_values_no_pod_names_do_not_tell_nodes_apart() -> None:
    # A pod kept off one hostname (a bound pod's anti-affinity) splits off that node
    # alone, not every node into a view of its own.
    nodes = _hosts(50)
    keys = sorted(read_label_keys([_reading("NotIn", "n3")]).items())
    views = {node_view(n, keys) for n in nodes}
    assert len(views) == 2
    assert node_view(nodes[3], keys) != node_view(nodes[4], keys)
    assert node_view(nodes[4], keys) == node_view(nodes[5], keys)
    # A node without the label is seen as such: DoesNotExist tells it apart.
    bare = node("bare").cap(cpu=4, memory="8Gi").build()
    assert node_view(bare, keys) != node_view(nodes[4], keys)


def test_every_pod_is_read_where_runs_of_pods_share_a_selector() -> None:
    # Alike pods are read once per run: a pod with the run's selector but its own
    # affinity, and the pods after it, are still read.
    pods = [
        pod("a").selector(zone="a").build(),
        pod("b").selector(zone="a").build(),
        pod("c").selector(zone="a").affinity(HOST, "Gt", "2").build(),
        pod("d").selector(zone="a").affinity(HOST, "Gt", "2").build(),
        pod("e").selector(zone="b").build(),
        pod("f").affinity("rack", "In", "r1").build(),
    ]
    assert read_label_keys(pods) == {
        "zone": frozenset({"a", "b"}),
        HOST: None,
        "rack": frozenset({"r1"}),
    }


def test_a_compared_value_keeps_every_value_apart() -> None:
    # Gt and Lt read the value itself: no value may be merged.
    nodes = _hosts(5)
    keys = sorted(read_label_keys([_reading("Gt", "2")]).items())
    assert len({node_view(n, keys) for n in nodes}) == 5


def test_the_decision_keeps_the_pod_off_the_named_node_among_merged_views() -> None:
    s = state(nodes=_hosts(6), pods=[_reading("NotIn", "n0")])
    problem = prepare(s)
    feasible = problem.classes[0].feasible
    assert not feasible[0] and feasible[1:].all()


def test_node_classes_split_by_bucket_and_by_every_placement_in_first_node_order() -> None:
    # Nodes 1 and 3 differ from 0 only in the ninth placement (the second byte of the
    # packed key); node 4's memory is 2% larger (another bucket), node 5's has none.
    allocatable = np.array([[4000, 8000]] * 4 + [[4000, 8160], [4000, 0]], dtype=np.int64)
    feasible = [np.ones(6, dtype=np.bool_) for _ in range(8)]
    feasible.append(np.array([True, False, True, False, True, True]))
    assert node_classes(allocatable, feasible) == [[0, 2], [1, 3], [4], [5]]
    assert node_classes(allocatable, []) == [[0, 1, 2, 3], [4], [5]]
    assert node_classes(np.zeros((0, 2), dtype=np.int64), []) == []
