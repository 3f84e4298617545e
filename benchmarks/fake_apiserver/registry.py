"""What the fake serves: the built-in resources a scheduler touches, custom resources a
POSTed CustomResourceDefinition registers, and the discovery documents describing them."""

from __future__ import annotations

import re

from benchmarks.fake_apiserver.objects import Obj, _not_found_path, _Resource
from benchmarks.fake_apiserver.storage import _Store

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


def _builtin_resources() -> tuple[_Resource, ...]:
    """The resources kube-apiserver itself serves that a scheduler touches."""
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
    return (
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
            "",
            ["v1"],
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            True,
            True,
            ("pvc",),
            "persistentvolumeclaim",
            "PersistentVolumeClaimList",
            {},
        ),
        _Resource(
            "",
            ["v1"],
            "persistentvolumes",
            "PersistentVolume",
            False,
            True,
            ("pv",),
            "persistentvolume",
            "PersistentVolumeList",
            {},
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
            "policy",
            ["v1"],
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            True,
            ("pdb",),
            "poddisruptionbudget",
            "PodDisruptionBudgetList",
            {},
        ),
        _Resource(
            "storage.k8s.io",
            ["v1"],
            "storageclasses",
            "StorageClass",
            False,
            False,
            ("sc",),
            "storageclass",
            "StorageClassList",
            {},
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
    )


class _Registry(_Store):
    """Registering custom resources, and discovery."""

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
                resources.append(
                    {
                        "name": "pods/eviction",
                        "singularName": "",
                        "namespaced": True,
                        "group": "policy",
                        "version": "v1",
                        "kind": "Eviction",
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


def _version_priority(version: str) -> tuple[int, int, int, str]:
    # Kubernetes' order: GA before beta before alpha, higher numbers first, others last.
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if m is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m[2]]
    return (stage, -int(m[1]), -int(m[3] or 0), version)
