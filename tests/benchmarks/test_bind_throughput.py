"""The bind-throughput benchmark runs end to end against the fake API server process."""

from __future__ import annotations

import re

import orjson
import pytest
from rich.console import Console

from benchmarks.cluster_setup import POD_SHAPES, job_pod
from benchmarks.suite import main


@pytest.mark.parametrize("shape", POD_SHAPES)
def test_bind_throughput_binds_every_pod_for_both_contenders_and_prints_the_ratios(
    shape: str,
) -> None:
    console = Console(record=True, width=250)
    status = main(
        [
            "bind-throughput",
            # 60 pods: where the CPU is read in 10 ms ticks (``/proc``, off Linux's own
            # clocks), the trivial binder's for 12 pods was one tick in a quarter of runs.
            *("--nodes", "4", "--gangs", "30", "--gang-size", "2", "--repeat", "1"),
            *("--cpu-ms", "5", "--pod-shape", shape),
        ],
        console,
    )
    out = console.export_text()
    assert status == 0
    assert f"{shape} pods)" in out  # the figures say which pods they bound
    rows = {
        m.group(1): (int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)))
        for m in re.finditer(
            r"│ (trivial binder|gangsat)\s+│\s+(\d+) │\s+[\d.]+ │\s+(\d+) │\s+([\d.]+) │"
            r"\s+([\d.]+) │",
            out,
        )
    }
    assert set(rows) == {"trivial binder", "gangsat"}
    assert rows["gangsat"][0] == rows["trivial binder"][0] == 60
    for _, rate, client_ms, server_ms in rows.values():
        assert rate > 0 and client_ms > 0
        # Every bind burnt the 5 ms the server was told to (less a 10 ms tick over 60 pods,
        # where the CPU is read from /proc).
        assert server_ms >= 5.0 - 10 / 60
    assert "(fake API" in out  # the figures say they come from the fake
    found = re.search(r"gangsat / trivial binder, pods/s: x([\d.]+) median of 1 round", out)
    assert found is not None
    assert_shown_ratio(float(found.group(1)), rows["gangsat"][1], rows["trivial binder"][1], 1)
    cpu = re.search(r"gangsat / trivial binder, CPU per bound pod: x([\d.]+)", out)
    assert cpu is not None
    assert_shown_ratio(float(cpu.group(1)), rows["gangsat"][2], rows["trivial binder"][2], 0.01)


def assert_shown_ratio(ratio: float, top: float, bottom: float, step: float) -> None:
    """``ratio`` (printed to 0.01) is top / bottom, as far as the table's values, printed
    to ``step``, let one tell: with few pods gangsat's start makes its CPU per pod several
    times the trivial binder's, and 0.005 ms of rounding there moves the ratio by tenths."""
    low = (top - step / 2) / (bottom + step / 2)
    high = (top + step / 2) / (bottom - step / 2)
    assert low - 0.005 <= ratio <= high + 0.005, (ratio, top, bottom)


def test_a_job_shaped_pod_is_as_big_as_a_job_controller_makes_one_and_names_its_group() -> None:
    pod = job_pod("ns", "train-3-1", "train-3", 1, "gangsat")
    assert 2_500 <= len(orjson.dumps(pod)) <= 5_000
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "train-3"
    assert pod["spec"]["schedulerName"] == "gangsat"
    assert job_pod("ns", "train-3-1", "train-3", 1, "gangsat") == pod  # the same every run
