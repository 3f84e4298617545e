"""How many cores this process may use: what ``num_workers: 0`` ("every core") means.

``os.cpu_count()`` counts the machine's cores, not the container's: under a 2-CPU limit on
a 64-core node, 64 CP-SAT workers would share two cores' quota, throttled, and starve the
watches and the probes' handler. The CPU affinity and the cgroup's quota (v2 ``cpu.max``,
v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``) both bound it; the least wins.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable_cores(cgroup: Path = CGROUP) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = cores or os.cpu_count() or 1
    quota = _quota(cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return cores


def _quota(cgroup: Path) -> float | None:
    """CPUs the cgroup's quota allows, or None where it sets none (or cannot be read)."""
    try:
        fields = (cgroup / "cpu.max").read_text(encoding="ascii").split()
        if len(fields) == 2 and fields[0] != "max":
            return int(fields[0]) / int(fields[1])
        return None
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text(encoding="ascii"))
        period = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
