"""Connections kept per thread (``adapter.kube.connections``): what a request carries,
what an answer raises, and what becomes of a connection around failures: one per
thread, reused, made again after the server closed it, dropped after an error, no
request sent twice, no late answer read as the next one's; TLS as the client's
configuration asks (its CA, its client certificate); through a proxy, the client's pool."""

from __future__ import annotations

import gc
import http.client
import json
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httptools
import pytest
import trustme
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ConnectTimeoutError

from adapter.kube import connections as connections_module
from adapter.kube.connections import Connections, Unsent


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    port: int  # the client's: one per connection
    method: str = "POST"


@dataclass
class Script:
    """What the server answers, request by request (the last answer repeats)."""

    answers: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    seen: list[Seen] = field(default_factory=list)

    def next(self) -> dict[str, Any]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: ClassVar[Script]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {k.lower(): v for k, v in self.headers.items()}
        seen = Seen(self.path, headers, body, self.client_address[1], self.command)
        self.script.seen.append(seen)
        answer = self.script.next()
        if answer.get("interim"):
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
            self.wfile.flush()
        time.sleep(answer.get("delay_s", 0.0))
        if answer.get("hang_up"):
            self.close_connection = True
            return
        if "raw" in answer:  # written as it is, the connection then closed or not
            self.wfile.write(answer["raw"])
            self.wfile.flush()
            self.close_connection = answer.get("close_after", True)
            return
        status, payload = answer.get("status", 201), answer.get("body", b'{"kind":"Status"}')
        self.send_response(status)
        for k, v in answer.get("headers", {}).items():
            self.send_header(k, v)
        if answer.get("chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = len(payload) // 2
            for part in (payload[:half], payload[half:], b""):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        else:
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        # Closed without saying so (an idle timeout): the client must notice on reuse.
        self.close_connection = bool(answer.get("close_after"))

    do_PATCH = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def script() -> Iterator[Script]:
    yield Script()


def _serve(script: Script, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    handler = type("ScriptedHandler", (Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server(script: Script) -> Iterator[ThreadingHTTPServer]:
    server = _serve(script)
    try:
        yield server
    finally:
        server.shutdown()


def _api(host: str, **settings: Any) -> client.ApiClient:
    config = client.Configuration(host=host)
    config.api_key = {"authorization": "sa-token"}
    config.api_key_prefix = {"authorization": "Bearer"}
    for key, value in settings.items():
        setattr(config, key, value)
    return client.ApiClient(config)


@pytest.fixture
def connections(server: ThreadingHTTPServer) -> Iterator[Connections]:
    made = Connections(_api(f"http://127.0.0.1:{server.server_port}"))
    try:
        yield made
    finally:
        made.close()


BODY = json.dumps({"kind": "Binding", "target": {"name": "n1"}}).encode()


def _next_on_a_new_connection(connections: Connections, script: Script) -> None:
    """The next post is answered, on a connection other than the last request's."""
    connections.post("/b", BODY, 1.0, 1.0)
    assert [s.path for s in script.seen][-2:] == ["/a", "/b"]
    assert script.seen[-2].port != script.seen[-1].port


def test_a_post_carries_the_clients_credentials_and_reuses_its_connection(
    connections: Connections, script: Script, server: ThreadingHTTPServer
) -> None:
    connections.post("/api/v1/namespaces/a/pods/p-0/binding", BODY, 1.0, 1.0)
    connections.post("/api/v1/namespaces/a/pods/p-1/binding", BODY, 1.0, 1.0)
    first, second = script.seen
    assert first.path == "/api/v1/namespaces/a/pods/p-0/binding"
    assert first.headers["authorization"] == "Bearer sa-token"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["user-agent"] == connections.api.user_agent
    assert first.headers["accept-encoding"] == "identity"
    assert first.headers["host"] == f"127.0.0.1:{server.server_port}"
    assert json.loads(first.body) == {"kind": "Binding", "target": {"name": "n1"}}
    assert second.port == first.port


def test_a_refused_post_raises_what_the_binder_reads(
    connections: Connections, script: Script
) -> None:
    status = {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"}
    script.answers = [
        {"status": 429, "headers": {"Retry-After": "2"}, "body": json.dumps(status).encode()},
        {},
    ]
    with pytest.raises(ApiException) as raised:
        connections.post("/x", BODY, 1.0, 1.0)
    assert raised.value.status == 429
    assert json.loads(raised.value.body or "") == status
    assert (raised.value.headers or {}).get("Retry-After") == "2"
    connections.post("/x", BODY, 1.0, 1.0)  # the refusal was read whole: the next is answered
    assert script.seen[0].port == script.seen[1].port


def test_a_chunked_answer_is_read_to_its_end(connections: Connections, script: Script) -> None:
    script.answers = [{"status": 409, "chunked": True, "body": b'{"reason":"Conflict"}'}, {}]
    with pytest.raises(ApiException) as raised:
        connections.post("/x", BODY, 1.0, 1.0)
    assert json.loads(raised.value.body or "") == {"reason": "Conflict"}
    connections.post("/x", BODY, 1.0, 1.0)
    assert script.seen[0].port == script.seen[1].port


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
    made = Connections(_api(f"http://127.0.0.1:{port}"))
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
    return _serve(script, context)


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
        made = Connections(_api(host, **files))
        made.post("/x", BODY, 2.0, 2.0)
        made.post("/y", BODY, 2.0, 2.0)
        made.close()
        assert [s.path for s in script.seen] == ["/x", "/y"]
        assert script.seen[0].port == script.seen[1].port
        # A server its CA did not sign is refused before anything is sent, and the
        # binder is told so (``Unsent``: the bind cannot have landed).
        other = tmp_path / "other.pem"
        trustme.CA().cert_pem.write_to_path(str(other))
        stranger = Connections(_api(host, **{**files, "ssl_ca_cert": str(other)}))
        with pytest.raises(Unsent) as raised:
            stranger.post("/z", BODY, 2.0, 2.0)
        assert isinstance(raised.value, ConnectTimeoutError)
        assert isinstance(raised.value.__cause__, ssl.SSLError)
        stranger.close()
        assert [s.path for s in script.seen] == ["/x", "/y"]
    finally:
        server.shutdown()


def test_through_a_proxy_requests_go_through_the_clients_pool(
    server: ThreadingHTTPServer, script: Script
) -> None:
    # The recording server as the proxy: a proxied request names its whole URL.
    made = Connections(
        _api("http://api.example:6443", proxy=f"http://127.0.0.1:{server.server_port}")
    )
    assert made.via_pool
    made.post("/api/v1/namespaces/a/pods/p/binding", BODY, 1.0, 1.0)
    made.close()
    [seen] = script.seen
    assert seen.path == "http://api.example:6443/api/v1/namespaces/a/pods/p/binding"
    assert seen.headers["authorization"] == "Bearer sa-token"


@pytest.mark.parametrize("proxied", [False, True])
def test_a_patch_carries_its_content_type_and_returns_the_answers_body(
    server: ThreadingHTTPServer, script: Script, proxied: bool
) -> None:
    here = f"http://127.0.0.1:{server.server_port}"
    api = _api("http://api.example:6443", proxy=here) if proxied else _api(here)
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
        plain = Connections(_api(host, **files))
        with pytest.raises(Unsent):
            plain.post("/refused", BODY, 2.0, 2.0)
        plain.close()
        for settings in ({"tls_server_name": "kubernetes"}, {"verify_ssl": False}):
            made = Connections(_api(host, **files, **settings))
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
        made = Connections(_api(f"https://127.0.0.1:{listener.getsockname()[1]}"))
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


def test_an_interim_answer_is_an_error_and_its_final_answer_is_never_the_next_ones(
    connections: Connections, script: Script
) -> None:
    script.answers = [
        {"interim": True, "delay_s": 0.05, "body": b'{"first":true}'},
        {"status": 409, "body": b'{"second":true}'},
    ]
    with pytest.raises(http.client.HTTPException):
        connections.post("/first", BODY, 1.0, 1.0)
    with pytest.raises(ApiException) as raised:
        connections.post("/second", BODY, 1.0, 1.0)  # its own 409, not the first's 201
    assert raised.value.status == 409
    assert script.seen[0].port != script.seen[1].port


def test_an_answer_without_a_length_ends_with_its_connection(
    connections: Connections, script: Script
) -> None:
    body = b'{"kind":"Status","code":409}'
    script.answers = [
        {"raw": b"HTTP/1.0 409 Conflict\r\nContent-Type: application/json\r\n\r\n" + body},
        {},
    ]
    with pytest.raises(ApiException) as raised:
        connections.post("/a", BODY, 1.0, 1.0)
    assert raised.value.status == 409
    assert raised.value.reason == "Conflict"
    assert raised.value.body == body.decode()
    _next_on_a_new_connection(connections, script)


def test_a_transfer_coding_not_ending_in_chunked_ends_with_the_connection(
    connections: Connections, script: Script
) -> None:
    body = b'{"kind":"Status","code":409}'
    raw = b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: identity\r\n\r\n" + body
    script.answers = [{"raw": raw}, {}]
    with pytest.raises(ApiException) as raised:
        connections.post("/a", BODY, 1.0, 1.0)
    assert (raised.value.status, raised.value.body) == (409, body.decode())


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
    server: ThreadingHTTPServer, script: Script
) -> None:
    left = [0.0]
    made = Connections(_api(f"http://127.0.0.1:{server.server_port}"), fence=lambda: left[0])
    with pytest.raises(Unsent):
        made.request("PATCH", "/lost", b"{}", 1.0, 1.0)
    left[0] = 5.0
    made.request("PATCH", "/held", b"{}", 1.0, 1.0)
    made.close()
    assert [s.path for s in script.seen] == ["/held"]
    # Through a proxy's pool too: nothing goes out without the lease.
    here = f"http://127.0.0.1:{server.server_port}"
    proxied = Connections(_api("http://api.example:6443", proxy=here), fence=lambda: 0.0)
    with pytest.raises(Unsent):
        proxied.request("PATCH", "/lost", b"{}", 1.0, 1.0)
    proxied.close()
    assert [s.path for s in script.seen] == ["/held"]


def test_head_is_refused_not_sent(connections: Connections, script: Script) -> None:
    with pytest.raises(ValueError):
        connections.request("HEAD", "/a", b"", 1.0, 1.0)
    assert script.seen == []


def test_bytes_past_a_whole_answer_leave_it_standing_and_the_connection_dropped(
    connections: Connections, script: Script
) -> None:
    whole = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
    for junk in (b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n", b"\x00not http", upgrade):
        script.answers = [{"raw": whole + junk, "close_after": False}, {}]
        script.seen.clear()
        connections.post("/a", BODY, 1.0, 1.0)  # the 201, not what came after it
        _next_on_a_new_connection(connections, script)


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        # cut short: never a partial success
        (
            {"raw": b"HTTP/1.1 201 Created\r\nContent-Length: 40\r\n\r\n" + b'{"kind":'},
            http.client.IncompleteRead,
        ),
        # larger than any answer to what is sent here (MAX_ANSWER_BYTES set to 1,000)
        ({"body": b"x" * 5000}, http.client.HTTPException),
        # not HTTP: llhttp's error, the outcome unknown (not a refusal, not unsent)
        ({"raw": b"SSH-2.0-OpenSSH_9.6\r\n", "close_after": False}, httptools.HttpParserError),
    ],
    ids=["cut-short", "too-large", "not-http"],
)
def test_a_broken_answer_raises_and_the_next_post_connects_afresh(
    connections: Connections,
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
    answer: dict[str, Any],
    raised: type[Exception],
) -> None:
    monkeypatch.setattr(connections_module, "MAX_ANSWER_BYTES", 1000)
    script.answers = [answer, {}]
    with pytest.raises(raised):
        connections.post("/a", BODY, 1.0, 1.0)
    _next_on_a_new_connection(connections, script)


def test_a_refusals_headers_are_read_whatever_their_case(
    connections: Connections, script: Script
) -> None:
    raw = (
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\nRetry-After: 9\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    script.answers = [{"raw": raw, "close_after": False}, {}]
    with pytest.raises(ApiException) as raised:
        connections.post("/a", BODY, 1.0, 1.0)
    assert (raised.value.headers or {}).get("Retry-After") == "3"  # the first, as http.client
    assert raised.value.reason == "Too Many Requests"
    connections.post("/b", BODY, 1.0, 1.0)  # read whole: the connection is kept
    assert script.seen[0].port == script.seen[1].port


def test_an_answer_read_is_freed_at_once_not_left_to_the_cyclic_collector(
    connections: Connections, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[weakref.ref[Any]] = []

    class Tracked(connections_module._Answer):
        def __init__(self) -> None:
            super().__init__()
            made.append(weakref.ref(self))

    monkeypatch.setattr(connections_module, "_Answer", Tracked)
    # Answered 2xx: a refusal's exception holds the frame it was raised in, answer and all.
    script.answers = [{}, {"chunked": True}]
    gc.disable()
    try:
        connections.post("/a", BODY, 1.0, 1.0)
        connections.post("/b", BODY, 1.0, 1.0)
        assert len(made) == 2
        assert [ref() for ref in made] == [None, None]
    finally:
        gc.enable()


def test_a_server_url_with_a_path_keeps_it_before_every_request(
    server: ThreadingHTTPServer, script: Script
) -> None:
    made = Connections(_api(f"http://127.0.0.1:{server.server_port}/k8s/clusters/c1/"))
    made.post("/api/v1/namespaces/a/pods/p/binding", BODY, 1.0, 1.0)
    made.close()
    assert [s.path for s in script.seen] == ["/k8s/clusters/c1/api/v1/namespaces/a/pods/p/binding"]


def test_a_token_with_a_line_break_is_refused_not_sent(
    server: ThreadingHTTPServer, script: Script
) -> None:
    api = _api(f"http://127.0.0.1:{server.server_port}")
    api.configuration.api_key = {"authorization": "sa-token\r\nX-Injected: 1"}
    made = Connections(api)
    with pytest.raises(ValueError):
        made.post("/x", BODY, 1.0, 1.0)
    made.close()
    assert script.seen == []
