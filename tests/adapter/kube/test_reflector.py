"""A reflector's requests end: a server that accepts the connection and never answers
(dead behind a load balancer, a half-open TCP connection) fails the list in bounded
time, so the reflector retries instead of freezing its resource in the cache."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from adapter.kube import reflector
from adapter.kube.cache import ClusterCache
from adapter.kube.reflector import Reflector
from adapter.kube.resources import PODS


@pytest.fixture
def silent_server() -> Iterator[str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)  # read nothing, answer nothing

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("relists", [0, 1], ids=["first list", "re-list"])
def test_a_list_the_server_never_answers_fails_in_bounded_time(
    silent_server: str, relists: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reflector, "LIST_TIMEOUT_S", (1, 1))
    configuration = client.Configuration()
    configuration.host = silent_server
    listing = Reflector(client.ApiClient(configuration), PODS, ClusterCache())
    listing.relists = relists
    started = time.monotonic()
    with pytest.raises(HTTPError):  # timed out, after the client's retries
        listing._list()
    assert time.monotonic() - started < 10
