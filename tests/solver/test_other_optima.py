"""Other optima of the node-class LP (``candidates.place_other_optima``): its pods' prices
tilted by gang size, each optimum rounded and placed where the cycle's time holds it; and
the exchange from the runner-up (``exchanges.best_exchanged``)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import solver.candidates as candidates
import solver.displace
import solver.exchanges as exchanges
from adapter.sim import realistic
from solver.bins import class_bins
from solver.config import SolverConfig
from solver.decision import SolveStatus
from solver.decode import decision_from_placements
from solver.encode import Encoding
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.relaxation import LpSolution, matrices, solve_lp, solve_matrices
from solver.schedulers import schedule
from solver.search import Search
from solver.solution import rounded_for_gangs
from solver.validate import check
from tests.builders import gang, node, pod, state
from tests.solver.encodings import class_model, search_for, without_branches

TIMED = SolverConfig(time_limit_s=1.0)
# Long enough that no machine's pace decides whether both optima fit.
ROOMY = SolverConfig(time_limit_s=10.0)
DETERMINISTIC = SolverConfig(time_limit_s=1.0, deterministic=True)


def pod_sizes(enc: Encoding) -> Any:
    """Per count variable, the size (pods it needs) of its gang."""
    needs = np.array([enc.shapes.shapes[sc.shape].need for sc in enc.shapes.classes])
    return needs[enc.pairs.cls]


def test_tilted_prices_lower_each_pods_price_by_its_gang_size_and_no_other_price() -> None:
    _, enc = class_model(prepare(realistic.cluster(0, 40, 60)))
    cost = matrices(enc.rows).cost
    pairs = len(enc.pairs)
    size = pod_sizes(enc)
    assert len(set(size.tolist())) > 2 and (cost[:pairs] > 0).all()
    by_size = np.argsort(size, kind="stable")
    for toward_smaller in (True, False):
        tilted = candidates.tilted_costs(enc, cost, toward_smaller)
        assert np.array_equal(tilted[pairs:], cost[pairs:])
        lowered = ((cost[:pairs] - tilted[:pairs]) / cost[:pairs])[by_size]
        assert (lowered >= 0).all() and (lowered <= candidates.TILT * (1 + 1e-9)).all()
        steps = np.diff(lowered)
        # Toward smaller gangs, a larger gang's pods lose more of their price.
        assert (steps >= -1e-15).all() if toward_smaller else (steps <= 1e-15).all()
        assert lowered[-1] != lowered[0]


def test_a_tilted_optimum_is_an_optimum_of_the_lp_to_within_the_tilt() -> None:
    """Its value under the LP's own prices is at least the optimum less TILT of what the
    optimum's pods are priced at (the tilted LP's optimum is at least the optimum's
    tilted value), and it meets every row and bound; and on this degenerate LP it is
    another optimum than HiGHS' own."""
    _, enc = class_model(prepare(realistic.cluster(0, 200, 600)))
    m = matrices(enc.rows)
    found = solve_matrices(m, 10.0)
    assert found is not None
    optimum, best = found
    pairs = len(enc.pairs)
    moved = []
    for toward_smaller in (True, False):
        tilted = solve_matrices(
            replace(m, cost=candidates.tilted_costs(enc, m.cost, toward_smaller)), 10.0
        )
        assert tilted is not None
        values = tilted[1]
        value = float(m.cost @ values)
        slack = candidates.TILT * float(m.cost[:pairs] @ best[:pairs])
        assert optimum - slack - 1e-6 * abs(optimum) <= value <= optimum + 1e-6 * abs(optimum)
        rows = m.matrix @ values
        assert (rows >= m.low - 1e-6).all() and (rows <= m.high + 1e-6).all()
        assert (values >= m.col_low - 1e-6).all() and (values <= m.col_high + 1e-6).all()
        moved.append(float(np.abs(values - best).max()) > 0.5)
    assert any(moved)


def placed_by(search: Search) -> list[str]:
    return [search.origin[id(p)] for p in search.solved]


def heavy_class_lp() -> tuple[Problem, Encoding, LpSolution]:
    """Real-shaped 200 nodes x 600 gangs, seed 8: its class model and LP optimum."""
    problem = prepare(realistic.cluster(8, 200, 600))
    _, enc = class_model(problem)
    lp = solve_lp(enc.rows, 10.0)
    assert lp is not None
    return problem, enc, lp


def after_the_class_lp(
    problem: Problem, enc: Encoding, lp: LpSolution, config: SolverConfig, pool: Any
) -> Search:
    """A solve's state once the class LP (taken to last 0.05 s) is solved."""
    search = search_for(problem, config, pool)
    search.class_lp = (enc, lp, 0.05)
    return search


