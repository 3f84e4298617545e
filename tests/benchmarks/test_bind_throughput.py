"""The bind-throughput benchmark runs end to end against the fake API server process."""

from __future__ import annotations

import re

from rich.console import Console

from benchmarks.suite import main


def test_bind_throughput_binds_every_pod_for_both_contenders_and_prints_the_ratio() -> None:
    console = Console(record=True, width=120)
    status = main(
        ["bind-throughput", "--nodes", "4", "--gangs", "6", "--gang-size", "2", "--repeat", "1"],
        console,
    )
    out = console.export_text()
    assert status == 0
    rows = {
        m.group(1): (int(m.group(2)), float(m.group(4)))
        for m in re.finditer(
            r"│ (trivial binder|gangsat)\s+│\s+(\d+) │\s+([\d.]+) │\s+(\d+) │", out
        )
    }
    assert set(rows) == {"trivial binder", "gangsat"}
    assert rows["gangsat"][0] == rows["trivial binder"][0] == 12
    assert all(rate > 0 for _, rate in rows.values())
    found = re.search(r"gangsat / trivial binder: x([\d.]+) median of 1 round", out)
    assert found is not None
    ratio = float(found.group(1))
    assert abs(ratio - rows["gangsat"][1] / rows["trivial binder"][1]) < 0.05
