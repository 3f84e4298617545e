"""A large class model's LP over groups of pods alike (``solver.grouped_lp``): the same
optimum as the model's own LP, and a solution of the model split back from it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import highspy
import numpy as np
import pytest
from scipy.sparse import csr_matrix

import solver.grouped_lp as grouped_lp
import solver.search as search_module
from benchmarks.instances import realistic
from solver.bins import class_bins, pair_capacity
from solver.config import SolverConfig
from solver.encode import Encoding, encode
from solver.grouped_lp import groups_apply, model_lp, solve_grouped_lp
from solver.objective import coefficients
from solver.problem import prepare
from solver.relaxation import LpSolution, Matrices, Meanwhile, matrices, solve_lp, solve_matrices
from solver.shapes import group
from tests.builders import gang, node, pod, pods_of, state
from tests.solver.encodings import search_for


def _lp_only_model(s: object) -> Encoding:
    problem = prepare(s)  # type: ignore[arg-type]
    coef = coefficients(problem, SolverConfig().weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    return encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins), True)


def _alike_gangs() -> Encoding:
    # Two kinds of node (two bins); three gangs of one spec, queue and priority but of
    # 3, 2 and 5 pods (three shapes, one group): 6 pairs, 2 columns. Room for 8 of the
    # 10 pods: the LP admits part of a gang.
    return _lp_only_model(
        state(
            nodes=[
                node("small-0").cap(cpu=4, memory="16Gi"),
                node("small-1").cap(cpu=4, memory="16Gi"),
                node("large").cap(cpu=8, memory="32Gi"),
            ],
            pods=[
                *pods_of("a", 3, cpu=2, memory="1Gi"),
                *pods_of("b", 2, cpu=2, memory="1Gi"),
                *pods_of("c", 5, cpu=2, memory="1Gi"),
            ],
            gangs=[gang("a", 3), gang("b", 2), gang("c", 5)],
        )
    )


def _assert_solves_the_model(enc: Encoding, lp: LpSolution, plain: LpSolution) -> None:
    """``lp``'s values meet every row and bound of ``enc`` and score its bound, which is
    the model's own LP's."""
    m = matrices(enc.rows)
    row = m.matrix @ lp.values
    assert (row >= m.low - 1e-6).all() and (row <= m.high + 1e-6).all()
    assert (lp.values >= m.col_low - 1e-6).all() and (lp.values <= m.col_high + 1e-6).all()
    assert lp.bound == pytest.approx(plain.bound, rel=1e-9, abs=1)
    # bound_of rounds the optimum up past 1e-7 of it (HiGHS' tolerance).
    assert float(m.cost @ lp.values) == pytest.approx(plain.bound, rel=1e-6)


def test_pods_alike_are_one_column_and_the_optimum_is_the_models() -> None:
    enc = _alike_gangs()
    assert groups_apply(enc)
    grouping = grouped_lp._grouping(enc)
    assert (len(enc.pairs), grouping.columns) == (6, 2)
    assert grouped_lp._grouped(enc, matrices(enc.rows), grouping) is not None
    lp, plain = solve_grouped_lp(enc, 1.0), solve_lp(enc.rows, 1.0)
    assert lp is not None and plain is not None
    _assert_solves_the_model(enc, lp, plain)
    # Split class after class, bin after bin: at most classes + bins - 1 pairs used.
    assert np.count_nonzero(lp.values[: len(enc.pairs)] > 1e-9) <= 3 + 2 - 1


def test_a_row_over_part_of_a_group_falls_back_to_the_models_lp() -> None:
    """Were a row over some of a group's pairs only, one column could not stand for
    them: the model's own LP is solved instead (its optimum and values)."""
    enc = _alike_gangs()
    capacity = next(
        r
        for r in range(enc.gang_rows, len(enc.rows.row_vars))
        if len([v for v in enc.rows.row_vars[r] if v < len(enc.pairs)]) > 1
    )
    enc.rows.row_vars[capacity] = list(enc.rows.row_vars[capacity])[1:]
    enc.rows.row_coeffs[capacity] = list(enc.rows.row_coeffs[capacity])[1:]
    assert grouped_lp._grouped(enc, matrices(enc.rows), grouped_lp._grouping(enc)) is None
    lp, plain = solve_grouped_lp(enc, 1.0), solve_lp(enc.rows, 1.0)
    assert lp is not None and plain is not None
    assert lp.bound == plain.bound
    assert np.allclose(lp.values, plain.values)


