"""Writes: create (generateName), update with optimistic concurrency, the three patch
types, delete with preconditions (a namespace's or CRD's objects go with it) and bind."""

from __future__ import annotations

import random
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.fake_apiserver.admission import _Admission, _check_name
from benchmarks.fake_apiserver.budgets import _check_budget
from benchmarks.fake_apiserver.objects import (
    TYPE_KEYS,
    BindingRecord,
    FakeApiError,
    Obj,
    _now,
    _Resource,
)
from benchmarks.fake_apiserver.patches import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    _json_patch,
    _merge_patch,
    _PatchError,
    _strategic_merge_patch,
)
from benchmarks.fake_apiserver.registry import _Registry
from benchmarks.fake_apiserver.watch import _Event

CONFLICT_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's generateName alphabet


DEFAULT_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when it sets none


class _Writes(_Admission, _Registry):
    """Every write, all under the store's lock (the callers hold it)."""

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
        uid = meta.get("uid")
        # A UID that is not the object's makes the write an error, a precondition a writer
        # sets against a namesake: a PUT's is checked as one (409), a patch's result fails
        # validation (the UID is immutable: 422), but where a custom resource's status
        # subresource keeps nothing but the status of the patched object: its UID dropped.
        dropped = patched and sub == "status" and res.custom
        if uid and uid != current["metadata"].get("uid") and not dropped:
            if not patched:
                raise res.conflict(
                    name,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{current['metadata'].get('uid')}",
                )
            raise res.invalid(name, f'metadata.uid: Invalid value: "{uid}": field is immutable')
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
        _check_preconditions(res, name, current["metadata"], options)
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

    def _evict(self, namespace: str, name: str, eviction: Any, dry_run: bool = False) -> None:
        """POST pods/{name}/eviction (policy/v1): the pod is deleted unless a
        PodDisruptionBudget selecting it would be broken (429). Gracefully, as a kubelet
        would end it: for its grace period (the eviction's ``gracePeriodSeconds``, else
        the pod's ``terminationGracePeriodSeconds``, else 30 s) it stays, with a
        ``deletionTimestamp``, holding its node's room; then it is deleted. A grace of 0
        deletes at once. ``dry_run`` (``?dryRun=All``): the same checks, the budget's and
        the preconditions', and nothing changed."""
        pods = self._resources[("", "pods")]
        if not isinstance(eviction, dict):
            raise FakeApiError(400, "the body of the request must be a JSON object")
        current = self._objects[("", "pods")].get((namespace, name))
        if current is None:
            raise pods.not_found(name)
        _check_budget(self._objects, namespace, current)
        if dry_run:
            options = eviction.get("deleteOptions") or {}
            _check_preconditions(pods, name, current["metadata"], options)
            return
        self._delete_pod(namespace, name, eviction.get("deleteOptions") or {})

    def _delete_pod(self, namespace: str, name: str, options: Any) -> Obj:
        """DELETE of a pod (or its eviction), as kube-apiserver ends it: a bound pod stays,
        with a ``deletionTimestamp``, holding its node's room for its grace period (the
        request's ``gracePeriodSeconds``, else its ``terminationGracePeriodSeconds``, else
        30 s), then is deleted, as its kubelet would confirm; an unbound pod, or a grace of
        0, is gone at once. Returns the pod as it is then."""
        pods = self._resources[("", "pods")]
        current = self._objects[("", "pods")].get((namespace, name))
        if current is None:
            raise pods.not_found(name)
        options = options if isinstance(options, dict) else {}
        grace = options.get("gracePeriodSeconds")
        if not isinstance(grace, int):
            grace = (current.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = grace if isinstance(grace, int) else DEFAULT_GRACE_S
        meta = current["metadata"]
        if grace <= 0 or not (current.get("spec") or {}).get("nodeName"):
            return self._delete(pods, namespace, name, options)  # nothing runs: gone at once
        _check_preconditions(pods, name, meta, options)
        if meta.get("deletionTimestamp"):
            return current  # terminating already
        ends = datetime.now(UTC) + timedelta(seconds=grace)
        new = {
            **current,
            "metadata": {
                **meta,
                "deletionTimestamp": ends.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "deletionGracePeriodSeconds": grace,
            },
        }
        self._commit(pods, current, new)
        timer = threading.Timer(grace, self._terminated, (namespace, name, meta.get("uid")))
        timer.daemon = True
        timer.start()
        return self._objects[("", "pods")][(namespace, name)]

    def _terminated(self, namespace: str, name: str, uid: str | None) -> None:
        """The grace period of an evicted pod is over: it is deleted (if still there)."""
        with self._lock:
            current = self._objects[("", "pods")].get((namespace, name))
            if current is not None and current["metadata"].get("uid") == uid:
                self._delete(self._resources[("", "pods")], namespace, name, {})

    def _bind(self, namespace: str, name: str, binding: Any) -> None:
        target = binding.get("target") if isinstance(binding, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        try:
            self._assign(namespace, name, binding)
        except FakeApiError as e:
            self.bindings.append(BindingRecord(f"{namespace}/{name}", str(node or ""), e.code))
            raise
        self.bindings.append(BindingRecord(f"{namespace}/{name}", str(node), 201))

    def _assign(self, namespace: str, name: str, binding: Any) -> None:
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
        # As kube-apiserver's pod registry refuses a bind, in its order; each refusal is
        # a 409 Conflict on pods/binding. The UID precondition is checked on the stored
        # pod first, so a namesake's bind fails on it even where the pod has a node. A
        # pending pod being deleted (a Job's, held by its tracking finalizer) or one still
        # gated is never bound.
        refusal = None
        if meta.get("uid") and meta["uid"] != current["metadata"].get("uid"):
            refusal = (
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object "
                f"meta: {current['metadata'].get('uid')}"
            )
        elif current["metadata"].get("deletionTimestamp"):
            refusal = f"pod {name} is being deleted, cannot be assigned to a host"
        elif spec.get("nodeName"):
            refusal = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        elif spec.get("schedulingGates"):
            refusal = f"pod {name} has non-empty .spec.schedulingGates"
        if refusal is not None:
            raise FakeApiError(
                409,
                f'Operation cannot be fulfilled on {binding_res} "{name}": {refusal}',
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


def _spec(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", *TYPE_KEYS)}


def _check_preconditions(res: _Resource, name: str, meta: Obj, options: Any) -> None:
    """A delete's (or an eviction's) ``preconditions``: UID and resourceVersion, a 409
    when either names another object or version."""
    pre = options.get("preconditions") if isinstance(options, dict) else None
    if not isinstance(pre, dict):
        return
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
