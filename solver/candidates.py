"""Decisions made from a model's counts: placed on real nodes, scored, kept as candidates.

``place_counts`` places any model's counts (node classes or nodes). ``place_node_lp`` adds
a candidate of its own where the node-class model's searches are the cycle's last (200
real-shaped nodes): the LP over every node of the gangs the class LP admits, its optimum
rounded. The class model sums a class's room; where its nodes are nearly full on two
resources (3-node classes with 98% of their cpu and 100% of their memory asked), its
counts do not pack, and the gangs the disaggregation then withdraws cost 2-3% of the
objective. Per node, the LP's rounded counts fit where they are put.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from solver.bins import Pairs, node_bins, pair_capacity
from solver.disaggregate import PACK_SHARE, REORDER_SHARE, disaggregate
from solver.encode import RESTRICT_ZERO, Encoding, encode
from solver.placement import Placer
from solver.search import Search
from solver.shapes import Shapes
from solver.solution import decode_admitted, decode_counts, rounded_for_gangs

# The node-level LP's pairs (pod class x node) of the gangs the class LP admits: real-shaped
# 200 nodes, 9,200-11,800; larger models (more nodes) keep the class searches alone.
NODE_LP_PAIRS = 15_000
# What the node-level LP, its encoding and the placement of its counts take per pair:
# real-shaped 200 nodes, 10,000 pairs: 0.02 s encoding, 0.15-0.23 s LP, 0.07-0.11 s
# placing. At 3e-5 the time left (0.16-0.36 s after the dive) held it on 3 of seeds 0-23,
# and cycles ended 0.3 s early; the LP's limit keeps the placement's time instead.
NODE_LP_S_PER_PAIR = 2e-5
NODE_PLACE_S_PER_PAIR = 8e-6


def place_counts(
    search: Search, enc: Encoding, solution: Sequence[int], name: str
) -> tuple[Placer, dict[int, list[tuple[int, int]]]]:
    """The solution disaggregated, as a candidate named ``name``; returned with the
    counts it came from."""
    admitted = decode_admitted(enc, solution)
    counts = decode_counts(enc, solution)
    config = search.config
    # No floor: once the cycle's time is used, an exact packing would only add to it
    # (real-shaped 1,000 nodes: 0.04 s past the limit, for no gain on any seed measured).
    budget = min(PACK_SHARE * config.time_limit_s, max(0.0, search.remaining()))
    reorder = min(REORDER_SHARE * config.time_limit_s, search.remaining())
    placer = disaggregate(
        search.problem,
        enc,
        counts,
        admitted,
        config.weights,
        budget,
        config.deterministic,
        reorder,
        until=time.perf_counter() + search.remaining(),
    )
    if search.admitted is None or all(
        search.score(placer) >= search.score(p) for p in search.solved
    ):
        search.admitted = admitted
    search.solved.append(placer)
    search.origin[id(placer)] = name
    return placer, counts


def node_lp_pairs(
    search: Search, classes: Encoding, values: npt.NDArray[np.float64]
) -> Pairs | None:
    """The node-level pairs of the shapes the class model's LP optimum ``values`` admits
    (any fraction of a gang); None above NODE_LP_PAIRS."""
    only = {s for s, var in classes.admitted.items() if values[var] > RESTRICT_ZERO}
    pairs = pair_capacity(search.problem, classes.shapes, node_bins(search.problem), only)
    return pairs if len(pairs) <= NODE_LP_PAIRS else None


def place_node_lp(search: Search, shapes: Shapes, pairs: Pairs, left: Callable[[], float]) -> None:
    """The LP over ``pairs`` (``node_lp_pairs``), its optimum rounded and placed as the
    candidate ``node-level-lp-rounded``; not where the time ``left`` cannot hold it. Over
    some gangs only, it is no relaxation: its stage reports no bound."""
    if left() < NODE_LP_S_PER_PAIR * len(pairs):
        return
    problem = search.problem
    enc = encode(problem, shapes, node_bins(problem), search.coef, pairs, lp_only=True)
    # An LP that has not ended when only its placement's time is left is cut short: the
    # cycle keeps its time limit, and the decision so far stands.
    lp = search.lp(enc, left() - NODE_PLACE_S_PER_PAIR * len(pairs), "node-level-lp")
    search.stages[-1] = search.stages[-1].model_copy(update={"bound": None})
    if lp is not None:
        place_counts(search, enc, rounded_for_gangs(enc, lp.values), "node-level-lp-rounded")
