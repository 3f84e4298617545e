"""FakeApiServer: the parts put together on a real socket, its lifecycle, and the direct
controls tests use (put, get, objects, delete, add_resource; fail and the other faults
come from faults.py)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from benchmarks.fake_apiserver.api import _Api
from benchmarks.fake_apiserver.handler import _HTTPServer
from benchmarks.fake_apiserver.objects import (
    BUILTIN_GROUPS,
    FakeApiError,
    Obj,
    _clone,
    _not_found_path,
    _Resource,
)
from benchmarks.fake_apiserver.registry import _builtin_resources
from benchmarks.fake_apiserver.watch import _shutdown

if TYPE_CHECKING:
    from kubernetes import client as kclient


class FakeApiServer(_Api):
    """An in-memory Kubernetes API server on a real socket; see the package docstring.

    The socket is bound on construction, so ``url`` and ``write_kubeconfig`` work before
    ``start()``. Stored objects are never mutated in place: every write stores a new dict.
    That lets reads, lists and watch events serialise them outside the lock, and lets
    watch history hold the previous state of an object without copying it.

    Every non-watch request sleeps ``latency_s`` and burns ``cpu_ms_per_request``
    milliseconds of CPU (see costs.py), in its own thread and outside the lock.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        history: int = 10_000,
        bookmark_interval_s: float = 1.0,
        latency_s: float = 0.0,
        cpu_ms_per_request: float = 0.0,
    ) -> None:
        self.history = history
        self.bookmark_interval_s = bookmark_interval_s
        self.latency_s = latency_s
        self.cpu_ms_per_request = cpu_ms_per_request
        # Called as hook(method, path without query) in the request's thread, before
        # fail() injection and the request's costs; an exception in a hook answers 500.
        self.hooks = []
        self.requests = []  # every request, failed ones included
        # Every Binding that reached a pod, in order, with its answer: a bind sent again
        # after its answer was lost is answered 409 here, the pod left where it is.
        self.bindings = []
        # One lock for every write and every watch registration: that is what makes the
        # version counter, the event order and optimistic concurrency consistent.
        self._lock = threading.RLock()
        self._rv = 0
        self._resources = {}
        self._by_kind = {}
        self._objects = {}
        self._history = {}
        self._floor = {}  # every event after this rv is retained
        self._watchers = {}
        self._snapshots = OrderedDict()
        self._failures = []
        self._connections = set()
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

    # --- registry --------------------------------------------------------------------

    def _builtins(self) -> None:
        for res in _builtin_resources():
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
