"""Reads: lists (selectors, ``limit`` and ``continue`` paging consistent at the first
page's version) and the store's side of watches (initial events, replay, bookmarks)."""

from __future__ import annotations

import base64
import json
import queue
import socket
import uuid

from benchmarks.fake_apiserver.objects import TYPE_KEYS, FakeApiError, Obj, _dumps, _Resource
from benchmarks.fake_apiserver.selectors import _Selector, _selector
from benchmarks.fake_apiserver.storage import _Snapshot, _Store
from benchmarks.fake_apiserver.watch import _Event, _Watcher

SNAPSHOTS = 256  # paged lists kept consistent; an older continue token gets 410


class _Reads(_Store):
    """Lists and watches; a get is a lookup the handler makes itself."""

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
                if after > self._rv:
                    # A version this server never reached (it was restored from an older
                    # state, or is another server): as kube-apiserver's watch cache, a 504
                    # and no event (it waits up to 3 s for the version first; here none
                    # comes), never the newer events of a history that is not the client's.
                    raise FakeApiError(
                        504,
                        f"Too large resource version: {after}, current: {self._rv}",
                        reason="Timeout",
                        details={
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
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
