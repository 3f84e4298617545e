"""A scripted HTTP/1.1 server for the tests of ``adapter.kube.connections``: what it
answers, request by request (``Script``), what it saw, and the fixtures that serve it and
connect to it (``conftest``: ``script``, ``scripted_server``, ``connections``)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from kubernetes import client

from adapter.kube.connections import Connections


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


def serve(script: Script, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    handler = type("ScriptedHandler", (Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def api_client(host: str, **settings: Any) -> client.ApiClient:
    config = client.Configuration(host=host)
    config.api_key = {"authorization": "sa-token"}
    config.api_key_prefix = {"authorization": "Bearer"}
    for key, value in settings.items():
        setattr(config, key, value)
    return client.ApiClient(config)


BODY = json.dumps({"kind": "Binding", "target": {"name": "n1"}}).encode()


def next_on_a_new_connection(connections: Connections, script: Script) -> None:
    """The next post is answered, on a connection other than the last request's."""
    connections.post("/b", BODY, 1.0, 1.0)
    assert [s.path for s in script.seen][-2:] == ["/a", "/b"]
    assert script.seen[-2].port != script.seen[-1].port
