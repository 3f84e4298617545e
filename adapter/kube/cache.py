"""The scheduler's view of the cluster: what the watches last saw, plus its own writes in flight.

Watches lag writes. A pod gangsat has just bound still shows pending in the watch for a
moment; without care the next cycle would place it again (a double bind, refused with
409, or worse, capacity counted twice). So a bind is *assumed* here before it is sent:
snapshots show the pod on its node at once; the assumption ends when the watch shows the
pod bound (or gone), or is *forgotten* when the bind fails. A pod gangsat deleted (a
gang rollback) is likewise hidden until the watch sees it go.

Objects are plain JSON dicts as the API server sent them, with ``kind`` and
``apiVersion`` filled in (the server leaves them out of list items of built-in kinds).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from adapter.kube.disruption import marked_victim
from adapter.kube.fields import LEAVING, STATUS_LISTS, finished, listed, uid_of
from adapter.kube.kept import kept
from adapter.kube.resources import DIALECTS, DISRUPTION_BUDGETS, NODES, PODS, Resource

Obj = dict[str, Any]
DOUBT_TTL_S = 30.0


class Unbindable(Exception):
    """A pod that cannot be bound now (gone, bound, or a bind already in flight)."""

    def __init__(self, message: str, bound_to: str | None = None) -> None:
        super().__init__(message)
        self.bound_to = bound_to  # bound since the snapshot, by someone else


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def split_key(key: str) -> tuple[str, str]:
    """A namespaced object's key (``key_of``) as its namespace and name."""
    namespace, _, name = key.partition("/")
    return namespace, name


class ClusterCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Resource, dict[str, Obj]] = {}
        self._synced: set[Resource] = set()
        # No longer watched (``drop``): a list or event of its reflector still in flight
        # must not bring its objects back.
        self._dropped: set[Resource] = set()
        self._assumed: dict[str, str] = {}  # pod key -> node, bind sent or about to be
        self._assumed_uid: dict[str, str] = {}  # pod key -> UID of the pod that bind is for
        # Assumed binds whose outcome is unknown (no answer, the pod unreadable): pod key
        # -> when the assumption lapses if no watch event has settled it by then.
        self._doubted: dict[str, float] = {}
        self._deleted: dict[str, str] = {}  # pod key -> uid gangsat deleted
        # An assumed bind set aside while its pod is being deleted (a rollback): back if
        # the delete fails, for the pod is still bound. Pod key -> (node, uid, doubt).
        self._parked: dict[str, tuple[str, str | None, float | None]] = {}
        self.version = 0  # bumped on every change, so a caller can tell nothing changed
        # Bumped when an object leaves (deleted, gone from a re-list, its resource no
        # longer watched): what was remembered of objects may be of ones now gone.
        self.removals = 0

    def _touch(self) -> None:
        self.version += 1

    # --- what the watches deliver ------------------------------------------------------------

    def replace(self, resource: Resource, items: Iterable[Obj], trimmed: bool = False) -> None:
        """The result of a (re-)list: everything of ``resource`` that exists now;
        ``trimmed``: the items are as the cache keeps them already (``kept``)."""
        fresh = {key_of(o): o if trimmed else kept(resource, o) for o in items}
        with self._lock:
            if resource in self._dropped:
                return
            if not self._objects.get(resource, {}).keys() <= fresh.keys():
                self.removals += 1
            self._objects[resource] = fresh
            self._synced.add(resource)
            if resource == PODS:
                for key in list(self._assumed):
                    self._settle(key, fresh.get(key))
                for key in list(self._deleted):
                    self._settle(key, fresh.get(key))
            self._touch()

    def apply(self, resource: Resource, event_type: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED or DELETED)."""
        obj = kept(resource, obj)
        key = key_of(obj)
        with self._lock:
            if resource in self._dropped:
                return
            store = self._objects.setdefault(resource, {})
            old = store.get(key)
            if event_type == "DELETED":
                if store.pop(key, None) is not None:
                    self.removals += 1
                current = None
            else:
                store[key] = obj
                current = obj
            # The echo of gangsat's own writes (a bind it assumed, a status it wrote) and
            # status chatter it never reads change no decision: no new cycle for them.
            assumed = self._assumed.get(key) if resource == PODS else None
            changed = (
                old is None
                or current is None
                or _read_view(resource, old, assumed)
                != _read_view(resource, current, None if _node_of(current) else assumed)
            )
            if resource == PODS:
                self._settle(key, current)
            if changed:
                self._touch()

    def _settle(self, key: str, pod: Obj | None) -> None:
        """End assumptions the watch has caught up with: the pod is bound, gone, or a
        namesake replaced it (a re-list after the bound pod was deleted and recreated:
        its bind was for the old pod, and the new one would look bound for good)."""
        uid = ((pod or {}).get("metadata") or {}).get("uid")
        if pod is None or _node_of(pod) or self._assumed_uid.get(key, uid) != uid:
            self._end_assumption(key)
        parked = self._parked.get(key)
        if pod is None or _node_of(pod) or (parked and parked[1] not in (None, uid)):
            self._parked.pop(key, None)
        if pod is None or self._deleted.get(key) not in (None, uid):
            self._deleted.pop(key, None)  # gone, or a new pod of the same name

    def synced(self, resources: Iterable[Resource]) -> bool:
        with self._lock:
            return all(r in self._synced for r in resources)

    # --- gangsat's own writes ----------------------------------------------------------------

    def pod(self, key: str) -> Obj | None:
        with self._lock:
            if key in self._deleted:
                return None
            return self._objects.get(PODS, {}).get(key)

    def running_on(self, key: str) -> str | None:
        """The node pod ``key`` runs on as the watch shows it, known to a snapshot or not
        (a Node deleted meanwhile): None where it is gone, being deleted, finished, or
        not bound."""
        pod = self.pod(key)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return None
        node = _node_of(pod)
        return node if isinstance(node, str) and node and not finished(pod.get("status")) else None

    def node_exists(self, name: str) -> bool:
        with self._lock:
            return name in self._objects.get(NODES, {})

    def assume(self, key: str, node: str, seen_uid: str | None = None) -> str:
        """Claim ``key`` for a bind to ``node``; the pod's UID (the bind and any rollback
        must reach this pod, not a namesake created since). ``Unbindable`` otherwise, and
        when the pod is no longer the one the decision saw (``seen_uid``)."""
        with self._lock:
            pod = self._objects.get(PODS, {}).get(key)
            if pod is None or key in self._deleted:
                raise Unbindable("pod no longer exists")
            if seen_uid and (pod.get("metadata") or {}).get("uid") != seen_uid:
                raise Unbindable("replaced by a namesake since the decision was made")
            bound = _node_of(pod)
            if bound:
                raise Unbindable(f"pod is already bound to {bound}", bound_to=str(bound))
            if key in self._assumed:
                raise Unbindable(f"a bind to {self._assumed[key]} is already in flight")
            # No version bump: the bind is the cycle's own decision, and its snapshot
            # already accounted for it; a follow-up cycle would only re-read that.
            self._assumed[key] = node
            uid = uid_of(pod)
            if uid:
                self._assumed_uid[key] = uid
            return uid

    def forget(self, key: str) -> None:
        """A bind that failed: the pod is pending again."""
        with self._lock:
            if self._end_assumption(key) is not None:
                self._touch()

    def doubt(self, key: str, now: float, ttl_s: float = DOUBT_TTL_S) -> None:
        """A bind whose outcome is unknown: assumed until the watch shows the pod bound
        or gone, or ``ttl_s`` passed (then ``lapse`` makes it pending again: a bind that
        had landed would have been shown by then, and a bind sent again to a pod that is
        bound after all is answered 409 and settled)."""
        with self._lock:
            if key in self._assumed:
                self._doubted[key] = now + ttl_s

    def in_doubt(self) -> set[str]:
        """The pods whose doubted binds (``doubt``) are not settled yet."""
        with self._lock:
            return set(self._doubted)

    def lapse(self, now: float) -> int:
        """End the doubted assumptions whose time is up; how many ended."""
        with self._lock:
            due = [key for key, at in self._doubted.items() if at <= now]
            for key in due:
                self._end_assumption(key)
            if due:
                self._touch()
            return len(due)

    def _end_assumption(self, key: str) -> str | None:
        self._doubted.pop(key, None)
        self._assumed_uid.pop(key, None)
        return self._assumed.pop(key, None)

    def in_flight(self) -> dict[str, int]:
        """gangsat's own writes the watches have not shown yet, by kind."""
        with self._lock:
            return {"assumed": len(self._assumed), "deleting": len(self._deleted)}

    def sizes(self) -> dict[str, int]:
        """How much this cache remembers, by memory (objects, and gangsat's writes in flight)."""
        with self._lock:
            return {
                "objects": sum(len(store) for store in self._objects.values()),
                "assumed": len(self._assumed),
                "doubted": len(self._doubted),
                "deleting": len(self._deleted),
                "parked": len(self._parked),
            }

    def assumed(self) -> dict[str, str]:
        with self._lock:
            return dict(self._assumed)

    def placed(self, key: str) -> bool:
        """The pod is bound, or a bind of it is sent or about to be."""
        with self._lock:
            pod = self._objects.get(PODS, {}).get(key)
            return key in self._assumed or (pod is not None and bool(_node_of(pod)))

    def deleting(self, key: str, uid: str) -> None:
        """Marked before the delete is sent: its DELETED event may come before its answer,
        and a mark made after that would never be settled."""
        with self._lock:
            current = self._objects.get(PODS, {}).get(key)
            if current is not None and (current.get("metadata") or {}).get("uid") == uid:
                self._deleted[key] = uid
            doubt = self._doubted.get(key)
            assumed_uid = self._assumed_uid.get(key)
            node = self._end_assumption(key)
            if node is not None:
                self._parked[key] = (node, assumed_uid, doubt)
            self._touch()

    def undelete(self, key: str) -> None:
        """A delete that failed: the pod is still there, and a bind assumed for it still
        stands (bound, or of unknown outcome, until the watch shows which)."""
        with self._lock:
            parked = self._parked.pop(key, None)
            if self._deleted.pop(key, None) is not None:
                self._touch()
            if parked is None or key in self._assumed:
                return
            node, uid, doubt = parked
            pod = self._objects.get(PODS, {}).get(key)
            if pod is None or _node_of(pod) or (pod.get("metadata") or {}).get("uid") != uid:
                return  # settled meanwhile: gone, shown bound, or replaced
            self._assumed[key] = node
            if uid:
                self._assumed_uid[key] = uid
            if doubt is not None:
                self._doubted[key] = doubt
            self._touch()

    # --- snapshots ---------------------------------------------------------------------------

    def objects(self, pod_uids: dict[str, str] | None = None) -> list[Obj]:
        """Every object, with assumed binds applied and deleted pods left out; the pods'
        UIDs into ``pod_uids`` (read under the same lock: the pods the objects are)."""
        with self._lock:
            out: list[Obj] = []
            for resource, store in self._objects.items():
                if resource != PODS:
                    out.extend(store.values())
                    continue
                deleted, assumed = self._deleted, self._assumed
                for key, pod in store.items():
                    if key in deleted or (pod.get("metadata") or {}).get("deletionTimestamp"):
                        # A bind that landed but that the watch has not shown yet still
                        # holds its node while the pod terminates: the parked node says.
                        parked = self._parked.get(key)
                        leaving = _leaving(pod, parked[0] if parked else None)
                        if leaving is not None:
                            out.append(leaving)
                        continue
                    node = assumed.get(key)
                    if node is not None:
                        pod = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}
                    out.append(pod)
                    if pod_uids is not None:
                        pod_uids[key] = uid_of(pod)
            return out

    def of(self, resource: Resource) -> list[Obj]:
        with self._lock:
            return list(self._objects.get(resource, {}).values())

    def get(self, resource: Resource, key: str) -> Obj | None:
        with self._lock:
            return self._objects.get(resource, {}).get(key)

    def drop(self, resource: Resource) -> None:
        """Forget every object of a resource no longer watched, and take no more."""
        with self._lock:
            self._dropped.add(resource)
            if self._objects.pop(resource, None):
                self.removals += 1
            self._synced.discard(resource)
            self._touch()

    def watch(self, resource: Resource) -> None:
        """Take objects of ``resource`` (again, if it was dropped)."""
        with self._lock:
            self._dropped.discard(resource)