def test_a_model_without_pairs_is_solved_as_it_is() -> None:
    """No pod fits any node: no gang row, no column to group; the model's own LP (its
    fairness rows), called through the scheduler's entry or directly."""
    enc = _lp_only_model(
        state(
            nodes=[node("small").cap(cpu=4, memory="16Gi")],
            pods=pods_of("huge", 2, cpu=64, memory="1Gi"),
            gangs=[gang("huge", 2)],
        )
    )
    assert len(enc.pairs) == 0 and not groups_apply(enc)
    plain = solve_lp(enc.rows, 1.0)
    assert plain is not None
    for lp in (model_lp(enc, 1.0), solve_grouped_lp(enc, 1.0)):
        assert lp is not None and lp.bound == plain.bound


@pytest.mark.parametrize(("nodes", "gangs", "seed"), [(40, 60, 0), (40, 60, 3), (120, 240, 1)])
def test_real_shaped_class_models_keep_their_optimum(
    monkeypatch: pytest.MonkeyPatch, nodes: int, gangs: int, seed: int
) -> None:
    """Real-shaped class models (selectors, tolerations, running pods, queues): grouped
    wherever anything groups, the same bound as the model's LP, and the split values a
    solution of the model that scores it."""
    monkeypatch.setattr(grouped_lp, "GROUPED_MAX_SHARE", 1.0)
    enc = _lp_only_model(realistic(seed, nodes, gangs))
    grouping = grouped_lp._grouping(enc)
    assert grouping.columns < len(enc.pairs)
    assert grouped_lp._grouped(enc, matrices(enc.rows), grouping) is not None
    lp, plain = solve_grouped_lp(enc, 10.0), solve_lp(enc.rows, 10.0)
    assert lp is not None and plain is not None
    _assert_solves_the_model(enc, lp, plain)


