"""The churn and footprint benchmarks run end to end against the fake API server, with
gangsat in a process of its own."""

from __future__ import annotations

import re

from rich.console import Console

from benchmarks.suite import main


def test_churn_binds_arriving_gangs_and_reports_latency_and_the_sustained_rate() -> None:
    console = Console(record=True, width=160)
    args = ["churn", "--minutes", "0.4", "--rate", "3", "--nodes", "6", "--node-cpu", "8"]
    assert main([*args, "--min-life", "2", "--max-life", "4", "--sample-s", "1"], console) == 0
    out = console.export_text()
    bound = re.search(r"(\d+)/(\d+) gangs bound, (\d+) deleted; creation-to-bound p50", out)
    assert bound is not None, out
    assert int(bound.group(1)) >= 0.5 * int(bound.group(2)) > 0
    sustained = re.search(r"sustained: ([\d.]+) gangs/s, [\d.]+ pods/s bound", out)
    assert sustained is not None and float(sustained.group(1)) > 0


def test_footprint_measures_rss_once_every_pending_pod_is_bound() -> None:
    console = Console(record=True, width=160)
    assert main(["footprint", "--sizes", "4x2,6x2,6x4", "--settle-s", "1"], console) == 0
    out = console.export_text()
    rows = re.findall(r"│\s+(\d+) │\s+(\d+) │\s+(\d+) │\s+(\d+) │", out)
    assert len(rows) == 3, out
    for nodes, gangs, pods, peak_mb in rows:
        assert int(pods) == int(gangs) * 4 + int(nodes) * 2  # 2 DaemonSet pods a node
        assert int(peak_mb) > 50  # a Python process with the solver loaded
    assert re.search(r"fitted: -?\d+ MB \+ -?\d+ KB per node \+ -?\d+ KB per pod", out)
