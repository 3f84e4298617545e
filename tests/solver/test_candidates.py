"""The node-level LP's rounded optimum as a candidate (``solver.candidates``), where the
node-class model's searches are the cycle's last: real-shaped 200 nodes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import solver.candidates as candidates
import solver.exchanges as exchanges
import solver.guided as guided
import solver.search
from adapter.sim import realistic
from solver.config import SolverConfig
from solver.problem import prepare
from solver.relaxation import solve_lp
from solver.schedulers import schedule
from solver.search import Search
from solver.validate import check
from tests.solver.encodings import class_model, without_branches

# Deterministic: budgets count CP-SAT's deterministic time, not this machine's load.
CONFIG = SolverConfig(time_limit_s=1.0, deterministic=True)


def test_node_lp_pairs_are_every_node_pair_of_the_gangs_the_class_lp_admits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = prepare(realistic.cluster(14, 200, 300))
    coef, enc = class_model(problem)
    lp = solve_lp(enc.rows, 10.0)
    assert lp is not None
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = Search(problem, CONFIG, coef, time.perf_counter(), pool, threading.Event())
        node_pairs = candidates.node_lp_pairs(search, enc, lp.values)
        assert node_pairs is not None
        nodes, pairs = node_pairs
        assert [b.nodes for b in nodes] == [(i,) for i in range(len(problem.nodes))]
        assert len(pairs) <= candidates.NODE_LP_PAIRS
        admitted = {s for s, var in enc.admitted.items() if lp.values[var] > 1e-6}
        waiting = set(enc.admitted) - admitted
        assert admitted and waiting  # the LP leaves gangs out: they must not be paired
        shape_of = {c: s.index for s in enc.shapes.shapes for c in s.classes}
        assert {shape_of[int(c)] for c in pairs.cls} == admitted
        # Every node a pod class may run on, not only those of the class LP's bins.
        for c in np.unique(pairs.cls)[:20].tolist():
            pod_class = problem.classes[enc.shapes.classes[c].members[0]]
            on = set(pairs.bin[pairs.cls == c].tolist())
            fits = np.all(problem.free >= pod_class.demand, axis=1)
            assert on == set(np.flatnonzero(pod_class.feasible & fits).tolist())
        # An LP that admits no gang gives no pairs, and one with too many none either.
        assert candidates.node_lp_pairs(search, enc, np.zeros_like(lp.values)) is None
        monkeypatch.setattr(candidates, "NODE_LP_PAIRS", len(pairs) - 1)
        assert candidates.node_lp_pairs(search, enc, lp.values) is None


def test_the_node_level_lp_follows_the_dive_where_the_class_searches_are_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real-shaped 200 nodes, seed 14: the class model's counts pack badly (without the
    node-level LP, its rounded LP ends 3.2% from the bound, the dive 5.9%); the
    node-level LP's counts are placed where they fit (1.3%). It replaces the repacking
    and the RINS rounds, and its LP, over the admitted gangs only, reports no bound."""
    names: list[str] = []
    original = solver.search.run_cpsat

    def recorded(enc: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        names.append(name)
        return original(enc, name, *args, **kwargs)

    monkeypatch.setattr(solver.search, "run_cpsat", recorded)
    # Not branched (``solver.branching``): branched, the LP that guides the rest, rounded,
    # decides this seed (1.1% from the bound); the node-level LP is what is tried here.
    without_branches(monkeypatch)
    s = realistic.cluster(14, 200, 300)
    decision = schedule(s, "cpsat", CONFIG)
    assert check(s, decision) == []
    assert names == ["node-classes-lp-guided"]  # the dive; no repacking, no RINS round
    stages = {stage.name: stage for stage in decision.stages}
    assert stages["node-level-admitted-lp"].status == "OPTIMAL"
    assert stages["node-level-admitted-lp"].bound is None
    assert decision.bound == stages["node-classes-lp"].bound
    # Its candidate, maybe then improved by an exchange (``displace.exchanged``).
    stage = decision.decided_by.removesuffix("+exchange")
    assert stage == "node-level-admitted-lp-rounded", decision.decided_by
    assert decision.gap is not None and decision.gap < 0.02


def test_the_node_level_lp_is_not_started_where_the_time_left_cannot_hold_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placed: list[str] = []
    original = candidates.place_counts

    def recorded(search: Search, enc: Any, solution: Any, name: str) -> Any:
        placed.append(name)
        return original(search, enc, solution, name)

    monkeypatch.setattr(candidates, "place_counts", recorded)
    called: list[float] = []
    place_node_lp = candidates.place_node_lp

    def no_time(search: Search, classes: Any, node_pairs: Any, left: Any) -> bool:
        called.append(left())
        pairs = len(node_pairs[1])
        short = 0.5 * candidates.NODE_LP_S_PER_PAIR * pairs
        return place_node_lp(search, classes, node_pairs, lambda: short)

    monkeypatch.setattr(guided, "place_node_lp", no_time)
    # The other optima go through ``candidates.place_counts`` too, recorded here.
    monkeypatch.setattr(exchanges, "place_other_optima", lambda search: None)
    s = realistic.cluster(14, 200, 300)
    decision = schedule(s, "cpsat", CONFIG)
    assert called  # it was reached, and declined
    # Only what ``candidates`` places is seen here (cpsat holds its own reference to
    # ``place_counts``): the node-level LP's candidate, and none of the class model's.
    assert placed == []
    assert "node-level-admitted-lp" not in {stage.name for stage in decision.stages}
    assert check(s, decision) == []
