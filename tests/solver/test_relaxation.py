"""The LP relaxation, the neighbourhoods it guides, and exact packing of a node class."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import highspy
import numpy as np
import pytest
from ortools.sat.python import cp_model

import solver.encode as solver_encode
from solver import relaxation
from solver.encode import (
    ROUNDING,
    Encoding,
    encode,
)
from solver.objective import Coefficients
from solver.packing import pack
from solver.problem import prepare
from solver.relaxation import LinearRows, matrices, solve_lp
from solver.restricted import restricted, waiting_pairs
from solver.solution import solution_of
from tests.builders import gang, node, pod, pods_of, queue, state
from tests.solver.encodings import class_model, node_model


def _small_lp() -> LinearRows:
    """max x + y, x + 2y <= 4, 0 <= x <= 3: the optimum x = 3, y = 0.5 scores 3.5."""
    rows = LinearRows()
    rows.add_var(0, 3)
    rows.add_var(0, 10)
    rows.add_row([0, 1], [1, 2], -(2**63) + 1, 4)
    rows.maximise([0, 1], [1, 1])
    return rows


def test_lp_optimum_is_rounded_up_into_a_bound() -> None:
    lp = solve_lp(_small_lp(), 1.0)
    assert lp is not None
    assert lp.bound == 4
    assert np.allclose(lp.values, [3.0, 0.5])


def test_an_lp_the_simplex_gives_up_on_is_solved_again_presolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HiGHS' unpresolved simplex ended a real-shaped 144-node class model in numerical
    trouble (status Unknown, neither optimal nor out of time): the cycle had no bound and
    no class stage. Here a HiGHS whose first run ends so."""
    runs: list[str] = []

    class GivesUpOnce(highspy.Highs):  # type: ignore[misc]
        def run(self) -> Any:
            runs.append(str(self.getOptionValue("presolve")))
            return super().run()

        def getModelStatus(self) -> Any:
            if len(runs) == 1:
                return highspy.HighsModelStatus.kUnknown
            return super().getModelStatus()

    monkeypatch.setattr(relaxation.highspy, "Highs", GivesUpOnce)
    lp = solve_lp(_small_lp(), 1.0)
    assert lp is not None and lp.bound == 4
    assert len(runs) == 2 and "on" in runs[1] and "off" in runs[0]


def test_a_ranged_row_keeps_both_sides() -> None:
    # max -x - y, 1 <= x + y <= 3: the optimum is on the lower side, x + y = 1 (without
    # it, 0 at x = y = 0). With x - y = 2 too (a row whose sides are equal), x = 2, y = 0.
    rows = LinearRows()
    rows.add_var(0, 5)
    rows.add_var(0, 5)
    rows.add_row([0, 1], [1, 1], 1, 3)
    rows.maximise([0, 1], [-1, -1])
    lp = solve_lp(rows, 1.0)
    assert lp is not None
    assert lp.values.sum() == pytest.approx(1.0)
    rows.add_row([0, 1], [1, -1], 2, 2)
    lp = solve_lp(rows, 1.0)
    assert lp is not None
    assert np.allclose(lp.values, [2.0, 0.0])