def test_other_optima_are_placed_where_the_time_left_holds_them() -> None:
    """Timed: each needs the class LP's time and the longest placement's so far left.
    A rounding already placed (here: no tilt, so HiGHS returns the LP's own optimum) is
    not placed again; neither tilted LP reports a bound; a decision at its bound ends it."""
    problem, enc, lp = heavy_class_lp()
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = after_the_class_lp(problem, enc, lp, TIMED, pool)
        search.placing_s = 2.0  # more than the whole limit
        candidates.place_other_optima(search)
        assert search.solved == [] and search.stages == []

        search = after_the_class_lp(problem, enc, lp, ROOMY, pool)
        candidates.place_other_optima(search)
        names = [s.name for s in search.stages]
        assert names == ["node-classes-lp-smaller", "node-classes-lp-larger"]
        assert all(s.bound is None and s.status == "OPTIMAL" for s in search.stages)
        assert "node-classes-lp-smaller-rounded" in placed_by(search)
        for placer in search.solved:
            assert placer.placed
        assert search.placing_s > 0  # what the next optimum's time is judged by

        # A decision at its bound already: nothing more is searched.
        search = after_the_class_lp(problem, enc, lp, ROOMY, pool)
        settled = Placer(problem)
        search.solved = [settled]
        search.scores[id(settled)] = 1000
        search.bounds = [1000]
        candidates.place_other_optima(search)
        assert search.stages == [] and search.solved == [settled]

    with pytest.MonkeyPatch.context() as patch, ThreadPoolExecutor(max_workers=1) as pool:
        patch.setattr(candidates, "TILT", 0.0)
        # Not placed yet (the LP's own rounding is placed on some models only): once.
        search = after_the_class_lp(problem, enc, lp, ROOMY, pool)
        candidates.place_other_optima(search)
        assert len(search.stages) == 2
        assert placed_by(search) == ["node-classes-lp-smaller-rounded"]
        # Placed already: not again.
        search = after_the_class_lp(problem, enc, lp, ROOMY, pool)
        search.class_rounded = tuple(rounded_for_gangs(enc, lp.values))
        candidates.place_other_optima(search)
        assert len(search.stages) == 2 and search.solved == []


def test_an_lp_solved_over_pods_alike_is_judged_at_the_models_own_lps_time() -> None:
    """The tilted LPs are over the model's own columns: where the class LP was solved
    over groups, it is taken to need UNGROUPED_LP_FACTOR times its time, not otherwise
    (an LP that fell back to the model's own took that time already)."""
    problem, enc, lp = heavy_class_lp()
    lp_s = 1.0
    with ThreadPoolExecutor(max_workers=1) as pool:
        for over_groups, placed in ((False, True), (True, False)):
            search = search_for(problem, ROOMY, pool)
            search.class_lp = (enc, replace(lp, over_groups=over_groups), lp_s)
            # Room for the LP's own time and 0.4 s more; not for 1.8 times it.
            search.placing_s = search.remaining() - lp_s - 0.4
            assert lp_s * candidates.UNGROUPED_LP_FACTOR > lp_s + 0.4 + 0.2
            candidates.place_other_optima(search)
            assert ("node-classes-lp-smaller" in [s.name for s in search.stages]) == placed


def test_deterministic_solves_count_each_optimum_at_its_price_per_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, enc, lp = heavy_class_lp()
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = after_the_class_lp(problem, enc, lp, DETERMINISTIC, pool)
        search.placing_s = 2.0  # wall times: not read by deterministic solves
        left = search.remaining()
        per_optimum = candidates.OTHER_OPTIMUM_S_PER_PAIR * len(enc.pairs)
        assert left >= 2 * per_optimum  # 5,200 pairs: 0.36 s each
        candidates.place_other_optima(search)
        assert len(search.stages) == 2
        assert search.remaining() == pytest.approx(left - 2 * per_optimum)

        monkeypatch.setattr(candidates, "OTHER_OPTIMUM_S_PER_PAIR", left / len(enc.pairs) * 1.01)
        search = after_the_class_lp(problem, enc, lp, DETERMINISTIC, pool)
        candidates.place_other_optima(search)
        assert search.stages == [] and search.solved == []


