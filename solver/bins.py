"""Where a model may put pods: *bins* (one node, or a class of nodes the pending pods
cannot tell apart) and the (shape class, bin) *pairs* that get a count variable, with
the most pods of the class each bin can take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.arrays import IntArray
from solver.problem import Problem, fit_per_node
from solver.shapes import Shapes


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
    return sum(int(sc.feasible.sum()) for sc in shapes.classes if only is None or sc.shape in only)


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
    bin_of_node = bin_index(problem, bins)
    inside = bin_of_node >= 0  # every node, for class and node bins
    per_spec: dict[int, IntArray] = {}  # pods of a spec that fit per bin, uncapped
    cls_idx: list[IntArray] = []
    bin_idx: list[IntArray] = []
    caps: list[IntArray] = []
    for sc in shapes.classes:
        if only is not None and sc.shape not in only:
            continue
        if sc.spec not in per_spec:
            per_node = np.where(sc.feasible, fit_per_node(sc.demand, free), 0)
            per_spec[sc.spec] = np.bincount(
                bin_of_node[inside], weights=per_node[inside], minlength=len(bins)
            ).astype(np.int64)
        per_bin = np.minimum(per_spec[sc.spec], sc.count)
        where = np.flatnonzero(per_bin > 0)
        cls_idx.append(np.full(len(where), sc.index, dtype=np.int64))
        bin_idx.append(where)
        caps.append(per_bin[where])
    if not cls_idx:
        empty = np.zeros(0, dtype=np.int64)
        return Pairs(empty, empty, empty)
    return Pairs(np.concatenate(cls_idx), np.concatenate(bin_idx), np.concatenate(caps))
