"""The CPU a contender used, as the bind-throughput benchmark reads it
(``benchmarks.bound_watch.process_cpu_s``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.bound_watch import process_cpu_s


def test_a_process_cpu_is_read_finer_than_a_clock_tick() -> None:
    """This process's CPU, read through its pid, lies between two readings of its own
    clock: a reading in 10 ms ticks would fall up to a tick below the first."""
    deadline = time.process_time() + 0.013  # some CPU spent, past a tick
    while time.process_time() < deadline:
        pass
    before = time.process_time()
    read = process_cpu_s(os.getpid())
    after = time.process_time()
    assert before <= read <= after


def test_another_process_cpu_counts_what_it_burnt() -> None:
    """A child that burns 0.05 s of CPU and then waits: read from here, at least that,
    and no more once it only waits."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "end = time.process_time() + 0.05\n"
            "while time.process_time() < end: pass\n"
            "print(time.process_time(), flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        own = float(child.stdout.readline())  # its own clock once it burnt the CPU
        first = process_cpu_s(child.pid)
        time.sleep(0.05)
        second = process_cpu_s(child.pid)
        assert own <= first
        assert second - first < 0.01  # waiting for input burns nothing
        child.stdin.write("\n")
        child.stdin.flush()
    finally:
        child.wait(timeout=10)
