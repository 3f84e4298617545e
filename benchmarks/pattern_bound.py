"""A valid bound on a cycle's problem that counts each node's pods as whole packings.

The cycle's bound is the LP relaxation of its model, where a node may hold a fraction of a
pod and summed or rounded capacity stands for how pods really pack. On real-shaped
clusters (cpu, memory, GPUs and pod slots, nodes part-used) whole pods often pack worse
than that, so a decision's reported gap mixes what its search lost with what the LP
relaxes, and no decision can close the second part.

Offline, the node-level model (every node its own bin, ``bins.node_bins``) is decomposed
by nodes (Dantzig-Wolfe): a node's variables may only take one of its integer points, a
packing that meets every row over that node alone (capacity, rounded capacity, opened
node), or a convex combination of them. A master LP chooses packings under the rows
that span nodes (each gang all-or-nothing, queue capability and fairness); for every
kind of node (nodes whose variables and rows read the same), a CP-SAT knapsack over the
master's duals finds the packing worth most (column generation). At every round, the
master's value plus what each node's best packing could still add (its reduced cost,
bounded above by the knapsack's proven bound) is a valid bound on the node-level integer
model (Farley's bound: the master's duals, the convexity rows' raised by that amount, are
then feasible for the full master's dual), hence on the real problem. It is at least as
tight as the node-level LP once no packing adds anything, and it holds at any round, so a
time limit only loosens it. The cycle's class model adds rows of its own (room per class,
rounded capacity over a class's nodes) and its LP is sometimes tighter still: ``optimum``
reports the least of the bounds.

Seconds to minutes at hundreds of nodes: a measurement (``gangsat-bench optimum``), not
something a cycle could run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model
from scipy.sparse import csc_matrix, csr_matrix

from solver.arrays import IntArray
from solver.encode import Encoding
from solver.objective import Coefficients
from solver.relaxation import Matrices, bound_of, matrices
from solver.solution import solution_of

FloatArray = npt.NDArray[np.float64]
# A packing enters the master when its reduced cost exceeds this share of the master's value.
ENTER_TOLERANCE = 1e-9
PRICE_S = 0.2  # CP-SAT's limit per knapsack; its proven bound counts when it stops short


@dataclass(frozen=True)
class PatternBound:
    bound: int  # valid on the real problem (rounded up)
    master: float  # the last master LP's value: the bound's lower end so far
    rounds: int
    columns: int  # packings in the master
    kinds: int  # distinct kinds of node priced
    converged: bool  # the last round priced no packing worth adding: the master is optimal
    wall_s: float


@dataclass
class _Kind:
    """Nodes whose variables and rows over themselves read alike: one pricing problem."""

    variables: IntArray  # of its first node, in the model's order
    high: IntArray  # their upper bounds (every lower bound is 0)
    members: list[IntArray]  # every node's variables, position by position as the first's
    rows: list[tuple[IntArray, IntArray, float, float]]  # positions, coefficients, low, high
    lifts: IntArray  # positions whose increase can help a row hold (kept when not worth it)


def _nodes_of_variables(enc: Encoding, size: int) -> IntArray:
    """Per model variable, the node whose bin it belongs to (-1: spans nodes)."""
    node_of = np.full(size, -1, dtype=np.int64)
    first = np.array([b.nodes[0] for b in enc.bins], dtype=np.int64)
    if any(len(b.nodes) != 1 for b in enc.bins):
        raise ValueError("the pattern bound decomposes a node-level model: one node per bin")
    node_of[: len(enc.pairs)] = first[enc.pairs.bin]
    for b, var in enc.opened.items():
        node_of[var] = first[b]
    return node_of


def _local_rows(matrix: csr_matrix, node_of: IntArray) -> IntArray:
    """Per row, the node all its variables belong to, or -1 when it spans nodes."""
    owner = np.full(matrix.shape[0], -1, dtype=np.int64)
    filled = np.flatnonzero(np.diff(matrix.indptr) > 0)
    if not len(filled):
        return owner
    of_entry = node_of[matrix.indices]
    starts = matrix.indptr[filled]
    low = np.minimum.reduceat(of_entry, starts)
    high = np.maximum.reduceat(of_entry, starts)
    owner[filled] = np.where((low == high) & (low >= 0), low, -1)
    return owner


def _kinds(m: Matrices, coupling: csc_matrix, node_of: IntArray, owner: IntArray) -> list[_Kind]:
    """Nodes grouped by what their pricing problems read: per variable its bounds, cost and
    column in the spanning rows; per row over the node its entries and sides."""
    matrix = m.matrix
    order = np.argsort(node_of, kind="stable")
    sorted_nodes = node_of[order]
    starts = np.searchsorted(sorted_nodes, np.arange(sorted_nodes.max(initial=-1) + 2))
    rows_of: dict[int, list[int]] = {}
    for r in np.flatnonzero(owner >= 0).tolist():
        rows_of.setdefault(int(owner[r]), []).append(r)
    kinds: dict[tuple[object, ...], _Kind] = {}
    for node in range(len(starts) - 1):
        variables = order[starts[node] : starts[node + 1]]
        if not len(variables):
            continue
        position = {int(v): i for i, v in enumerate(variables.tolist())}
        described = tuple(
            (
                m.col_low[v],
                m.col_high[v],
                m.cost[v],
                coupling.indices[coupling.indptr[v] : coupling.indptr[v + 1]].tobytes(),
                coupling.data[coupling.indptr[v] : coupling.indptr[v + 1]].tobytes(),
            )
            for v in variables.tolist()
        )
        rows = []
        for r in rows_of.get(node, []):
            entries = matrix.indices[matrix.indptr[r] : matrix.indptr[r + 1]]
            at = np.array([position[int(v)] for v in entries.tolist()], dtype=np.int64)
            coeffs = matrix.data[matrix.indptr[r] : matrix.indptr[r + 1]]
            rows.append((at, coeffs, float(m.low[r]), float(m.high[r])))
        key = (
            described,
            tuple((a.tobytes(), c.tobytes(), lo, hi) for a, c, lo, hi in rows),
        )
        kind = kinds.get(key)
        if kind is None:
            lifts = np.zeros(len(variables), dtype=bool)
            for at, coeffs, lo, hi in rows:
                lifts[at] |= ((coeffs < 0) & math.isfinite(hi)) | ((coeffs > 0) & math.isfinite(lo))
            high = m.col_high[variables].astype(np.int64)
            kinds[key] = _Kind(variables, high, [variables], rows, np.flatnonzero(lifts))
        else:
            kind.members.append(variables)
    return list(kinds.values())


def _price(kind: _Kind, worth: FloatArray, time_limit_s: float) -> tuple[float, FloatArray | None]:
    """The most a packing of this kind of node is worth at ``worth`` per unit of each of
    its variables: an upper bound on it, and the best packing found (or None)."""
    keep = np.union1d(np.flatnonzero(worth > 0), kind.lifts)
    if not len(keep):
        return 0.0, None
    model = cp_model.CpModel()
    x = {int(i): model.new_int_var(0, int(kind.high[i]), f"x{i}") for i in keep.tolist()}
    for at, coeffs, lo, hi in kind.rows:
        terms = [
            (x[int(i)], int(c))
            for i, c in zip(at.tolist(), coeffs.tolist(), strict=True)
            if int(i) in x
        ]
        if not terms:
            continue
        expr = sum(c * v for v, c in terms)
        if math.isfinite(hi):
            model.add(expr <= math.floor(hi + 1e-9))
        if math.isfinite(lo):
            model.add(expr >= math.ceil(lo - 1e-9))
    # Rounded up: the integer objective is at least the real one for every packing, so
    # its proven bound bounds the real packings' worth too.
    model.maximize(sum(math.ceil(float(worth[i])) * v for i, v in x.items()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        raise ValueError("a node's own rows forbid leaving it empty: no decomposition by nodes")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return math.inf, None  # nothing proven in the limit: no bound this round
    packing = np.zeros(len(kind.variables))
    for i, v in x.items():
        packing[i] = solver.value(v)
    return float(solver.best_objective_bound), packing


class _Master:
    """The master LP: the spanning rows, a convexity row per kind of node, the variables
    that span nodes, and the packings so far."""

    def __init__(
        self,
        m: Matrices,
        coupling: csc_matrix,
        spanning: IntArray,
        kinds: list[_Kind],
        free_vars: IntArray,
    ):
        self.m, self.coupling, self.kinds = m, coupling, kinds
        n_rows = coupling.shape[0]
        self.n_coupling = n_rows
        low = np.concatenate([m.low[spanning], np.full(len(kinds), -np.inf)])
        high = np.concatenate([m.high[spanning], [float(len(k.members)) for k in kinds]])
        sub = coupling[:, free_vars]
        self.highs = highspy.Highs()  # type: ignore[no-untyped-call]
        for option, value in (("output_flag", False), ("threads", 1), ("presolve", "off")):
            self.highs.setOptionValue(option, value)
        full = csc_matrix(
            (sub.data, sub.indices, sub.indptr), shape=(n_rows + len(kinds), len(free_vars))
        )
        self.highs.passModel(
            len(free_vars),
            len(low),
            full.nnz,
            int(highspy.MatrixFormat.kColwise),
            int(highspy.ObjSense.kMaximize),
            0.0,
            m.cost[free_vars],
            m.col_low[free_vars],
            m.col_high[free_vars],
            low,
            high,
            full.indptr.astype(np.int32),
            full.indices.astype(np.int32),
            full.data.astype(np.float64),
            np.zeros(len(free_vars), dtype=np.int32),
        )
        self.columns = 0
        self.seen: set[tuple[int, bytes]] = set()

    def add(self, k: int, packing: FloatArray) -> bool:
        """A packing of kind ``k`` as a column; False if it is already there or empty."""
        key = (k, packing.tobytes())
        if key in self.seen or not packing.any():
            return False
        self.seen.add(key)
        kind = self.kinds[k]
        column = self.coupling[:, kind.variables] @ packing
        at = np.flatnonzero(column)
        indices = np.concatenate([at, [self.n_coupling + k]]).astype(np.int32)
        values = np.concatenate([column[at], [1.0]])
        cost = float(self.m.cost[kind.variables] @ packing)
        self.highs.addCols(
            1,
            np.array([cost]),
            np.array([0.0]),
            np.array([np.inf]),
            len(indices),
            np.array([0], dtype=np.int32),
            indices,
            values,
        )
        self.columns += 1
        return True

    def solve(self) -> tuple[float, FloatArray]:
        self.highs.run()
        if self.highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"the master LP: {self.highs.getModelStatus()}")
        value = float(self.highs.getInfo().objective_function_value)
        return value, np.asarray(self.highs.getSolution().row_dual, dtype=np.float64)


def pattern_bound(
    enc: Encoding,
    coef: Coefficients,
    start: Mapping[str, int] | None,
    time_limit_s: float,
    price_s: float = PRICE_S,
) -> PatternBound:
    """The bound of the node-level encoding ``enc`` (an ``lp_only`` one will do), from the
    packings of ``start`` (pod -> node index; a decision's) on, within about the limit."""
    started = time.perf_counter()
    m = matrices(enc.rows)
    node_of = _nodes_of_variables(enc, len(m.cost))
    if (m.col_low[node_of >= 0] != 0).any():
        raise ValueError("the pattern bound expects every node variable to start at 0")
    owner = _local_rows(m.matrix, node_of)
    spanning = np.flatnonzero(owner < 0)
    coupling = m.matrix[spanning].tocsc()
    kinds = _kinds(m, coupling, node_of, owner)
    master = _Master(m, coupling, spanning, kinds, np.flatnonzero(node_of < 0))
    if start is not None:
        values = solution_of(enc, start, coef).astype(np.float64)
        for k, kind in enumerate(kinds):
            for variables in kind.members:  # a node's packing is one of its kind's
                master.add(k, values[variables])
    best = math.inf
    rounds = 0
    value = -math.inf
    converged = False
    while True:
        rounds += 1
        value, duals = master.solve()
        prices, rest = duals[: master.n_coupling], duals[master.n_coupling :]
        worth_all = m.cost - coupling.T @ prices
        gain = 0.0
        added = 0
        for k, kind in enumerate(kinds):
            worth = worth_all[kind.variables]
            upper, packing = _price(kind, worth, price_s)
            gain += len(kind.members) * max(0.0, upper - rest[k])
            if packing is not None and float(worth @ packing) - rest[k] > ENTER_TOLERANCE * max(
                1.0, abs(value)
            ):
                added += master.add(k, packing)
        best = min(best, value + gain)
        converged = not added
        if converged or time.perf_counter() - started > time_limit_s:
            break
    return PatternBound(
        bound=bound_of(best),
        master=value,
        rounds=rounds,
        columns=master.columns,
        kinds=len(kinds),
        converged=converged,
        wall_s=time.perf_counter() - started,
    )
