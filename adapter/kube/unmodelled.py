"""Placement rules of a pod that gangsat does not check, and so must not place it under.

kube-scheduler filters nodes by more than gangsat's predicates read (selector, required
node affinity, taints, resources): dynamic resource claims and inline disks one pod at a
time may use (volumes read from claims: ``volumes``; required anti-affinity:
``anti_affinity``; required affinity: ``pod_affinity``; topology spread: ``spread``;
host ports: ``host_ports``). Placed without such rules, a gang of pods with required
anti-affinity went onto one node, and pods asking for one host port onto one node (the
kubelet then refuses all but one: a gang broken after binding). A pending pod with a rule
gangsat does not check is therefore not scheduled: it becomes a finding, an
``InvalidSpec`` Event says which rule, and its gang waits for it. Bound pods are read as
they are: they hold their room wherever they run."""

from __future__ import annotations

from collections.abc import Mapping

from adapter.kube.fields import Obj, mappings
from adapter.kube.pod_terms import AFFINITY, NOT_SCHEDULED, REQUIRED

# Inline volumes that VolumeRestrictions lets no two pods of a node (or any node) share.
EXCLUSIVE_DISKS = ("gcePersistentDisk", "awsElasticBlockStore", "iscsi", "rbd")


def unmodelled(spec: Obj) -> str | None:
    """The first rule of a pending pod's ``spec`` that gangsat does not check, if any."""
    affinity = spec.get("affinity")
    rules = affinity.get(AFFINITY) if isinstance(affinity, Mapping) else None
    if isinstance(rules, Mapping) and any(
        term.get("namespaceSelector") for term in mappings(rules.get(REQUIRED))
    ):
        # Read as every namespace, which is never too few for anti-affinity, a pod in a
        # namespace the selector leaves out would count for affinity: refused instead.
        return (
            "asks for required podAffinity with a namespaceSelector (gangsat reads no "
            f"Namespace objects), {NOT_SCHEDULED}"
        )
    if spec.get("resourceClaims"):
        return f"asks for resourceClaims (dynamic resource allocation), {NOT_SCHEDULED}"
    for volume in mappings(spec.get("volumes")):
        if (disk := inline_disk(volume)) is not None:
            return f"mounts an inline {disk} volume, {NOT_SCHEDULED}"
    return None


def inline_disk(volume: Obj) -> str | None:
    """The kind of an inline disk ``volume`` is, if one of ``EXCLUSIVE_DISKS``: kube-
    scheduler's VolumeRestrictions keeps two pods of one such disk apart (but read-only);
    placed together, the second pod's attach or mount fails."""
    return next((k for k in EXCLUSIVE_DISKS if volume.get(k) is not None), None)
