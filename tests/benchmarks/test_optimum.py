"""The optimum probe solves the cycle's encodings exactly, offline, and places the
decision between the best solution and the best bound it finds."""

from __future__ import annotations

import re

from rich.console import Console

from benchmarks.optimum import measure
from benchmarks.suite import main


def test_the_node_level_optimum_bounds_the_decision_and_scores_as_evaluate_does() -> None:
    r = measure(seed=1, nodes=8, gangs=10, time_limit_s=0.3, mip_s=20.0, node_level=True)
    assert r.node_mip is not None and r.node_mip.objective is not None
    # The exact model's objective is the real one, and its dual bound no decision beats
    # (HiGHS stops within MIP_GAP of it: its best solution may be below the decision).
    assert r.node_scored == r.node_mip.objective
    assert r.node_mip.bound is not None and r.node_mip.bound >= max(r.node_scored, r.decision)
    # The class model relaxes the real problem: its LP bounds what its MIP finds, and its
    # MIP's bound whatever a packing onto nodes scores.
    assert r.class_mip.objective is not None and r.class_mip.bound is not None
    assert r.class_packed is not None
    assert r.class_lp >= r.class_mip.objective
    assert r.class_mip.bound >= r.class_packed
    assert r.best_bound() >= r.best_found() >= r.decision
    assert r.best_bound() <= min(r.class_lp, r.class_mip.bound)


def test_the_optimum_benchmark_prints_a_row_per_seed() -> None:
    console = Console(record=True, width=250)
    args = ["optimum", "--nodes", "6", "--gangs", "6", "--seeds", "0,1"]
    limits = ["--time-limit", "0.2", "--mip-time-limit", "10", "--pattern-bound", "10"]
    limits += ["--class-packing", "1"]
    assert main([*args, *limits], console) == 0
    out = console.export_text()
    assert "real-shaped 6 nodes, 6 pending gangs" in out
    assert "gap to best bound" in out
    assert "packing bound" in out
    assert "LP counts no packing holds" in out
    # The probe ran: its cell per seed (classes proved short of those asked, the worth).
    assert len(re.findall(r"│ +\d+/\d+, \d+\.\d\d% \(\d+\.\d%\) │", out)) == 2
    assert out.count("│    0 │") == 1 and out.count("│    1 │") == 1
