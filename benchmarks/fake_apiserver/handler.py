"""The HTTP side: a threading server whose handler parses a request, records it, runs the
hooks, injected failures and the request's costs (costs.py), then answers from the fake
(JSON objects, Kubernetes Status errors, chunked watch streams)."""

from __future__ import annotations

import contextlib
import json
import math
import queue
import time
from collections.abc import Callable, Iterable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from benchmarks.fake_apiserver.api import RequestRecord, _Api
from benchmarks.fake_apiserver.costs import charge
from benchmarks.fake_apiserver.objects import (
    TYPE_KEYS,
    FailedInBody,
    FakeApiError,
    Obj,
    _dumps,
    _not_found_path,
    _Resource,
)
from benchmarks.fake_apiserver.routing import _resource_target, _Target, _verb
from benchmarks.fake_apiserver.selectors import _selector
from benchmarks.fake_apiserver.watch import BATCH, POLL_S, _alive, _Event, _Watcher


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # 16 client threads opening connections at once

    def __init__(self, address: tuple[str, int], fake: _Api) -> None:
        self.fake = fake
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, alive=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, alive=False)

    def handle(self) -> None:
        # A client that hangs up or resets is routine here (dropped watches, pool overflow).
        with contextlib.suppress(ConnectionError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # --- plumbing --------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        code: int,
        payload: Obj | bytes,
        content_type: str = "application/json",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        data = payload if isinstance(payload, bytes) else _dumps(payload)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: FakeApiError) -> None:
        self._send(error.code, error.status(), headers=error.headers)

    def _serve(self, method: str) -> None:
        fake = self.server.fake
        body_bytes = self._read_body()  # always, or keep-alive would desynchronise
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        target: _Target | None = None
        if len(segments) > 2 and segments[:2] == ["api", "v1"]:
            target = _resource_target("", "v1", segments[2:])
        elif len(segments) > 3 and segments[0] == "apis":
            target = _resource_target(segments[1], segments[2], segments[3:])
        verb = _verb(method, target, query) if target else method.lower()
        fake.requests.append(
            RequestRecord(
                verb,
                target.group if target else "",
                target.plural if target else "",
                target.sub if target else None,
                target.namespace if target else None,
                target.name if target else None,
                path,
                self._content_type() if body_bytes else None,
                split.query,
            )
        )
        try:
            for hook in list(fake.hooks):
                hook(method, path)
            injected = fake._injected(method, path)
            if injected is not None:
                raise injected
            if verb != "watch":
                charge(fake.latency_s, fake.cpu_ms_per_request)
            body: Any = None
            if body_bytes:
                try:
                    body = json.loads(body_bytes)
                except ValueError as e:
                    raise FakeApiError(
                        400, f"the body of the request is not valid JSON: {e}", details={}
                    ) from None
            if target is None:
                self._non_resource(method, segments)
            else:
                self._resource(method, verb, target, query, body)
        except FakeApiError as e:
            self._send_error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug in the fake or a hook: answer like a real server
            self._send_error(FakeApiError(500, f"{type(e).__name__}: {e}"))

    def _non_resource(self, method: str, segments: list[str]) -> None:
        fake = self.server.fake
        if method != "GET":
            raise FakeApiError(
                405, "the server does not allow this method on the requested resource"
            )
        host = "{}:{}".format(*self.server.server_address[:2])
        if segments == ["version"]:
            self._send(
                200,
                {
                    "major": "1",
                    "minor": "34",
                    "gitVersion": "v1.34.0-gangsat-fake",
                    "gitCommit": "0000000000000000000000000000000000000000",
                    "gitTreeState": "clean",
                    "buildDate": "2025-08-27T00:00:00Z",
                    "goVersion": "go1.24.6",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
        elif segments in (["healthz"], ["livez"], ["readyz"]):
            self._send(200, b"ok", content_type="text/plain; charset=utf-8")
        elif segments == []:
            self._send(200, {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/version"]})
        elif segments == ["api"]:
            self._send(200, fake._api_versions(host))
        elif segments == ["api", "v1"]:
            self._send(200, fake._resource_list("", "v1"))
        elif segments == ["apis"]:
            self._send(200, fake._group_list())
        elif len(segments) == 2 and segments[0] == "apis":
            versions = fake._groups().get(segments[1])
            if not versions or not segments[1]:
                raise _not_found_path()
            self._send(
                200, {"kind": "APIGroup", "apiVersion": "v1", **fake._group(segments[1], versions)}
            )
        elif len(segments) == 3 and segments[0] == "apis":
            self._send(200, fake._resource_list(segments[1], segments[2]))
        else:
            raise _not_found_path()

    def _resource(
        self, method: str, verb: str, t: _Target, query: dict[str, str], body: Any
    ) -> None:
        fake = self.server.fake
        # A dry-run eviction checks what a real one would (the pod, its preconditions, its
        # disruption budget) and changes nothing; other dry runs are not faked.
        dry_run = "dryRun" in query
        if dry_run and (query["dryRun"] != "All" or t.sub != "eviction" or method != "POST"):
            raise FakeApiError(
                400, "dryRun is supported only on pods/eviction by the fake API server"
            )
        if (t.group, t.plural, t.sub) == ("", "bindings", None) and t.name is None:
            if method != "POST" or t.namespace is None:
                raise _not_found_path()
            name = (
                ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
            )
            if not name:
                raise FakeApiError(400, "a Binding needs metadata.name (the pod)")
            with fake._lock:
                fake._bind(t.namespace, name, body)
            self._send(201, _bind_success())
            return
        res = fake._resources.get((t.group, t.plural))
        if res is None or t.version not in res.versions:
            raise _not_found_path()
        if res.namespaced and t.namespace is None and t.name is not None:
            raise _not_found_path()
        if not res.namespaced and t.namespace is not None:
            raise _not_found_path()
        if t.sub is not None:
            self._subresource(method, res, t, body, dry_run)
            return
        ns = t.namespace
        if verb == "list":
            self._send(200, fake._list(res, ns, t.version, query))
        elif verb == "watch":
            self._watch(res, t, query)
        elif verb == "get":
            assert t.name is not None
            with fake._lock:
                obj = fake._objects[(res.group, res.plural)].get((ns or "", t.name))
            if obj is None:
                raise res.not_found(t.name)
            self._send(200, _present(res, obj, t.version))
        elif verb == "create":
            if t.name is not None:
                raise FakeApiError(
                    405, "the server does not allow this method on the requested resource"
                )
            if res.namespaced and ns is None:
                raise FakeApiError(
                    405, "the server does not allow this method on the requested resource"
                )
            if not isinstance(body, dict):
                raise FakeApiError(400, "the body of the request must be a JSON object")
            with fake._lock:
                obj = fake._create(res, ns, body, t.version)
            self._send(201, _present(res, obj, t.version))
        elif verb == "update":
            assert t.name is not None
            with fake._lock:
                code, obj = fake._update(res, ns, t.name, None, body, t.version)
            self._send(code, _present(res, obj, t.version))
        elif verb == "patch":
            assert t.name is not None
            with fake._lock:
                obj = fake._patch(res, ns, t.name, None, body, self._content_type(), t.version)
            self._send(200, _present(res, obj, t.version))
        elif verb == "delete":
            assert t.name is not None
            with fake._lock:
                if (res.group, res.plural) == ("", "pods") and ns is not None:
                    options = dict(body) if isinstance(body, dict) else {}
                    if query.get("gracePeriodSeconds", "").lstrip("-").isdigit():
                        # The query parameter, as the client sends it, wins over the body.
                        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
                    last = fake._delete_pod(ns, t.name, options)  # graceful, as a kubelet
                else:
                    last = fake._delete(res, ns, t.name, body)
            if res.return_deleted:
                self._send(200, _present(res, last, t.version))
            else:
                details = res.details(t.name)
                details["uid"] = last["metadata"].get("uid")
                self._send(
                    200,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": details,
                    },
                )
        elif verb == "deletecollection":
            listed = fake._list(
                res,
                ns,
                t.version,
                {k: v for k, v in query.items() if k in ("labelSelector", "fieldSelector")},
            )
            deleted = []
            with fake._lock:
                for item in listed["items"]:
                    meta = item["metadata"]
                    # Someone else may have deleted it since the list.
                    with contextlib.suppress(FakeApiError):
                        deleted.append(fake._delete(res, meta.get("namespace"), meta["name"], {}))
            listed["items"] = (
                deleted
                if res.custom
                else [{k: v for k, v in o.items() if k not in TYPE_KEYS} for o in deleted]
            )
            self._send(200, listed)
        else:
            raise FakeApiError(
                405, "the server does not allow this method on the requested resource"
            )

    def _subresource(
        self, method: str, res: _Resource, t: _Target, body: Any, dry_run: bool = False
    ) -> None:
        fake = self.server.fake
        assert t.name is not None and t.sub is not None
        # POST-only subresources of a pod: pods/binding and pods/eviction (policy/v1).
        actions: dict[str, Callable[[str, str, Any], None]] = {
            "binding": fake._bind,
            "eviction": partial(fake._evict, dry_run=dry_run),
        }
        pod_action = actions.get(t.sub)
        if (res.group, res.plural) == ("", "pods") and pod_action is not None:
            if method != "POST":
                raise FakeApiError(
                    405, "the server does not allow this method on the requested resource"
                )
            assert t.namespace is not None
            try:
                with fake._lock:
                    pod_action(t.namespace, t.name, body)
            except FailedInBody as e:
                self._send(201, e.status())
                return
            self._send(201, _bind_success())
            return
        if t.sub != "status" or not res.status_subresource:
            raise _not_found_path()
        with fake._lock:
            if method == "GET":
                obj = fake._objects[(res.group, res.plural)].get((t.namespace or "", t.name))
                if obj is None:
                    raise res.not_found(t.name)
            elif method == "PUT":
                obj = fake._update(res, t.namespace, t.name, "status", body, t.version)[1]
            elif method == "PATCH":
                obj = fake._patch(
                    res, t.namespace, t.name, "status", body, self._content_type(), t.version
                )
            else:
                raise FakeApiError(
                    405, "the server does not allow this method on the requested resource"
                )
        self._send(200, _present(res, obj, t.version))

    def _content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower()

    # --- watch -----------------------------------------------------------------------

    def _watch(self, res: _Resource, t: _Target, query: dict[str, str]) -> None:
        fake = self.server.fake
        selector = _selector(res, query)
        try:
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else 0.0
        except ValueError:
            raise FakeApiError(400, "invalid timeoutSeconds") from None
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        watcher, expired = fake._open_watch(
            res, t.namespace, selector, t.version, query.get("resourceVersion"), self.connection
        )
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            if expired is not None:
                # A real apiserver answers 200 and reports the expiry in the stream.
                self._chunk(_dumps({"type": "ERROR", "object": expired.status()}) + b"\n")
                self._chunk(b"")
                return
            if not self._stream(watcher, timeout, bookmarks):
                self.close_connection = True  # dropped: no terminating chunk, just gone
                return
            self._chunk(b"")
        except OSError:
            self.close_connection = True
        finally:
            fake._close_watch(watcher)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _stream(self, watcher: _Watcher, timeout: float, bookmarks: bool) -> bool:
        """Send events until the timeout (True) or until dropped or the client left (False)."""
        fake = self.server.fake
        interval = fake.bookmark_interval_s
        now = time.monotonic()
        deadline = now + timeout if timeout > 0 else math.inf
        next_bookmark = now + interval if bookmarks and interval > 0 else math.inf
        while True:
            now = time.monotonic()
            if now >= deadline or now >= next_bookmark:
                pending, bookmark = fake._bookmark(watcher)
                if not self._send_events(watcher, pending):
                    return False
                if bookmarks:
                    self._chunk(_dumps({"type": "BOOKMARK", "object": bookmark}) + b"\n")
                if now >= deadline:
                    return True
                next_bookmark = now + interval
                continue
            wait = min(deadline, next_bookmark, now + POLL_S) - now
            try:
                first = watcher.queue.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if watcher.conn is not None and not _alive(watcher.conn):
                    return False
                continue
            events = [first]
            while len(events) < BATCH:
                try:
                    events.append(watcher.queue.get_nowait())
                except queue.Empty:
                    break
            if not self._send_events(watcher, events):
                return False

    def _send_events(self, watcher: _Watcher, events: list[_Event | None]) -> bool:
        data = bytearray()
        for ev in events:
            if ev is None:
                return False
            data += watcher.encode(ev)
        if data:
            self._chunk(bytes(data))
        return True


def _present(res: _Resource, obj: Obj, version: str) -> Obj:
    api_version = res.api_version(version)
    return obj if obj.get("apiVersion") == api_version else {**obj, "apiVersion": api_version}


def _bind_success() -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
