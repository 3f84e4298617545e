"""List, then watch, one resource into the cache — and recover from whatever the server does.

The client-go reflector's contract, on the official Python client: list (in pages) to get
every object and the list's resourceVersion; watch from that version with bookmarks, so
a quiet collection still advances the version; on a dropped connection or a server error
reconnect from the last version seen, with capped exponential backoff and jitter; on
410 Gone (the version fell out of the server's history) re-list.

Why not ``kubernetes.informer.SharedInformer``: it decodes every object into client
models (0.5 s per 2,000 pods), asks for no bookmarks, and retries at a fixed 5 s.
"""

from __future__ import annotations

import logging
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from adapter.kube.cache import ClusterCache
from adapter.kube.lists import list_page
from adapter.kube.resources import OPTIONAL, Resource, decode

log = logging.getLogger(__name__)

LIST_PAGE = 500
WATCH_TIMEOUT_S = 300  # the server ends each watch after this; we resume from our version
READ_TIMEOUT_S = 90  # a watch silent this long is opened again
# A list's answer (or its next bytes) not within this: the connection is dead. Without
# it, a re-list sent on a pooled connection to a server that died without closing it
# waited forever, its resource frozen in the cache while the loop went on.
LIST_TIMEOUT_S = (10, 60)
# After a read that brought events, the watch waits this long before reading again, and
# then reads all that came meanwhile at once: while a scheduler binds, the events of its
# own binds arrive hundreds a second, and a thread woken for each one must win the
# interpreter lock from the binding threads every time (a pod watch beside a binder of
# 3,000 pods, fake API server, 6 paired rounds: the watch's CPU 0.24 -> 0.17 s, the
# process's 2.58 -> 2.36 s). A quiet watch is read at once.
WATCH_BATCH_S = 0.01
# A read that brought several events waits that many times longer, up to this: beside
# 16 binding threads a wake-up costs the watch CPU whatever it reads (3,000 binds, fake
# API server: 430 reads of 7 events took 0.17-0.22 s, where decoding and applying the
# events alone take 0.06 s; waits of 2 ms, 0.23-0.28 s; of 50 ms, 0.11-0.16 s). In a
# burst the cache learns of an event up to this late, a twentieth of the default cycle;
# a trickle is read as before.
WATCH_BATCH_MAX_S = 0.05
READ_AT_MOST = 1 << 20  # bytes read from the socket at once
HEX = re.compile(rb"[0-9A-Fa-f]+")


class Expired(Exception):
    """The resourceVersion is too old for the server: re-list."""


class Reflector:
    def __init__(
        self,
        api: Any,
        resource: Resource,
        cache: ClusterCache,
        backoff_s: tuple[float, float] = (0.2, 30.0),
        watch_timeout_s: int = WATCH_TIMEOUT_S,
    ) -> None:
        self.api = api
        self.resource = resource
        self.cache = cache
        self.backoff_s = backoff_s
        self.watch_timeout_s = watch_timeout_s
        self.resource_version: str | None = None
        self.relists = 0  # how often the version expired (or never existed)
        self.reconnects = 0
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch {resource}", daemon=True)

    def start(self) -> Reflector:
        self._thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        _abort(self._response)
        if wait:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                    self.relists += 1
                if self._stop.is_set():
                    return
                self._watch()
                failures = 0
            except Expired:
                log.info(
                    "%s: resourceVersion %s expired; re-listing",
                    self.resource,
                    self.resource_version,
                )
                self.resource_version = None
                failures = 0
            except ApiException as e:
                if e.status == 410 or _too_large(e):
                    # Too large: the server never reached the version the cache is at (it
                    # was restored, or replaced): what it holds is listed afresh, as
                    # client-go's reflector does.
                    self.resource_version = None
                    continue
                failures += 1
                if e.status in (403, 404) and self.resource in OPTIONAL:
                    self._read_as_none(e)
                log.warning("%s: API error %s %s; retrying", self.resource, e.status, e.reason)
            except Exception as e:  # a dropped connection or a bad response
                if self._stop.is_set():
                    return
                failures += 1
                log.info(
                    "%s: watch interrupted (%s); reconnecting", self.resource, type(e).__name__
                )
            if failures:
                self.reconnects += 1
                low, high = self.backoff_s
                delay = min(high, low * 2 ** (failures - 1))
                self._stop.wait(delay * random.uniform(0.5, 1.0))

    def _read_as_none(self, e: ApiException) -> None:
        """An optional input the server will not list (``resources.OPTIONAL``): none, so
        that a snapshot need not wait for it, until a later list succeeds."""
        if self.cache.synced([self.resource]):
            return  # listed before: what was read stands until the watch resumes
        log.error(
            "%s: the API server refuses to list it (%s %s): read as none until it allows it "
            "(deploy/base/rbac.yaml grants list and watch)",
            self.resource,
            e.status,
            e.reason,
        )
        self.cache.replace(self.resource, [])

    def _list(self) -> None:
        # The first list asks for resourceVersion "0", as client-go's reflector does: a
        # real API server answers it from its watch cache in one response (a page limit
        # is ignored there), sparing etcd. A re-list after 410 must be fresh: paged, at
        # the current version.
        first = self.relists == 0
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            response = self.resource.list_call(
                self.api,
                resource_version="0" if first else None,
                limit=None if first else LIST_PAGE,
                _continue=token,
                _request_timeout=LIST_TIMEOUT_S,
            )
            page, meta = list_page(self.resource, response.data)
            items.extend(page)
            token = meta.get("continue") or None
            if token is None:
                break
        if self._stop.is_set():
            return  # stopped meanwhile (a dialect no longer served): what it read is stale
        self.cache.replace(self.resource, items, trimmed=True)
        self.resource_version = str(meta.get("resourceVersion") or "")

    def _watch(self) -> None:
        response = self.resource.list_call(
            self.api,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=(10, READ_TIMEOUT_S),
        )
        self._response = response
        opened = time.monotonic()
        try:
            for line in lines(response, WATCH_BATCH_S):
                if self._stop.is_set():
                    return
                if line:
                    self._handle(decode(line))
        except (TimeoutError, ReadTimeoutError):
            # Nothing for READ_TIMEOUT_S, not even a bookmark: a quiet collection. A real
            # API server sends a bookmark only once its version has moved past the
            # watch's, which on a quiet collection may take minutes. Watched again from
            # the same version at once: counted as a failure, each silence doubled the
            # wait before the next watch, up to 30 s with no watch open. A timeout sooner
            # than that is no silence of the server's: a failure, waited on.
            if time.monotonic() - opened < READ_TIMEOUT_S:
                raise
            log.debug("%s: no event for %d s; watching again", self.resource, READ_TIMEOUT_S)
        finally:
            self._response = None
            # A stream left part-read must not go back to the pool: close it.
            response.close()
            response.release_conn()

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message", ""))
            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version and _went_back(self.resource_version, str(version)):
            # A server restored from an older state (or a new one on the same address):
            # what it has now is not what the cache holds; objects deleted in between
            # would stay in the cache for good, holding room.
            raise Expired(f"resourceVersion went back from {self.resource_version} to {version}")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.cache.apply(self.resource, kind, obj)
        if version:
            self.resource_version = str(version)


