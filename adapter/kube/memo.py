"""What one snapshot converted, kept for the next (``adapter.kube.convert``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapter.kube.dialects import group_of
from adapter.kube.fields import LEAVING, Obj, created_s
from solver.model import Pod

# A memo entry: the object read, its ``memo_key``, what it converted to, and its finding.
Seen = tuple[Obj, tuple[Any, ...], Any, Any]


@dataclass
class Memo:
    """On a big cluster nearly every object is unchanged from one cycle to the next.

    ``by_id``: the cache hands out the same dict for an object until a watch event
    replaces it, so an object seen before is found by identity, without reading it (at
    5,000 nodes and 40,000 pods, reading every object's keys again took half of a
    quiet cycle's snapshot). Each entry holds its object, so its id cannot be reused
    while the entry lives. An unchanged object in a new dict (a re-list, a bind the
    cache overlays) is found by its ``memo_key`` (uid and resourceVersion) among the
    entries' keys (``Reading``): looked up only when an object is not found by identity.
    """

    # What an object converted to, and the finding it made (or None).
    by_id: dict[int, Seen] = field(default_factory=dict)

    # Pods' conversions by shape (``pods.shape_key``), for the pods a later snapshot
    # converts afresh (``Shapes``).
    shapes: dict[tuple[Any, ...], Pod] = field(default_factory=dict)

    # What the reads depended on besides the objects (``Reading.priority_key``): the
    # same object from one snapshot to the next while it is unchanged, so that most
    # entries are compared with it by identity.
    priority_key: tuple[Any, ...] = ()

    def __len__(self) -> int:
        return len(self.by_id) + len(self.shapes)


@dataclass
class Shapes:
    """What pods converted to, by shape: the pods of a gang come from one template, so
    all but the first of them are copies with their own name (``pods.pod_of_object``).
    A shape is kept while the snapshot before converted a pod of it afresh
    (``earlier``), so the memory follows the pods arriving, not the history."""

    earlier: dict[tuple[Any, ...], Pod] = field(default_factory=dict)
    now: dict[tuple[Any, ...], Pod] = field(default_factory=dict)

    def get(self, key: tuple[Any, ...]) -> Pod | None:
        hit = self.now.get(key)
        if hit is None and (hit := self.earlier.get(key)) is not None:
            self.now[key] = hit
        return hit

    def put(self, key: tuple[Any, ...], value: Pod) -> None:
        self.now[key] = value


def memo_key(kind: str, o: Obj, priorities: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What a converted object depends on: an API object's uid and resourceVersion, and
    for a pod also its node, its group and whether it is leaving, which the cache may
    overlay (an assumed bind, a pod being deleted). Objects without both (a manifest
    file), and pods and Jobs without a creation time, are not memoised."""
    metadata = o.get("metadata") or {}
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if not isinstance(uid, str) or not isinstance(version, str) or not uid or not version:
        return None  # unusual shapes are read uncached, where they become findings
    if kind in ("Pod", "Job") and not created_s(o):
        # Without a creation time a pod is ordered by its place among the objects
        # (``convert``), which no key holds: read again each time, as it may have moved.
        return None
    if kind == "Pod":
        spec = o.get("spec") or {}
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        try:
            group = group_of(o)
        except (AttributeError, TypeError):
            return None
        if not isinstance(node, str | None) or not isinstance(group, str | None):
            return None
        return (kind, uid, version, node, group, bool(o.get(LEAVING)), priorities)
    return (kind, uid, version, priorities)
