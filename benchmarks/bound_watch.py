"""When every pod of a namespace is bound, seen from outside: a watch in a process of its
own, and the CPU the contenders had used by then."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from adapter.kube.reflector import lines
from adapter.kube.resources import raw, read_json
from adapter.kube.run import api_client


def process_cpu_s(pid: int) -> float:
    """CPU seconds a process of this machine has run, its threads' and those that ended:
    read from the kernel's clock of that process (Linux, to the nanosecond), else from
    ``/proc/<pid>/stat`` (user + system, in 10 ms ticks). Ticks were too coarse for small
    runs: 60 binds of the trivial binder (about 9 ms) read as 0 ms in one run of four."""
    try:
        return time.clock_gettime(_process_cpu_clock(pid))
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU time as Linux encodes it (glibc's
    ``clock_getcpuclockid``, which Python does not expose): the pid inverted, shifted past
    the clock type, here the scheduler's runtime (2)."""
    return ((~pid) << 3) | 2


@dataclass
class CpuMeter:
    """CPU used from ``start`` until the moment every pod was seen bound: this process's,
    and the server's when its process is known (the fake, run by ``cluster_setup.fake_server``).

    The end is read by the ``BoundWatcher``'s process when it sees the last pod bound,
    not by this process once it hears of it: to hear of it, this process's waiting thread
    needs the interpreter lock, which gangsat's loop holds while it goes on after the
    binds (the cycle's report, the collection after it, the first status writes: read
    here, gangsat's figure took in 0.35-0.4 s more at 3,000 pods, the trivial binder's,
    with nothing left to do, 0.01 s)."""

    server_pid: int | None = None
    _start: tuple[float, ...] = ()

    def pids(self) -> tuple[int, ...]:
        own = os.getpid()
        return (own,) if self.server_pid is None else (own, self.server_pid)

    def start(self) -> None:
        self._start = tuple(process_cpu_s(pid) for pid in self.pids())

    def until(self, readings: Sequence[float]) -> tuple[float, float | None]:
        """This process's and the server's CPU from ``start`` to ``readings`` (taken by
        ``BoundWatcher`` of ``pids()``, in that order)."""
        used = [end - begin for end, begin in zip(readings, self._start, strict=True)]
        return used[0], used[1] if len(used) > 1 else None


def _watch_namespace(
    kubeconfig: str,
    namespace: str,
    expected: int,
    ready: Any,
    finished: Any,
    pids: tuple[int, ...] = (),
) -> None:
    """In its own process: list, say ready, watch until ``expected`` pods are bound, then
    send the wall-clock time of that moment and the CPU seconds ``pids`` had used by
    then."""

    def done() -> None:
        finished.put((time.time(), [process_cpu_s(pid) for pid in pids]))

    core = client.CoreV1Api(api_client(Path(kubeconfig)))
    listed = read_json(core.list_namespaced_pod(namespace, _preload_content=False))
    bound = {p["metadata"]["name"] for p in listed["items"] if p["spec"].get("nodeName")}
    ready.set()
    if len(bound) >= expected:
        done()
        return
    response = core.list_namespaced_pod(
        namespace,
        watch=True,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=900,
        _preload_content=False,
    )
    for line in lines(response):
        pod = json.loads(line)["object"] if line else {}
        if (pod.get("spec") or {}).get("nodeName"):
            bound.add(pod["metadata"]["name"])
            if len(bound) >= expected:
                done()
                break
    raw(response).close()


class BoundWatcher:
    """Watches a namespace's pods from a process of its own and notes when ``expected`` of
    them are bound: the same outside view of both contenders, from the API server, and
    one that competes with neither for the interpreter. ``pids``: processes whose CPU it
    reads at that moment."""

    def __init__(
        self, kubeconfig: Path, namespace: str, expected: int, pids: tuple[int, ...] = ()
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self.namespace = namespace
        self.expected = expected
        self._ready = context.Event()
        self._finished: Any = context.Queue()
        self._process = context.Process(
            target=_watch_namespace,
            args=(str(kubeconfig), namespace, expected, self._ready, self._finished, pids),
            daemon=True,
        )
        self._process.start()
        if not self._ready.wait(60):
            raise RuntimeError(f"the watcher of {namespace} did not start")

    def wait(self, timeout_s: float) -> float:
        """The wall-clock time (``time.time()``) every pod was seen bound."""
        return self.wait_cpu(timeout_s)[0]

    def wait_cpu(self, timeout_s: float) -> tuple[float, list[float]]:
        """The wall-clock time every pod was seen bound, and the CPU seconds each of the
        ``pids`` had used then."""
        try:
            at, cpu = self._finished.get(timeout=timeout_s)
            return float(at), [float(c) for c in cpu]
        except queue.Empty:
            raise RuntimeError(
                f"not all {self.expected} pods bound in {self.namespace} after {timeout_s:.0f} s"
            ) from None
        finally:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
