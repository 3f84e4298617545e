"""Everything the HTTP handler calls on the fake, as one type: the store's writes, reads
and injected faults, the request hooks and records, what a request costs (latency, CPU),
and the open connections."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.fake_apiserver.faults import _Faults
from benchmarks.fake_apiserver.reads import _Reads
from benchmarks.fake_apiserver.writes import _Writes


@dataclass(frozen=True)
class RequestRecord:
    """One request the server handled, in Kubernetes authorization terms.

    Non-resource requests (discovery, ``/version``) have an empty ``resource``.
    ``path``, ``content_type`` (of the body, e.g. which patch type the client chose) and
    ``query`` take no part in equality.
    """

    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    path: str = field(default="", compare=False)
    content_type: str | None = field(default=None, compare=False)
    query: str = field(default="", compare=False)  # as sent, e.g. "dryRun=All"


class _Api(_Writes, _Reads, _Faults):
    """What the handler serves; FakeApiServer adds the socket and the direct controls."""

    bookmark_interval_s: float
    latency_s: float
    cpu_ms_per_request: float
    hooks: list[Callable[[str, str], None]]
    requests: list[RequestRecord]
    _connections: set[socket.socket]
    _conn_lock: threading.Lock

    def _track(self, conn: socket.socket, alive: bool) -> None:
        with self._conn_lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
