"""A fake Kubernetes API server over real HTTP, for tests and the bind-throughput benchmark.

What it fakes: the REST surface a scheduler touches, served by ``http.server`` with HTTP/1.1
keep-alive, so the official ``kubernetes`` client (ApiClient, urllib3, ``watch.Watch``)
runs its real code paths against it:

- discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/{group}[/{version}]``, ``/version``);
- nodes, pods (``status`` and ``binding`` subresources, and ``/namespaces/{ns}/bindings``),
  core and ``events.k8s.io`` events, namespaces, leases, priority classes, and CRDs — a
  POSTed CustomResourceDefinition registers its resource, so CRD manifests can be applied;
- one global resourceVersion counter; get, list (label and field selectors, ``limit`` and
  ``continue`` paging consistent at the first page's version), watch (initial ADDED
  events, replay from a version, 410 Expired as an ERROR event, bookmarks,
  ``timeoutSeconds``), create (``generateName``), update with optimistic concurrency,
  JSON / merge / strategic-merge patch, delete with preconditions, deletecollection;
- apiserver behaviour a scheduler can trip over: pod create resets ``status`` to Pending
  and runs Priority admission (``spec.priority`` from the PriorityClass, 403 for an unknown
  class or a hand-set mismatching priority) and defaults ``spec.schedulerName``; pod
  updates may not change the spec beyond what a real server allows, so ``spec.nodeName``
  is set only by a binding; updates that change nothing neither bump the version nor
  emit an event; a write to a resource with a status subresource ignores ``status``;
  a watch with selectors sees an object that stops matching as DELETED (carrying its
  previous state) and one that starts matching as ADDED, as the watch cache does.

What it deliberately does not fake, because nothing in gangsat depends on it: auth
(no TLS, no tokens, no RBAC), schema validation beyond object names, server-side apply
(415), ``dryRun`` (400 rather than silently writing), protobuf and CBOR (always JSON),
graceful deletion and finalizers (a delete is immediate; deleting a namespace deletes its
objects at once), namespace existence checks on create, ``managedFields``, conversion
between versions beyond rewriting ``apiVersion``, shared storage between core and
``events.k8s.io`` events, streaming lists (``sendInitialEvents``), list
``resourceVersion`` semantics (a list is always served at the current version), and
strategic merge patch beyond the merge keys in ``SMP_MERGE_KEYS``. Watch history is kept
per resource, like the apiserver's watch cache, so a busy resource does not expire
another's versions.

It lives in ``benchmarks/`` rather than ``tests/`` because the bind-throughput benchmark
runs against it too (in-process, or as ``python -m benchmarks.fake_apiserver`` in a
separate process), not only the test suite.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import queue
import random
import re
import signal
import socket
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    from kubernetes import client as kclient

__all__ = ["FakeApiError", "FakeApiServer", "RequestRecord", "main"]

Obj = dict[str, Any]

# Groups served by kube-apiserver itself: their list items carry no kind/apiVersion and
# they accept strategic merge patches; every other group behaves like a custom resource.
BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

CONFLICT_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

# Strategic merge patch merges these lists element by element on the key; every other
# list is replaced, as for a merge patch. The subset of Kubernetes' patchMergeKey tags
# that a scheduler's writes meet.
SMP_MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
}
SMP_UNION_LISTS = frozenset({"finalizers"})  # patchStrategy "merge" on a list of strings

# What a real server lets a pod update change in spec (ValidatePodUpdate); nodeName is not
# among them, which is why a scheduler must bind.
POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "schedulingGates",
    "terminationGracePeriodSeconds",
)

TYPE_KEYS = ("kind", "apiVersion")
SNAPSHOTS = 256  # paged lists kept consistent; an older continue token gets 410
POLL_S = 0.25  # how soon an idle watch notices its client went away
BATCH = 512  # events written in one chunk when a watcher has a backlog
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's generateName alphabet

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _clone(obj: Any) -> Any:
    # A JSON round trip is both a deep copy and a check that the object is plain JSON.
    return json.loads(json.dumps(obj))


class FakeApiError(Exception):
    """An error the fake answers with a Kubernetes Status; raised by the direct methods too."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: Obj | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(f"{code} {reason or REASONS.get(code, '')}: {message}")
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.headers = tuple(headers)

    def status(self) -> Obj:
        status: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


def _not_found_path() -> FakeApiError:
    return FakeApiError(404, "the server could not find the requested resource", details={})


@dataclass(frozen=True)
class RequestRecord:
    """One request the server handled, in Kubernetes authorization terms.

    Non-resource requests (discovery, ``/version``) have an empty ``resource``.
    ``path`` and ``content_type`` (of the body, e.g. which patch type the client chose)
    take no part in equality.
    """

    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    path: str = field(default="", compare=False)
    content_type: str | None = field(default=None, compare=False)


@dataclass
class _Resource:
    group: str
    versions: list[str]
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool
    short_names: tuple[str, ...]
    singular: str
    list_kind: str
    # label -> path into the object; metadata.name and metadata.namespace always work
    field_labels: dict[str, tuple[str, ...]]
    create_on_update: bool = False  # leases and events: PUT to a missing name creates it
    return_deleted: bool = False  # pods answer a delete with the object, others with Status
    generation: bool = False  # metadata.generation counts spec changes

    @property
    def custom(self) -> bool:
        return self.group not in BUILTIN_GROUPS

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def details(self, name: str) -> Obj:
        details: Obj = {"name": name, "kind": self.plural}
        if self.group:
            details["group"] = self.group
        return details

    def not_found(self, name: str) -> FakeApiError:
        return FakeApiError(404, f'{self.qualified} "{name}" not found', details=self.details(name))

    def conflict(self, name: str, why: str) -> FakeApiError:
        return FakeApiError(
            409,
            f'Operation cannot be fulfilled on {self.qualified} "{name}": {why}',
            details=self.details(name),
        )

    def invalid(self, name: str, why: str) -> FakeApiError:
        details: Obj = {"name": name, "kind": self.kind}
        if self.group:
            details["group"] = self.group
        return FakeApiError(422, f'{self.kind} "{name}" is invalid: {why}', details=details)


