"""The LP relaxation of a CP-SAT encoding: a valid bound and a guide for the search.

On real-shaped clusters the aggregated model's LP is tight (within 0.2-2% of the integer
optimum) while CP-SAT's single-worker search needs seconds to dive to a first solution
of a 3,000-12,000 variable model. HiGHS solves the same LP in 0.01-0.2 s. Its optimum
bounds the aggregated model, which bounds the real problem; and the variables it leaves
at zero are, nearly always, zero in good integer solutions too, so fixing them leaves
CP-SAT a model small enough to solve within the cycle (``encode.restrict``).

``LinearRows`` records the model as the encoder writes it, row by row from the same
arrays, so the LP is the model's relaxation by construction and costs no proto reading.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import highspy
import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix

from solver.arrays import FloatArray, IntArray

# Rows beyond this magnitude are one-sided (the encoder writes int64 limits for "none").
UNBOUNDED = 1e18
# Time left below which an LP HiGHS gave up on is not solved again (``solve_matrices``).
RETRY_MIN_S = 0.02


# A row's variables or coefficients: a list, or an array where the encoder has one (the
# rows over a bin's or a queue's pairs, thousands of entries each, are read as arrays).
RowEntries = Sequence[int] | IntArray


@dataclass
class LinearRows:
    """Variables' bounds, linear rows and a maximised objective."""

    low: list[int] = field(default_factory=list)
    high: list[int] = field(default_factory=list)
    row_vars: list[RowEntries] = field(default_factory=list)
    row_coeffs: list[RowEntries] = field(default_factory=list)
    row_low: list[int] = field(default_factory=list)
    row_high: list[int] = field(default_factory=list)
    objective_vars: list[int] = field(default_factory=list)
    objective_coeffs: list[int] = field(default_factory=list)

    def add_var(self, low: int, high: int) -> None:
        self.low.append(low)
        self.high.append(high)

    def add_vars(self, low: Sequence[int], high: Sequence[int]) -> None:
        self.low.extend(low)
        self.high.extend(high)

    def add_row(self, variables: RowEntries, coeffs: RowEntries, low: int, high: int) -> None:
        self.row_vars.append(variables)
        self.row_coeffs.append(coeffs)
        self.row_low.append(low)
        self.row_high.append(high)

    def maximise(self, variables: Sequence[int], coeffs: Sequence[int]) -> None:
        self.objective_vars = list(variables)
        self.objective_coeffs = list(coeffs)


@dataclass(frozen=True)
class LpSolution:
    bound: int  # rounded up: no integer solution of the model scores more
    values: FloatArray  # per variable
    over_groups: bool = False  # solved over pods alike (``grouped_lp``), in less time


@dataclass(frozen=True)
class Matrices:
    """``LinearRows`` as LP solvers take them: maximise ``cost`` over ``low <= matrix @ x
    <= high`` (ranged rows; +-inf where a side is open) within ``col_low <= x <= col_high``."""

    cost: FloatArray
    matrix: csr_matrix
    low: FloatArray
    high: FloatArray
    col_low: FloatArray
    col_high: FloatArray


def matrices(rows: LinearRows) -> Matrices:
    n = len(rows.low)
    starts = np.zeros(len(rows.row_vars) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in rows.row_vars], out=starts[1:])
    # Row by row as arrays, joined once: the large rows already are arrays (real-shaped
    # 5,000 nodes, 965,000 entries: 0.155 -> 0.04 s against reading every entry through
    # one iterator, as when every row was a list). Rows are built in order: the matrix
    # is read as compressed rows at once (16 -> 8 ms there), canonical as a COO build
    # leaves it (columns sorted in each row, repeated ones summed).
    col_index = _joined(rows.row_vars, np.int64)
    data = _joined(rows.row_coeffs, np.float64)
    # Built so, the matrix checks no column index (a COO build did): an encoder's slip
    # would reach HiGHS.
    if len(col_index) and (int(col_index.min()) < 0 or int(col_index.max()) >= n):
        raise ValueError(f"a row reads a variable outside 0..{n - 1}")
    matrix = csr_matrix((data, col_index, starts), shape=(len(starts) - 1, n))
    matrix.sum_duplicates()
    low = np.array(rows.row_low, dtype=np.float64)
    high = np.array(rows.row_high, dtype=np.float64)
    low[low <= -UNBOUNDED] = -np.inf
    high[high >= UNBOUNDED] = np.inf
    cost = np.zeros(n)
    np.add.at(cost, rows.objective_vars, np.array(rows.objective_coeffs, dtype=np.float64))
    col_low, col_high = np.array(rows.low, np.float64), np.array(rows.high, np.float64)
    return Matrices(cost, matrix, low, high, col_low, col_high)


