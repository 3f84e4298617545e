"""``gangsat-bench preemption``: what preemption and reclaim buy on the philly trace, and
what they cost.

Per offered load (``arrival_compression``) and queue draw (the trace ``seed``), the
same workload runs under: cpsat without preemption, cpsat with it, and gang-greedy with
its kube-batch-style preempt and reclaim actions. Each run reports the largest queue
share error while backlogged, utilisation while backlogged, mean JCT, pods evicted and
the GPU-hours of work their jobs lost. ``--disruption`` runs cpsat with preemption once
per ``disruption`` weight: the trade-off curve between fair shares and work lost.

Figures are simulated (the simulator's virtual clock; cpsat's decisions depend on its
time limit and so on the machine only through what it finds in time).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from adapter.loop import LoopSettings
from adapter.sim.measures import summarise
from adapter.sim.run import simulate
from adapter.sim.scenario import Scenario, load_scenario, materialise
from solver.config import ObjectiveWeights, SolverConfig

GPU_HOUR_S = 3600.0
RUNS = (("cpsat", False), ("cpsat", True), ("gang-greedy", True))


def _scenario(load: float, draw: int, jobs: int | None) -> Scenario:
    raw = load_scenario("philly").model_dump()
    raw["trace"]["arrival_compression"] = load
    raw["trace"]["seed"] = draw
    if jobs is not None:
        raw["trace"]["jobs"] = jobs
    return Scenario.model_validate(raw)


def run_one(
    load: float,
    draw: int,
    scheduler: str,
    preemption: bool,
    time_limit_s: float,
    disruption: int,
    jobs: int | None = None,
) -> dict[str, Any]:
    config = SolverConfig(
        time_limit_s=time_limit_s,
        preemption=preemption,
        weights=ObjectiveWeights(disruption=disruption),
    )
    workload = materialise(_scenario(load, draw, jobs))
    run = simulate(workload, LoopSettings(scheduler=scheduler, solver=config))
    s = summarise(run)
    return {
        "load": load,
        "draw": draw,
        "scheduler": scheduler,
        "preemption": preemption,
        "disruption": disruption,
        "share_error": s.max_share_error,
        "abs_share_error": s.max_abs_share_error,
        "off_share": s.max_off_share,
        "backlogged_utilisation": s.backlogged_utilisation.get(s.fair_resource),
        "jct_mean_h": (s.jct_mean_s or 0.0) / 3600,
        "evicted_pods": s.evicted_pods,
        "lost_gpu_hours": s.lost_resource_s.get(s.fair_resource, 0.0) / GPU_HOUR_S,
        "partial_gangs": s.partial_gangs,
        "deadlocks": s.deadlocks,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="philly: preemption and reclaim (simulated)")
    columns: tuple[str, ...] = ("load", "draw", "scheduler", "preempt", "disruption", "share err")
    columns += ("mean |err|", "time >2% off")
    columns += ("util backlogged", "mean JCT h", "evicted pods", "lost GPU-h", "partial")
    for column in columns:
        t.add_column(column, justify="right")
    for r in rows:
        t.add_row(
            f"{r['load']:g}x",
            str(r["draw"]),
            r["scheduler"],
            "yes" if r["preemption"] else "no",
            str(r["disruption"]),
            _pct(r["share_error"]),
            _pct(r["abs_share_error"]),
            _pct(r["off_share"]),
            _pct(r["backlogged_utilisation"]),
            f"{r['jct_mean_h']:.2f}",
            str(r["evicted_pods"]),
            f"{r['lost_gpu_hours']:,.0f}",
            str(r["partial_gangs"]),
        )
    return t


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gangsat-bench preemption", description=__doc__)
    parser.add_argument("--loads", default="3,4,5", help="arrival compressions (default 3,4,5)")
    parser.add_argument("--draws", default="0,1,2", help="trace queue draws (default 0,1,2)")
    parser.add_argument(
        "--disruption",
        default="",
        help="comma-separated disruption weights: only cpsat with preemption, once per weight",
    )
    parser.add_argument("--time-limit", type=float, default=0.2, help="CP-SAT s per cycle")
    parser.add_argument("--jobs", type=int, default=None, help="trace jobs (default: 1,000)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    return parser.parse_args(argv)


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or (Console() if sys.stdout.isatty() else Console(width=200))
    loads = [float(x) for x in args.loads.split(",")]
    draws = [int(x) for x in args.draws.split(",")]
    weights = [int(x) for x in args.disruption.split(",")] if args.disruption else []
    plan = (
        [("cpsat", True, w) for w in weights]
        if weights
        else [(sched, pre, ObjectiveWeights().disruption) for sched, pre in RUNS]
    )
    rows = []
    for load in loads:
        for draw in draws:
            for scheduler, preemption, disruption in plan:
                row = run_one(
                    load, draw, scheduler, preemption, args.time_limit, disruption, args.jobs
                )
                console.print(json.dumps(row), highlight=False)
                rows.append(row)
    console.print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0