@dataclass(frozen=True, slots=True)
class _Event:
    type: str
    rv: int
    obj: Obj
    prev: Obj | None  # the state before a MODIFIED, so selector watches see transitions


@dataclass(frozen=True)
class _Selector:
    labels: tuple[tuple[str, str, Any], ...] = ()
    fields: tuple[tuple[tuple[str, ...], str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.labels and not self.fields

    def matches(self, obj: Obj) -> bool:
        if self.labels:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            for op, key, want in self.labels:
                if not _label_ok(labels, op, key, want):
                    return False
        for path, op, value in self.fields:
            if (_field_value(obj, path) == value) == (op == "!="):
                return False
        return True


def _label_ok(labels: dict[str, str], op: str, key: str, want: Any) -> bool:
    has = key in labels
    value = labels.get(key)
    if op == "exists":
        return has
    if op == "!":
        return not has
    if op == "=":
        return has and value == want
    if op == "!=":
        return not has or value != want
    if op == "in":
        return has and value in want
    if op == "notin":
        return not has or value not in want
    try:  # ">" and "<" compare integers; a non-integer label matches neither
        number = int(value or "")
    except ValueError:
        return False
    return bool(number > want if op == ">" else number < want)


def _field_value(obj: Obj, path: tuple[str, ...]) -> str:
    node: Any = obj
    for part in path:
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_LABEL_SET = re.compile(rf"\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*")
_LABEL_CMP = re.compile(
    rf"\s*(?P<key>{_KEY})\s*(?P<op>==|!=|=|>|<)\s*(?P<value>[-A-Za-z0-9_.]*)\s*"
)
_LABEL_EXISTS = re.compile(rf"\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*")


def _split_top_level(text: str) -> list[str]:
    # Commas separate requirements except inside "in (a,b)".
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


@lru_cache(maxsize=1024)
def _parse_labels(text: str) -> tuple[tuple[str, str, Any], ...]:
    if not text.strip():
        return ()
    reqs: list[tuple[str, str, Any]] = []
    for term in _split_top_level(text):
        if m := _LABEL_SET.fullmatch(term):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            reqs.append((m["op"], m["key"], values))
        elif m := _LABEL_CMP.fullmatch(term):
            op = "=" if m["op"] == "==" else m["op"]
            want: Any = m["value"]
            if op in (">", "<"):
                try:
                    want = int(want)
                except ValueError:
                    raise FakeApiError(
                        400, f"unable to parse requirement: {term.strip()}: not an integer"
                    ) from None
            reqs.append((op, m["key"], want))
        elif m := _LABEL_EXISTS.fullmatch(term):
            reqs.append(("!" if m["neg"] else "exists", m["key"], None))
        else:
            raise FakeApiError(400, f"unable to parse requirement: {term.strip()!r}")
    return tuple(reqs)


@lru_cache(maxsize=1024)
def _parse_fields(text: str) -> tuple[tuple[str, str, str], ...]:
    if not text.strip():
        return ()
    reqs: list[tuple[str, str, str]] = []
    for term in text.split(","):
        for op in ("!=", "==", "="):
            if op in term:
                label, value = term.split(op, 1)
                reqs.append((label.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            raise FakeApiError(400, f"invalid selector: '{text}'; can't understand '{term}'")
    return tuple(reqs)


def _selector(res: _Resource, query: dict[str, str]) -> _Selector:
    fields: list[tuple[tuple[str, ...], str, str]] = []
    for label, op, value in _parse_fields(query.get("fieldSelector", "")):
        path = res.field_labels.get(label)
        if path is None and label in ("metadata.name", "metadata.namespace"):
            path = tuple(label.split("."))
        if path is None:
            raise FakeApiError(400, f"field label not supported: {label}")
        fields.append((path, op, value))
    return _Selector(_parse_labels(query.get("labelSelector", "")), tuple(fields))


# --- patches -------------------------------------------------------------------------


def _merge_patch(target: Any, patch: Any) -> Any:
    # RFC 7386, without mutating target: unchanged subtrees are shared, which is safe
    # because stored objects are never mutated in place.
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # $setElementOrder/..., $retainKeys, $deleteFromPrimitiveList
            continue
        if value is None:
            result.pop(key, None)
        elif key in SMP_MERGE_KEYS and isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, SMP_MERGE_KEYS[key])
        elif key in SMP_UNION_LISTS and isinstance(value, list):
            current = list(result.get(key) or [])
            result[key] = current + [v for v in value if v not in current]
        else:
            result[key] = _strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: Any, items: list[Any], key: str) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in items):
        return [
            _strategic_merge_patch({}, i)
            for i in items
            if not (isinstance(i, dict) and i.get("$patch") == "replace")
        ]
    out = list(current) if isinstance(current, list) else []
    for item in items:
        if not isinstance(item, dict) or key not in item:
            out.append(item)
            continue
        index = next(
            (n for n, el in enumerate(out) if isinstance(el, dict) and el.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(_strategic_merge_patch({}, item))
        else:
            out[index] = _strategic_merge_patch(out[index], item)
    return out


class _PatchError(Exception):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(node: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(node)
    if not token.isdigit():
        raise _PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(node) or (index == len(node) and not allow_end):
        raise _PatchError(f"array index {index} out of bounds")
    return index


def _walk(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise _PatchError(f"path /{'/'.join(tokens)} does not exist")
    return node


def _json_patch(doc: Any, ops: list[Any]) -> Any:
    doc = _clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise _PatchError(f"invalid operation {op!r}")
        kind, tokens = op["op"], _pointer(op["path"])
        if kind in ("move", "copy"):
            value = _clone(_walk(doc, _pointer(op.get("from", ""))))
            if kind == "move":
                doc = _json_patch_remove(doc, _pointer(op.get("from", "")))
            doc = _json_patch_add(doc, tokens, value)
        elif kind == "add":
            doc = _json_patch_add(doc, tokens, op.get("value"))
        elif kind == "remove":
            doc = _json_patch_remove(doc, tokens)
        elif kind == "replace":
            doc = _json_patch_remove(doc, tokens) if tokens else None
            doc = _json_patch_add(doc, tokens, op.get("value"))
        elif kind == "test":
            if _walk(doc, tokens) != op.get("value"):
                raise _PatchError(f"testing value {op['path']} failed")
        else:
            raise _PatchError(f"unknown operation {kind!r}")
    return doc


def _json_patch_add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], allow_end=True), value)
    else:
        raise _PatchError(f"cannot add at {tokens}")
    return doc


def _json_patch_remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return None
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], allow_end=False)]
    else:
        raise _PatchError(f"path /{'/'.join(tokens)} does not exist")
    return doc


