"""The room a node can give this cycle's pods (``solver.room``): never less than any set
of those pods uses there, and less than its free capacity where that cannot be used."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import instances
from solver.problem import prepare
from solver.room import usable_free
from tests.builders import gang, node, pod, state
from tests.solver.encodings import class_model
from tests.solver.test_relaxation import _most_pods


def test_a_node_where_no_pod_fits_gives_nothing() -> None:
    free = np.array([[125, 100_000, 3], [4_000, 8_000, 3]])
    usable = usable_free(free, np.array([[1_000, 1_000, 1]]))
    assert usable[0].tolist() == [0, 0, 0]
    assert usable[1].tolist() == [3_000, 3_000, 3]  # 3 pod slots: at most 3 pods' worth


def test_what_one_resource_is_short_of_caps_the_others() -> None:
    """1 core free, pods of 500m and 1 GiB or of 250m and 256 MiB: at most 2 GiB of the
    100 GiB free can be used, and 4 of the 110 pod slots."""
    gib = 1 << 30
    free = np.array([[1_000, 100 * gib, 110]])
    demands = np.array([[500, gib, 1], [250, gib // 4, 1]])
    cpu, memory, slots = usable_free(free, demands)[0].tolist()
    assert (cpu, slots) == (1_000, 4)
    # Rounded up by at most the float slack, never down: the bound stays valid.
    assert 2 * gib <= memory <= 2 * gib * (1 + 1e-8)


def test_a_resource_some_pod_does_not_ask_for_bounds_nothing() -> None:
    """A pod that asks no cpu could use all the memory whatever the cpu left."""
    free = np.array([[100, 64, 10]])
    demands = np.array([[100, 1, 1], [0, 8, 1]])
    assert usable_free(free, demands)[0].tolist() == [100, 64, 10]


def _packings(free: np.ndarray, demands: np.ndarray) -> list[np.ndarray]:
    """Every count vector of the specs that fits the node (by brute force)."""
    most = [int(min((free[d > 0] // d[d > 0]).min(), 6)) if (d > 0).any() else 6 for d in demands]
    return [
        used
        for counts in itertools.product(*(range(m + 1) for m in most))
        if ((used := np.array(counts) @ demands) <= free).all()
    ]


@settings(max_examples=150, deadline=None)
@given(
    free=st.lists(st.integers(0, 12), min_size=3, max_size=3),
    demands=st.lists(st.lists(st.integers(0, 5), min_size=3, max_size=3), min_size=1, max_size=3),
)
def test_no_set_of_pods_that_fits_uses_more_than_the_room(
    free: list[int], demands: list[list[int]]
) -> None:
    free_row = np.array([free], dtype=np.int64)
    asked = np.array(demands, dtype=np.int64)
    usable = usable_free(free_row, asked)[0]
    assert (usable <= free_row[0]).all()
    for used in _packings(free_row[0], asked):
        assert (used <= usable).all(), (used, usable)


def test_a_class_model_counts_no_room_its_pods_cannot_use() -> None:
    """One class of two 4-core 16 GiB nodes: one empty, one left with 100m and 15 GiB by a
    running pod, where no pending pod fits. Pods of 500m and 4 GiB, and of 250m and 2 GiB:
    eight fit at most, on the empty node. Summed, the class has 4.1 cores and 31 GiB, and
    its LP places eleven or more (caps per spec, 4 and 8, do not see it)."""
    s = state(
        nodes=[node(f"n{i}").cap(cpu=4, memory="16Gi") for i in range(2)],
        pods=[
            pod("run").req(cpu="3900m", memory="1Gi").on("n1"),
            *(pod(f"a{i}").req(cpu="500m", memory="4Gi").gang(f"a{i}") for i in range(4)),
            *(pod(f"b{i}").req(cpu="250m", memory="2Gi").gang(f"b{i}") for i in range(8)),
        ],
        gangs=[*(gang(f"a{i}", 1) for i in range(4)), *(gang(f"b{i}", 1) for i in range(8))],
    )
    problem = prepare(s)
    assert len(problem.node_classes) == 1
    _, enc = class_model(problem)
    assert _most_pods(enc, len(enc.pairs)) == 8


def test_each_class_of_nodes_gets_the_room_of_every_pod_class_paired_with_it() -> None:
    # A real-shaped cluster: many pod classes per bin, most sharing a demand with others.
    problem = prepare(instances.realistic(0, 200, 300))
    _, enc = class_model(problem)
    demand = np.array([sc.demand for sc in enc.shapes.classes])
    bins_with_room = 0
    for b in {int(b) for b in enc.pairs.bin}:
        nodes = list(enc.bins[b].nodes)
        if len(nodes) < 2:
            assert b not in enc.room  # a bin of one node needs none
            continue
        paired = demand[enc.pairs.cls[enc.pairs.bin == b]]
        assert enc.room[b].tolist() == usable_free(problem.free[nodes], paired).tolist()
        bins_with_room += 1
    assert bins_with_room >= 5
