"""Watch events and watchers: the events a watch has yet to send, filtered by its
namespace and selectors as the watch cache filters them, and the socket they go out on."""

from __future__ import annotations

import contextlib
import queue
import socket
from dataclasses import dataclass, field

from benchmarks.fake_apiserver.objects import Obj, _dumps, _Resource
from benchmarks.fake_apiserver.selectors import _Selector

POLL_S = 0.25  # how soon an idle watch notices its client went away
BATCH = 512  # events written in one chunk when a watcher has a backlog


@dataclass(frozen=True, slots=True)
class _Event:
    type: str
    rv: int
    obj: Obj
    prev: Obj | None  # the state before a MODIFIED, so selector watches see transitions
    # The event as sent, by apiVersion: encoded once for every watcher that sends it
    # unchanged, as a real apiserver's watch cache serialises an event once per encoding.
    encoded: dict[str, bytes] = field(default_factory=dict, compare=False)


class _Watcher:
    def __init__(
        self,
        res: _Resource,
        namespace: str | None,
        selector: _Selector,
        version: str,
        conn: socket.socket | None,
    ) -> None:
        self.res = res
        self.namespace = namespace
        self.selector = selector
        self.api_version = res.api_version(version)
        self.conn = conn
        self.queue: queue.SimpleQueue[_Event | None] = queue.SimpleQueue()  # None: dropped

    def matches(self, obj: Obj) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selector.matches(obj)

    def encode(self, ev: _Event) -> bytes:
        obj: Obj | None = ev.obj
        kind = ev.type
        if ev.type == "MODIFIED" and ev.prev is not None:
            now, before = self.matches(ev.obj), self.matches(ev.prev)
            if now and not before:
                kind = "ADDED"
            elif before and not now:
                # What the watch cache does: the previous state, at the event's version.
                kind = "DELETED"
                obj = {
                    **ev.prev,
                    "metadata": {**ev.prev["metadata"], "resourceVersion": str(ev.rv)},
                }
            elif not now:
                obj = None
        elif not self.matches(ev.obj):
            obj = None
        if obj is None:
            return b""
        plain = obj is ev.obj and kind == ev.type
        if plain and self.api_version in ev.encoded:
            return ev.encoded[self.api_version]
        if obj.get("apiVersion") != self.api_version:
            obj = {**obj, "apiVersion": self.api_version}
        data = _dumps({"type": kind, "object": obj}) + b"\n"
        if plain:
            ev.encoded[self.api_version] = data
        return data


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _alive(conn: socket.socket) -> bool:
    # A watch client sends nothing: anything readable is its close (b"") or reset (OSError).
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