# --- the store -----------------------------------------------------------------------


class _Watcher:
    def __init__(
        self,
        res: _Resource,
        namespace: str | None,
        selector: _Selector,
        version: str,
        conn: socket.socket | None,
    ) -> None:
        self.res = res
        self.namespace = namespace
        self.selector = selector
        self.api_version = res.api_version(version)
        self.conn = conn
        self.queue: queue.SimpleQueue[_Event | None] = queue.SimpleQueue()  # None: dropped

    def matches(self, obj: Obj) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selector.matches(obj)

    def encode(self, ev: _Event) -> bytes:
        obj: Obj | None = ev.obj
        kind = ev.type
        if ev.type == "MODIFIED" and ev.prev is not None:
            now, before = self.matches(ev.obj), self.matches(ev.prev)
            if now and not before:
                kind = "ADDED"
            elif before and not now:
                # What the watch cache does: the previous state, at the event's version.
                kind = "DELETED"
                obj = {
                    **ev.prev,
                    "metadata": {**ev.prev["metadata"], "resourceVersion": str(ev.rv)},
                }
            elif not now:
                obj = None
        elif not self.matches(ev.obj):
            obj = None
        if obj is None:
            return b""
        if obj.get("apiVersion") != self.api_version:
            obj = {**obj, "apiVersion": self.api_version}
        return _dumps({"type": kind, "object": obj}) + b"\n"


@dataclass
class _Snapshot:
    rv: int
    items: list[Obj]
    resource: str
    namespace: str


@dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    code: int
    times: int
    reason: str | None


