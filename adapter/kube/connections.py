"""Connections held by the threads that send a request thousands of times a cycle.

A bind sent through the client's connection pool cost 250-285 us of the scheduler's CPU
(one thread, fake API server: the pool's lookup, its retry and timeout objects, a
response object read through two layers of wrappers); the same request written on a
connection the thread keeps, its answer parsed by ``http.client``, cost 100-105 us. On a
small control plane that CPU is taken from the API server, so the binder sends its
binds this way, on connections made as the client's pool makes them (the same TLS
settings, socket options and credentials): each bind thread keeps one.

Nothing is sent twice: a request that fails is the caller's to retry (the binder
retries within its fence). An idle connection the server closed is noticed before use
(a socket readable while no answer is due has been closed, or holds junk) and made
again, as urllib3's pool does; a failure on a connection leaves it closed, and so does
an interim (1xx) answer, whose final answer could otherwise be read as the next
request's. What fails before a byte of the request is written (the TCP connect, the TLS
handshake, a deadline to send by that passed while connecting) is ``Unsent``: the
binder then knows the bind cannot land. A client configured with a proxy has its
requests sent through its own pool, which speaks to proxies.
"""

from __future__ import annotations

import http.client
import threading
import time
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError
from urllib3.util import parse_url
from urllib3.util.wait import wait_for_read

from adapter.kube.resources import done, request_headers, send

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


class Unsent(ConnectTimeoutError):
    """Nothing of the request was written: no connection was made, or the time to send
    it by passed while one was made."""


class Connections:
    """Requests to ``api``'s server, each thread on a connection of its own. ``close``
    closes every connection made (the threads using them must be done)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
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

    def post(
        self,
        path: str,
        body: bytes,
        connect_s: float,
        read_s: float,
        send_by: float | None = None,
    ) -> None:
        """POST ``body`` (JSON) to ``path``, written before ``send_by`` (``time.monotonic``)
        or not at all; returns on a 2xx answer, raises ``ApiException`` (status, reason,
        body and headers: a 429's Retry-After) on any other final one, ``Unsent`` (a
        urllib3 ``ConnectTimeoutError``) when nothing was written, and what the socket
        or ``http.client`` raises when the request was written and no answer read.
        (Through a proxy's pool, ``send_by`` is not read: ``connect_s`` bounds when the
        request goes out, its one connect never retried.)"""
        if self.via_pool:
            done(send(self.api, "POST", path, body, (connect_s, read_s)))
            return
        headers = request_headers(self.api, "POST", path)
        lines = [f"POST {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
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
            response = http.client.HTTPResponse(conn.sock, method="POST")
            response.begin()  # skips a 100 Continue, not another interim answer
            if response.status < 200:
                raise http.client.HTTPException(
                    f"an interim answer ({response.status}) where the final one was due"
                )
            data = response.read()  # whole: the connection is used again
        except BaseException:
            self._drop(conn)  # in an unknown state: what is read next may be this answer
            raise
        if response.will_close:
            self._drop(conn)
        if not 200 <= response.status <= 299:
            error = ApiException(
                status=response.status,
                reason=response.reason,
                body=data.decode("utf-8", "replace"),
            )
            error.headers = response.headers
            raise error

    def _connection(self, connect_s: float) -> HTTPConnection:
        conn: HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and (conn.sock is None or wait_for_read(conn.sock, timeout=0.0)):
            self._drop(conn)  # closed by the server while idle (or it sent what no one asked)
            conn = None
        if conn is None:
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
            self._local.conn = conn
            with self._lock:
                self._made.append(conn)
        return conn

    def _drop(self, conn: HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._made:
                self._made.remove(conn)

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, []
        for conn in made:
            conn.close()