def test_each_classs_pods_fixed_by_its_gangs_count_are_substituted_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every whole gang's class row (``y = per_gang x admitted``) and its ``y`` leave the
    LP: its optimum is the grouped LP's, and its solution mapped back meets every row
    and bound of the grouped LP, those rows included."""
    monkeypatch.setattr(grouped_lp, "GROUPED_MAX_SHARE", 1.0)
    enc = _lp_only_model(realistic(1, 120, 240))
    grouping = grouped_lp._grouping(enc)
    grouped = grouped_lp._grouped(enc, matrices(enc.rows), grouping)
    assert grouped is not None
    reduced, restore = grouped_lp._substituted(grouped, enc.gang_rows, grouping)
    fixed = sum(1 for r in range(enc.gang_rows) if enc.rows.row_low[r] == enc.rows.row_high[r] == 0)
    assert fixed > 0
    assert grouped.matrix.shape[0] - reduced.matrix.shape[0] == fixed
    assert grouped.matrix.shape[1] - reduced.matrix.shape[1] == fixed
    full, small = solve_matrices(grouped, 10.0), solve_matrices(reduced, 10.0)
    assert full is not None and small is not None
    assert small[0] == pytest.approx(full[0], rel=1e-9)
    values = restore @ small[1]
    row = grouped.matrix @ values
    assert (row >= grouped.low - 1e-6).all() and (row <= grouped.high + 1e-6).all()
    assert (values >= grouped.col_low - 1e-6).all()
    assert (values <= grouped.col_high + 1e-6).all()
    assert float(grouped.cost @ values) == pytest.approx(full[0], rel=1e-9)


def test_a_substituted_classs_bounds_bound_its_gangs_count() -> None:
    """Columns x (a group on a bin), y (its class's pods), a (the class's gangs): y = 2a,
    x = y, y <= 3. With y substituted out, a <= 1.5 holds it: the optimum stays 3."""
    grouped = Matrices(
        cost=np.array([1.0, 0.0, 0.0]),
        matrix=csr_matrix(np.array([[0.0, 1.0, -2.0], [1.0, -1.0, 0.0]])),
        low=np.zeros(2),
        high=np.zeros(2),
        col_low=np.zeros(3),
        col_high=np.array([10.0, 3.0, 5.0]),
    )
    one = np.zeros(1, dtype=np.int64)
    grouping = grouped_lp._Grouping(one, one, one, one, one)
    reduced, restore = grouped_lp._substituted(grouped, 1, grouping)
    assert reduced.matrix.shape == (1, 2)
    assert reduced.col_high.tolist() == [10.0, 1.5]
    found = solve_matrices(reduced, 1.0)
    assert found is not None and found[0] == pytest.approx(3.0)
    assert (restore @ found[1]).tolist() == pytest.approx([3.0, 3.0, 1.5])


def test_only_rows_fixing_a_ys_pods_to_its_gangs_count_are_substituted() -> None:
    """Columns: x, then y0..y3 (four classes), then a0..a2. Substituted: y0 = 2 a0
    (written y0 - 2 a0 = 0) and y3 = 3 a2 (written -y3 + 3 a2 = 0). Kept: y1 = y3 (two
    ys), y2 = a1 where y2 may not be 0 (its lower bound is 1), y1 - a1 <= 0 (not an
    equation), and y0 = 2 a1 (y0 is substituted once; this row then reads 2 a0 = 2 a1)."""
    cost = np.array([1.0, 0, 0, 0, 0, 0, 0, 0])
    rows = [
        ([1, 5], [1.0, -2.0], 0.0, 0.0),
        ([4, 7], [-1.0, 3.0], 0.0, 0.0),
        ([2, 4], [1.0, -1.0], 0.0, 0.0),
        ([3, 6], [1.0, -1.0], 0.0, 0.0),
        ([2, 6], [1.0, -1.0], -np.inf, 0.0),
        ([1, 6], [1.0, -2.0], 0.0, 0.0),
        ([0, 1, 2, 3, 4], [1.0, -1.0, -1.0, -1.0, -1.0], 0.0, 0.0),  # x: every class's pods
    ]
    dense = np.zeros((len(rows), len(cost)))
    for r, (cols, coeffs, _, _) in enumerate(rows):
        dense[r, cols] = coeffs
    grouped = Matrices(
        cost=cost,
        matrix=csr_matrix(dense),
        low=np.array([r[2] for r in rows]),
        high=np.array([r[3] for r in rows]),
        col_low=np.array([0.0, 0, 0, 1, 0, 0, 0, 0]),
        col_high=np.array([100.0, 8, 8, 8, 9, 5, 5, 5]),
    )
    ids = np.arange(4, dtype=np.int64)
    grouping = grouped_lp._Grouping(ids[:1], ids[:1], ids, ids, ids[:1])
    reduced, restore = grouped_lp._substituted(grouped, 6, grouping)
    assert reduced.matrix.shape == (5, 6)  # rows 0 and 1 out; columns y0 and y3 out
    assert reduced.col_high.tolist() == [100, 8, 8, 4, 5, 3]  # a0 <= 8 / 2, a2 <= 9 / 3
    mapped = restore @ np.arange(1.0, 7.0)  # x, y1, y2, a0, a1, a2 = 1..6
    assert mapped.tolist() == [1, 2 * 4, 2, 3, 3 * 6, 4, 5, 6]
    found = solve_matrices(grouped, 1.0)
    small = solve_matrices(reduced, 1.0)
    assert found is not None and small is not None
    assert small[0] == pytest.approx(found[0])


def test_gangs_with_task_minimums_and_extras_keep_their_optimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whole gangs with a task minimum (their task rows read the substituted ys), gangs
    with pods beyond minMember (their class rows are not equations, and stay), alike
    gangs of two sizes: grouped and substituted, the optimum is the model's own LP's
    and the values mapped back meet every row of the model."""
    monkeypatch.setattr(grouped_lp, "GROUPED_MAX_SHARE", 1.0)
    pods = []
    gangs = []
    for j, workers in enumerate((3, 5, 3, 4)):
        name = f"tasks-{j}"
        pods += [pod(f"{name}-w{i}").req(cpu=2).gang(name).task("worker") for i in range(workers)]
        pods += [pod(f"{name}-ps").req(cpu="500m").gang(name).task("ps")]
        gangs.append(gang(name, workers + 1).task_minimums(ps=1, worker=workers))
    for j, size in enumerate((4, 6, 4)):
        name = f"extras-{j}"
        pods += pods_of(name, size, cpu=1, memory="1Gi")
        gangs.append(gang(name, 2))
    nodes = [node(f"small-{i}").cap(cpu=4, memory="16Gi") for i in range(4)]
    nodes += [node(f"large-{i}").cap(cpu=8, memory="32Gi") for i in range(2)]
    enc = _lp_only_model(state(nodes=nodes, pods=pods, gangs=gangs))
    assert groups_apply(enc)
    grouping = grouped_lp._grouping(enc)
    grouped = grouped_lp._grouped(enc, matrices(enc.rows), grouping)
    assert grouped is not None
    reduced, _ = grouped_lp._substituted(grouped, enc.gang_rows, grouping)
    kept = grouped.matrix.shape[0] - reduced.matrix.shape[0]
    assert 0 < kept < enc.gang_rows  # some gang rows substituted, the extras' kept
    lp, plain = solve_grouped_lp(enc, 10.0), solve_lp(enc.rows, 10.0)
    assert lp is not None and plain is not None and lp.over_groups
    _assert_solves_the_model(enc, lp, plain)


