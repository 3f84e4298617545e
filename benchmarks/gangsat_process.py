"""gangsat as the benchmarks run it: the real ``KubeScheduler`` in a process of its own.

Its own process, so that its memory and CPU are its own and it shares no interpreter
with the benchmark driving it; and a module of its own, importing only what the
scheduler does, so that a measured start (``gangsat-bench restart``) does not include
the benchmark harness's imports (its reports and plots load matplotlib).
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from adapter.kube.run import KubeOptions, KubeScheduler, api_client
from adapter.settings import Settings

SCHEDULER = "gangsat-churn"  # the schedulerName the benchmarks' pods ask for


def _top_growth(base: tracemalloc.Snapshot, now: tracemalloc.Snapshot, count: int) -> list[str]:
    stats = now.compare_to(base, "traceback")
    out = []
    for stat in stats[:count]:
        frames = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in stat.traceback[-4:]]
        size, count_diff = stat.size_diff / 1e6, stat.count_diff
        out.append(f"{size:+8.2f} MB {count_diff:+8d} objs  {' < '.join(frames)}")
    return out


def run_gangsat(
    kubeconfig: str, trace_every_s: float, warmup_s: float, stop: Any, reports: Any, ready: Any
) -> None:
    """The scheduler until ``stop`` is set; ``ready`` is set once its first cycle ran;
    with tracing, sends (elapsed, top growth sites) every ``trace_every_s`` after a
    baseline taken at ``warmup_s``."""
    logging.basicConfig(level=logging.WARNING, format="gangsat: %(levelname)s %(message)s")
    settings = Settings.model_validate(
        {"schedulerNames": [SCHEDULER], "cycleSeconds": 0.2, "solver": {"time_limit_s": 1.0}}
    )
    options = KubeOptions(leader_elect=False, metrics_port=0, metrics_host="127.0.0.1")
    scheduler = KubeScheduler(api_client(Path(kubeconfig)), options, settings)
    if trace_every_s > 0:
        # Only now: the client's API modules, imported on first use, are slow to import
        # under tracing (minutes for the core API's annotations).
        tracemalloc.start(8)
    runner = threading.Thread(target=scheduler.run, daemon=True)
    runner.start()
    while scheduler.cycles < 1 and runner.is_alive() and not stop.wait(0.05):
        pass
    ready.set()
    started = time.monotonic()
    base: tracemalloc.Snapshot | None = None
    next_trace = started + warmup_s
    while not stop.wait(1.0):
        if trace_every_s <= 0 or time.monotonic() < next_trace:
            continue
        snapshot = tracemalloc.take_snapshot()
        if base is None:
            base = snapshot
        else:
            reports.put((time.monotonic() - started, _top_growth(base, snapshot, 6)))
        next_trace += trace_every_s
    scheduler.stop_event.set()
    runner.join(timeout=30)
    reports.put(None)


class GangsatProcess:
    """gangsat (``run_gangsat``) in a spawned process of its own, so that its memory and
    CPU are its own and it shares no interpreter with the benchmark driving it."""

    def __init__(self, kubeconfig: Path, trace_every_s: float = 0.0, warmup_s: float = 0.0):
        context = multiprocessing.get_context("spawn")
        self.stop_event = context.Event()
        self.ready_event = context.Event()
        self.reports: Any = context.Queue()
        self.process = context.Process(
            target=run_gangsat,
            args=(
                str(kubeconfig),
                trace_every_s,
                warmup_s,
                self.stop_event,
                self.reports,
                self.ready_event,
            ),
            daemon=True,
        )

    def start(self) -> GangsatProcess:
        self.process.start()
        return self

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether its first cycle ran within ``timeout_s`` (start-up is behind it)."""
        return bool(self.ready_event.wait(timeout_s))

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self) -> None:
        self.stop_event.set()
        self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.kill()
