"""The joint benchmark decides each real-shaped cluster both ways and compares them."""

from __future__ import annotations

import re

from rich.console import Console

from benchmarks.joint import joint_objective
from benchmarks.suite import main
from solver.config import SolverConfig
from solver.cpsat import solve
from tests.solver.test_joint import _two_preemptors

CONFIG = SolverConfig(preemption=True, time_limit_s=0.5)


def test_the_joint_objective_counts_nominations_and_evictions() -> None:
    st_ = _two_preemptors()
    joint = solve(st_, CONFIG)
    after = solve(st_, CONFIG, joint=False)
    # Placed nowhere, both decisions score below zero by placements alone (fairness).
    assert not joint.placements and joint.nominated and joint.evictions
    assert joint.objective < 0
    assert joint_objective(st_, joint, CONFIG) > joint_objective(st_, after, CONFIG) > 0


def test_the_joint_benchmark_prints_both_decisions_per_seed() -> None:
    console = Console(record=True, width=250)
    args = ["joint", "--nodes", "12", "--gangs", "12", "--seeds", "2", "--time-limit", "0.3"]
    assert main(args, console) == 0
    out = console.export_text()
    assert "real-shaped 12 nodes, 12 pending gangs" in out
    rows = re.findall(r"│\s+(\d) │\s+(-?[\d,]+) │\s+(-?[\d,]+) │.*│\s+(\d+) │", out)
    assert [r[0] for r in rows] == ["0", "1"]
    assert all(r[3] == "0" for r in rows)  # no violation in any decision
    assert "joint / sequential: min" in out
