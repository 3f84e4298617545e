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

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Readiness = Callable[[], tuple[bool, str]]


class Endpoint:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: any free port)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Readiness,
        host: str = "0.0.0.0",
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
        self._server = ThreadingHTTPServer((host, port), Handler)
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
