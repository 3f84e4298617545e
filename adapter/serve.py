"""The scheduler's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz``
for the kubelet's probes.

Liveness says the scheduler is not wedged, readiness that it can do its job (it has a
fresh snapshot, and it leads when leader election is on): the caller decides both,
through the ``alive`` and ``ready`` callables (the Kubernetes backend: its watches have
listed and its loop went round lately), and the reason is returned so ``kubectl
describe`` shows why a probe failed. The server runs on a daemon thread and never
touches the scheduling loop.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Readiness = Callable[[], tuple[bool, str]]


class Endpoint:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: any free port).
    ``host`` "" (the default): every address of both families (``listening``)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Readiness,
        host: str = "",
        port: int = 8080,
        alive: Readiness | None = None,
    ) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(endpoint.registry), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    check = endpoint.alive if path == "/healthz" else endpoint.ready
                    try:
                        ok, why = check()
                    except Exception as e:  # a broken check says so, not a 500 loop
                        ok, why = False, f"check failed: {type(e).__name__}: {e}"
                    self._send(
                        200 if ok else 503, (why or ("ok" if ok else "not ready")).encode() + b"\n"
                    )
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the scheduler's own log

        self.registry = registry
        self.ready = ready
        self.alive: Readiness = alive or (lambda: (True, "ok"))
        self._server = listening(host, port, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> Endpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Inet6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _DualStackServer(_Inet6Server):
    def server_bind(self) -> None:
        # IPv4 clients too, as ::ffff:a.b.c.d: where the kernel refuses, IPv6 only.
        with contextlib.suppress(OSError):
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def listening(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server on ``host:port``. "" is every address of both families: the kubelet probes
    the pod's IP and Prometheus scrapes it, and on an IPv6-only or IPv6-first cluster
    that address is IPv6, which a server on 0.0.0.0 never answers (the pod would never
    be ready). Where the machine has no IPv6 (disabled in the pod), "" is 0.0.0.0."""
    if not host:
        try:
            return _DualStackServer(("::", port), handler)
        except OSError:
            return ThreadingHTTPServer(("0.0.0.0", port), handler)
    if ":" in host:
        return _Inet6Server((host, port), handler)
    return ThreadingHTTPServer((host, port), handler)