class FakeApiServer:
    """An in-memory Kubernetes API server on a real socket; see the module docstring.

    The socket is bound on construction, so ``url`` and ``write_kubeconfig`` work before
    ``start()``. Stored objects are never mutated in place: every write stores a new dict.
    That lets reads, lists and watch events serialise them outside the lock, and lets
    watch history hold the previous state of an object without copying it.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        history: int = 10_000,
        bookmark_interval_s: float = 1.0,
        latency_s: float = 0.0,
    ) -> None:
        self.history = history
        self.bookmark_interval_s = bookmark_interval_s
        self.latency_s = latency_s
        # Called as hook(method, path without query) in the request's thread, before
        # fail() injection and latency; an exception in a hook answers 500.
        self.hooks: list[Callable[[str, str], None]] = []
        self.requests: list[RequestRecord] = []  # every request, failed ones included
        # One lock for every write and every watch registration: that is what makes the
        # version counter, the event order and optimistic concurrency consistent.
        self._lock = threading.RLock()
        self._rv = 0
        self._resources: dict[tuple[str, str], _Resource] = {}
        self._by_kind: dict[tuple[str, str], _Resource] = {}
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._history: dict[tuple[str, str], deque[_Event]] = {}
        self._floor: dict[tuple[str, str], int] = {}  # every event after this rv is retained
        self._watchers: dict[tuple[str, str], set[_Watcher]] = {}
        self._snapshots: OrderedDict[str, _Snapshot] = OrderedDict()
        self._failures: list[_Failure] = []
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._builtins()
        self._http = _HTTPServer((host, port), self)

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def resource_version(self) -> int:
        return self._rv

    def start(self) -> FakeApiServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._http.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="fake-apiserver",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join()
            self._thread = None
        self.drop_watches()
        # Idle keep-alive connections would otherwise keep their handler threads blocked.
        with self._conn_lock:
            connections = list(self._connections)
        for conn in connections:
            _shutdown(conn)
        self._http.server_close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig for this server without auth (JSON, which is valid YAML)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
            "preferences": {},
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2))
        return path

    def client(self, pool_size: int = 32) -> kclient.ApiClient:
        """An ApiClient for this server. The pool is larger than the client's default
        (5 per CPU): past it urllib3 opens and discards a connection per request, which
        a benchmark with many threads would measure instead of the server."""
        from kubernetes import client as kclient

        config = kclient.Configuration(host=self.url)
        config.connection_pool_maxsize = pool_size
        return kclient.ApiClient(config)

    # --- test controls ---------------------------------------------------------------

    def add_resource(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        namespaced: bool,
        status_subresource: bool = True,
        short_names: tuple[str, ...] = (),
    ) -> None:
        """Serve a resource (a further version if the group and plural are known)."""
        with self._lock:
            known = self._resources.get((group, plural))
            if known is not None:
                if version not in known.versions:
                    known.versions.append(version)
                return
            self._register(
                _Resource(
                    group,
                    [version],
                    plural,
                    kind,
                    namespaced,
                    status_subresource,
                    tuple(short_names),
                    kind.lower(),
                    f"{kind}List",
                    {},
                    generation=group not in BUILTIN_GROUPS,
                )
            )

    def put(self, obj: Obj) -> Obj:
        """Store an object as a create would (no HTTP, no admission of status); if it
        exists, replace it whole, status included (MODIFIED). Returns the stored copy."""
        obj = _clone(obj)
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        with self._lock:
            res = self._by_kind.get((group, str(obj.get("kind"))))
            if res is None or version not in res.versions:
                raise FakeApiError(
                    404, f"no resource serves {obj.get('apiVersion')} {obj.get('kind')}"
                )
            meta = obj.setdefault("metadata", {})
            namespace = (meta.get("namespace") or "default") if res.namespaced else None
            current = self._objects[(group, res.plural)].get((namespace or "", meta.get("name")))
            if current is None:
                stored = self._create(res, namespace, obj, version, seed=True)
            else:
                stored = self._replace(res, current, obj, version)
        copied: Obj = _clone(stored)
        return copied

    def get(self, group: str, plural: str, namespace: str | None, name: str) -> Obj | None:
        with self._lock:
            obj = self._store(group, plural).get((namespace or "", name))
        return None if obj is None else _clone(obj)

    def objects(self, group: str, plural: str) -> list[Obj]:
        with self._lock:
            items = sorted(self._store(group, plural).items())
        return [_clone(obj) for _, obj in items]

    def delete(self, group: str, plural: str, namespace: str | None, name: str) -> None:
        with self._lock:
            res = self._resources.get((group, plural))
            if res is None:
                raise _not_found_path()
            self._delete(res, namespace, name, {})

    def fail(
        self, method: str, path_regex: str, code: int, times: int = 1, reason: str | None = None
    ) -> None:
        """The next ``times`` requests whose method (or ``*``) matches and whose path
        (without query) contains a match of ``path_regex`` (``re.search``) get this error."""
        with self._lock:
            self._failures.append(
                _Failure(method.upper(), re.compile(path_regex), code, times, reason)
            )

    def expire_history(self) -> None:
        """Compact: every watch or continue token from before now gets 410 Expired."""
        with self._lock:
            for key, events in self._history.items():
                events.clear()
                self._floor[key] = self._rv
            self._snapshots.clear()

    def drop_watches(self) -> None:
        with self._lock:
            watchers = [w for ws in self._watchers.values() for w in ws]
            for ws in self._watchers.values():
                ws.clear()
        for watcher in watchers:
            watcher.queue.put(None)
            if watcher.conn is not None:
                _shutdown(watcher.conn)

    # --- registry --------------------------------------------------------------------

    def _builtins(self) -> None:
        pod_fields = {
            label: tuple(label.split("."))
            for label in (
                "spec.nodeName",
                "spec.schedulerName",
                "spec.restartPolicy",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            )
        }
        event_fields = {
            label: tuple(label.split("."))
            for label in (
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "type",
            )
        }
        event_fields["source"] = ("source", "component")
        for res in (
            _Resource(
                "",
                ["v1"],
                "nodes",
                "Node",
                False,
                True,
                ("no",),
                "node",
                "NodeList",
                {"spec.unschedulable": ("spec", "unschedulable")},
            ),
            _Resource(
                "",
                ["v1"],
                "pods",
                "Pod",
                True,
                True,
                ("po",),
                "pod",
                "PodList",
                pod_fields,
                return_deleted=True,
            ),
            _Resource(
                "",
                ["v1"],
                "events",
                "Event",
                True,
                False,
                ("ev",),
                "event",
                "EventList",
                event_fields,
                create_on_update=True,
            ),
            _Resource(
                "",
                ["v1"],
                "namespaces",
                "Namespace",
                False,
                True,
                ("ns",),
                "namespace",
                "NamespaceList",
                {"status.phase": ("status", "phase")},
            ),
            _Resource(
                "events.k8s.io",
                ["v1"],
                "events",
                "Event",
                True,
                False,
                ("ev",),
                "event",
                "EventList",
                {},
                create_on_update=True,
            ),
            _Resource(
                "coordination.k8s.io",
                ["v1"],
                "leases",
                "Lease",
                True,
                False,
                (),
                "lease",
                "LeaseList",
                {},
                create_on_update=True,
            ),
            _Resource(
                "scheduling.k8s.io",
                ["v1"],
                "priorityclasses",
                "PriorityClass",
                False,
                False,
                ("pc",),
                "priorityclass",
                "PriorityClassList",
                {},
            ),
            _Resource(
                "apiextensions.k8s.io",
                ["v1"],
                "customresourcedefinitions",
                "CustomResourceDefinition",
                False,
                True,
                ("crd", "crds"),
                "customresourcedefinition",
                "CustomResourceDefinitionList",
                {},
                generation=True,
            ),
        ):
            self._register(res)
        # What every real cluster starts with.
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for name, value in (
            ("system-cluster-critical", 2000000000),
            ("system-node-critical", 2000001000),
        ):
            self.put(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                    "description": "Used for system critical pods that must run in the "
                    "cluster, but can be moved to another node if necessary.",
                }
            )

    def _register(self, res: _Resource) -> None:
        key = (res.group, res.plural)
        old = self._resources.get(key)
        if old is not None:
            self._by_kind.pop((old.group, old.kind), None)
        self._resources[key] = res
        self._by_kind[(res.group, res.kind)] = res
        self._objects.setdefault(key, {})
        self._history.setdefault(key, deque(maxlen=self.history))
        self._floor.setdefault(key, 0)
        self._watchers.setdefault(key, set())

    def _unregister(self, res: _Resource) -> None:
        key = (res.group, res.plural)
        for ns, name in list(self._objects.get(key, {})):
            self._delete(res, ns or None, name, {})
        self._resources.pop(key, None)
        self._by_kind.pop((res.group, res.kind), None)
        self._objects.pop(key, None)
        self._history.pop(key, None)
        self._floor.pop(key, None)
        for watcher in self._watchers.pop(key, set()):
            watcher.queue.put(None)

    def _store(self, group: str, plural: str) -> dict[tuple[str, str], Obj]:
        store = self._objects.get((group, plural))
        if store is None:
            raise _not_found_path()
        return store

    # --- writes (all under self._lock) ---------------------------------------------

    def _emit(self, res: _Resource, ev: _Event) -> None:
        key = (res.group, res.plural)
        events = self._history[key]
        if events.maxlen is not None and len(events) == events.maxlen:
            self._floor[key] = events[0].rv
        events.append(ev)
        for watcher in self._watchers[key]:
            watcher.queue.put(ev)

    def _create(
        self, res: _Resource, namespace: str | None, obj: Obj, version: str, seed: bool = False
    ) -> Obj:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise FakeApiError(
                    400,
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        store = self._objects[(res.group, res.plural)]
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise res.invalid(
                    "", "metadata.name: Required value: name or generateName is required"
                )
            while True:
                name = prefix + "".join(random.choices(NAME_CHARS, k=5))
                if (namespace or "", name) not in store:
                    break
            meta["name"] = name
        _check_name(res, str(name))
        if (namespace or "", name) in store:
            raise FakeApiError(
                409,
                f'{res.qualified} "{name}" already exists',
                reason="AlreadyExists",
                details=res.details(name),
            )
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version(version)
        for stale in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(stale, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if res.generation:
            meta["generation"] = 1
        self._admit(res, obj, seed)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        store[(namespace or "", name)] = obj
        self._emit(res, _Event("ADDED", self._rv, obj, None))
        if (res.group, res.plural) == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._register_crd(obj)
        return obj

    def _admit(self, res: _Resource, obj: Obj, seed: bool) -> None:
        """Create-time defaulting and admission of the built-ins."""
        kind = (res.group, res.plural)
        if kind == ("", "pods"):
            spec = obj.get("spec")
            if not isinstance(spec, dict):
                spec = obj["spec"] = {}
            spec.setdefault("schedulerName", "default-scheduler")
            self._admit_priority(obj["metadata"]["name"], spec)
            if seed:
                status = obj.get("status")
                if not isinstance(status, dict):
                    status = obj["status"] = {}
                status.setdefault("phase", "Pending")
            else:
                obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
                if spec.get("schedulingGates"):
                    obj["status"]["conditions"] = [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "lastProbeTime": None,
                            "lastTransitionTime": _now(),
                            "reason": "SchedulingGated",
                            "message": "Scheduling is blocked due to non-empty scheduling gates",
                        }
                    ]
        elif kind == ("", "namespaces"):
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            if not seed or "status" not in obj:
                obj["status"] = {"phase": "Active"}
        elif kind == ("scheduling.k8s.io", "priorityclasses"):
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        elif kind == ("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = obj.get("spec") or {}
            expected = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
            if obj["metadata"]["name"] != expected:
                raise res.invalid(
                    obj["metadata"]["name"],
                    f"metadata.name: Invalid value: "
                    f'"{obj["metadata"]["name"]}": must be spec.names.plural+".'
                    f'"+spec.group',
                )
            obj["status"] = _crd_status(obj)
        elif res.custom and res.status_subresource and not seed:
            obj.pop("status", None)

    def _admit_priority(self, pod: str, spec: Obj) -> None:
        classes = self._objects[("scheduling.k8s.io", "priorityclasses")]
        name = spec.get("priorityClassName")
        if name:
            found = classes.get(("", name))
            if found is None:
                raise FakeApiError(
                    403, f'pods "{pod}" is forbidden: no PriorityClass with name {name} was found'
                )
        else:
            found = next((c for c in classes.values() if c.get("globalDefault")), None)
            if found is not None:
                spec["priorityClassName"] = found["metadata"]["name"]
        value = int(found.get("value", 0)) if found else 0
        if spec.get("priority") is not None and spec["priority"] != value:
            raise FakeApiError(
                403,
                f'pods "{pod}" is forbidden: the integer value of priority '
                f"({spec['priority']}) must not be provided in pod spec; priority admission "
                f"controller computed {value} from the given PriorityClass name",
            )
        spec["priority"] = value
        if found is not None:
            spec.setdefault(
                "preemptionPolicy", found.get("preemptionPolicy", "PreemptLowerPriority")
            )

    def _register_crd(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        served = [v for v in spec.get("versions") or [] if v.get("served", True)]
        kind = names.get("kind")
        if not served or not kind:
            return
        self._register(
            _Resource(
                spec["group"],
                [v["name"] for v in served],
                names["plural"],
                kind,
                spec.get("scope", "Namespaced") == "Namespaced",
                any("status" in (v.get("subresources") or {}) for v in served),
                tuple(names.get("shortNames") or ()),
                names.get("singular") or kind.lower(),
                names.get("listKind") or f"{kind}List",
                {},
                generation=True,
            )
        )

    def _replace(self, res: _Resource, current: Obj, obj: Obj, version: str) -> Obj:
        """put() onto an existing object: everything replaced but identity."""
        meta = obj["metadata"]
        old = current["metadata"]
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version(version)
        for kept in ("uid", "creationTimestamp", "namespace", "name"):
            if kept in old:
                meta[kept] = old[kept]
        if res.generation:
            meta["generation"] = old.get("generation", 1) + int(_spec(obj) != _spec(current))
        if (res.group, res.plural) == ("", "pods"):
            obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        return self._commit(res, current, obj)

    def _commit(self, res: _Resource, current: Obj, new: Obj) -> Obj:
        """Store an update; one that changes nothing is no write at all, as in etcd."""
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return current
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        meta = new["metadata"]
        self._objects[(res.group, res.plural)][(meta.get("namespace") or "", meta["name"])] = new
        self._emit(res, _Event("MODIFIED", self._rv, new, current))
        if (res.group, res.plural) == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._register_crd(new)
        return new

    def _update(
        self,
        res: _Resource,
        namespace: str | None,
        name: str,
        sub: str | None,
        body: Any,
        version: str,
        patched: bool = False,
    ) -> tuple[int, Obj]:
        if not isinstance(body, dict):
            raise FakeApiError(400, "the body of the request must be a JSON object")
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        if meta.get("name") not in (None, "", name):
            raise FakeApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not "
                f"match the name on the URL ({name})",
            )
        if res.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise FakeApiError(
                400,
                "the namespace of the provided object does not match "
                "the namespace sent on the request",
            )
        current = self._objects[(res.group, res.plural)].get((namespace or "", name))
        if current is None:
            if res.create_on_update and sub is None and not patched:
                meta["name"] = name
                return 201, self._create(res, namespace, body, version)
            raise res.not_found(name)
        wanted = meta.get("resourceVersion")
        if wanted:
            if wanted != current["metadata"]["resourceVersion"]:
                raise res.conflict(name, CONFLICT_MESSAGE)
        elif res.custom and not patched:
            raise res.invalid(
                name,
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            )
        if sub == "status":
            new = {**current, "status": body.get("status"), "metadata": dict(current["metadata"])}
            if new["status"] is None:
                del new["status"]
            return 200, self._commit(res, current, new)
        new = dict(body)
        new["kind"], new["apiVersion"] = current["kind"], current["apiVersion"]
        if res.status_subresource:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        old = current["metadata"]
        new_meta = dict(meta)
        for kept in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "namespace",
            "name",
            "generation",
        ):
            if kept in old:
                new_meta[kept] = old[kept]
            else:
                new_meta.pop(kept, None)
        new["metadata"] = new_meta
        if res.generation and _spec(new) != _spec(current):
            new_meta["generation"] = old.get("generation", 1) + 1
        if (res.group, res.plural) == ("", "pods"):
            self._check_pod_update(name, current, new)
        return 200, self._commit(res, current, new)

    def _check_pod_update(self, name: str, current: Obj, new: Obj) -> None:
        # A copy: after a patch, spec may still be the stored object's own dict.
        spec = dict(new.get("spec") or {})
        spec.setdefault("schedulerName", "default-scheduler")
        new["spec"] = spec
        if _pod_spec_fixed(spec) != _pod_spec_fixed(current.get("spec") or {}):
            raise FakeApiError(
                422,
                f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change '
                "fields other than `spec.containers[*].image`, "
                "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                "`spec.tolerations` (only additions to existing tolerations), "
                "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
                "was previously negative)",
                details={"name": name, "kind": "Pod"},
            )

    def _patch(
        self,
        res: _Resource,
        namespace: str | None,
        name: str,
        sub: str | None,
        body: Any,
        content_type: str,
        version: str,
    ) -> Obj:
        current = self._objects[(res.group, res.plural)].get((namespace or "", name))
        if current is None:
            raise res.not_found(name)
        try:
            if content_type == JSON_PATCH:
                if not isinstance(body, list):
                    raise FakeApiError(400, "json patch must be a list of operations")
                result = _json_patch(current, body)
            elif content_type == MERGE_PATCH:
                if not isinstance(body, dict):
                    raise FakeApiError(400, "merge patch must be a JSON object")
                result = _merge_patch(current, body)
            elif content_type == STRATEGIC_MERGE_PATCH and not res.custom:
                if not isinstance(body, dict):
                    raise FakeApiError(400, "strategic merge patch must be a JSON object")
                result = _strategic_merge_patch(current, body)
            else:
                accepted = [JSON_PATCH, MERGE_PATCH] + (
                    [] if res.custom else [STRATEGIC_MERGE_PATCH]
                )
                raise FakeApiError(
                    415,
                    f"the body of the request was in an unknown format - accepted media "
                    f"types include: {', '.join(accepted)}",
                )
        except _PatchError as e:
            raise FakeApiError(422, str(e)) from None
        if not isinstance(result, dict):
            raise FakeApiError(422, "the patch does not produce an object")
        # The patched copy shares subtrees with the stored object; _update only reads them.
        result = dict(result)
        result["metadata"] = dict(result.get("metadata") or {})
        return self._update(res, namespace, name, sub, result, version, patched=True)[1]

    def _delete(self, res: _Resource, namespace: str | None, name: str, options: Any) -> Obj:
        store = self._objects[(res.group, res.plural)]
        current = store.get((namespace or "", name))
        if current is None:
            raise res.not_found(name)
        pre = options.get("preconditions") if isinstance(options, dict) else None
        if isinstance(pre, dict):
            meta = current["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise res.conflict(
                    name,
                    f"Precondition failed: UID in precondition: "
                    f"{pre['uid']}, UID in object meta: {meta.get('uid')}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise res.conflict(
                    name,
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                    f"{meta['resourceVersion']}",
                )
        self._rv += 1
        # A DELETED event carries the last state at the deletion's own version.
        last = {**current, "metadata": {**current["metadata"], "resourceVersion": str(self._rv)}}
        del store[(namespace or "", name)]
        self._emit(res, _Event("DELETED", self._rv, last, None))
        kind = (res.group, res.plural)
        if kind == ("", "namespaces"):
            for other in list(self._resources.values()):
                if other.namespaced:
                    for ns, obj_name in [
                        k for k in self._objects[(other.group, other.plural)] if k[0] == name
                    ]:
                        self._delete(other, ns, obj_name, {})
        elif kind == ("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = current.get("spec") or {}
            crd_res = self._resources.get(
                (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            )
            if crd_res is not None and crd_res.custom:
                self._unregister(crd_res)
        return last

    def _bind(self, namespace: str, name: str, binding: Any) -> None:
        pods = self._resources[("", "pods")]
        if not isinstance(binding, dict):
            raise FakeApiError(400, "the body of the request must be a JSON object")
        meta = binding.get("metadata") or {}
        if meta.get("name") not in (None, "", name):
            raise FakeApiError(400, "name in URL does not match name in Binding object")
        target = binding.get("target") or {}
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise FakeApiError(
                422,
                f'Binding "{name}" is invalid: target.name: Required value',
                details={"name": name, "kind": "Binding"},
            )
        current = self._objects[("", "pods")].get((namespace, name))
        if current is None:
            raise pods.not_found(name)
        binding_res = "pods/binding"
        spec = current.get("spec") or {}
        if spec.get("nodeName"):
            raise FakeApiError(
                409,
                f'Operation cannot be fulfilled on {binding_res} "{name}": pod {name} is '
                f'already assigned to node "{spec["nodeName"]}"',
                details={"name": name, "kind": binding_res},
            )
        if spec.get("schedulingGates"):
            # As kube-apiserver: a pod with scheduling gates cannot be bound.
            raise FakeApiError(
                400,
                f'Binding "{name}" is invalid: pod has scheduling gates',
                details={"name": name, "kind": "Binding"},
            )
        if meta.get("uid") and meta["uid"] != current["metadata"].get("uid"):
            raise FakeApiError(
                409,
                f'Operation cannot be fulfilled on {binding_res} "{name}": Precondition '
                f"failed: UID in precondition: {meta['uid']}, UID in object meta: "
                f"{current['metadata'].get('uid')}",
                details={"name": name, "kind": binding_res},
            )
        status = dict(current.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": _now(),
            }
        )
        status["conditions"] = conditions
        new_meta = dict(current["metadata"])
        if meta.get("annotations"):
            new_meta["annotations"] = {**(new_meta.get("annotations") or {}), **meta["annotations"]}
        new = {
            **current,
            "metadata": new_meta,
            "spec": {**spec, "nodeName": node},
            "status": status,
        }
        self._commit(pods, current, new)

    # --- reads -----------------------------------------------------------------------

    def _list(
        self, res: _Resource, namespace: str | None, version: str, query: dict[str, str]
    ) -> Obj:
        selector = _selector(res, query)
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise FakeApiError(400, f"invalid limit {query.get('limit')!r}") from None
        token = query.get("continue")
        snap_id: str | None = None
        if token:
            snap_id, start = _decode_continue(token)
            with self._lock:
                snap = self._snapshots.get(snap_id)
                if snap is not None:
                    self._snapshots.move_to_end(snap_id)
            if snap is None:
                raise FakeApiError(
                    410,
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                )
            if snap.resource != res.qualified or snap.namespace != (namespace or ""):
                raise FakeApiError(400, "continue key does not match this list")
            rv, matched = snap.rv, snap.items
        else:
            with self._lock:
                rv = self._rv
                pairs = list(self._objects[(res.group, res.plural)].items())
            pairs.sort(key=lambda kv: kv[0])
            matched = [
                obj
                for (ns, _), obj in pairs
                if (namespace is None or ns == namespace) and selector.matches(obj)
            ]
            start = 0
        meta: Obj = {"resourceVersion": str(rv)}
        if limit > 0 and start + limit < len(matched):
            page = matched[start : start + limit]
            if snap_id is None:
                snap_id = uuid.uuid4().hex
                with self._lock:
                    self._snapshots[snap_id] = _Snapshot(
                        rv, matched, res.qualified, namespace or ""
                    )
                    while len(self._snapshots) > SNAPSHOTS:
                        self._snapshots.popitem(last=False)
            meta["continue"] = _encode_continue(snap_id, start + limit)
            if selector.empty:
                meta["remainingItemCount"] = len(matched) - start - limit
        else:
            page = matched[start:]
        api_version = res.api_version(version)
        if res.custom:
            items = [
                o if o.get("apiVersion") == api_version else {**o, "apiVersion": api_version}
                for o in page
            ]
        else:
            items = [{k: v for k, v in o.items() if k not in TYPE_KEYS} for o in page]
        return {"kind": res.list_kind, "apiVersion": api_version, "metadata": meta, "items": items}

    def _open_watch(
        self,
        res: _Resource,
        namespace: str | None,
        selector: _Selector,
        version: str,
        since: str | None,
        conn: socket.socket | None,
    ) -> tuple[_Watcher, FakeApiError | None]:
        watcher = _Watcher(res, namespace, selector, version, conn)
        key = (res.group, res.plural)
        with self._lock:
            if since in (None, "", "0"):
                for _, obj in sorted(self._objects[key].items(), key=lambda kv: kv[0]):
                    watcher.queue.put(_Event("ADDED", self._rv, obj, None))
            else:
                try:
                    after = int(str(since))
                except ValueError:
                    raise FakeApiError(400, f'invalid resource version: "{since}"') from None
                floor = self._floor[key]
                if after < floor:
                    return watcher, FakeApiError(
                        410, f"too old resource version: {after} ({floor})", reason="Expired"
                    )
                for ev in self._history[key]:
                    if ev.rv > after:
                        watcher.queue.put(ev)
            self._watchers[key].add(watcher)
        return watcher, None

    def _close_watch(self, watcher: _Watcher) -> None:
        with self._lock:
            self._watchers.get((watcher.res.group, watcher.res.plural), set()).discard(watcher)

    def _bookmark(self, watcher: _Watcher) -> tuple[list[_Event | None], Obj]:
        # Drained under the lock: every event up to the bookmark's version is then either
        # sent already or in hand, so the bookmark never runs ahead of this watch's events.
        with self._lock:
            rv = self._rv
            pending: list[_Event | None] = []
            while True:
                try:
                    pending.append(watcher.queue.get_nowait())
                except queue.Empty:
                    break
        return pending, {
            "kind": watcher.res.kind,
            "apiVersion": watcher.api_version,
            "metadata": {"resourceVersion": str(rv)},
        }

    # --- discovery -------------------------------------------------------------------

    def _api_versions(self, host: str) -> Obj:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }

    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        with self._lock:
            for res in self._resources.values():
                versions = groups.setdefault(res.group, [])
                versions.extend(v for v in res.versions if v not in versions)
        for versions in groups.values():
            versions.sort(key=_version_priority)
        return groups

    def _group(self, name: str, versions: list[str]) -> Obj:
        listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": listed, "preferredVersion": listed[0]}

    def _group_list(self) -> Obj:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(g, vs) for g, vs in self._groups().items() if g],
        }

    def _resource_list(self, group: str, version: str) -> Obj:
        with self._lock:
            served = [
                r for r in self._resources.values() if r.group == group and version in r.versions
            ]
        if not served:
            raise _not_found_path()
        resources: list[Obj] = []
        if group == "":
            resources.append(
                {
                    "name": "bindings",
                    "singularName": "binding",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
        for res in served:
            entry: Obj = {
                "name": res.plural,
                "singularName": res.singular,
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": VERBS,
            }
            if res.short_names:
                entry["shortNames"] = list(res.short_names)
            resources.append(entry)
            if (res.group, res.plural) == ("", "pods"):
                resources.append(
                    {
                        "name": "pods/binding",
                        "singularName": "",
                        "namespaced": True,
                        "kind": "Binding",
                        "verbs": ["create"],
                    }
                )
            if res.status_subresource:
                resources.append(
                    {
                        "name": f"{res.plural}/status",
                        "singularName": "",
                        "namespaced": res.namespaced,
                        "kind": res.kind,
                        "verbs": STATUS_VERBS,
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    # --- request plumbing ------------------------------------------------------------

    def _injected(self, method: str, path: str) -> FakeApiError | None:
        with self._lock:
            for failure in self._failures:
                if failure.method in ("*", method) and failure.path.search(path):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                    headers = [("Retry-After", "1")] if failure.code == 429 else []
                    return FakeApiError(
                        failure.code,
                        f"injected failure for {method} {path}",
                        reason=failure.reason,
                        headers=headers,
                    )
        return None

    def _track(self, conn: socket.socket, alive: bool) -> None:
        with self._conn_lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


def _spec(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", *TYPE_KEYS)}


def _pod_spec_fixed(spec: Obj) -> Obj:
    fixed = {k: v for k, v in spec.items() if k not in POD_MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if isinstance(fixed.get(key), list):
            fixed[key] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in fixed[key]
            ]
    return fixed


def _qos_class(spec: Obj) -> str:
    containers = [
        c
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if isinstance(c, dict)
    ]
    requests, limits = [], []
    for c in containers:
        resources = c.get("resources") or {}
        requests.append(
            {k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}
        )
        limits.append(
            {k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")}
        )
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        set(lim) == {"cpu", "memory"} and all(req.get(k, lim[k]) == lim[k] for k in lim)
        for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _crd_status(crd: Obj) -> Obj:
    spec = crd.get("spec") or {}
    storage = [v.get("name") for v in spec.get("versions") or [] if v.get("storage")]
    now = _now()
    return {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "acceptedNames": spec.get("names") or {},
        "storedVersions": storage,
    }


def _check_name(res: _Resource, name: str) -> None:
    if (res.group, res.plural) == ("", "namespaces"):
        if len(name) > 63 or not DNS_LABEL.fullmatch(name):
            raise res.invalid(
                name,
                f'metadata.name: Invalid value: "{name}": a lowercase RFC '
                "1123 label must consist of lower case alphanumeric "
                "characters or '-', and must start and end with an "
                "alphanumeric character",
            )
    elif len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        raise res.invalid(
            name,
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
            "subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric "
            "character",
        )


def _version_priority(version: str) -> tuple[int, int, int, str]:
    # Kubernetes' order: GA before beta before alpha, higher numbers first, others last.
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if m is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m[2]]
    return (stage, -int(m[1]), -int(m[3] or 0), version)


def _encode_continue(snap_id: str, offset: int) -> str:
    raw = _dumps({"id": snap_id, "o": offset})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, int]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        decoded = json.loads(raw)
        return str(decoded["id"]), int(decoded["o"])
    except (ValueError, KeyError, TypeError):
        raise FakeApiError(400, "continue key is not valid") from None


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _alive(conn: socket.socket) -> bool:
    # A watch client sends nothing: anything readable is its close (b"") or reset (OSError).
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


# --- HTTP --------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # 16 client threads opening connections at once

    def __init__(self, address: tuple[str, int], fake: FakeApiServer) -> None:
        self.fake = fake
        super().__init__(address, _Handler)


@dataclass(frozen=True)
class _Target:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    sub: str | None


def _resource_target(group: str, version: str, segments: list[str]) -> _Target | None:
    namespace = None
    # /namespaces/{ns}/status is the namespace's own subresource, not a collection.
    if (
        len(segments) >= 3
        and segments[0] == "namespaces"
        and not (len(segments) == 3 and segments[2] in ("status", "finalize"))
    ):
        namespace, segments = segments[1], segments[2:]
    if not 1 <= len(segments) <= 3 or "" in segments:
        return None
    return _Target(
        group,
        version,
        namespace,
        segments[0],
        segments[1] if len(segments) > 1 else None,
        segments[2] if len(segments) > 2 else None,
    )


def _verb(method: str, target: _Target, query: dict[str, str]) -> str:
    if method == "GET":
        if target.name is None:
            return "watch" if query.get("watch", "").lower() in ("true", "1") else "list"
        return "get"
    if method == "DELETE" and target.name is None:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


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
            )
        )
        try:
            for hook in list(fake.hooks):
                hook(method, path)
            injected = fake._injected(method, path)
            if injected is not None:
                raise injected
            if verb != "watch" and fake.latency_s > 0:
                time.sleep(fake.latency_s)
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
        if "dryRun" in query:
            raise FakeApiError(400, "dryRun is not supported by the fake API server")
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
            self._subresource(method, res, t, body)
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

    def _subresource(self, method: str, res: _Resource, t: _Target, body: Any) -> None:
        fake = self.server.fake
        assert t.name is not None and t.sub is not None
        if (res.group, res.plural, t.sub) == ("", "pods", "binding"):
            if method != "POST":
                raise FakeApiError(
                    405, "the server does not allow this method on the requested resource"
                )
            assert t.namespace is not None
            with fake._lock:
                fake._bind(t.namespace, t.name, body)
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


# --- command line --------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fake_apiserver",
        description="Run the fake Kubernetes API server in the foreground.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig-out", type=Path, help="write a kubeconfig here")
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="sleep this long in every non-watch request"
    )
    parser.add_argument(
        "--history", type=int, default=10_000, help="watch events retained per resource"
    )
    parser.add_argument("--bookmark-interval-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    server = FakeApiServer(
        args.host,
        args.port,
        history=args.history,
        bookmark_interval_s=args.bookmark_interval_s,
        latency_s=args.latency_ms / 1000.0,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.start()
    if args.kubeconfig_out is not None:
        server.write_kubeconfig(args.kubeconfig_out)
    print(server.url, flush=True)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0

