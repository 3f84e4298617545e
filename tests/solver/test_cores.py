"""``num_workers: 0`` counts the cores this process may use, not the machine's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from solver.config import SolverConfig
from solver.cores import usable_cores


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "200000 100000\n"}, 2),  # a 2-CPU container limit, cgroup v2
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: two workers share them
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # v1
    ],
)
def test_a_cgroup_quota_bounds_the_cores(
    tmp_path: Path, files: dict[str, str], expected: int
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert usable_cores(tmp_path) == min(expected, _affinity())


@pytest.mark.parametrize(
    "files",
    [
        {},  # no cgroup files: not in a container, or unreadable
        {"cpu.max": "max 100000\n"},
        {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
        {"cpu.max": "garbage\n"},
    ],
)
def test_without_a_quota_the_affinity_counts(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert usable_cores(tmp_path) == _affinity()


def test_zero_workers_means_the_usable_cores() -> None:
    assert SolverConfig(num_workers=0).workers() == usable_cores()
    assert SolverConfig(num_workers=3).workers() == 3
