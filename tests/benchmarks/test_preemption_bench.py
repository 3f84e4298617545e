"""``gangsat-bench preemption`` on a short slice of the philly trace."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from benchmarks.suite import main


def test_the_preemption_benchmark_runs_each_configuration(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    console = Console(width=200, record=True)
    args = ["preemption", "--loads", "8", "--draws", "0", "--jobs", "60", "--json", str(out)]
    assert main([*args, "--time-limit", "0.1"], console) == 0
    rows = json.loads(out.read_text())
    assert [(r["scheduler"], r["preemption"]) for r in rows] == [
        ("cpsat", False),
        ("cpsat", True),
        ("gang-greedy", True),
    ]
    assert all(r["partial_gangs"] == 0 and r["deadlocks"] == 0 for r in rows)
    assert rows[0]["evicted_pods"] == 0 and rows[0]["lost_gpu_hours"] == 0
    # The absolute measures bound the signed one: over and under cannot cancel in them.
    assert all(r["abs_share_error"] >= (r["share_error"] or 0) - 1e-9 for r in rows)
    shown = console.export_text()
    assert "lost GPU-h" in shown and "mean |err|" in shown
