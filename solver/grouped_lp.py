"""A large class model's LP with pods alike on one class of nodes as one column.

Shape classes of one spec, queue, price and fairness share differ only in the gangs
they belong to: on a class of nodes their pods ask for the same room, count the same in
every queue's and bin's row, and score the same. The model gives each such (shape class,
bin) pair a column of its own; real-shaped 5,000 nodes x 7,500 gangs have 48,000 pairs
but 10,700 (group, bin) pairs, and HiGHS' dual simplex pays for every column.

The LP solved here has one column per group and bin (``x``) and one per shape class for
its pods in all (``y``): every row of the model but the gangs' is over whole groups of
one bin with one coefficient, and reads ``x``; the gangs' rows each sum one class's
pairs (or a shape's, or a task's: whole classes) and read ``y``; one row per group
says its bins' ``x`` add up to its classes' ``y``. Any solution of the model sums to one
of this LP, and any solution of this LP splits back into one of the model
(``_split``: per group, classes filled bin after bin), with the same objective: the two
optima are equal. One bound is added: a column's upper bound is the pairs' summed, and
at most what the spec's pods fit in the bin, which the model's LP lacked; it holds for
any placement, so the optimum may only be lower, and is still a bound (it was equal on
every instance measured). The gang rows that fix a class's ``y`` to a multiple of its
gangs' admitted count are then substituted out (``_substituted``), with those ``y``.

Real-shaped class models (``benchmarks.instances.realistic``; the same bound, the model's
rows met by the split values to 1e-7), the model's LP against this one, building the
matrices included: at stop 52, 5,000 nodes x 7,500 gangs 1.11 -> 0.49 s, 1,000 x 1,500
0.18-0.22 -> 0.12-0.17 s; with the substitution (stop 54), 0.68 -> 0.23 s and
0.094-0.144 -> 0.074-0.086 s. At 200 nodes 57% of the columns are left and it took as long.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix, hstack, vstack

from solver.arrays import FloatArray, IntArray
from solver.encode import Encoding
from solver.relaxation import (
    LpSolution,
    Matrices,
    Meanwhile,
    NoSolution,
    bound_of,
    lp_solution,
    matrices,
    solve_lp,
    solve_matrices,
)

# Values this close to zero are spent when the split fills a class or a bin.
SPLIT_TOLERANCE = 1e-9
# Grouped only where it leaves at most this share of the columns: real-shaped 200 nodes
# keep 57% of them and their LP took as long either way (0.07 s), what the grouping
# costs; at 1,000 nodes 38% are left, at 5,000 nodes 22%.
GROUPED_MAX_SHARE = 0.5


@dataclass(frozen=True)
class _Grouping:
    column: IntArray  # per pair, its group's column on its bin (0..columns-1)
    first: IntArray  # per column, its first pair
    classes: IntArray  # shape classes with pairs, in ``y``'s order
    group_of_class: IntArray  # per entry of ``classes``, its group
    group_of_column: IntArray  # per column, its group

    @property
    def columns(self) -> int:
        return len(self.first)


def model_lp(
    enc: Encoding,
    time_limit_s: float,
    meanwhile: Meanwhile | None = None,
    proof: NoSolution | None = None,
) -> LpSolution | None:
    """``enc``'s LP relaxation: over groups where they apply, else as the model is
    (``meanwhile``, ``proof``: see ``relaxation.solve_matrices``)."""
    if groups_apply(enc):
        return solve_grouped_lp(enc, time_limit_s, meanwhile, proof)
    return solve_lp(enc.rows, time_limit_s, meanwhile, proof)


def groups_apply(enc: Encoding) -> bool:
    """Only large class models, with their gang rows where ``_grouped`` reads them, and
    no running pods as variables (``encode_victims``' rows free room per victim)."""
    return enc.lp_only and enc.gang_rows > 0 and not enc.freed and not enc.costs


def solve_grouped_lp(
    enc: Encoding,
    time_limit_s: float,
    meanwhile: Meanwhile | None = None,
    proof: NoSolution | None = None,
) -> LpSolution | None:
    """The model's LP optimum, solved over groups and split back into the model's
    variables; None when HiGHS proves no optimum within the limit (``proof``: whether it
    proved there is none: then no placement has one either, as every placement sums to a
    solution of it)."""
    plain = matrices(enc.rows)
    grouping = _grouping(enc)
    few = 0 < grouping.columns <= GROUPED_MAX_SHARE * len(enc.pairs)
    grouped = _grouped(enc, plain, grouping) if few else None
    if grouped is None:
        return lp_solution(plain, time_limit_s, meanwhile, proof)
    reduced, restore = _substituted(grouped, enc.gang_rows, grouping)
    found = solve_matrices(reduced, time_limit_s, meanwhile, proof)
    if found is None:
        return None
    optimum, values = found
    return LpSolution(bound_of(optimum), _split(enc, grouping, restore @ values), over_groups=True)


def _grouping(enc: Encoding) -> _Grouping:
    pairs = enc.pairs
    keys: dict[tuple[int, int, int, int], int] = {}
    group = np.zeros(len(enc.shapes.classes), dtype=np.int64)
    for sc in enc.shapes.classes:
        key = (sc.spec, enc.shapes.shapes[sc.shape].queue, sc.pod_price, sc.pod_share)
        group[sc.index] = keys.setdefault(key, len(keys))
    cls = pairs.cls.astype(np.int64)
    code = group[cls] * len(enc.bins) + pairs.bin.astype(np.int64)
    _, first, column = np.unique(code, return_index=True, return_inverse=True)
    classes = np.array(sorted(enc.class_span), dtype=np.int64)
    return _Grouping(
        column.astype(np.int64), first.astype(np.int64), classes, group[classes], group[cls[first]]
    )


def _grouped(enc: Encoding, plain: Matrices, grouping: _Grouping) -> Matrices | None:
    """The LP over groups; None where a row is not over whole groups (or whole classes,
    for the gang rows), which the model's rows always are (checked, not assumed)."""
    pairs = len(enc.pairs)
    first_pair = np.array([enc.class_span[int(c)][0] for c in grouping.classes], dtype=np.int64)
    matrix = plain.matrix
    gangs, rest = matrix[: enc.gang_rows], matrix[enc.gang_rows :]
    over_groups = rest[:, grouping.first]
    over_classes = gangs[:, first_pair]
    # Each entry kept stands for its whole group's (class's) pairs: the entries dropped
    # must be exactly those.
    group_size = np.bincount(grouping.column, minlength=grouping.columns)
    class_size = np.array([np.subtract(*enc.class_span[int(c)][::-1]) for c in grouping.classes])
    if _stands_for(over_groups, group_size) != rest[:, :pairs].nnz:
        return None
    if _stands_for(over_classes, class_size) != gangs[:, :pairs].nnz:
        return None
    classes, columns = len(grouping.classes), grouping.columns
    groups = int(grouping.group_of_class.max()) + 1
    of_column = grouping.group_of_column
    # ``_split`` reads every class of a group as having a pair on each of its bins.
    if np.bincount(of_column, minlength=groups)[grouping.group_of_class].sum() != pairs:
        return None
    link = hstack(
        [
            csr_matrix((np.ones(columns), (of_column, np.arange(columns))), (groups, columns)),
            csr_matrix(
                (-np.ones(classes), (grouping.group_of_class, np.arange(classes))),
                (groups, classes),
            ),
            csr_matrix((groups, matrix.shape[1] - pairs)),
        ]
    )
    grouped = vstack(
        [
            hstack([csr_matrix((enc.gang_rows, grouping.columns)), over_classes, gangs[:, pairs:]]),
            hstack([over_groups, csr_matrix((rest.shape[0], classes)), rest[:, pairs:]]),
            link,
        ],
        format="csr",
    )
    zeros = np.zeros(link.shape[0])
    return Matrices(
        cost=np.concatenate([plain.cost[grouping.first], np.zeros(classes), plain.cost[pairs:]]),
        matrix=grouped,
        low=np.concatenate([plain.low, zeros]),
        high=np.concatenate([plain.high, zeros]),
        col_low=np.concatenate([np.zeros(grouping.columns + classes), plain.col_low[pairs:]]),
        col_high=np.concatenate(
            [
                _column_high(enc, grouping, plain.col_high[:pairs]),
                _class_high(enc, grouping, plain.col_high[:pairs]),
                plain.col_high[pairs:],
            ]
        ),
    )


def _substituted(m: Matrices, gang_rows: int, grouping: _Grouping) -> tuple[Matrices, csr_matrix]:
    """The grouped LP without the gang rows that fix a class's ``y`` to its gangs'
    admitted count (``y = per_gang x admitted``, every whole gang of a large model): each
    such ``y`` is that multiple of its shape's column wherever it appears (the group
    rows), its bounds moved onto that column. The same LP in fewer rows and columns
    (real-shaped 5,000 nodes x 7,500 gangs: 9,700 x 19,800 -> 4,700 x 14,900; HiGHS 0.25
    -> 0.15 s, the same optimum, 4 ms to substitute); returned with the matrix that maps
    its solutions back to the grouped LP's columns. Another formulation: HiGHS may end at
    another of its optima (see "Fewer rows for the grouped LP" in
    benchmarks/solver_history.md)."""
    matrix = m.matrix if m.matrix.has_sorted_indices else m.matrix.sorted_indices()
    first_y, end_y = grouping.columns, grouping.columns + len(grouping.classes)
    starts = matrix.indptr[:gang_rows]
    rows = np.flatnonzero(
        (np.diff(matrix.indptr[: gang_rows + 1]) == 2)
        & (m.low[:gang_rows] == 0)
        & (m.high[:gang_rows] == 0)
    )
    # Columns sorted in each row: a class's y comes before its shape's admitted count,
    # which lies past every y.
    y, other = matrix.indices[starts[rows]], matrix.indices[starts[rows] + 1]
    y_coef, other_coef = matrix.data[starts[rows]], matrix.data[starts[rows] + 1]
    times = -other_coef / np.where(y_coef != 0, y_coef, 1)
    fixed = (y >= first_y) & (y < end_y) & (other >= end_y) & (y_coef != 0) & (times > 0)
    fixed &= m.col_low[y] == 0
    fixed &= m.col_low[other] == 0
    rows, y, other, times = rows[fixed], y[fixed], other[fixed], times[fixed]
    y, once = np.unique(y, return_index=True)  # a y fixed by two rows keeps one of them
    rows, other, times = rows[once], other[once], times[once]
    columns = len(m.cost)
    kept = np.ones(columns, dtype=np.bool_)
    kept[y] = False
    new_index = np.cumsum(kept) - 1
    restore = csr_matrix(
        (
            np.concatenate([np.ones(int(kept.sum())), times]),
            (
                np.concatenate([np.flatnonzero(kept), y]),
                np.concatenate([new_index[kept], new_index[other]]),
            ),
        ),
        shape=(columns, int(kept.sum())),
    )
    keep_rows = np.ones(len(m.low), dtype=np.bool_)
    keep_rows[rows] = False
    col_high = m.col_high[kept].copy()
    np.minimum.at(col_high, new_index[other], m.col_high[y] / times)
    reduced = Matrices(
        cost=restore.T @ m.cost,
        matrix=(matrix[keep_rows] @ restore).tocsr(),
        low=m.low[keep_rows],
        high=m.high[keep_rows],
        col_low=m.col_low[kept],
        col_high=col_high,
    )
    return reduced, restore


def _stands_for(kept: csr_matrix, size: IntArray) -> int:
    """How many entries the kept ones stand for, each its column's ``size``."""
    return int(size[kept.indices].sum())


def _column_high(enc: Encoding, grouping: _Grouping, high: FloatArray) -> FloatArray:
    """The group's pairs' highs summed, at most the pods of the spec that fit the bin (a
    pair's cap is that where it is below its class's pods)."""
    summed = np.zeros(grouping.columns)
    np.add.at(summed, grouping.column, high)
    pods = np.array([sc.count for sc in enc.shapes.classes], dtype=np.int64)[enc.pairs.cls]
    capped = enc.pairs.cap < pods
    fits = np.full(grouping.columns, np.inf)
    np.minimum.at(fits, grouping.column[capped], enc.pairs.cap[capped].astype(np.float64))
    column_high: FloatArray = np.minimum(summed, fits)
    return column_high


def _class_high(enc: Encoding, grouping: _Grouping, high: FloatArray) -> FloatArray:
    return np.array(
        [high[slice(*enc.class_span[int(c)])].sum() for c in grouping.classes], dtype=np.float64
    )


def _split(enc: Encoding, grouping: _Grouping, values: FloatArray) -> FloatArray:
    """The grouped LP's values as the model's: each group's classes, in order, take their
    ``y`` from its bins' ``x``, bin after bin (at most classes + bins - 1 pairs nonzero,
    whole where those are whole). Classes of one group share their bins (a pair is
    made wherever a pod of the spec fits), in the same order within their spans."""
    pairs = len(enc.pairs)
    columns, classes = grouping.columns, len(grouping.classes)
    x, y = values[:columns], values[columns : columns + classes]
    out = np.zeros(pairs + len(values) - columns - classes)
    out[pairs:] = values[columns + classes :]
    members: dict[int, list[int]] = {}
    for i, g in enumerate(grouping.group_of_class.tolist()):
        members.setdefault(g, []).append(i)
    for of_group in members.values():
        spans = [enc.class_span[int(grouping.classes[i])] for i in of_group]
        start, end = spans[0]
        room = x[grouping.column[start:end]].copy()
        if len(of_group) == 1:
            out[start:end] = room
            continue
        at = 0
        for i, (s, _) in zip(of_group, spans, strict=True):
            want = float(y[i])
            while want > SPLIT_TOLERANCE and at < len(room):
                take = min(want, float(room[at]))
                out[s + at] += take
                want -= take
                room[at] -= take
                if room[at] <= SPLIT_TOLERANCE:
                    at += 1
    return out
