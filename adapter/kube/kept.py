"""What the cache keeps of an object: the fields some part of gangsat reads, and not what
a real API server sends besides.

A pod as kube-apiserver stores it is 5-7 KB of JSON and 30-40 KB as decoded Python: its
``managedFields``, its containers' env, commands, mounts and probes, the service-account
token volume, and the kubelet's per-container state. gangsat reads little of it, and a
first list of 50,000 such pods left the process at about 1.9 GB (a Deployment limited to
2 GiB); 20,000 kept 18.4 KB each, 10.6 KB trimmed. As
client-go's informer transforms do, each object is trimmed as it enters the cache:

- every kind: ``metadata.managedFields`` and kubectl's last-applied-configuration
  annotation (the whole object again, on anything applied with ``kubectl apply``);
- nodes: ``status.images`` (every image the node holds);
- pods: of each container, init container and their statuses only what conversion reads
  (``pods._requests``: name, resources, restartPolicy; ``unmodelled``: ports; the
  statuses' resources of an in-place resize), not the volumes no scheduling rule reads
  (the service-account token, ConfigMaps, Secrets, scratch space), and no ephemeral
  containers (kube-scheduler ignores them).

A field read anywhere in ``convert``, ``pods``, ``unmodelled``, ``volumes`` or the reporter
must not be trimmed here: the tests convert objects both ways and compare.
"""

from __future__ import annotations

from typing import Any

from adapter.kube.fields import CONTAINER_LISTS, STATUS_LISTS
from adapter.kube.resources import NODES, PODS, Resource

Obj = dict[str, Any]  # as the cache holds objects

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CONTAINER_READ = ("name", "resources", "ports", "restartPolicy")
CONTAINER_STATUS_READ = ("name", "resources", "allocatedResources")
# Volumes no scheduling rule reads (the service-account token, config, scratch space):
# every other kind is kept, claims and disks alike.
UNREAD_VOLUMES = frozenset({"projected", "configMap", "secret", "downwardAPI", "emptyDir"})


def kept(resource: Resource, obj: Obj) -> Obj:
    """The object as the cache keeps it: typed (a list's items may lack kind and
    apiVersion), and trimmed. A copy where anything changes: the decoded object may be
    shared."""
    if "kind" not in obj or "apiVersion" not in obj:
        obj = {**obj, "kind": resource.kind, "apiVersion": resource.api_version}
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict) or LAST_APPLIED not in annotations:
            annotations = None
        if annotations is not None or "managedFields" in meta:
            meta = {k: v for k, v in meta.items() if k != "managedFields"}
            if annotations is not None:
                meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
            obj = {**obj, "metadata": meta}
    status = obj.get("status")
    if resource == NODES and isinstance(status, dict) and "images" in status:
        obj = {**obj, "status": {k: v for k, v in status.items() if k != "images"}}
    elif resource == PODS:
        obj = _pod(obj)
    return obj


def _pod(obj: Obj) -> Obj:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        obj = {**obj, "spec": _trimmed(spec, CONTAINER_LISTS, CONTAINER_READ, SPEC_DROPPED)}
    status = obj.get("status")
    if isinstance(status, dict) and not status.keys().isdisjoint(STATUS_TRIMMED):
        trimmed = _trimmed(status, STATUS_LISTS, CONTAINER_STATUS_READ, STATUS_DROPPED)
        obj = {**obj, "status": trimmed}
    return obj


SPEC_DROPPED = frozenset({"ephemeralContainers"})
STATUS_DROPPED = frozenset({"ephemeralContainerStatuses"})
STATUS_TRIMMED = frozenset({*STATUS_LISTS, *STATUS_DROPPED})


def _trimmed(
    part: Obj, lists: tuple[str, ...], fields: tuple[str, ...], dropped: frozenset[str]
) -> Obj:
    """A pod's spec or status, in one pass: ``dropped`` left out, each mapping of the
    ``lists`` with only ``fields``, and the volumes no rule reads left out. Anything of
    another shape stays as it is (a malformed object stays malformed, for conversion to
    report)."""
    # Copied whole (in C), then the few keys that change replaced in place: the same
    # keys in the same order as a copy key by key.
    out = (
        dict(part)
        if dropped.isdisjoint(part)
        else {k: v for k, v in part.items() if k not in dropped}
    )
    for key in lists:
        value = out.get(key)
        if isinstance(value, list):
            out[key] = [
                {k: c[k] for k in fields if k in c} if isinstance(c, dict) else c for c in value
            ]
    value = out.get("volumes")
    if isinstance(value, list):
        out["volumes"] = [
            v for v in value if not isinstance(v, dict) or UNREAD_VOLUMES.isdisjoint(v)
        ]
    return out
