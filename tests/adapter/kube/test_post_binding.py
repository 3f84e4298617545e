"""The lean requests: Bindings (on the binder's own connections), status patches and
Events (on the writer's), what a kube-apiserver needs of them (path, JSON, content
type, auth) and what their callers need back (an ApiException carrying status, body and
Retry-After)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.kube.binder import post_binding
from adapter.kube.connections import Connections
from adapter.kube.events import Events
from adapter.kube.resources import DIALECTS, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from adapter.kube.status import EventRecorder, ObjectRef
from adapter.kube.status_patches import patch_object_status, pod_status_write
from adapter.kube.writer import Writer


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict[str, Any]]] = []
    answer: tuple[int, dict[str, str], bytes] = (201, {}, b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {k.lower(): v for k, v in self.headers.items()}
        Recorder.seen.append(
            {"method": self.command, "path": self.path, "headers": headers, "body": body}
        )
        status, headers, payload = Recorder.answer
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(payload))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    do_PATCH = do_POST

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
    connections = Connections(api)
    post_binding(connections, "team a", "pod-0", body)
    [request] = Recorder.seen
    assert request["path"] == "/api/v1/namespaces/team%20a/pods/pod-0/binding"
    assert request["headers"]["authorization"] == "Bearer sa-token"
    assert request["headers"]["content-type"] == "application/json"
    assert request["headers"]["user-agent"] == api.user_agent
    assert json.loads(request["body"]) == {"kind": "Binding", "target": {"name": "n1"}}
    # The answer was read whole: a second bind on the same connection is answered.
    post_binding(connections, "team a", "pod-1", body)
    assert len(Recorder.seen) == 2
    connections.close()


def test_a_refused_bind_is_an_api_exception_with_what_the_binder_reads(
    api: client.ApiClient,
) -> None:
    status = {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"}
    Recorder.answer = (429, {"Retry-After": "2"}, json.dumps(status).encode())
    connections = Connections(api)
    with pytest.raises(ApiException) as raised:
        post_binding(connections, "ns", "p", b"{}")
    connections.close()
    assert raised.value.status == 429
    assert json.loads(raised.value.body or "") == status
    assert (raised.value.headers or {}).get("Retry-After") == "2"


def test_status_patches_go_where_each_resource_takes_them(api: client.ApiClient) -> None:
    Recorder.answer = (200, {}, b"{}")
    volcano, queue = DIALECTS[4], DIALECTS[5]
    workload = next(r for r in DIALECTS if r.group == "scheduling.k8s.io" and r.kind == "PodGroup")
    connections = Connections(api)
    try:
        patch_object_status(connections, volcano, True, "ns", "pg", {"phase": "Running"})
        patch_object_status(connections, queue, False, None, "q1", {"running": 2})
        patch_object_status(connections, workload, False, "ns", "pg", {"conditions": []})
        pod_status_write(connections, "ns/p-0", {"nominatedNodeName": None})()
    finally:
        connections.close()
    seen = [(r["method"], r["path"], r["headers"]["content-type"]) for r in Recorder.seen]
    assert seen == [
        # Volcano's PodGroup as it ships has no status subresource: on the object
        ("PATCH", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/pg", MERGE_PATCH),
        ("PATCH", "/apis/scheduling.volcano.sh/v1beta1/queues/q1/status", MERGE_PATCH),
        (
            "PATCH",
            f"/apis/scheduling.k8s.io/{workload.version}/namespaces/ns/podgroups/pg/status",
            STRATEGIC_MERGE_PATCH,
        ),
        ("PATCH", "/api/v1/namespaces/ns/pods/p-0/status", STRATEGIC_MERGE_PATCH),
    ]
    bodies = [json.loads(r["body"]) for r in Recorder.seen]
    assert bodies[0] == {"status": {"phase": "Running"}}
    assert bodies[3] == {"status": {"nominatedNodeName": None}}
    assert {r["headers"]["authorization"] for r in Recorder.seen} == {"Bearer sa-token"}


def test_an_event_is_created_then_its_repeat_patches_the_name_the_server_gave(
    api: client.ApiClient,
) -> None:
    Recorder.answer = (201, {}, b'{"metadata": {"name": "p.17f"}}')
    sent: list[Any] = []
    deferred: list[bool] = []  # Events wait for any status write queued (Writer.submit)

    def submit(key: str, write: Any, dropped: Any = None, later: bool = False) -> None:
        sent.append(write)
        deferred.append(later)

    writer = Writer()
    writer.submit = submit  # type: ignore[method-assign]
    connections = Connections(api)
    events = Events(connections, writer, EventRecorder(refresh_s=0.0))
    ref = ObjectRef("Pod", "ns", "p", "v1", "uid-1")
    events.event(ref, "Warning", "FailedScheduling", "no room")
    events.event(ref, "Warning", "FailedScheduling", "no room")
    try:
        for write in sent:
            write()
    finally:
        connections.close()
    assert deferred == [True, True]
    (create, update) = Recorder.seen
    assert (create["method"], create["path"]) == ("POST", "/api/v1/namespaces/ns/events")
    assert json.loads(create["body"])["involvedObject"]["uid"] == "uid-1"
    assert (update["method"], update["path"]) == ("PATCH", "/api/v1/namespaces/ns/events/p.17f")
    assert update["headers"]["content-type"] == STRATEGIC_MERGE_PATCH
    assert json.loads(update["body"])["count"] == 2