def _read_view(resource: Resource, obj: Obj, assumed_node: str | None = None) -> tuple[Any, ...]:
    """What a snapshot can read of ``obj`` (``adapter.kube.convert``): everything but the
    bookkeeping a write bumps (``resourceVersion``, ``generation``) and the status parts
    no decision reads — a pod's status beyond whether it finished, what a resize
    changed, its nomination and its mark as a victim (its other conditions, and Running
    once a kubelet starts it), a node's beyond its room and readiness, a PodGroup's or
    Queue's status (gangsat's own output). ``assumed_node`` is the bind the snapshot
    already showed. A test holds convert to this view."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):  # (set rather than left out: a copy in C, the same compare)
        meta = {**meta, "resourceVersion": None, "generation": None}
    spec = obj.get("spec")
    if assumed_node is not None and isinstance(spec, dict):
        spec = {**spec, "nodeName": assumed_node}
    status = obj.get("status")
    if resource == PODS and isinstance(status, dict | None):
        # Whether it finished, what an in-place resize changed (``pods._requests``),
        # where a preemptor is nominated (``pods._nominated``), and why a victim was
        # marked for eviction (``disruption.marked_victim``).
        status = (
            finished(status),
            _resources_of(status) if status else None,
            status.get("nominatedNodeName") if status else None,
            marked_victim(status),
        )
    elif resource == NODES and isinstance(status, dict):
        # Room and readiness; not the heartbeat times a kubelet refreshes.
        conditions = status.get("conditions")
        status = (
            status.get("allocatable"),
            status.get("capacity"),
            [(c.get("type"), c.get("status")) if isinstance(c, dict) else c for c in conditions]
            if isinstance(conditions, list)
            else conditions,
        )
    elif (resource in DIALECTS or resource == DISRUPTION_BUDGETS) and isinstance(
        status, dict | None
    ):
        # A budget's status follows every pod it covers; which pods it covers, its spec.
        # Of a PodGroup's and a Queue's, gangsat writes all but a Volcano Queue's state,
        # which its controller sets as an admin opens or closes the queue (read:
        # ``Queue.admits``). A status that is no mapping makes a finding: kept.
        status = status.get("state") if status and resource.kind == "Queue" else None
    rest = {**obj, "metadata": None, "spec": None, "status": None}
    return meta, spec, status, rest


def _resources_of(status: dict[str, Any]) -> Any:
    """What a pod's status says of the resources its containers hold (in-place resize):
    nothing for most pods, so the usual status chatter changes no read view."""
    held = [
        (c.get("name"), c.get("resources"), c.get("allocatedResources"))
        for key in STATUS_LISTS
        for c in listed(status.get(key))
        if isinstance(c, dict) and (c.get("resources") or c.get("allocatedResources"))
    ]
    if not held:
        return None
    conditions = listed(status.get("conditions"))
    pending = [
        (c.get("type"), c.get("reason"))
        for c in conditions
        if isinstance(c, dict) and str(c.get("type", "")).startswith("PodResize")
    ]
    return held, status.get("resize"), pending


def _node_of(pod: Obj) -> Any:
    """The node a pod is bound to, if any."""
    spec = pod.get("spec")
    return spec.get("nodeName") if isinstance(spec, dict) else None


def _leaving(pod: Obj, assumed_node: str | None = None) -> Obj | None:
    """A pod being deleted: until it is gone it still holds its node's capacity, marked
    terminating (no member of its gang any more, which is no victim meanwhile: it is
    already losing pods); if it was never bound it is not to be scheduled."""
    if _node_of(pod):
        return {**pod, LEAVING: True}
    if assumed_node is None:
        return None
    return {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": assumed_node}, LEAVING: True}
