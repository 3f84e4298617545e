"""The lean Binding request: what a kube-apiserver needs of it (path, JSON, auth) and
what the binder needs back (an ApiException carrying status, body and Retry-After)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.kube.binder import post_binding

TIMEOUT = urllib3.Timeout(connect=2, read=2)


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict[str, Any]]] = []
    answer: tuple[int, dict[str, str], bytes] = (201, {}, b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {k.lower(): v for k, v in self.headers.items()}
        Recorder.seen.append({"path": self.path, "headers": headers, "body": body})
        status, headers, payload = Recorder.answer
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(payload))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
    config.api_key = {"authorization": "sa-token"}
    config.api_key_prefix = {"authorization": "Bearer"}
    try:
        yield client.ApiClient(config)
    finally:
        server.shutdown()


def test_a_bind_posts_the_binding_with_the_clients_auth(api: client.ApiClient) -> None:
    Recorder.answer = (201, {}, b'{"kind":"Status","status":"Success"}')
    body = json.dumps({"kind": "Binding", "target": {"name": "n1"}}).encode()
    post_binding(api, "team a", "pod-0", body, TIMEOUT)
    [request] = Recorder.seen
    assert request["path"] == "/api/v1/namespaces/team%20a/pods/pod-0/binding"
    assert request["headers"]["authorization"] == "Bearer sa-token"
    assert request["headers"]["content-type"] == "application/json"
    assert request["headers"]["user-agent"] == api.user_agent
    assert json.loads(request["body"]) == {"kind": "Binding", "target": {"name": "n1"}}
    # The connection went back to the pool: a second bind reuses it without error.
    post_binding(api, "team a", "pod-1", body, TIMEOUT)
    assert len(Recorder.seen) == 2


def test_a_refused_bind_is_an_api_exception_with_what_the_binder_reads(
    api: client.ApiClient,
) -> None:
    status = {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"}
    Recorder.answer = (429, {"Retry-After": "2"}, json.dumps(status).encode())
    with pytest.raises(ApiException) as raised:
        post_binding(api, "ns", "p", b"{}", TIMEOUT)
    assert raised.value.status == 429
    assert json.loads(raised.value.body or "") == status
    assert (raised.value.headers or {}).get("Retry-After") == "2"