def test_a_degenerate_lp_is_decided_by_its_better_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real-shaped 200 nodes x 600 gangs, seed 10, deterministic: the LP's own optimum
    rounded and placed ends 4.35% from the bound; its optimum with prices tilted toward
    smaller gangs 2.48%. The bound stays the class LP's (the LP not branched: branched, a
    lower bound holds, and its LP guides the rounding instead, ``solver.branching``)."""
    without_branches(monkeypatch)
    s = realistic.cluster(10, 200, 600)
    decision = schedule(s, "cpsat", DETERMINISTIC)
    assert check(s, decision) == []
    stages = {stage.name: stage for stage in decision.stages}
    assert stages["node-classes-lp-smaller"].bound is None
    assert decision.bound == stages["node-classes-lp"].bound
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exchanges, "place_other_optima", lambda search: None)
        alone = schedule(s, "cpsat", DETERMINISTIC)
    assert "node-classes-lp-smaller" not in {stage.name for stage in alone.stages}
    assert decision.bound == alone.bound
    assert decision.gap is not None and alone.gap is not None
    assert decision.gap < alone.gap - 0.01, (decision.gap, alone.gap)


def test_the_runner_up_is_exchanged_too_and_decides_where_it_then_scores_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An exchange gains more from some candidates than from others: where the runner-up
    exchanged scores above the best one exchanged, it is the decision. The best's
    exchange comes before the LP's other optima, which only take the time it leaves, and
    the runner-up is chosen after them (one of them may be it). A best at its bound
    needs no exchange, its own or the runner-up's."""
    problem = prepare(realistic.cluster(0, 40, 60))
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = search_for(problem, ROOMY, pool)
        best, runner_up, worst, exchanged = (Placer(problem) for _ in range(4))
        baseline: Future[Placer] = Future()
        baseline.set_result(worst)
        search.baseline_job = baseline
        scores = {id(best): 100, id(runner_up): 90, id(worst): 10}
        trials: list[object] = []

        def exchanged_from(
            placer: Placer, weights: Any, until: Any, tried: set[int]
        ) -> Placer | None:
            trials.append(placer)
            return exchanged if placer is runner_up else None

        def other_optimum(search: Search) -> None:
            trials.append("other optima")
            search.solved.append(runner_up)  # one of them is the runner-up

        monkeypatch.setattr(exchanges, "exchanged", exchanged_from)
        monkeypatch.setattr(exchanges, "place_other_optima", other_optimum)
        for value, decided in ((101, exchanged), (95, best)):
            search.solved = [best]
            search.scores = {**scores, id(exchanged): value}
            trials.clear()
            assert exchanges.best_exchanged(search) is decided
            # Then, the time left holding it, the decision is exchanged again over gangs no
            # exchange of it has tried: this stub tries none, so one round ends it.
            assert trials == [best, "other optima", runner_up, decided]
        # The best at its bound: neither it nor the runner-up is exchanged.
        search.solved = [best]
        search.bounds = [100]
        trials.clear()
        assert exchanges.best_exchanged(search) is best
        assert trials == ["other optima"]


def test_the_lp_kept_is_the_node_class_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real-shaped 40 nodes: a node-level stage follows the class stage and solves an LP
    of its own; the one kept for the other optima is the class model's."""
    kept: list[Any] = []
    monkeypatch.setattr(
        exchanges, "place_other_optima", lambda search: kept.append(search.class_lp)
    )
    s = realistic.cluster(0, 40, 60)
    decision = schedule(s, "cpsat", DETERMINISTIC)
    assert "node-level-lp" in {stage.name for stage in decision.stages}
    problem = prepare(s)
    assert len(kept) == 1 and kept[0] is not None
    enc, lp, lp_s = kept[0]
    assert len(enc.bins) == len(class_bins(problem)) < len(problem.nodes)
    assert lp.bound == {st.name: st for st in decision.stages}["node-classes-lp"].bound
    assert lp_s > 0


def two_nodes_held_cheaply() -> Problem:
    """Two 4-cpu nodes, each held by a cheap one-pod gang (priority 0, 3 cpu); two dear
    ones (priority 1,000, 3 cpu) wait."""
    return prepare(
        state(
            nodes=[
                node(f"n{i}").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": f"n{i}"})
                for i in range(2)
            ],
            pods=[
                *(pod(f"cheap{i}-0").req(cpu=3).gang(f"cheap{i}") for i in range(2)),
                *(pod(f"dear{i}-0").req(cpu=3).gang(f"dear{i}") for i in range(2)),
            ],
            gangs=[
                *(gang(f"cheap{i}", 1).priority(0) for i in range(2)),
                *(gang(f"dear{i}", 1).priority(1000) for i in range(2)),
            ],
        )
    )


@pytest.mark.parametrize("deterministic", [False, True])
def test_time_left_goes_to_exchanges_of_gangs_not_tried_yet(
    monkeypatch: pytest.MonkeyPatch, deterministic: bool
) -> None:
    """One gang per exchange: the first places one dear gang, the next round the other,
    then every waiting gang has been tried and the rounds end. Deterministic solves run
    no further rounds (how many fit would depend on the load)."""
    monkeypatch.setattr(solver.displace, "EXCHANGE_GANGS", 1)
    problem = two_nodes_held_cheaply()
    start = Placer(problem)
    for cls in problem.classes:
        if problem.gangs[cls.gang].name.startswith("cheap"):
            start.place_on(cls, int(cls.gang), 1)
    config = ROOMY.model_copy(update={"deterministic": deterministic})
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = search_for(problem, config, pool)
        search.solved = [start]
        once = exchanges.exchanged_once(search, start)
        assert sorted(once.placed) == ["cheap1-0", "dear0-0"]
        best = exchanges.exchanged_again(search, once)
    placed = sorted(best.placed)
    assert placed == (["cheap1-0", "dear0-0"] if deterministic else ["dear0-0", "dear1-0"])
    decision = decision_from_placements(
        problem, best, config, scheduler="cpsat", status=SolveStatus.FEASIBLE
    )
    assert check(problem.state, decision) == []