def _too_large(e: ApiException) -> bool:
    """kube-apiserver's answer to a watch from a version it has not reached (504,
    cause ResourceVersionTooLarge)."""
    text = f"{e.body or ''} {e.reason or ''}"
    return e.status == 504 and ("ResourceVersionTooLarge" in text or "Too large resource" in text)


def _went_back(held: str | None, seen: str) -> bool:
    """Whether a watch event's resourceVersion is older than the one the cache is at.
    Versions are opaque to clients; both as integers (etcd's revisions, as every
    kube-apiserver has them) they order, else nothing is concluded."""
    if held is None or not held.isdigit() or not seen.isdigit():
        return False
    return int(seen) < int(held)


def lines(response: Any, pause_s: float = 0.0) -> Iterator[bytes]:
    """The lines of a streamed response (one watch event each), as bytes (``decode``
    reads them as they are).

    Not the client's own splitter: it copies the rest of its buffer after every line,
    so a chunk of N events (an API server flushes a watcher's backlog in one) costs
    O(N^2) bytes copied — the events of 3,000 binds read in bursts cost the scheduler
    more CPU than the binds. Here each read is split once. ``pause_s``: see
    ``WATCH_BATCH_S`` (``_dechunked``)."""
    pending = b""
    for segment in _segments(response, pause_s):
        data = segment if isinstance(segment, bytes) else str(segment).encode("utf-8")
        if pending:
            data = pending + data
        *complete, pending = data.split(b"\n")
        yield from complete


def _segments(response: Any, pause_s: float) -> Iterator[bytes | str]:
    """The body of a streamed response in pieces: a chunked one (every watch of an API
    server) as all the chunks that came since the last read; else as urllib3 reads it,
    which for a chunked body is one chunk (one event) per read."""
    # The socket's buffered reader, below urllib3 and http.client: neither reads more
    # than one chunk at a time.
    fp = getattr(getattr(response, "_fp", None), "fp", None)
    if getattr(response, "chunked", False) is True and callable(getattr(fp, "read1", None)):
        yield from _dechunked(fp, pause_s)
        return
    yield from response.stream(amt=None, decode_content=False)


class StreamEnded(ConnectionError):
    """The connection closed before the response's last chunk: reconnect."""


def _dechunked(fp: Any, pause_s: float) -> Iterator[bytes]:
    """HTTP/1.1 chunked transfer coding (RFC 9112, 7.1) read off ``fp`` as it arrives:
    each read takes what the socket holds, up to READ_AT_MOST, and gives back the data
    of every chunk it completes, joined. Ends at the last (empty) chunk; its trailers,
    if any, are not read (the connection is closed after a watch)."""
    buffer = bytearray()
    need = 0  # bytes the buffer must hold before the chunk at its start is whole
    while True:
        data = fp.read1(READ_AT_MOST)
        if not data:
            raise StreamEnded("the watch stream ended before its last chunk")
        buffer += data
        if len(buffer) < need:
            continue  # a large chunk still arriving: not scanned again for each read
        parts: list[bytes] = []
        start = need = 0
        while True:
            line_end = buffer.find(b"\r\n", start)
            if line_end < 0:
                break
            size_field = bytes(buffer[start:line_end]).split(b";", 1)[0].strip()  # extensions
            if not HEX.fullmatch(size_field):
                raise StreamEnded(f"bad chunk size {size_field[:20]!r}")
            size = int(size_field, 16)
            if size == 0:
                if parts:
                    yield b"".join(parts)
                return
            data_end = line_end + 2 + size
            if len(buffer) < data_end + 2:
                need = data_end + 2 - start
                break
            if buffer[data_end : data_end + 2] != b"\r\n":
                raise StreamEnded("a chunk's data is not followed by CRLF")
            parts.append(bytes(buffer[line_end + 2 : data_end]))
            start = data_end + 2
        del buffer[:start]
        if parts:
            yield b"".join(parts)
            if pause_s > 0:
                time.sleep(min(pause_s * len(parts), max(pause_s, WATCH_BATCH_MAX_S)))


def _abort(response: Any) -> None:
    """Unblock a thread reading a watch: shut its socket down."""
    if response is None:
        return
    try:
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