def _joined(entries: list[RowEntries], dtype: type) -> npt.NDArray[Any]:
    """Every row's entries, in order, as one array: runs of list rows (each a few
    entries: the gangs' rows) gathered into one list first, array rows as they are."""
    parts: list[npt.NDArray[Any]] = []
    run: list[int] = []
    for e in entries:
        if isinstance(e, np.ndarray):
            if run:
                parts.append(np.array(run, dtype=dtype))
                run = []
            parts.append(e.astype(dtype, copy=False))
        else:
            run.extend(e)
    if run or not parts:
        parts.append(np.array(run, dtype=dtype))
    return np.concatenate(parts)


def _quiet_highs() -> None:
    """HiGHS prints its banner to the process's stdout at its first construction, before
    any option can turn output off: made with stdout pointed at /dev/null (a scheduler's
    stdout is its users' terminal or log). Where stdout cannot be redirected (no file
    descriptor 1), the banner goes where it goes."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
        saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        highspy.Highs()  # type: ignore[no-untyped-call]  # highspy types no __init__
        return
    os.dup2(null, 1)
    try:
        highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


_quiet_highs()  # the banner, once, at import: no other thread writes to stdout yet


def solve_lp(
    rows: LinearRows,
    time_limit_s: float,
    meanwhile: Meanwhile | None = None,
    proof: NoSolution | None = None,
) -> LpSolution | None:
    """The LP optimum, or None when HiGHS does not prove one within the limit.

    Through highspy rather than scipy's ``linprog``: rows keep both sides (linprog takes
    ``A_ub x <= b_ub`` only, so every ranged row of the model, as each gang's
    need <= placed <= pods, became two), and the matrix goes in as it is, column-wise.
    Real-shaped node-class models, the same LP both ways: 1,000 nodes 0.25-0.32 ->
    0.18-0.21 s, 5,000 nodes x 7,500 gangs 1.53 -> 1.3 s. The binding also releases the
    GIL throughout its solve, where scipy's took it back now and then (beside a busy
    Python thread, stop 42 measured 0.77 s through scipy and 0.38 s through the binding)."""
    if not rows.low:
        return None
    return lp_solution(matrices(rows), time_limit_s, meanwhile, proof)


def lp_solution(
    m: Matrices,
    time_limit_s: float,
    meanwhile: Meanwhile | None = None,
    proof: NoSolution | None = None,
) -> LpSolution | None:
    """``solve_matrices``' optimum as a bound and values, or None."""
    found = solve_matrices(m, time_limit_s, meanwhile, proof)
    return None if found is None else LpSolution(bound=bound_of(found[0]), values=found[1])


