"""The start-up benchmark runs end to end against the fake API server process."""

from __future__ import annotations

import re

from rich.console import Console

from benchmarks.suite import main


def test_restart_times_the_first_bind_and_every_pod_bound_of_each_start() -> None:
    console = Console(record=True, width=120)
    args = ["restart", "--nodes", "6", "--gangs", "3", "--gang-size", "2", "--repeat", "2"]
    assert main(args, console) == 0
    out = console.export_text()
    assert "6 nodes, 18 pods (12 bound) — fake API server" in out
    rows = [
        (float(m.group(1)), float(m.group(2)))
        for m in re.finditer(r"│\s+\d │\s+([\d.]+) │\s+([\d.]+) │", out)
    ]
    assert len(rows) == 2  # both starts met the same pending gangs and bound them all
    assert all(0 < first <= every for first, every in rows)
    assert re.search(r"first bind: [\d.]+ s median of 2 \(target < 10 s\)", out)
