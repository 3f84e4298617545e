"""A fake API server over real HTTP with every PodGroup/Queue dialect's CRDs, and a
``KubeCluster`` watching it; a server that accepts connections and never answers; and
the scripted server the tests of the binder's connections talk to."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.connections import Connections
from adapter.kube.resources import DIALECTS
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import ships_inline_status
from tests.adapter.kube.scripted import Script, api_client, serve


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    fake = FakeApiServer(bookmark_interval_s=0.2)
    for r in DIALECTS:
        # As the CRDs ship upstream: Volcano's PodGroup has no status subresource.
        fake.add_resource(
            r.group,
            r.version,
            r.plural,
            r.kind,
            namespaced=r.namespaced,
            status_subresource=not ships_inline_status(r.group, r.plural),
        )
    with fake:
        yield fake


@pytest.fixture
def cluster(server: FakeApiServer) -> Iterator[KubeCluster]:
    kube = KubeCluster(server.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
    try:
        yield kube
    finally:
        kube.stop()


@dataclass
class Silent:
    """A server that accepts every connection and reads and answers nothing (one dead
    behind a load balancer, a half-open TCP connection)."""

    url: str
    accepted: list[socket.socket] = field(default_factory=list)


@pytest.fixture
def silent_server() -> Iterator[Silent]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    silent = Silent(f"http://127.0.0.1:{server.getsockname()[1]}")

    def accept() -> None:
        while True:
            try:
                silent.accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield silent
    server.close()
    for conn in silent.accepted:
        conn.close()


# The scripted server of the connections' tests (``scripted``).
@pytest.fixture
def script() -> Iterator[Script]:
    yield Script()


@pytest.fixture
def scripted_server(script: Script) -> Iterator[ThreadingHTTPServer]:
    server = serve(script)
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def connections(scripted_server: ThreadingHTTPServer) -> Iterator[Connections]:
    made = Connections(api_client(f"http://127.0.0.1:{scripted_server.server_port}"))
    try:
        yield made
    finally:
        made.close()
