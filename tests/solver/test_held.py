"""What bound pods hold, summed per node and per queue (solver.held)."""

from __future__ import annotations

import numpy as np

from solver.held import Held
from tests.builders import pod

RESOURCES = {"cpu": 0, "memory": 1, "pods": 2}
UNITS = np.array([1, 2**20, 1], dtype=np.int64)  # memory in MiB, as the models count it


def test_pods_sharing_a_node_or_a_queue_all_count() -> None:
    """Two pods on one node (and in one queue) must both be taken: a vectorised update
    that wrote each index once would keep only one of them."""
    a = pod("a").req(cpu="1500m", memory="1Gi").build()
    b = pod("b").req(cpu="500m").build()
    # Equal requests in another object: a row of its own, the same sums.
    c = pod("c").req(cpu="500m").build()
    assert c.requests is not b.requests
    held = Held(RESOURCES, UNITS)
    for node, p in ((0, a), (0, b), (1, c)):
        held.on_nodes.append(node)
        held.on_sets.append(p.requests)
        held.by_queues.append(node)
        held.by_sets.append(p.requests)
    free = np.array([[4000, 8 * 2**30, 10], [4000, 8 * 2**30, 10]], dtype=np.int64)
    held.take_from(free)
    assert free.tolist() == [[2000, 7 * 2**30, 8], [3500, 8 * 2**30, 9]]
    used = np.zeros((2, 3), dtype=np.int64)
    held.add_to(used)
    assert used.tolist() == [[2000, 1024, 2], [500, 0, 1]]


def test_a_request_below_a_model_unit_holds_a_whole_unit() -> None:
    """Usage is in model units, rounded up as every pod's demand is: 1 byte is 1 MiB."""
    held = Held(RESOURCES, UNITS)
    held.by_queues.append(0)
    held.by_sets.append(pod("tiny").req(cpu="1m", memory=1).build().requests)
    used = np.zeros((1, 3), dtype=np.int64)
    held.add_to(used)
    assert used.tolist() == [[1, 1, 1]]


def test_nothing_held_changes_nothing() -> None:
    held = Held(RESOURCES, UNITS)
    free = np.ones((2, 3), dtype=np.int64)
    held.take_from(free)
    used = np.zeros((1, 3), dtype=np.int64)
    held.add_to(used)
    assert free.tolist() == [[1, 1, 1], [1, 1, 1]] and not used.any()