def test_an_lp_only_model_writes_whole_gangs_as_equalities() -> None:
    """A gang that needs every pod: in a model only its LP is solved of, each class row
    is an equality and the need row is left out; a gang that needs fewer than its pods
    keeps both. The LP's bound is the same either way."""
    s = state(
        nodes=[node("small").cap(cpu=4, memory="16Gi"), node("large").cap(cpu=8, memory="32Gi")],
        pods=[*pods_of("whole", 3, cpu=2), *pods_of("elastic", 4, cpu=3)],
        gangs=[gang("whole", 3), gang("elastic", 2)],
    )
    problem = prepare(s)
    coef, enc = class_model(problem)
    lean = encode(problem, enc.shapes, enc.bins, coef, enc.pairs, lp_only=True)
    assert len(lean.rows.row_low) == len(enc.rows.row_low) - 1
    whole = next(sh.index for sh in enc.shapes.shapes if problem.gangs[sh.gangs[0]].name == "whole")
    (c,) = enc.shapes.shapes[whole].classes
    span = list(range(*enc.class_span[c]))
    sides = zip(lean.rows.row_vars, lean.rows.row_low, lean.rows.row_high, strict=True)
    own = {*span, lean.admitted[whole]}
    rows = [(lo, hi) for variables, lo, hi in sides if set(variables) == own]
    assert rows == [(0, 0)]
    full_lp, lean_lp = solve_lp(enc.rows, 1.0), solve_lp(lean.rows, 1.0)
    assert full_lp is not None and lean_lp is not None
    assert full_lp.bound == lean_lp.bound


