"""A pending pod's PersistentVolumeClaims, as kube-scheduler's volume plugins read them.

Training jobs mount datasets and checkpoints through claims; most are bound to volumes
any node reaches (NFS, object-store CSI drivers: no node affinity), some to volumes one
zone or one node reaches. So a claim is no reason to refuse a pod: where its volume is
bound, the volume's node affinity (``spec.nodeAffinity.required``) is added to the pod's
own, and the pod goes wherever both allow. A claim gangsat cannot place the pod for
makes the pod wait, with the reason, as kube-scheduler's ``VolumeBinding`` and
``VolumeRestrictions`` filters do:

- the claim does not exist (yet), or is being deleted;
- a generic ephemeral volume's claim (``<pod>-<volume>``) was made for another pod;
- the claim is not bound: gangsat does not bind or provision volumes, so a claim whose
  StorageClass waits for its first consumer (``WaitForFirstConsumer``) stays unbound and
  its pod stays pending under gangsat (kube-scheduler would pick the node and let the
  provisioner follow); one bound by the PV controller (``Immediate``) is waited for;
- its volume is not known (yet);
- a ``ReadWriteOncePod`` claim that another pod already uses.

Not modelled (kube-scheduler checks it, gangsat does not): per-node limits on attached
volumes (``NodeVolumeLimits``); a ``ReadWriteOnce`` volume is, as in kube-scheduler,
not kept off a second node (its attach would fail there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import product

from adapter.kube.fields import Obj
from adapter.kube.pods import node_selector_terms
from solver.model import NodeSelectorTerm, Pod

# Above this many terms (the product of the pod's and its volumes' alternatives), the
# pod waits: each term is checked against every node in every cycle.
MAX_TERMS = 64


class Waits(Exception):
    """Why a pod cannot be placed until its claims change."""


def claim_names(pod_name: str, spec: Obj) -> list[tuple[str, bool]]:
    """The claims a pod's volumes name, in its namespace, each with whether it is a
    generic ephemeral volume's (``<pod name>-<volume name>``, made by its controller)."""
    names = []
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, Mapping):
            names.append((str(claim.get("claimName") or ""), False))
        elif volume.get("ephemeral") is not None:
            names.append((f"{pod_name}-{volume.get('name')}", True))
    return names


class Claims:
    """The claims and volumes of a snapshot, and which pods use each claim."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        self.claims: dict[str, Obj] = {}  # namespace/name -> PersistentVolumeClaim
        self.volumes: dict[str, Obj] = {}  # name -> PersistentVolume
        self.users: dict[str, set[str]] = {}  # namespace/claim -> pods using it
        for o in objects:
            metadata = o.get("metadata")
            if not isinstance(metadata, Mapping):
                continue
            if o.get("kind") == "PersistentVolumeClaim":
                self.claims[f"{metadata.get('namespace')}/{metadata.get('name')}"] = o
            elif o.get("kind") == "PersistentVolume":
                self.volumes[str(metadata.get("name"))] = o
        # Whether a bound pod's claims must be known: only a ReadWriteOncePod claim's
        # users keep other pods off it.
        self.exclusive = any(
            "ReadWriteOncePod" in ((c.get("spec") or {}).get("accessModes") or [])
            for c in self.claims.values()
        )

    def use(self, namespace: str, pod_name: str, spec: Obj) -> list[tuple[str, bool]]:
        """Record that pod ``pod_name`` (not finished) uses its claims; returns them."""
        names = claim_names(pod_name, spec)
        for name, _ in names:
            self.users.setdefault(f"{namespace}/{name}", set()).add(f"{namespace}/{pod_name}")
        return names

    def placed(self, pod: Pod, names: list[tuple[str, bool]], uid: str | None) -> Pod:
        """``pod`` with the node affinity of the volumes its claims ``names`` are bound
        to; ``Waits`` if one of them keeps it from every node now. ``uid``: the pod's,
        which a generic ephemeral volume's claim must be controlled by."""
        terms: tuple[NodeSelectorTerm, ...] = pod.affinity
        for name, ephemeral in names:
            volume_terms = self._terms(pod, name, ephemeral, uid)
            if volume_terms:
                terms = _both(terms, volume_terms)
                if len(terms) > MAX_TERMS:
                    raise Waits(
                        f"its node affinity and its volumes' allow nodes in {len(terms)} "
                        f"ways, above the {MAX_TERMS} gangsat reads"
                    )
        return pod if terms == pod.affinity else pod.model_copy(update={"affinity": terms})

    def _terms(
        self, pod: Pod, name: str, ephemeral: bool, uid: str | None
    ) -> tuple[NodeSelectorTerm, ...]:
        key = f"{pod.namespace}/{name}"
        claim = self.claims.get(key)
        what = f"PersistentVolumeClaim {name!r}"
        if claim is None:
            raise Waits(f"waits for {what}: not found")
        metadata = claim.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            raise Waits(f"waits: {what} is being deleted")
        if ephemeral and not _controlled_by(claim, uid):
            raise Waits(f"waits: {what} was not made for this pod's ephemeral volume")
        spec = claim.get("spec") or {}
        modes = spec.get("accessModes") or []
        if "ReadWriteOncePod" in modes and self.users.get(key, set()) - {pod.name}:
            raise Waits(f"waits: {what} is ReadWriteOncePod and another pod uses it")
        volume_name = spec.get("volumeName")
        phase = (claim.get("status") or {}).get("phase")
        if not volume_name or phase not in (None, "Bound"):
            raise Waits(
                f"waits for {what} to be bound: gangsat does not bind or provision volumes "
                "(a WaitForFirstConsumer StorageClass's claims need kube-scheduler)"
            )
        volume = self.volumes.get(str(volume_name))
        if volume is None:
            raise Waits(f"waits for PersistentVolume {volume_name!r} of {what}: not found")
        required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
        if not required:
            return ()  # reached from every node
        terms = node_selector_terms(required)
        if not terms:
            raise Waits(f"PersistentVolume {volume_name!r} of {what} allows no node")
        return terms


def _controlled_by(claim: Obj, uid: str | None) -> bool:
    """Whether ``claim``'s controller is the pod of ``uid`` (a pod read from a manifest,
    without one: any pod)."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") == "Pod":
            return uid is None or ref.get("uid") == uid
    return False


def _both(
    ours: tuple[NodeSelectorTerm, ...], theirs: tuple[NodeSelectorTerm, ...]
) -> tuple[NodeSelectorTerm, ...]:
    """Terms that hold where one of ``ours`` and one of ``theirs`` hold (``ours`` empty:
    no affinity, any node). A term without requirements matches no node, and stays one."""
    if not ours:
        return theirs
    return tuple(_and(a, b) for a, b in product(ours, theirs))


def _and(a: NodeSelectorTerm, b: NodeSelectorTerm) -> NodeSelectorTerm:
    if not (a.match_expressions or a.match_fields) or not (b.match_expressions or b.match_fields):
        return a if not (a.match_expressions or a.match_fields) else b
    return NodeSelectorTerm(
        match_expressions=(*a.match_expressions, *b.match_expressions),
        match_fields=(*a.match_fields, *b.match_fields),
    )
