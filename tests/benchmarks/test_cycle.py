"""The cycle benchmark runs the adapter's cycle on a cluster it builds in memory."""

from __future__ import annotations

import gc
import re

import pytest
from rich.console import Console

import benchmarks.cycle
from adapter.loop import LoopSettings, run_cycle
from benchmarks.cycle import cluster
from benchmarks.suite import main
from solver.config import SolverConfig


def test_the_cluster_it_builds_is_one_the_loop_schedules() -> None:
    kube = cluster(nodes=4, bound=6, pending=4, size=2)
    state = kube.snapshot()
    assert len(state.nodes) == 4 and len(state.gangs) == 5
    assert sum(p.node_name is not None and not p.daemon for p in state.pods) == 6
    assert sum(p.daemon for p in state.pods) == 8  # two DaemonSet pods a node
    assert len(state.pending_pods()) == 4
    result = run_cycle(kube, LoopSettings())
    assert result.error is None and len(result.bound) == 4  # binds answered in-process
    # Nothing was bound in the cache: the next cycle decides the same backlog again.
    assert len(kube.snapshot().pending_pods()) == 4


def test_the_cycle_benchmark_prints_each_phase_of_the_first_and_later_cycles() -> None:
    console = Console(record=True, width=200)
    args = ["cycle", "--nodes", "4", "--bound", "6", "--pending", "4", "--gang-size", "2"]
    assert main([*args, "--cycles", "3", "--time-limit", "0.2"], console) == 0
    out = console.export_text()
    assert "A cycle at 4 nodes: 6 gang pods and 8 DaemonSet pods running, 4 pending" in out
    first = re.search(r"│\s+first │((?:\s+\d+ │){6})", out)
    later = re.search(r"│\s+median of 2 after │((?:\s+\d+ │){6})", out)
    assert first and later
    total = [int(v) for v in re.findall(r"\d+", later.group(1))]
    assert total[-1] >= max(total[:-1])  # the total holds every phase
    slowest = re.search(r"│\s+slowest after, by snapshot \+ decide │((?:\s+\d+ │){6})", out)
    assert slowest
    worst = [int(v) for v in re.findall(r"\d+", slowest.group(1))]
    # The slowest at least the median, each rounded to a millisecond on its own.
    assert worst[0] + worst[1] >= total[0] + total[1] - 1
    # Then the decision's objective and gap: the same as a cycle of the same cluster.
    scores = re.search(r"│\s+first │(?:\s+\d+ │){6}\s+([\d,]+) │\s+(\d+\.\d\d) │", out)
    assert scores
    settings = LoopSettings(solver=SolverConfig(time_limit_s=0.2))
    decision = run_cycle(cluster(4, 6, 4, 2), settings).decision
    assert decision is not None and decision.objective and decision.gap is not None
    assert scores.group(1) == f"{decision.objective:,}"
    assert scores.group(2) == f"{100 * decision.gap:.2f}"


def test_no_collection_runs_inside_a_cycle_as_in_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collecting: list[bool] = []

    def recorded(*args: object, **kwargs: object) -> object:
        collecting.append(gc.isenabled())
        return run_cycle(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(benchmarks.cycle, "run_cycle", recorded)
    args = ["cycle", "--nodes", "4", "--bound", "6", "--pending", "4", "--gang-size", "2"]
    assert main([*args, "--cycles", "2", "--time-limit", "0.2"], Console(record=True)) == 0
    assert collecting == [False, False] and gc.isenabled()


def test_a_negative_count_of_pods_is_refused() -> None:
    with pytest.raises(SystemExit) as refused:
        main(["cycle", "--pending", "-1"], Console(record=True))
    assert refused.value.code == 2


def test_the_real_shaped_instance_runs_through_the_same_cycle() -> None:
    console = Console(record=True, width=200)
    args = ["cycle", "--real", "--seed", "1", "--nodes", "40", "--cycles", "2"]
    assert main([*args, "--time-limit", "0.3"], console) == 0
    out = console.export_text()
    assert "real-shaped instance of 40 nodes x 60 gangs, seed 1" in out
    assert re.search(r"│\s+median of 1 after │((?:\s+\d+ │){6})", out)


def test_the_scheduler_perf_gangs_run_on_the_real_shaped_nodes() -> None:
    console = Console(record=True, width=200)
    args = ["cycle", "--real", "--perf", "--nodes", "40", "--cycles", "2"]
    assert main([*args, "--time-limit", "0.3"], console) == 0
    out = console.export_text()
    title = " ".join(out.split())  # as wrapped to the table's width
    assert "40 nodes x the scheduler_perf gangs (24 of 3, 9 of 8), seed 0" in title
    # 24 x 3 + 9 x 8 pods pending, none running but the DaemonSets' (one per node and kind).
    assert "144 pending" in title
    assert re.search(r"│\s+median of 1 after │((?:\s+\d+ │){6})\s+[\d,]+ │", out)


def test_the_median_row_scores_one_cycle() -> None:
    from benchmarks.cycle import median_scores

    nan = float("nan")
    rows = [[1.0, 30.0, 2.0], [1.0, 10.0, 9.0], [1.0, nan, nan], [1.0, 20.0, 5.0]]
    assert median_scores(rows) == [10.0, 9.0]  # the lower of 10 and 20, with its own gap
    assert median_scores(rows[:2]) == [10.0, 9.0]
    assert median_scores(rows[1:]) == [10.0, 9.0]


def test_perf_without_real_is_refused() -> None:
    console = Console(record=True, width=200)
    assert main(["cycle", "--perf", "--nodes", "4", "--cycles", "1"], console) == 2
    assert "--perf needs --real" in console.export_text()
