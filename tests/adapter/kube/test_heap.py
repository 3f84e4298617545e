"""The collector after each cycle: the cycle's cyclic garbage is collected before the
heap is frozen, and garbage hidden in the frozen heap by a full collection now and then."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from adapter.kube.heap import MIN_FULL_INTERVAL_S, HeapKeeper


class Cyclic:
    """Garbage only the cycle collector can free (it refers to itself)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_a_cycles_garbage_is_collected_not_frozen() -> None:
    now = [0.0]
    keeper = HeapKeeper(clock=lambda: now[0])
    keeper.settle(quiet=True)
    garbage = Cyclic()
    ref = weakref.ref(garbage)
    del garbage
    now[0] = 1.0
    keeper.settle()
    assert keeper.young_collections == 1
    assert ref() is None


def test_frozen_objects_that_become_garbage_are_collected_by_the_next_full_collection() -> None:
    now = [0.0]
    keeper = HeapKeeper(clock=lambda: now[0])
    holder = [Cyclic()]
    ref = weakref.ref(holder[0])
    keeper.settle()  # the first one is full, then everything alive is frozen
    holder.clear()
    now[0] = 1.0
    keeper.settle()
    assert ref() is not None  # frozen: the young collection does not see it
    now[0] = MIN_FULL_INTERVAL_S + 1.0
    keeper.settle()
    assert ref() is None
    assert keeper.full_collections == 2


def test_a_quiet_cycle_collects_everything_at_once() -> None:
    now = [0.0]
    keeper = HeapKeeper(clock=lambda: now[0])
    holder = [Cyclic()]
    ref = weakref.ref(holder[0])
    keeper.settle()
    holder.clear()
    now[0] = 1.0
    keeper.settle(quiet=True)
    assert ref() is None


def test_start_up_freezes_without_a_walk_and_collects_it_when_quiet_or_due() -> None:
    for quiet, at in ((True, 1.0), (False, MIN_FULL_INTERVAL_S)):
        now = [0.0]
        keeper = HeapKeeper(clock=lambda now=now: now[0])
        start_up_garbage = Cyclic()
        ref = weakref.ref(start_up_garbage)
        del start_up_garbage
        keeper.freeze()
        assert ref() is not None and keeper.full_collections == 0  # frozen, not collected
        assert gc.get_freeze_count() > 0
        now[0] = 1.0
        keeper.settle()  # after the first, busy cycle: no walk of the whole heap
        assert keeper.full_collections == 0 and ref() is not None
        now[0] = at
        keeper.settle(quiet=quiet)
        assert keeper.full_collections == 1 and ref() is None


def test_no_automatic_collection_while_the_initial_lists_load() -> None:
    keeper = HeapKeeper()
    assert gc.isenabled()
    with keeper.loading():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), keeper.loading():
        raise RuntimeError("a failed start")
    assert gc.isenabled()  # a start that fails leaves the collector on


def test_the_lists_are_frozen_before_the_collector_is_back_on() -> None:
    keeper = HeapKeeper()
    with keeper.loading():
        loaded = [{"item": i} for i in range(20_000)]
    # Nothing young left for the next allocation to walk: every loaded object is frozen.
    assert gc.get_count()[0] < 1_000
    assert gc.get_freeze_count() >= len(loaded)


def test_a_cycle_is_settled_before_the_collector_is_back_on() -> None:
    keeper = HeapKeeper()
    with keeper.cycling():
        assert not gc.isenabled()
        kept = [{"pod": i} for i in range(20_000)]
        garbage = Cyclic()
        ref = weakref.ref(garbage)
        del garbage
    assert gc.isenabled()
    assert ref() is None  # collected as ``settle`` collects
    assert gc.get_count()[0] < 1_000  # and what lives on frozen, not left for a walk
    assert gc.get_freeze_count() >= len(kept)
    assert keeper.young_collections + keeper.full_collections == 1


def test_a_cycle_that_raises_is_settled_too() -> None:
    keeper = HeapKeeper()
    with pytest.raises(RuntimeError), keeper.cycling(quiet=True):
        raise RuntimeError("a bug in a cycle")
    assert gc.isenabled() and keeper.full_collections == 1


def test_a_converted_snapshot_is_frozen_at_once_and_the_decision_collected_after() -> None:
    keeper = HeapKeeper()
    with keeper.cycling():
        snapshot = [{"pod": i} for i in range(20_000)]
        keeper.converted()
        assert gc.get_freeze_count() >= len(snapshot)
        garbage = Cyclic()  # the decision's
        ref = weakref.ref(garbage)
        del garbage
    assert ref() is None


def test_a_stopped_scheduler_gives_what_it_froze_back_to_the_collector() -> None:
    keeper = HeapKeeper()
    holder = [Cyclic()]
    ref = weakref.ref(holder[0])
    keeper.freeze()  # as at start-up
    holder.clear()  # garbage now, but frozen
    gc.collect()
    assert ref() is not None and gc.get_freeze_count() > 0
    keeper.release()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_a_full_collection_gives_what_threads_freed_back_to_the_system() -> None:
    """A thread decodes 100 MB (objects the C allocator serves from its arena) and keeps
    one object in 64: freed, the rest stayed resident in the arena's pages until a full
    collection trimmed them."""
    kept: list[bytes] = []

    def decode() -> None:
        made = [bytes(2000 + i % 7) for i in range(50_000)]
        kept.extend(made[::64])

    worker = threading.Thread(target=decode)
    keeper = HeapKeeper()
    keeper.settle(quiet=True)  # no free pages left from earlier tests for it to reuse
    before = _resident_mb()
    worker.start()
    worker.join()
    freed = _resident_mb()
    assert freed - before > 50  # the arena holds the freed pages
    keeper.settle(quiet=True)
    assert _resident_mb() < before + (freed - before) / 2
