"""The node-class model searched whole on the other core from the node-class stage's
first decision, while the rest of that stage and the node-level LP-guided searches run
on this one; read before the node-level stage's last phase."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import solver.cpsat
import solver.guided
import solver.neighbourhoods
from benchmarks import instances
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.problem import prepare
from solver.search import Ahead, Search
from solver.validate import check
from tests.solver.encodings import class_model, search_for
from tests.solver.test_beside import recorded_spans

TIMED = SolverConfig(time_limit_s=1.0)


def a_search(config: SolverConfig, pool: ThreadPoolExecutor) -> tuple[Search, Any]:
    """A class model its search does not prove optimal at once (about 1 s alone)."""
    problem = prepare(instances.realistic(3, 40, 60))
    _, enc = class_model(problem)
    return search_for(problem, config, pool), enc


def ahead_solves(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """(started, ended) of every search started ahead."""
    spans: list[tuple[float, float]] = []
    original = Ahead.__init__

    def recorded(self: Ahead, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        started = time.perf_counter()
        self._job.add_done_callback(lambda _: spans.append((started, time.perf_counter())))

    monkeypatch.setattr(Ahead, "__init__", recorded)
    return spans


def test_a_search_ahead_read_early_stops_and_reports_its_bound() -> None:
    """Its time is the cycle's (here about 60 s): read after 0.3 s, it stops there."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        search, enc = a_search(SolverConfig(time_limit_s=60.0), pool)
        ahead = Ahead(search, enc, "node-classes")
        time.sleep(0.3)
        started = time.perf_counter()
        result = ahead.result()
        waited = time.perf_counter() - started
        ahead.discard()  # read: nothing left to end
    assert waited < 30.0
    assert result.solution is not None
    report = result.report
    assert report.objective is not None and report.bound is not None
    assert report.objective <= report.bound
    assert search.stages == [report]


def test_a_search_ahead_discarded_as_it_starts_ends_at_once() -> None:
    """A stop asked before its thread entered the solve must not be lost."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        search, enc = a_search(SolverConfig(time_limit_s=60.0), pool)
        started = time.perf_counter()
        for _ in range(3):
            Ahead(search, enc, "node-classes").discard()
        assert time.perf_counter() - started < 30.0
    assert search.stages == []


def test_the_class_model_is_searched_whole_from_the_class_stages_first_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real-shaped 40 nodes: the second core was idle through the node-class stage and
    the node-level LP-guided searches. The class model's search now runs there from the
    class stage's first decision (short of its bound) until the node-level stage's last
    phase, which reads it (its bound counts, its decision is placed) and is not searched
    again on this core."""
    ahead = ahead_solves(monkeypatch)
    classes = recorded_spans(monkeypatch, solver.cpsat, "_node_class_stage")
    lns = recorded_spans(monkeypatch, solver.neighbourhoods, "improve")
    placed = recorded_spans(monkeypatch, solver.guided, "place_counts")
    cluster = instances.realistic(3, 40, 60)
    # 2 s: the search ahead has about 1 s to find a decision, on a slow machine too.
    decision = solve(cluster, SolverConfig(time_limit_s=2.0))
    assert check(cluster, decision) == []
    assert len(ahead) == 1 and len(classes) == 1 and len(lns) == 1
    (ahead_start, ahead_end), (classes_start, classes_end), (lns_start, _) = (
        ahead[0],
        classes[0],
        lns[0],
    )
    assert classes_start < ahead_start < classes_end  # searching during the class stage
    assert ahead_end < lns_start  # ... until read, before the last phase
    assert any(ahead_end < start < lns_start for start, _ in placed)  # its decision placed
    names = [s.name for s in decision.stages]
    assert names.count("node-classes") == 1 and names.count("node-level") == 1
    ahead_report = next(s for s in decision.stages if s.name == "node-classes")
    assert ahead_report.bound is not None
    assert decision.bound == min(s.bound for s in decision.stages if s.bound is not None)


def test_an_easy_cycle_searches_nothing_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Identical gangs on identical nodes (scheduler_perf's shape, each node with its
    hostname): the node-class stage's first decision is at its bound, so nothing is
    searched ahead (a node-level search ahead, started with the cycle, took the
    decision's CPU from 0.07 to 0.2 s at 1,000 nodes)."""
    ahead = ahead_solves(monkeypatch)
    cluster = instances.scheduler_perf(1000, 1000)
    cluster = cluster.model_copy(
        update={
            "nodes": tuple(
                n.model_copy(update={"labels": {"kubernetes.io/hostname": n.name}})
                for n in cluster.nodes
            )
        }
    )
    decision = solve(cluster, TIMED)
    assert check(cluster, decision) == []
    assert decision.gap is not None and decision.gap < 1e-6  # at the bound (OPTIMAL_GAP)
    assert ahead == []


def test_deterministic_solves_search_nothing_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """How far a search ahead gets by the time it is read depends on the load."""
    ahead = ahead_solves(monkeypatch)
    config = SolverConfig(time_limit_s=1.0, deterministic=True)
    decision = solve(instances.realistic(3, 40, 60), config)
    assert ahead == []
    assert [s.name for s in decision.stages].count("node-level") == 1


def test_no_search_ahead_where_no_node_level_stage_over_every_shape_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ahead = ahead_solves(monkeypatch)
    solve(instances.realistic(0, 200, 300), TIMED)
    assert ahead == []


def test_a_stage_that_fails_leaves_no_search_running_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop reports a failed cycle and goes on: the search must not run on into the
    next cycle's time."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("node-level stage failed")

    ahead = ahead_solves(monkeypatch)
    monkeypatch.setattr(solver.cpsat, "_node_stage", broken)
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="node-level stage failed"):
        solve(instances.realistic(3, 40, 60), SolverConfig(time_limit_s=60.0))
    assert len(ahead) == 1 and ahead[0][1] - started < 30.0
    assert not [t for t in threading.enumerate() if t.name.startswith("node-classes")]
