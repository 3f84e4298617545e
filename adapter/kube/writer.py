"""Status and Event writes, off the scheduling loop, coalesced and rate-limited.

A cycle over thousands of pending gangs would otherwise send thousands of status
patches and Events, every cycle, and wait for each. Here a cycle only *submits* writes,
keyed by the object they change: a newer write for the same key replaces the queued one
(only the latest status matters), and one thread sends them at most ``rate_per_s``.

Binds go first: while a batch of binds is in flight (``holding``), writes wait, up to
``max_hold_s``. Every write is a request the API server spends CPU on, on the cores the
binds need (an Event costs gangsat 0.08-0.09 ms of CPU, sent on the connection this
thread keeps, ``Connections``; the fake server 1 ms in its CPU mode). A backlog bound in
one cycle already wrote after its binds; this keeps what earlier cycles left queued from
going out during a later cycle's binds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from adapter.kube.sending import Fence, always

log = logging.getLogger(__name__)

Write = Callable[[], Any]
# (connect, read) seconds for every status and Event write: the writer is one thread, and
# one request left unanswered (a half-open connection) held every later write, of every
# gang, with no end.
WRITE_TIMEOUT = (5.0, 15.0)
# A write waits this long at most for binds that keep coming: under steady arrivals,
# statuses still go out.
MAX_HOLD_S = 5.0
# While both wait, every LATER_EVERY-th write is an Event (``submit``'s ``later``).
LATER_EVERY = 10


class Writer:
    def __init__(
        self,
        rate_per_s: float = 50.0,
        burst: int = 100,
        max_hold_s: float = MAX_HOLD_S,
        fence: Fence = always,
    ) -> None:
        """``fence``: the leadership left (as the binder's); at 0 writes are dropped."""
        self.rate_per_s = rate_per_s
        self.fence = fence
        self.burst = burst
        self.max_hold_s = max_hold_s
        self._holds = 0
        self._held_since = 0.0
        # key -> the write, and what to do if it is dropped unsent
        self._queue: OrderedDict[str, tuple[Write, Write | None]] = OrderedDict()
        # Events, sent while no status write waits (``submit``'s ``later``)
        self._later: OrderedDict[str, tuple[Write, Write | None]] = OrderedDict()
        self._before_later = 0  # writes sent since the last Event while Events waited
        self._cond = threading.Condition()
        self._busy = False
        self._stop = False
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def submit(
        self, key: str, write: Write, dropped: Write | None = None, later: bool = False
    ) -> None:
        """``dropped``: called instead of ``write`` when the replica no longer leads.
        ``later``: sent when no other write waits, or as every ``LATER_EVERY``-th while
        others keep coming. A backlog bound in one cycle queues an Event per pod (3,000
        pods: a minute at 50 writes a second), and the statuses behind them would wait
        as long: a Volcano PodGroup's Inqueue, which its controller waits for to create
        the job's pods, among them."""
        with self._cond:
            (self._queue if later else self._later).pop(key, None)  # the newer one only
            (self._later if later else self._queue)[key] = (write, dropped)
            self._cond.notify_all()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Writes wait while inside (binds in flight), up to ``max_hold_s`` from when the
        first of overlapping holds began."""
        with self._cond:
            if not self._holds:
                self._held_since = time.monotonic()
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                self._cond.notify_all()

    def queued(self) -> int:
        """Writes waiting to be sent."""
        with self._cond:
            return len(self._queue) + len(self._later)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every submitted write was attempted (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._later or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _wait_token(self) -> None:
        while True:
            now = time.monotonic()
            self._tokens = min(
                float(self.burst), self._tokens + (now - self._last) * self.rate_per_s
            )
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            time.sleep((1 - self._tokens) / self.rate_per_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._later and not self._stop:
                    self._cond.wait()
                while self._holds and not self._stop:
                    left = self._held_since + self.max_hold_s - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stop:
                    return
                # A status may have come meanwhile; an Event waits for at most
                # LATER_EVERY - 1 of them, so a stream of statuses never starves Events.
                waited = bool(self._later)
                events_due = waited and (not self._queue or self._before_later >= LATER_EVERY - 1)
                self._before_later = 0 if events_due or not waited else self._before_later + 1
                waiting = self._later if events_due else self._queue
                key, (write, dropped) = waiting.popitem(last=False)
                self._busy = True
            self._wait_token()
            try:
                if self.fence() <= 0:
                    # A replica that lost its lease writes nothing: a stale status (a
                    # Volcano PodGroup set Inqueue makes its controller create pods)
                    # would undo what the new leader wrote.
                    log.info("write %s dropped: this replica does not hold the lease", key)
                    if dropped is not None:
                        dropped()
                    continue
                write()
            except Exception as e:  # a status write is best effort; the next cycle redoes it
                log.warning("write %s failed: %s", key, e)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
