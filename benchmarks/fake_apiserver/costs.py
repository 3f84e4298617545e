"""What a request costs the machine beyond the fake's own work: latency, which is slept,
and CPU, which is burnt as a real API server's handler and etcd write would burn it.

A real kube-apiserver and etcd on the scheduler's machine take CPU for every request
from the scheduler; a sleep takes none. The burn hashes a buffer: hashlib lets go of the
GIL while it hashes anything over 2 KiB, so the burn occupies a core of its own, as a
separate process would, instead of merely serialising the fake's threads.
"""

from __future__ import annotations

import hashlib
import time

# Large enough that nearly all of each round is spent hashing without the GIL, small
# enough (tens of microseconds a round) that the burn overshoots by little.
_BUFFER = bytes(64 * 1024)


def burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of the calling thread's CPU time, mostly without holding the GIL."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        hashlib.sha256(_BUFFER).digest()


def charge(latency_s: float, cpu_ms: float) -> None:
    """Charge one request: burn ``cpu_ms`` milliseconds of CPU, then sleep ``latency_s``."""
    if cpu_ms > 0:
        burn_cpu(cpu_ms / 1000.0)
    if latency_s > 0:
        time.sleep(latency_s)
