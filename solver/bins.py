"""Where a model may put pods: *bins* (one node, or a class of nodes the pending pods
cannot tell apart) and the (shape class, bin) *pairs* that get a count variable, with
the most pods of the class each bin can take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from solver.arrays import IntArray
from solver.problem import Problem
from solver.shapes import ShapeClass, Shapes
from solver.units import fit_per_node


@dataclass(frozen=True)
class Bin:
    name: str
    nodes: tuple[int, ...]
    free: IntArray  # summed over the bin's nodes
    node_allocatable: IntArray  # the largest of the bin's nodes (they are within ~1%)
    empty_nodes: int
    used_free: IntArray  # free capacity on the bin's non-empty nodes
    gpu: bool


def node_bins(problem: Problem) -> list[Bin]:
    zero = np.zeros(len(problem.resources), dtype=np.int64)
    return [
        Bin(
            name=problem.nodes[i].name,
            nodes=(i,),
            free=problem.free[i],
            node_allocatable=problem.allocatable[i],
            empty_nodes=int(problem.empty[i]),
            used_free=zero if problem.empty[i] else problem.free[i],
            gpu=bool(problem.gpu_node[i]),
        )
        for i in range(len(problem.nodes))
    ]


def class_bins(problem: Problem) -> list[Bin]:
    return [class_bin(problem, members, k) for k, members in enumerate(problem.node_classes)]


def class_bin(problem: Problem, members: Sequence[int], k: int) -> Bin:
    """The bin of nodes ``members`` (of one class of nodes), named as the ``k``-th."""
    zero = np.zeros(len(problem.resources), dtype=np.int64)
    rows = np.array(members)
    used = rows[~problem.empty[rows]]
    return Bin(
        name=f"class{k}({problem.nodes[members[0]].name}+{len(members) - 1})",
        nodes=tuple(members),
        free=problem.free[rows].sum(axis=0),
        # Nodes of a class differ by up to ~1% (equivalence.allocatable_bucket): the
        # largest keeps the node-opening constraint a relaxation.
        node_allocatable=problem.allocatable[rows].max(axis=0),
        empty_nodes=int(problem.empty[rows].sum()),
        used_free=problem.free[used].sum(axis=0) if len(used) else zero,
        gpu=bool(problem.gpu_node[members[0]]),
    )


@dataclass(frozen=True)
class Pairs:
    """The (shape class, bin) pairs that get a count variable, grouped by class."""

    cls: IntArray
    bin: IntArray
    cap: IntArray  # most pods of the class the bin can take

    def __len__(self) -> int:
        return len(self.cls)


def feasible_pair_estimate(shapes: Shapes, only: set[int] | None = None) -> int:
    """An upper bound on the node-level model's pairs, without computing fits."""
    # Classes of one placement share its array (``NodeViews``): each array's nodes counted
    # once, added for every class (5,000 nodes: 13 -> 0.6 ms).
    counted: dict[int, int] = {}
    total = 0
    for sc in shapes.classes:
        if only is None or sc.shape in only:
            key = id(sc.feasible)
            if key not in counted:
                counted[key] = int(np.count_nonzero(sc.feasible))
            total += counted[key]
    return total


def bin_index(problem: Problem, bins: Sequence[Bin]) -> IntArray:
    """Per node, the index of the bin holding it; -1 for a node in none."""
    index = np.full(len(problem.nodes), -1, dtype=np.int64)
    for b, bin_ in enumerate(bins):
        index[list(bin_.nodes)] = b
    return index


def pair_capacity(
    problem: Problem,
    shapes: Shapes,
    bins: Sequence[Bin],
    only: set[int] | None = None,
    free: IntArray | None = None,
) -> Pairs:
    """Pairs for every shape class (or those of the ``only`` shapes), in the room ``free``
    per node (default: what the nodes have free)."""
    free = problem.free if free is None else free
    wanted = [sc for sc in shapes.classes if only is None or sc.shape in only]
    if not wanted or not bins:
        empty = np.zeros(0, dtype=np.int64)
        return Pairs(empty, empty, empty)
    per_spec, row_of_spec = _fits_per_bin(problem, wanted, bins, free)
    rows = np.array([row_of_spec[sc.spec] for sc in wanted], dtype=np.int64)
    counts = np.array([sc.count for sc in wanted], dtype=np.int64)
    index = np.array([sc.index for sc in wanted], dtype=np.int64)
    cls_idx: list[IntArray] = []
    bin_idx: list[IntArray] = []
    caps: list[IntArray] = []
    step = max(1, CHUNK_CELLS // len(bins))
    for lo in range(0, len(wanted), step):
        per_bin = np.minimum(per_spec[rows[lo : lo + step]], counts[lo : lo + step, None])
        cls_of, bin_of = np.nonzero(per_bin > 0)  # row-major: grouped by class
        cls_idx.append(index[lo : lo + step][cls_of])
        bin_idx.append(bin_of.astype(np.int64))
        caps.append(per_bin[cls_of, bin_of])
    return Pairs(np.concatenate(cls_idx), np.concatenate(bin_idx), np.concatenate(caps))


# Largest temporary (cells) a chunk of pair_capacity's arrays may take: 32 MiB of int64.
CHUNK_CELLS = 1 << 22


def _fits_per_bin(
    problem: Problem, wanted: Sequence[ShapeClass], bins: Sequence[Bin], free: IntArray
) -> tuple[IntArray, dict[int, int]]:
    """Pods of each spec that fit per bin, uncapped (one row per spec), and each spec's
    row. Real-shaped 1,000-node clusters have ~600 specs but ~80 distinct demands: the
    fits per node are computed once per demand and summed over each bin's nodes by one
    sparse product (0.04 s one spec at a time, 0.009 s so), then masked by each spec's
    feasibility on the bin's first node. That stands for the bin's: a bin is a node, or a
    class of nodes that no pending pod tells apart (``equivalence``), or part of one.
    Masked node by node before the sum, real-shaped 5,000 nodes x 7,500 gangs took 0.2 s
    more (5,900 specs x 5,000 nodes)."""
    bin_of_node = bin_index(problem, bins)
    inside = np.flatnonzero(bin_of_node >= 0)
    row_of_spec: dict[int, int] = {}
    exemplars: list[ShapeClass] = []
    for sc in wanted:
        if sc.spec not in row_of_spec:
            row_of_spec[sc.spec] = len(exemplars)
            exemplars.append(sc)
    demands, demand_row = np.unique(
        np.array([sc.demand for sc in exemplars], dtype=np.int64), axis=0, return_inverse=True
    )
    demand_row = demand_row.ravel()  # numpy 2.0.0 kept the axis
    room = free[inside]
    fit_of = np.array([fit_per_node(d, room) for d in demands], dtype=np.int64)
    member = csr_matrix(
        (np.ones(len(inside), dtype=np.int64), (bin_of_node[inside], np.arange(len(inside)))),
        shape=(len(bins), len(inside)),
    )
    per_demand = np.asarray((member @ fit_of.T).T, dtype=np.int64).reshape(len(demands), len(bins))
    # A bin without nodes (none is built so) sums to 0 whatever node stands for it.
    first = np.array([b.nodes[0] if b.nodes else 0 for b in bins], dtype=np.int64)
    feasible = np.array([sc.feasible[first] for sc in exemplars], dtype=np.bool_)
    per_spec: IntArray = np.where(feasible, per_demand[demand_row], 0)
    return per_spec, row_of_spec