def _held_until(monkeypatch: pytest.MonkeyPatch, go: threading.Event) -> list[str]:
    """HiGHS' ``run`` waits for ``go`` before it solves; returns the threads it ran on."""
    ran: list[str] = []
    real = highspy.Highs.run

    def held(self: highspy.Highs) -> object:
        ran.append(threading.current_thread().name)
        go.wait(5.0)
        return real(self)

    monkeypatch.setattr(highspy.Highs, "run", held)
    return ran


def test_work_meanwhile_runs_on_the_calling_thread_while_highs_solves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The work runs once, here, while HiGHS solves in a thread of its own (held until the
    work has looked), and the LP's answer is the one solved without it."""
    enc = _alike_gangs()
    alone = model_lp(enc, 1.0)
    go = threading.Event()
    ran = _held_until(monkeypatch, go)
    seen: list[tuple[str, bool]] = []

    def work() -> None:
        solving = any(t.name == "highs" and t.is_alive() for t in threading.enumerate())
        seen.append((threading.current_thread().name, solving))
        go.set()

    meanwhile = Meanwhile(work)
    with_work = model_lp(enc, 1.0, meanwhile)
    assert alone is not None and with_work is not None
    assert seen == [(threading.current_thread().name, True)]
    assert ran == ["highs"]
    assert with_work.bound == alone.bound
    assert np.allclose(with_work.values, alone.values)
    assert meanwhile.past_s < 0.01  # HiGHS ended after the work
    assert not any(t.name == "highs" for t in threading.enumerate())


