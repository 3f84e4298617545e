"""When the garbage collector runs in a long-lived scheduler.

The cache and the memoised snapshot are hundreds of thousands of long-lived objects.
Every full collection walked them all: on a 3,000-pod first cycle that doubled the
snapshot's time and slowed binding by a seventh. ``gc.freeze`` moves them out of the
collector's sight, and frozen objects are still freed by reference counting.

What freezing must not catch is garbage. A cycle leaves reference cycles behind (a
CP-SAT model and its variables refer to each other; their C++ protos are megabytes);
frozen, they were never collected, and under steady arrivals — never a quiet cycle —
memory grew by tens of MB a minute. So after every cycle the unfrozen
objects, the cycle's own, are collected *before* the freeze (cheap: the frozen heap is
not walked). Objects frozen earlier that become cyclic garbage later are rare, but they
exist; the whole heap is unfrozen and collected now and then: when nothing is pending
(a quiet moment), else at most one full collection per ``FULL_EVERY`` times the last one
took, and at least ``MIN_FULL_INTERVAL_S`` apart, so it costs about 1% of the time.

What the collector frees goes back to the C allocator, not to the system: glibc keeps
it in the arena of the thread that made it (the binder's, the watches', CP-SAT's), and
the scheduler's resident memory crept up under churn with no Python allocation growing.
Each full collection is followed by ``malloc_trim``, which returns the arenas' free
pages (where the C library has it: glibc does, musl does not).
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

FULL_EVERY = 100
MIN_FULL_INTERVAL_S = 60.0


def _malloc_trim() -> Callable[[], object]:
    """glibc's ``malloc_trim(0)``, or a no-op where the C library has none."""
    try:
        # The process's own symbols, libc's among them (find_library runs ldconfig).
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


trim_free_memory = _malloc_trim()


@contextmanager
def collections_paused() -> Iterator[None]:
    """No automatic collections inside: for work that allocates many long-lived objects
    and no reference cycles (decoding lists, converting a snapshot), where each
    collection the allocations trigger walks them all. Collections resume after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class HeapKeeper:
    clock: Callable[[], float] = time.monotonic
    full_collections: int = 0
    young_collections: int = 0
    _last_full_at: float = field(default=-float("inf"), init=False)
    _last_full_s: float = field(default=0.0, init=False)

    def full_due(self) -> bool:
        wait = max(MIN_FULL_INTERVAL_S, FULL_EVERY * self._last_full_s)
        return self.clock() - self._last_full_at >= wait

    @contextmanager
    def loading(self) -> Iterator[None]:
        """While the initial lists are read, no automatic collections: they create
        hundreds of thousands of long-lived objects (decoded JSON, no reference cycles),
        and each full collection the allocations triggered walked them all (0.16 s of a
        6,000-pod start before the first bind). Frozen (``freeze``) before the collector
        is back on, whatever the start raised: on first, its next allocation would walk
        every object the lists made (8-11 ms at 1,000 nodes and 6,000 pods)."""
        with collections_paused():
            try:
                yield
            finally:
                self.freeze()

    @contextmanager
    def cycling(self, quiet: bool = False) -> Iterator[None]:
        """No automatic collections during a cycle, and after it ``settle`` (``quiet``:
        nothing was pending) before the collector is back on. Each collection inside
        walked the snapshot and the decision's young objects again (1,000 nodes, 3,000
        pending pods: about 75 collections, 0.03 s before the first bind and 0.015 s
        while binding); on before ``settle``, the next allocation walked every object
        the cycle made (21-24 ms) only for ``settle`` to walk them again. The garbage a
        cycle leaves meanwhile is one decision's (5,000 real-shaped nodes, 3,000
        pending pods: the solver peaked 47-48 MB above its snapshot with collections
        and without)."""
        with collections_paused():
            try:
                yield
            finally:
                self.settle(quiet)

    def freeze(self) -> None:
        """At start-up: the heap is imports and the initial lists, with next to no
        garbage; frozen as it is, so the first cycle is not slowed by walking it (a full
        collection here cost 0.1-0.15 s of a 3,000-pod start before the first bind).
        It counts as a full collection: the next is due at the first quiet cycle or
        ``MIN_FULL_INTERVAL_S`` on. Due at once, it walked the whole heap (0.2-0.35 s
        at 1,000 nodes and 6,000 pods) right after the first backlog's binds, while
        their Events and statuses were being written and the API server was busiest."""
        gc.freeze()
        self._last_full_at = self.clock()

    def converted(self) -> None:
        """A snapshot is converted: what it made lives until the next one (the memo of
        its objects, the state the cycle decides on) and holds no reference cycle (models
        and tuples). Frozen at once, so the ``settle`` after the cycle walks only what
        the decision and the report made (after a 3,000-pod cycle: 27-30 -> 15-16 ms).
        Cyclic garbage among it, or made since the last ``settle``, waits for the next
        full collection: not to be called after a decision (the second chance's
        snapshot), whose garbage is a CP-SAT model's."""
        gc.freeze()

    def release(self) -> None:
        """The scheduler stopped: the frozen heap goes back to the collector (the whole
        process's, as a full ``settle`` unfreezes it: another scheduler running in the
        process walks its own heap once more at its next settle). Left frozen, a stopped
        scheduler's cyclic garbage outlived it in a process that went on until some full
        collection (a benchmark's rounds, a test run): 135,000-160,000 objects a
        stopped scheduler at 1,000 nodes and 6,000 pods, the process growing 0.1 GB a
        round."""
        gc.unfreeze()

    def settle(self, quiet: bool = False) -> int:
        """Collect what the last cycle left behind, then freeze what lives on; the number
        of unreachable objects found."""
        if quiet or self.full_due():
            started = self.clock()
            gc.unfreeze()
            found = gc.collect()
            trim_free_memory()
            self._last_full_at = self.clock()
            self._last_full_s = self._last_full_at - started
            self.full_collections += 1
        else:
            found = gc.collect()
            self.young_collections += 1
        gc.freeze()
        return found
