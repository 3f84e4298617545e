"""Connections kept per thread (``adapter.kube.connections``): what a request carries,
and what becomes of a connection around failures: one per thread, reused, made again
after the server closed it, dropped after an error, no request sent twice, no late
answer read as the next one's, closed at once; TLS as the client's configuration asks
(its CA, its client certificate); through a proxy, the client's pool; fenced by the
lease. How answers are read: test_connection_answers.py."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ConnectTimeoutError

from adapter.kube.connections import Connections, Unsent
from tests.adapter.kube.scripted import (
    BODY,
    Script,
    api_client,
    serve,
)


def test_a_post_carries_the_clients_credentials_and_reuses_its_connection(
    connections: Connections, script: Script, scripted_server: ThreadingHTTPServer
) -> None:
    connections.post("/api/v1/namespaces/a/pods/p-0/binding", BODY, 1.0, 1.0)
    connections.post("/api/v1/namespaces/a/pods/p-1/binding", BODY, 1.0, 1.0)
    first, second = script.seen
    assert first.path == "/api/v1/namespaces/a/pods/p-0/binding"
    assert first.headers["authorization"] == "Bearer sa-token"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["user-agent"] == connections.api.user_agent
    assert first.headers["accept-encoding"] == "identity"
    assert first.headers["host"] == f"127.0.0.1:{scripted_server.server_port}"
    assert json.loads(first.body) == {"kind": "Binding", "target": {"name": "n1"}}
    assert second.port == first.port


@pytest.mark.parametrize("said", [True, False])
def test_a_connection_the_server_closed_is_made_again_and_nothing_is_sent_twice(
    connections: Connections, script: Script, said: bool
) -> None:
    # Said: "Connection: close" in the answer. Unsaid: closed after answering, as an idle
    # timeout does; the socket reads as closed when the next request is due.
    closing = {"headers": {"Connection": "close"}} if said else {"close_after": True}
    script.answers = [closing, {}]
    connections.post("/a", BODY, 1.0, 1.0)
    time.sleep(0.05)  # the server's close reaches the client
    connections.post("/b", BODY, 1.0, 1.0)
    assert [s.path for s in script.seen] == ["/a", "/b"]
    assert script.seen[0].port != script.seen[1].port


def test_an_answer_too_late_is_never_read_as_the_next_ones(
    connections: Connections, script: Script
) -> None:
    script.answers = [
        {"delay_s": 0.4, "status": 409, "body": b'{"late":true}'},
        {"body": b'{"next":true}'},
    ]
    with pytest.raises(TimeoutError):
        connections.post("/slow", BODY, 1.0, 0.1)
    connections.post("/next", BODY, 1.0, 1.0)  # 201, not the late 409
    assert script.seen[0].port != script.seen[1].port


def test_a_hang_up_without_an_answer_raises_and_the_next_post_connects_afresh(
    connections: Connections, script: Script
) -> None:
    script.answers = [{"hang_up": True}, {}]
    with pytest.raises(ConnectionError):  # http.client's RemoteDisconnected is one
        connections.post("/a", BODY, 1.0, 1.0)
    connections.post("/b", BODY, 1.0, 1.0)
    assert [s.path for s in script.seen] == ["/a", "/b"]


def test_no_connection_made_is_a_connect_error_so_the_binder_knows_nothing_was_sent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    made = Connections(api_client(f"http://127.0.0.1:{port}"))
    with pytest.raises(ConnectTimeoutError):
        made.post("/x", BODY, 0.5, 0.5)
    made.close()


def test_each_thread_keeps_a_connection_of_its_own_and_close_closes_them(
    connections: Connections, script: Script
) -> None:
    threads = 4
    barrier = threading.Barrier(threads)

    def posts() -> None:
        barrier.wait()
        for _ in range(3):
            connections.post("/x", BODY, 1.0, 1.0)

    workers = [threading.Thread(target=posts) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    ports = [s.port for s in script.seen]
    assert len(ports) == 12
    assert len(set(ports)) == threads
    assert all(ports.count(p) == 3 for p in set(ports))
    made = list(connections._made)
    assert len(made) == threads
    connections.close()
    assert all(conn.sock is None for conn in made)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _tls_server(
    ca: trustme.CA, script: Script, names: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> ThreadingHTTPServer:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED  # a client certificate, as kube-apiserver asks
    return serve(script, context)


def _client_files(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    ca_file, cert_file = tmp_path / "ca.pem", tmp_path / "client.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("gangsat").private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    return {"ssl_ca_cert": str(ca_file), "cert_file": str(cert_file), "key_file": str(cert_file)}


def test_tls_verifies_the_server_by_the_configured_ca_and_shows_the_client_certificate(
    ca: trustme.CA, script: Script, tmp_path: Path
) -> None:
    server = _tls_server(ca, script)
    files = _client_files(ca, tmp_path)
    host = f"https://127.0.0.1:{server.server_port}"
    try:
        made = Connections(api_client(host, **files))
        made.post("/x", BODY, 2.0, 2.0)
        made.post("/y", BODY, 2.0, 2.0)
        made.close()
        assert [s.path for s in script.seen] == ["/x", "/y"]
        assert script.seen[0].port == script.seen[1].port
        # A server its CA did not sign is refused before anything is sent, and the
        # binder is told so (``Unsent``: the bind cannot have landed).
        other = tmp_path / "other.pem"
        trustme.CA().cert_pem.write_to_path(str(other))
        stranger = Connections(api_client(host, **{**files, "ssl_ca_cert": str(other)}))
        with pytest.raises(Unsent) as raised:
            stranger.post("/z", BODY, 2.0, 2.0)
        assert isinstance(raised.value, ConnectTimeoutError)
        assert isinstance(raised.value.__cause__, ssl.SSLError)
        stranger.close()
        assert [s.path for s in script.seen] == ["/x", "/y"]
    finally:
        server.shutdown()


def test_through_a_proxy_requests_go_through_the_clients_pool(
    scripted_server: ThreadingHTTPServer, script: Script
) -> None:
    # The recording server as the proxy: a proxied request names its whole URL.
    made = Connections(
        api_client(
            "http://api.example:6443", proxy=f"http://127.0.0.1:{scripted_server.server_port}"
        )
    )
    assert made.via_pool
    made.post("/api/v1/namespaces/a/pods/p/binding", BODY, 1.0, 1.0)
    made.close()
    [seen] = script.seen
    assert seen.path == "http://api.example:6443/api/v1/namespaces/a/pods/p/binding"
    assert seen.headers["authorization"] == "Bearer sa-token"


@pytest.mark.parametrize("proxied", [False, True])
def test_a_patch_carries_its_content_type_and_returns_the_answers_body(
    scripted_server: ThreadingHTTPServer, script: Script, proxied: bool
) -> None:
    here = f"http://127.0.0.1:{scripted_server.server_port}"
    api = api_client("http://api.example:6443", proxy=here) if proxied else api_client(here)
    made = Connections(api)
    assert made.via_pool is proxied
    answer = b'{"metadata":{"name":"p.17f"}}'
    script.answers = [{"status": 200, "chunked": True, "body": answer}]
    kind = "application/strategic-merge-patch+json"
    got = made.request("PATCH", "/api/v1/namespaces/a/events/p.17f", b'{"count":2}', 1.0, 1.0, kind)
    made.close()
    assert got == answer
    [seen] = script.seen
    assert (seen.method, seen.body) == ("PATCH", b'{"count":2}')
    assert seen.path.endswith("/api/v1/namespaces/a/events/p.17f")
    assert seen.headers["content-type"] == kind
    assert seen.headers["authorization"] == "Bearer sa-token"


def test_the_servers_name_verify_and_none_as_the_client_configures_them(
    ca: trustme.CA, script: Script, tmp_path: Path
) -> None:
    # Certified for "kubernetes" only, reached at 127.0.0.1: refused unless the client
    # names the server so (kubeconfig's tls-server-name), or verifies nothing.
    server = _tls_server(ca, script, names=("kubernetes",))
    files = _client_files(ca, tmp_path)
    host = f"https://127.0.0.1:{server.server_port}"
    try:
        plain = Connections(api_client(host, **files))
        with pytest.raises(Unsent):
            plain.post("/refused", BODY, 2.0, 2.0)
        plain.close()
        for settings in ({"tls_server_name": "kubernetes"}, {"verify_ssl": False}):
            made = Connections(api_client(host, **files, **settings))
            made.post("/" + next(iter(settings)), BODY, 2.0, 2.0)
            made.close()
        assert [s.path for s in script.seen] == ["/tls_server_name", "/verify_ssl"]
    finally:
        server.shutdown()


def test_a_handshake_never_answered_is_unsent_within_the_connect_timeout() -> None:
    # A listener that takes the TCP connection and never speaks TLS (an API server too
    # busy to): nothing of the bind was written, and the binder must know it.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        made = Connections(api_client(f"https://127.0.0.1:{listener.getsockname()[1]}"))
        started = time.monotonic()
        with pytest.raises(Unsent):
            made.post("/x", BODY, 0.3, 5.0)
        assert time.monotonic() - started < 2.0
        made.close()


def test_nothing_is_sent_once_the_time_to_send_by_has_passed(
    connections: Connections, script: Script
) -> None:
    with pytest.raises(Unsent):
        connections.post("/late", BODY, 1.0, 1.0, send_by=time.monotonic() - 0.01)
    connections.post("/now", BODY, 1.0, 1.0, send_by=time.monotonic() + 5.0)
    assert [s.path for s in script.seen] == ["/now"]


def test_close_wakes_a_read_waiting_for_an_answer_and_no_connection_is_made_after(
    connections: Connections, script: Script
) -> None:
    script.answers = [{"delay_s": 3.0}]
    outcome: list[BaseException | None] = []

    def waiting() -> None:
        try:
            connections.post("/slow", BODY, 1.0, 10.0)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=waiting)
    thread.start()
    time.sleep(0.3)  # sent, its answer awaited
    started = time.monotonic()
    connections.close()
    thread.join(timeout=2.0)
    assert not thread.is_alive() and time.monotonic() - started < 1.5
    assert isinstance(outcome[0], Exception) and not isinstance(outcome[0], ApiException)
    with pytest.raises(Unsent):
        connections.post("/after", BODY, 1.0, 1.0)
    assert [s.path for s in script.seen] == ["/slow"]


def test_a_fenced_write_goes_out_within_the_lease_or_not_at_all(
    scripted_server: ThreadingHTTPServer, script: Script
) -> None:
    left = [0.0]
    made = Connections(
        api_client(f"http://127.0.0.1:{scripted_server.server_port}"), fence=lambda: left[0]
    )
    with pytest.raises(Unsent):
        made.request("PATCH", "/lost", b"{}", 1.0, 1.0)
    left[0] = 5.0
    made.request("PATCH", "/held", b"{}", 1.0, 1.0)
    made.close()
    assert [s.path for s in script.seen] == ["/held"]
    # Through a proxy's pool too: nothing goes out without the lease.
    here = f"http://127.0.0.1:{scripted_server.server_port}"
    proxied = Connections(api_client("http://api.example:6443", proxy=here), fence=lambda: 0.0)
    with pytest.raises(Unsent):
        proxied.request("PATCH", "/lost", b"{}", 1.0, 1.0)
    proxied.close()
    assert [s.path for s in script.seen] == ["/held"]


def test_a_server_url_with_a_path_keeps_it_before_every_request(
    scripted_server: ThreadingHTTPServer, script: Script
) -> None:
    made = Connections(
        api_client(f"http://127.0.0.1:{scripted_server.server_port}/k8s/clusters/c1/")
    )
    made.post("/api/v1/namespaces/a/pods/p/binding", BODY, 1.0, 1.0)
    made.close()
    assert [s.path for s in script.seen] == ["/k8s/clusters/c1/api/v1/namespaces/a/pods/p/binding"]


def test_a_token_with_a_line_break_is_refused_not_sent(
    scripted_server: ThreadingHTTPServer, script: Script
) -> None:
    api = api_client(f"http://127.0.0.1:{scripted_server.server_port}")
    api.configuration.api_key = {"authorization": "sa-token\r\nX-Injected: 1"}
    made = Connections(api)
    with pytest.raises(ValueError):
        made.post("/x", BODY, 1.0, 1.0)
    made.close()
    assert script.seen == []
