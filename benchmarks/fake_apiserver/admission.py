"""What the apiserver does to an object on its way in besides storing it: create-time
defaulting and Priority admission, name validation, and the limits on pod updates."""

from __future__ import annotations

import re

from benchmarks.fake_apiserver.objects import FakeApiError, Obj, _now, _Resource
from benchmarks.fake_apiserver.storage import _Store

# What a real server lets a pod update change in spec (ValidatePodUpdate); nodeName is not
# among them, which is why a scheduler must bind.
POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "schedulingGates",
    "terminationGracePeriodSeconds",
)

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class _Admission(_Store):
    """Admission and validation of writes (under the store's lock)."""

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
