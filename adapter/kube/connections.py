"""Connections held by the threads that send a request thousands of times a cycle.

A bind sent through the client's connection pool cost 250-285 us of the scheduler's CPU
(one thread, fake API server: the pool's lookup, its retry and timeout objects, a
response object read through two layers of wrappers); the same request written on a
connection the thread keeps, its answer parsed by ``http.client``, cost 100-105 us, of
which ``http.client``'s header parsing (the ``email`` package's) was 40-45 us: answers
are read by llhttp instead (``httptools``, the parser uvicorn reads requests with;
2-3 us). On a small control plane that CPU is taken from the API server, so the binder
sends its binds this way, on connections made as the client's pool makes them (the same
TLS settings, socket options and credentials): each bind thread keeps one, and so does
the writer's thread for status patches and Events (an Event, one per bound pod, cost
360-400 us through the pool, 80-90 us here).

Nothing is sent twice: a request that fails is the caller's to retry (the binder
retries within its fence). An idle connection the server closed is noticed before use
(a socket readable while no answer is due has been closed, or holds junk) and made
again, as urllib3's pool does; a failure on a connection leaves it closed, and so do an
interim (1xx) answer, whose final answer could otherwise be read as the next request's,
and bytes past an answer's end. What fails before a byte of the request is written (the
TCP connect, the TLS handshake, a deadline to send by that passed while connecting) is
``Unsent``: the binder then knows the bind cannot land. A client configured with a proxy
has its requests sent through its own pool, which speaks to proxies.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import httptools
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3 import HTTPHeaderDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError
from urllib3.util import parse_url
from urllib3.util.wait import wait_for_read

from adapter.kube.resources import JSON, request_headers, send

# What the client's pool passes on to the connections it makes (``kubernetes.client.rest``):
# TLS verification, the client's certificate, the server name, socket options.
_TLS_ARGS = (
    "cert_reqs",
    "ca_certs",
    "ca_cert_dir",
    "ca_cert_data",
    "cert_file",
    "key_file",
    "key_password",
    "assert_hostname",
    "assert_fingerprint",
    "server_hostname",
    "ssl_context",
    "ssl_minimum_version",
    "ssl_maximum_version",
)
_SOCKET_ARGS = ("socket_options", "source_address")
_READ_BYTES = 65536
MAX_ANSWER_BYTES = 16 * 2**20


class Unsent(ConnectTimeoutError):
    """Nothing of the request was written: no connection was made, or the time to send
    it by passed while one was made."""


class Connections:
    """Requests to ``api``'s server, each thread on a connection of its own. ``close``
    closes every connection made (a thread still reading an answer on one raises)."""

    def __init__(self, api: client.ApiClient, fence: Callable[[], float] | None = None) -> None:
        """``fence``: the seconds this replica may still write (a leader's lease left);
        a request not passed its own ``send_by`` is sent within them or not at all."""
        self.api = api
        self.fence = fence
        # A proxy (HTTP or SOCKS) has a manager of its own kind.
        self.via_pool = type(api.rest_client.pool_manager) is not urllib3.PoolManager
        url = parse_url(api.configuration.host)
        self.tls = url.scheme == "https"
        self.host = url.host or "localhost"
        self.port = url.port or (443 if self.tls else 80)
        self.prefix = (url.path or "").rstrip("/")
        kw: dict[str, Any] = api.rest_client.pool_manager.connection_pool_kw
        wanted = (*_SOCKET_ARGS, *_TLS_ARGS) if self.tls else _SOCKET_ARGS
        self.connection_args = {k: kw[k] for k in wanted if k in kw}
        host_header = self.host if url.port is None else f"{self.host}:{url.port}"
        self.host_header = host_header
        self._local = threading.local()
        self._made: list[HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def post(
        self,
        path: str,
        body: bytes,
        connect_s: float,
        read_s: float,
        send_by: float | None = None,
    ) -> None:
        """POST ``body`` (JSON) to ``path`` (``request``), its answer's body dropped."""
        self.request("POST", path, body, connect_s, read_s, send_by=send_by)

    def request(
        self,
        method: str,
        path: str,
        body: bytes,
        connect_s: float,
        read_s: float,
        content_type: str = JSON,
        send_by: float | None = None,
    ) -> bytes:
        """``method`` ``path`` with ``body``, written before ``send_by``
        (``time.monotonic``) or not at all; the body of a 2xx answer. Raises
        ``ApiException`` (status, reason, body and headers: a 429's Retry-After) on any
        other final answer, ``Unsent`` (a urllib3 ``ConnectTimeoutError``) when nothing
        was written, and what the socket, ``http.client`` or llhttp raise when the
        request was written and no answer read. (Through a proxy's pool, ``send_by`` is
        not read: ``connect_s`` bounds when the request goes out, its one connect never
        retried.)"""
        if send_by is None and self.fence is not None:
            left = self.fence()
            if left <= 0:
                raise Unsent("this replica may not write: it does not hold the lease")
            send_by = time.monotonic() + left
        if self.via_pool:
            response = send(self.api, method, path, body, (connect_s, read_s), content_type)
            data: bytes = response.data
            response.release_conn()
            return data
        if method == "HEAD":  # its answer's length announces a body that never comes
            raise ValueError("HEAD is not sent on these connections")
        headers = request_headers(self.api, method, path, content_type)
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        # As http.client asks: a compressing proxy on the way would otherwise send gzip,
        # which nothing here decodes.
        lines.append("Accept-Encoding: identity")
        if any("\r" in line or "\n" in line for line in lines):
            # http.client refuses these too: a token read with its newline would
            # otherwise end the headers early.
            raise ValueError("a request header holds a line break")
        lines.append(f"Content-Length: {len(body)}\r\n\r\n")
        request = "\r\n".join(lines).encode("latin-1") + body
        conn = self._connection(connect_s)
        if send_by is not None and time.monotonic() >= send_by:
            raise Unsent("the time to send the request by passed while connecting")
        try:
            assert conn.sock is not None
            conn.sock.settimeout(read_s)
            conn.sock.sendall(request)
            answer = _read_answer(conn.sock)
        except BaseException:
            self._drop(conn)  # in an unknown state: what is read next may be this answer
            raise
        if answer.status < 200 or not answer.keep_alive or answer.beyond:
            self._drop(conn)  # an interim answer's final one is still to come
        if answer.status < 200:
            raise http.client.HTTPException(
                f"an interim answer ({answer.status}) where the final one was due"
            )
        if not 200 <= answer.status <= 299:
            raise _refusal(answer)
        return b"".join(answer.body)

    def _connection(self, connect_s: float) -> HTTPConnection:
        conn: HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and (conn.sock is None or wait_for_read(conn.sock, timeout=0.0)):
            self._drop(conn)  # closed by the server while idle (or it sent what no one asked)
            conn = None
        if conn is None:
            if self._closed:
                raise Unsent("these connections are closed")
            cls = HTTPSConnection if self.tls else HTTPConnection
            conn = cls(self.host, self.port, timeout=connect_s, **self.connection_args)
            try:
                conn.connect()
            except Exception as e:
                conn.close()
                if isinstance(e, ConnectTimeoutError):
                    raise
                # The TLS handshake: no byte of a request went out either.
                raise Unsent(f"could not connect: {e!r}") from e
            except BaseException:
                conn.close()
                raise
            with self._lock:
                if self._closed:
                    conn.close()
                    raise Unsent("these connections are closed")
                self._made.append(conn)
            self._local.conn = conn
        return conn

    def _drop(self, conn: HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._made:
                self._made.remove(conn)

    def close(self) -> None:
        """Close every connection, waking a thread blocked reading an answer on one (it
        raises); none is made after."""
        with self._lock:
            self._closed = True
            made, self._made = self._made, []
        for conn in made:
            sock = conn.sock  # read once: a thread dropping it may set it to None
            if sock is not None:
                # A read blocked on it ends now, not at its timeout (OSError: no longer
                # connected).
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            conn.close()


class _Answer:
    """The first answer llhttp reads off a connection (``httptools`` calls these)."""

    def __init__(self) -> None:
        # The parser holds this answer: a cycle, broken once read (``_read_answer``),
        # else a thousand binds' parsers wait for the cyclic garbage collector.
        self.parser: Any = httptools.HttpResponseParser(self)
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.headed = False
        self.complete = False
        self.keep_alive = False
        self.until_close = False  # no length given: the body ends where the connection does
        self.beyond = False  # bytes after the answer: the connection cannot be trusted

    def on_message_begin(self) -> None:
        self.beyond = self.complete

    def on_status(self, reason: bytes) -> None:
        if not self.complete:
            self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        self.headed = True
        self.status = self.parser.get_status_code()
        self.until_close = (
            self.status >= 200 and self.status not in (204, 304) and _close_delimited(self.headers)
        )

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.complete:
            self.keep_alive = self.parser.should_keep_alive()
            self.complete = True


def _close_delimited(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a body is framed by the connection's end (RFC 9112, 6.3): no transfer
    coding ending in chunked, and no Content-Length."""
    codings = [v for n, v in headers if n.lower() == b"transfer-encoding"]
    if codings:
        return b",".join(codings).split(b",")[-1].strip().lower() != b"chunked"
    return not any(n.lower() == b"content-length" for n, _ in headers)


def _refusal(answer: _Answer) -> ApiException:
    """What the generated client raises for the answer: its status, reason, body and
    headers, read case-blind (Retry-After), the first of a repeated one as
    ``http.client`` gave it. (Made here, not in the caller's frame: a local holding the
    exception there would hold the frame, and the answer, in a cycle.)"""
    error = ApiException(
        status=answer.status,
        reason=answer.reason.decode("latin-1"),
        body=b"".join(answer.body).decode("utf-8", "replace"),
    )
    said = HTTPHeaderDict()
    for name, value in answer.headers:
        key = name.decode("latin-1")
        if key not in said:
            said[key] = value.decode("latin-1")
    error.headers = cast(dict[str, str], said)
    return error


def _read_answer(sock: Any) -> _Answer:
    """The answer to the request just written on ``sock``, read whole (each read within
    the socket's timeout). An interim answer is returned as it is: its final one may
    follow, so the caller drops the connection. Raises ``http.client``'s errors where the
    server closed the connection early, llhttp's on what is not HTTP."""
    answer = _Answer()
    try:
        _read_into(sock, answer)
    finally:
        answer.parser = None
    return answer


def _read_into(sock: Any, answer: _Answer) -> None:
    read = 0
    while not answer.complete:
        data = sock.recv(_READ_BYTES)
        read += len(data)
        if read > MAX_ANSWER_BYTES:  # no request sent here is answered with more
            raise http.client.HTTPException(f"an answer of more than {MAX_ANSWER_BYTES} bytes")
        if not data:
            if answer.until_close:
                answer.complete = True  # what HTTP/1.0 servers do; keep_alive stays False
                break
            if not answer.headed:
                raise http.client.RemoteDisconnected("the server closed the connection unanswered")
            raise http.client.IncompleteRead(b"".join(answer.body))
        try:
            answer.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if not answer.complete:
                raise
            answer.beyond = True  # junk after a whole answer: the answer stands
