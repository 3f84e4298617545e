"""The store every part of the fake shares: objects by resource, the one resourceVersion
counter, watch history and watchers per resource, and the snapshots paged lists read."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass

from benchmarks.fake_apiserver.objects import BindingRecord, Obj, _not_found_path, _Resource
from benchmarks.fake_apiserver.watch import _Event, _Watcher


@dataclass
class _Snapshot:
    rv: int
    items: list[Obj]
    resource: str
    namespace: str


class _Store:
    """The shared state, declared once for the parts FakeApiServer is made of (its base
    classes: registry, admission, writes, reads, faults), and what they all do with it.

    ``FakeApiServer.__init__`` sets it, and says what guards it.
    """

    history: int
    _lock: threading.RLock
    _rv: int
    bindings: list[BindingRecord]
    _resources: dict[tuple[str, str], _Resource]
    _by_kind: dict[tuple[str, str], _Resource]
    _objects: dict[tuple[str, str], dict[tuple[str, str], Obj]]
    _history: dict[tuple[str, str], deque[_Event]]
    _floor: dict[tuple[str, str], int]
    _watchers: dict[tuple[str, str], set[_Watcher]]
    _snapshots: OrderedDict[str, _Snapshot]

    @property
    def resource_version(self) -> int:
        return self._rv

    def _register(self, res: _Resource) -> None:
        key = (res.group, res.plural)
        old = self._resources.get(key)
        if old is not None:
            self._by_kind.pop((old.group, old.kind), None)
        self._resources[key] = res
        self._by_kind[(res.group, res.kind)] = res
        self._objects.setdefault(key, {})
        self._history.setdefault(key, deque(maxlen=self.history))
        self._floor.setdefault(key, 0)
        self._watchers.setdefault(key, set())

    def _store(self, group: str, plural: str) -> dict[tuple[str, str], Obj]:
        store = self._objects.get((group, plural))
        if store is None:
            raise _not_found_path()
        return store

    def _emit(self, res: _Resource, ev: _Event) -> None:
        key = (res.group, res.plural)
        events = self._history[key]
        if events.maxlen is not None and len(events) == events.maxlen:
            self._floor[key] = events[0].rv
        events.append(ev)
        for watcher in self._watchers[key]:
            watcher.queue.put(ev)