def test_solving_an_lp_prints_nothing() -> None:
    """HiGHS prints a banner at its first construction; a scheduler's stdout is its
    users' terminal or log. Also with no stdout at all, the import does not fail."""
    code = (
        "from solver.relaxation import LinearRows, solve_lp\n"
        "rows = LinearRows()\n"
        "rows.add_var(0, 3)\n"
        "rows.maximise([0], [1])\n"
        "assert solve_lp(rows, 1.0).values[0] == 3\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout == ""
    closed = subprocess.run(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, env=env, check=False
    )
    assert closed.returncode == 0


def test_an_infeasible_lp_gives_no_bound() -> None:
    rows = LinearRows()
    rows.add_var(0, 1)
    rows.add_row([0], [1], 2, 5)  # x >= 2, but x <= 1
    rows.maximise([0], [1])
    assert solve_lp(rows, 1.0) is None


def _class_model() -> tuple[Coefficients, Encoding]:
    # Two identical 4-core nodes; gangs of 2 one-core pods in two queues.
    s = state(
        nodes=[node(f"n{i}").cap(cpu=4, memory="8Gi") for i in range(2)],
        pods=[*pods_of("a", 2, cpu=1), *pods_of("b", 2, cpu=1), *pods_of("c", 6, cpu=1)],
        gangs=[gang("a", 2).queue("q1"), gang("b", 2).queue("q2"), gang("c", 6).queue("q2")],
        queues=[queue("q1"), queue("q2")],
    )
    return class_model(prepare(s))


def test_restriction_keeps_only_what_the_guide_or_the_incumbent_uses() -> None:
    coef, enc = _class_model()
    guide = np.zeros(len(enc.model.proto.variables))
    assert len(restricted(enc, coef, guide).pairs) == 0  # the LP places nothing
    guide[0] = 0.5
    narrow = restricted(enc, coef, guide)
    assert len(narrow.pairs) == 1
    assert (narrow.pairs.cls[0], narrow.pairs.bin[0]) == (enc.pairs.cls[0], enc.pairs.bin[0])
    # An incumbent's counts are kept too, and nothing else.
    values = solution_of(enc, {"a-0": 0, "a-1": 0}, coef)
    wide = restricted(enc, coef, np.zeros(len(guide)), values)
    used = {
        (int(enc.pairs.cls[p]), int(enc.pairs.bin[p]))
        for p in np.flatnonzero(values[: len(enc.pairs)])
    }
    assert used and set(zip(wide.pairs.cls.tolist(), wide.pairs.bin.tolist(), strict=True)) == used


def test_the_waiting_gangs_pairs_widen_a_neighbourhood_to_every_bin() -> None:
    coef, enc = _class_model()
    values = solution_of(enc, {"a-0": 0, "a-1": 0}, coef)  # a admitted; b and c wait
    also = waiting_pairs(enc, values)
    gang_of = {
        sc.index: enc.problem.gangs[enc.shapes.shapes[sc.shape].gangs[0]].name
        for sc in enc.shapes.classes
    }
    waiting = {int(p) for p in np.flatnonzero(also)}
    assert {gang_of[int(enc.pairs.cls[p])] for p in waiting} == {"b", "c"}
    assert all(gang_of[int(c)] != "b" or p in waiting for p, c in enumerate(enc.pairs.cls))
    # Added to the incumbent's pairs: a stays where it is, b and c may go anywhere.
    wide = restricted(enc, coef, np.zeros(len(values)), values, also)
    assert len(wide.pairs) == len(waiting) + int((values[: len(enc.pairs)] > 0).sum())


def test_an_lp_only_encoding_has_the_rows_and_bound_but_no_cp_sat_model() -> None:
    coef, enc = _class_model()
    lean = encode(enc.problem, enc.shapes, enc.bins, coef, enc.pairs, lp_only=True)
    assert len(lean.model.proto.variables) == 0 and len(lean.model.proto.constraints) == 0
    assert enc.size() == (len(enc.model.proto.variables), len(enc.model.proto.constraints))
    # The same variables; whole gangs' rows as equalities, fewer (see the test below).
    assert lean.rows.low == enc.rows.low and lean.rows.high == enc.rows.high
    assert lean.size()[1] < enc.size()[1]
    full_lp, lean_lp = solve_lp(enc.rows, 1.0), solve_lp(lean.rows, 1.0)
    assert full_lp is not None and lean_lp is not None and full_lp.bound == lean_lp.bound
    # What is searched is restricted from it, and that is a whole CP-SAT model again.
    narrow = restricted(lean, coef, lean_lp.values)
    assert len(narrow.model.proto.variables) == narrow.size()[0] > 0


def test_pack_places_everything_a_greedy_order_would_not() -> None:
    # Two nodes of 4 cpu x 4 GiB; pods (3, 1) and (1, 3): only one of each per node fits.
    free = np.array([[4, 4], [4, 4]])
    result = pack(free, [np.array([3, 1]), np.array([1, 3])], [2, 2], [1, 1], 1.0)
    assert result is not None
    assert [sum(r.values()) for r in result] == [2, 2]
    for n in range(2):
        assert result[0].get(n) == 1 and result[1].get(n) == 1


def test_pack_keeps_the_most_valuable_when_not_everything_fits() -> None:
    free = np.array([[4, 4]])
    result = pack(free, [np.array([3, 3]), np.array([2, 2])], [1, 2], [10, 1], 1.0)
    assert result is not None
    assert result[0] == {0: 1} and result[1] == {}


def _fragmented_class(rounding: int) -> tuple[Encoding, int]:
    """Two 64-core nodes with 5 cores free each (one class); 1-pod gangs of 3 and 3.5
    cores, two of each. Node by node only one fits per node; summed, the 10 cores would
    take three (3 + 3 + 3.5), and so would caps per spec (one per node each). Two pods of
    10m and 200 GiB (one per node) keep the room's own bound (``solver.room``) out of it:
    pods that small could use every pod slot."""
    s = state(
        nodes=[node(f"n{i}").cap(cpu=64, memory="256Gi") for i in range(2)],
        pods=[
            *(pod(f"run-{i}").req(cpu=59).on(f"n{i}") for i in range(2)),
            *(pod(f"s{i}").req(cpu=3).gang(f"s{i}") for i in range(2)),
            *(pod(f"m{i}").req(cpu="3500m").gang(f"m{i}") for i in range(2)),
            *(pod(f"t{i}").req(cpu="10m", memory="200Gi").gang(f"t{i}") for i in range(2)),
        ],
        gangs=[
            *(gang(f"{kind}{i}", 1) for kind in ("s", "m", "t") for i in range(2)),
        ],
    )
    problem = prepare(s)
    assert len(problem.node_classes) == 1
    _, enc = class_model(problem, rounding)
    return enc, len(enc.pairs)


def _most_pods(enc: Encoding, pairs: int) -> int:
    """The most pods the model's LP places (its objective replaced by the pod count)."""
    enc.rows.maximise(list(range(pairs)), [1] * pairs)
    lp = solve_lp(enc.rows, 1.0)
    assert lp is not None
    return round(float(lp.values[:pairs].sum()))


def test_pods_of_a_32nd_of_a_node_are_held_to_what_fits_node_by_node() -> None:
    """3 cores are 1/21 of these nodes: rounded capacity rows (at most floor(5 / 3) = 1
    pod of 3 cores or more per node) hold the class to two such pods, which its nodes can
    hold, where summed capacity lets it promise three (with the two small pods: 4 and 5).
    At 1/16 they are left out, and the relaxation is weaker, though still valid."""
    assert _most_pods(*_fragmented_class(ROUNDING)) == 4
    assert _most_pods(*_fragmented_class(16)) == 5


def _one_node_mixed_gpu_pods() -> tuple[Coefficients, Encoding]:
    # A 7-GPU node already in use (no node to open); three 1-pod gangs of 2 GPUs at
    # priority 10 and one of 3 GPUs at 0. Best: the three 2-GPU pods (1 GPU left over).
    s = state(
        nodes=[node("n0").cap(cpu=16, memory="64Gi", gpu=7)],
        pods=[
            pod("run-0").req(cpu=1).gang("run").on("n0"),
            pod("a-0").req(cpu=1, gpu=3).gang("a"),
            *(pod(f"b{i}-0").req(cpu=1, gpu=2).gang(f"b{i}") for i in range(3)),
        ],
        gangs=[gang("run", 1), gang("a", 1), *(gang(f"b{i}", 1).priority(10) for i in range(3))],
    )
    return node_model(prepare(s))


def test_a_single_nodes_rounded_rows_cut_its_lp_down_to_the_integer_optimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plain capacity lets the LP add a third of the 3-GPU pod to the three 2-GPU pods;
    rounded to 2-GPU units the node holds three such pods in all: the LP's bound is the
    integer optimum."""
    _, enc = _one_node_mixed_gpu_pods()
    lp = solve_lp(enc.rows, 5.0)
    solver = cp_model.CpSolver()
    assert solver.solve(enc.model) == cp_model.OPTIMAL
    optimum = round(solver.objective_value)
    # The bound is HiGHS' optimum rounded up past its tolerance (``relaxation.bound_of``).
    assert lp is not None and optimum <= lp.bound <= optimum * (1 + 1e-6)
    # Without them (a model above ROUNDED_NODE_PAIRS), the LP's bound is looser.
    monkeypatch.setattr(solver_encode, "ROUNDED_NODE_PAIRS", 0)
    _, plain = _one_node_mixed_gpu_pods()
    looser = solve_lp(plain.rows, 5.0)
    assert looser is not None and looser.bound > optimum * 1.01


def test_rows_read_as_a_matrix_sum_a_repeated_variable_and_keep_empty_rows() -> None:
    rows = LinearRows()
    rows.add_vars([0] * 4, [5] * 4)
    rows.add_row([3, 0, 3], [1, 2, 4], 0, 10)  # columns out of order, one repeated
    rows.add_row([], [], -(2**62), 2**62)  # empty, and open on both sides
    rows.add_row(np.array([2, 1]), np.array([7, 1]), 1, 1)  # an array row
    m = matrices(rows)
    assert m.matrix.toarray().tolist() == [[2, 0, 0, 5], [0, 0, 0, 0], [0, 1, 7, 0]]
    assert m.matrix.has_canonical_format
    assert m.low.tolist() == [0, -np.inf, 1] and m.high.tolist() == [10, np.inf, 1]


def test_a_row_reading_a_variable_that_does_not_exist_is_an_error() -> None:
    rows = LinearRows()
    rows.add_vars([0, 0], [1, 1])
    rows.add_row([0, 2], [1, 1], 0, 1)
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        matrices(rows)