def test_work_that_outlasts_highs_is_not_counted_as_the_lps_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``past_s`` is how long the work ran on after HiGHS ended (HiGHS made to take 0.1 s,
    the work 0.3 s), and the LP stage's time leaves it out."""
    enc = _alike_gangs()
    ends: dict[str, float] = {}
    real = highspy.Highs.run

    def slow(self: highspy.Highs) -> object:
        time.sleep(0.1)
        try:
            return real(self)
        finally:
            ends["highs"] = time.perf_counter()

    def work() -> None:
        time.sleep(0.3)
        ends["work"] = time.perf_counter()

    monkeypatch.setattr(highspy.Highs, "run", slow)
    meanwhile = Meanwhile(work)
    assert model_lp(enc, 1.0, meanwhile) is not None
    assert meanwhile.past_s == pytest.approx(ends["work"] - ends["highs"], abs=0.01)
    assert meanwhile.past_s > 0.1


def test_a_warm_up_that_outlasts_the_first_lp_is_not_its_stage_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = prepare(realistic(0, 40, 60))
    config = SolverConfig(time_limit_s=1.0, seed=0)
    warm = search_module.Search.warm_up

    def slow(self: search_module.Search) -> None:
        warm(self)
        time.sleep(0.3)

    monkeypatch.setattr(search_module.Search, "warm_up", slow)
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = search_for(problem, config, pool)
        shapes = group(problem, search.coef)
        bins = class_bins(problem)
        enc = encode(problem, shapes, bins, search.coef, pair_capacity(problem, shapes, bins))
        started = time.perf_counter()
        assert search.lp(enc, 1.0, "first") is not None
        took = time.perf_counter() - started
    assert took >= 0.3
    assert search.stages[-1].wall_s < took - 0.2


def test_an_error_meanwhile_is_raised_once_highs_has_stopped() -> None:
    enc = _alike_gangs()

    def work() -> None:
        raise ValueError("meanwhile")

    with pytest.raises(ValueError, match="meanwhile"):
        model_lp(enc, 1.0, Meanwhile(work))
    assert not any(t.name == "highs" for t in threading.enumerate())


def test_an_error_in_highs_is_raised_here_as_without_work_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not lost in HiGHS' thread (it would read as an LP with no optimum), and raised over
    what the work raised."""
    enc = _alike_gangs()

    def broken(self: highspy.Highs) -> object:
        raise MemoryError("highs")

    monkeypatch.setattr(highspy.Highs, "run", broken)
    done: list[bool] = []
    with pytest.raises(MemoryError, match="highs"):
        model_lp(enc, 1.0, Meanwhile(lambda: done.append(True)))
    assert done == [True]
    with pytest.raises(MemoryError, match="highs"):
        model_lp(enc, 1.0)

    def failing() -> None:
        raise ValueError("meanwhile")

    with pytest.raises(MemoryError, match="highs") as raised:
        model_lp(enc, 1.0, Meanwhile(failing))
    assert isinstance(raised.value.__context__, ValueError)


def test_a_solve_warms_the_problems_memos_beside_its_first_lp_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The class-of-pod map and the gangs' prices, which every candidate's placing reads,
    are built beside the cycle's first LP, and only there."""
    calls: list[bool] = []
    lp = grouped_lp.model_lp

    def counting(
        enc: Encoding, time_limit_s: float, meanwhile: Meanwhile | None = None
    ) -> LpSolution | None:
        calls.append(meanwhile is not None)
        return lp(enc, time_limit_s, meanwhile)

    monkeypatch.setattr(search_module, "model_lp", counting)
    problem = prepare(realistic(0, 200, 300))
    config = SolverConfig(time_limit_s=1.0, seed=0)
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = search_for(problem, config, pool)
        shapes = group(problem, search.coef)
        bins = class_bins(problem)
        enc = encode(problem, shapes, bins, search.coef, pair_capacity(problem, shapes, bins))
        assert ("gang-prices", config.weights) not in problem.memo
        assert not problem._class_of_pod
        first = search.lp(enc, 1.0, "first")
        second = search.lp(enc, 1.0, "second")
    assert first is not None and second is not None
    assert calls == [True, False]
    assert problem._class_of_pod == {p: c.index for c in problem.classes for p in c.pods}
    assert ("gang-prices", config.weights) in problem.memo