def solve_matrices(
    m: Matrices,
    time_limit_s: float,
    meanwhile: Meanwhile | None = None,
    proof: NoSolution | None = None,
) -> tuple[float, FloatArray] | None:
    """The LP's optimum and an optimal solution, or None (``solve_lp``). ``meanwhile``: work
    for this thread while HiGHS solves on another: a large class model's LP took
    0.15-0.2 s of a 5,000-node cycle, its Python thread idle. ``proof`` records whether a
    None is HiGHS' proof that the LP has no solution (not a time out)."""
    columns = m.matrix.tocsc()
    highs = highspy.Highs()  # type: ignore[no-untyped-call]
    for option, value in (
        ("output_flag", False),
        # Its presolve took 40% of the solve on real-shaped node-class models.
        ("presolve", "off"),
        # One thread: the other core runs the baseline or a search beside it.
        ("threads", 1),
        ("time_limit", max(0.01, time_limit_s)),
    ):
        highs.setOptionValue(option, value)
    # As arrays, not through a ``HighsLp``: its fields copy a numpy array element by
    # element (5,000 nodes x 7,500 gangs: 0.13-0.17 s, against 0.02 s so, the same LP).
    # Open row sides are -inf / inf, as HiGHS' own; every column continuous.
    highs.passModel(
        len(m.cost),
        len(m.low),
        columns.nnz,
        int(highspy.MatrixFormat.kColwise),
        int(highspy.ObjSense.kMaximize),
        0.0,
        m.cost,
        m.col_low,
        m.col_high,
        m.low,
        m.high,
        columns.indptr.astype(np.int32, copy=False),
        columns.indices.astype(np.int32, copy=False),
        columns.data.astype(np.float64, copy=False),
        np.zeros(len(m.cost), dtype=np.int32),
    )
    started = time.perf_counter()
    if meanwhile is None:
        highs.run()
    else:
        _run_meanwhile(highs, meanwhile)
    status = highs.getModelStatus()
    left = time_limit_s - (time.perf_counter() - started)
    if status == highspy.HighsModelStatus.kUnknown and left >= RETRY_MIN_S:
        # The unpresolved simplex gave up, neither optimal nor out of time: real-shaped
        # 144 nodes with tolerations, 3,640 columns, after 0.11 s (1 primal and 66 dual
        # infeasibilities left), and the cycle had no bound and no class stage at all.
        # Presolved, from where it stopped, it was optimal 0.04 s later.
        highs.setOptionValue("presolve", "on")
        highs.setOptionValue("time_limit", left)
        highs.run()
        status = highs.getModelStatus()
    if proof is not None:
        # Every column is bounded, so "unbounded or infeasible" is infeasible.
        proof.proved = status in (
            highspy.HighsModelStatus.kInfeasible,
            highspy.HighsModelStatus.kUnboundedOrInfeasible,
        )
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    optimum = float(highs.getInfo().objective_function_value)
    return optimum, np.asarray(highs.getSolution().col_value, dtype=np.float64)


@dataclass
class NoSolution:
    """Set by a solve that returned no optimum: whether HiGHS proved there is no solution
    at all (``proved``), rather than running out of time."""

    proved: bool = False


@dataclass
class Meanwhile:
    """Work for the calling thread while HiGHS solves in a thread of its own (it releases
    the GIL throughout); ``past_s``, once solved, how long that work ran on after HiGHS
    had ended: not the LP's time."""

    work: Callable[[], object]
    past_s: float = 0.0


def _run_meanwhile(highs: highspy.Highs, meanwhile: Meanwhile) -> None:
    """``highs.run()`` in a thread while ``meanwhile.work()`` runs here. What either raises
    is raised here once both have stopped (HiGHS' first), as a plain ``run`` raises it."""
    ended: list[float] = []
    failed: list[BaseException] = []

    def solve() -> None:
        try:
            highs.run()
        except BaseException as e:  # raised on the calling thread below
            failed.append(e)
        finally:
            ended.append(time.perf_counter())

    solving = threading.Thread(target=solve, name="highs")
    solving.start()
    try:
        meanwhile.work()
    finally:
        worked = time.perf_counter()
        solving.join()
        if failed:  # raised over what the work raised, which it keeps as its context
            raise failed[0]
    meanwhile.past_s = max(0.0, worked - ended[0])


def bound_of(optimum: float) -> int:
    """HiGHS' optimum (or dual bound) of a maximisation as an integer bound: HiGHS is exact
    to its feasibility tolerance, so rounded up past it, never down."""
    return math.ceil(optimum + 1e-7 * max(1.0, abs(optimum)))
