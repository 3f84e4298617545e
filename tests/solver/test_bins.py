"""The (shape class, bin) pairs a model gets, and the most pods each bin can take: summed
over the bin's nodes, node by node, as a reader would count them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solver.bins
from solver.bins import (
    CHUNK_CELLS,
    Bin,
    Pairs,
    class_bin,
    class_bins,
    node_bins,
    pair_capacity,
)
from solver.config import SolverConfig
from solver.model import ClusterState
from solver.objective import coefficients
from solver.problem import Problem, prepare
from solver.shapes import Shapes, group
from tests.builders import gang, node, pod, queue, state


def _by_hand(
    problem: Problem, shapes: Shapes, bins: list[Bin], only: set[int] | None, free: np.ndarray
) -> list[tuple[int, int, int]]:
    """Per shape class and bin: pods fitting on each feasible node of the bin, on their
    own, summed, capped by the class's count; the pairs where that is positive."""
    out = []
    for sc in shapes.classes:
        if only is not None and sc.shape not in only:
            continue
        for b, bin_ in enumerate(bins):
            total = 0
            for n in bin_.nodes:
                if not sc.feasible[n]:
                    continue
                fits = [max(int(free[n, r]), 0) // int(d) for r, d in enumerate(sc.demand) if d > 0]
                total += min(fits) if fits else 2**31
            if min(total, sc.count) > 0:
                out.append((sc.index, b, min(total, sc.count)))
    return out


def _listed(pairs: Pairs) -> list[tuple[int, int, int]]:
    return list(zip(pairs.cls.tolist(), pairs.bin.tolist(), pairs.cap.tolist(), strict=True))


@st.composite
def _clusters(draw: st.DrawFn) -> ClusterState:
    """Nodes of a few kinds (labels, taints, sizes), some running pods; pending gangs of
    a few specs, some asking for a GPU, memory or a label, and specs sharing a demand."""
    nodes = []
    pods = []
    for i in range(draw(st.integers(1, 9))):
        b = node(f"n{i}").cap(
            cpu=draw(st.sampled_from([2, 4, 8])), memory=draw(st.sampled_from(["4Gi", "16Gi"]))
        )
        if draw(st.booleans()):
            b = b.cap(**{"nvidia.com/gpu": draw(st.integers(1, 4))}).taint("nvidia.com/gpu")
        b = b.label(zone=draw(st.sampled_from("ab")))
        nodes.append(b)
        for k in range(draw(st.integers(0, 2))):
            pods.append(pod(f"run-{i}-{k}").req(cpu=draw(st.integers(1, 3))).on(f"n{i}"))
    gangs = []
    for g in range(draw(st.integers(1, 6))):
        name = f"g{g}"
        size = draw(st.integers(1, 4))
        cpu = draw(st.sampled_from([1, 2, 3]))
        gpu = draw(st.sampled_from([0, 0, 1]))
        zone = draw(st.sampled_from([None, "a", "b"]))
        for k in range(size):
            p = pod(f"{name}-{k}").req(cpu=cpu, memory=draw(st.sampled_from(["1Gi", "1Gi", "3Gi"])))
            if gpu:
                p = p.req(cpu=cpu, **{"nvidia.com/gpu": gpu}).tolerate("nvidia.com/gpu")
            if zone is not None:
                p = p.selector(zone=zone)
            pods.append(p.gang(name))
        gangs.append(gang(name, draw(st.integers(1, size))))
    return state(nodes, pods, gangs, [queue()])


@settings(max_examples=80, deadline=None)
@given(
    cluster=_clusters(),
    per_node=st.booleans(),
    subset=st.integers(-1, 3),
    extra=st.integers(-2, 2),
    dropped=st.integers(0, 2),
    chunk=st.sampled_from([1, 3, 64, CHUNK_CELLS]),
    split=st.integers(0, 2),
    empty=st.booleans(),
)
def test_pairs_are_the_fits_of_each_node_summed_over_its_bin(
    cluster: ClusterState,
    per_node: bool,
    subset: int,
    extra: int,
    dropped: int,
    chunk: int,
    split: int,
    empty: bool,
) -> None:
    """Over classes of nodes and over nodes, or classes with some of their nodes alone
    (as the joint model has them: ``encode_victims.joint_bins``), some bins left out, a
    bin of no node, every shape or some or none, in the nodes' free room or in more or
    less, computed in chunks of any size: the same pairs, in the same order, with the
    same capacities as counting node by node."""
    problem = prepare(cluster)
    shapes = group(problem, coefficients(problem, SolverConfig().weights))
    bins = node_bins(problem) if per_node else class_bins(problem)
    if split and not per_node:
        alone = node_bins(problem)
        parts: list[Bin] = []
        for members in problem.node_classes:
            parts += [alone[n] for n in members[:split]]
            if members[split:]:
                parts.append(class_bin(problem, members[split:], len(parts)))
        bins = parts
    if empty:
        bins = [replace(bins[0], nodes=()), *bins]
    if dropped:
        bins = [b for i, b in enumerate(bins) if i % (dropped + 1)]
    only = {sc.shape for sc in shapes.classes[::subset]} if subset > 0 else None
    if subset < 0:
        only = set()
    free = problem.free + extra
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(solver.bins, "CHUNK_CELLS", chunk)
        got = pair_capacity(problem, shapes, bins, only, free=free if extra else None)
    assert _listed(got) == _by_hand(problem, shapes, bins, only, free)
