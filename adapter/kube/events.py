"""Events as users read them (`kubectl describe`, `kubectl get events`): what the
``EventRecorder`` decides to write (deduplicated, rate-limited) sent through the
``Writer`` on the connection its thread keeps (``Connections``: one Event per bound pod,
as kube-scheduler writes, cost as much CPU through the client's pool as the bind), each
repeat an update of the Event it made.

The API server names each Event it creates; the name is kept per recorder key, so a
repeat patches the count of the Event already there instead of creating another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

import orjson
from kubernetes.client.exceptions import ApiException

from adapter.kube.connections import Connections
from adapter.kube.resources import EVENTS, STRATEGIC_MERGE_PATCH, decode, path_of
from adapter.kube.status import EventAction, EventRecorder, ObjectRef
from adapter.kube.writer import WRITE_TIMEOUT, Writer


class Events:
    def __init__(self, connections: Connections, writer: Writer, recorder: EventRecorder) -> None:
        self.connections = connections
        self.writer = writer
        self.recorder = recorder
        self._names: dict[Any, tuple[str, str]] = {}  # event key -> (namespace, name)
        self._lock = threading.Lock()  # the writer thread adds, the loop prunes

    def event(
        self,
        ref: ObjectRef,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
        news: bool = True,
    ) -> None:
        """``news``: False where the object was told this before (``EventRecorder.record``)."""
        action = self.recorder.record(ref, type_, reason, message, news)
        if action is not None:
            self.writer.submit(f"event {action.key}", lambda: self._send(action), later=True)

    def keep(self, alive: Callable[[ObjectRef], bool]) -> None:
        """Forget the Events of objects that are gone (``EventRecorder.keep``)."""
        self.recorder.keep(alive)
        self.trim()

    def trim(self) -> None:
        """Forget the names of Events the recorder no longer remembers (their object
        bound, or a new message since): the writer's thread names an Event after the
        report that made it, and after the one that forgot a bound pod's topics."""
        remembered = self.recorder.keys()
        with self._lock:
            self._names = {k: v for k, v in self._names.items() if k in remembered}

    def names(self) -> int:
        with self._lock:
            return len(self._names)

    def _send(self, action: EventAction) -> None:
        namespace = action.body["metadata"]["namespace"]
        with self._lock:
            where = self._names.get(action.key)
        # An update of an Event whose create failed creates it: else a failed create was
        # never sent again (the recorder counts repeats as updates of what it made).
        if action.verb == "create" or where is None:
            body = orjson.dumps(action.body)
            path = path_of(EVENTS, namespace)
            created = decode(self.connections.request("POST", path, body, *WRITE_TIMEOUT))
            with self._lock:
                self._names[action.key] = (namespace, created["metadata"]["name"])
            return
        patch = {"count": action.body["count"], "lastTimestamp": action.body["lastTimestamp"]}
        path = path_of(EVENTS, where[0], where[1])
        try:
            self.connections.request(
                "PATCH", path, orjson.dumps(patch), *WRITE_TIMEOUT, STRATEGIC_MERGE_PATCH
            )
        except ApiException as e:
            if e.status != 404:
                raise
            # Expired (the API server keeps Events for --event-ttl, an hour by default)
            # or deleted: a gang still waiting for the same reason says so again.
            with self._lock:
                self._names.pop(action.key, None)
            self._send(action)
