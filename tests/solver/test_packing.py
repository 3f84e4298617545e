"""Packing one class of nodes greedily, node by node (``packing.pack_greedy``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.packing import pack_greedy

ALLOCATABLE = np.array([4, 4])


def test_a_node_takes_the_pods_that_fill_its_room_together() -> None:
    """Two nodes of (4, 4); two pods of (2, 1) and two of (2, 3), of equal value. Pod by
    pod, (2, 1) first, both go on the fullest node and leave (0, 2) there: one (2, 3) is
    left out. Matched to the room, each node takes one of each."""
    free = np.array([[4, 4], [4, 4]])
    plan = pack_greedy(free, [np.array([2, 1]), np.array([2, 3])], [2, 2], [1, 1], ALLOCATABLE)
    assert plan == [{0: 1, 1: 1}, {0: 1, 1: 1}]


def test_the_valuable_pod_is_kept_when_one_must_go() -> None:
    free = np.array([[4, 4]])
    plan = pack_greedy(free, [np.array([2, 2]), np.array([3, 3])], [2, 1], [1, 10], ALLOCATABLE)
    assert plan == [{}, {0: 1}]


def test_a_pod_asking_for_nothing_is_placed_whole() -> None:
    free = np.array([[0, 0], [1, 1]])
    plan = pack_greedy(free, [np.array([0, 0]), np.array([1, 1])], [5, 2], [1, 1], ALLOCATABLE)
    assert sum(plan[0].values()) == 5
    assert plan[1] == {1: 1}


def test_a_fill_is_copied_only_to_the_nodes_next_in_order() -> None:
    """Fullest first: (6, 4), (4, 6), (2, 6), (1, 8). The first node's fill, one (2, 2),
    also fits the (1, 8) node two places on; copied there, the (2, 6) node between them
    would be left the valuable (1, 5) pods' share. Copied only to a run of nodes next in
    order, every node is filled in its turn: worth 21, where copying to any node that
    fits placed 17."""
    free = np.array([[6, 4], [4, 6], [2, 6], [1, 8]])
    demands = [np.array([1, 5]), np.array([2, 2])]
    plan = pack_greedy(free, demands, [3, 4], [1, 5], np.array([8, 8]))
    worth = sum(v * sum(p.values()) for v, p in zip([1, 5], plan, strict=True))
    assert worth == 21


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda nodes: st.tuples(
            st.lists(
                st.lists(st.integers(-2, 8), min_size=3, max_size=3),
                min_size=nodes,
                max_size=nodes,
            ),
            st.lists(
                st.tuples(
                    st.lists(st.integers(0, 5), min_size=3, max_size=3),
                    st.integers(0, 4),
                    st.integers(1, 9),
                ),
                min_size=1,
                max_size=5,
            ),
        )
    )
)
def test_a_greedy_packing_fits_its_nodes_and_leaves_nothing_that_would_fit(
    case: tuple[list[list[int]], list[tuple[list[int], int, int]]],
) -> None:
    rows, items = case
    free = np.array(rows, dtype=np.int64)
    demands = [np.array(d, dtype=np.int64) for d, _, _ in items]
    counts = [n for _, n, _ in items]
    plan = pack_greedy(free, demands, counts, [v for *_, v in items], np.array([8, 8, 8]))
    room = np.maximum(free, 0)
    for i, on_nodes in enumerate(plan):
        assert sum(on_nodes.values()) <= counts[i]
        for n, k in on_nodes.items():
            assert k > 0
            room[n] -= demands[i] * k
    assert (room >= 0).all()
    for i, on_nodes in enumerate(plan):
        if sum(on_nodes.values()) < counts[i]:
            # Every node was filled until no pod left fitted it.
            assert not (room >= demands[i]).all(axis=1).any()
