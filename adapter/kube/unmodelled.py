"""Placement rules of a pod that gangsat does not check, and so must not place it under.

kube-scheduler filters nodes by more than gangsat's predicates read (selector, required
node affinity, taints, resources): inter-pod affinity and anti-affinity, topology spread,
host ports, dynamic resource claims and inline disks one pod at a time may use
(volumes read from claims: ``volumes``). Placed without them, a
gang of pods with required anti-affinity went onto one node, and pods asking for one
host port onto one node (the kubelet then refuses all but one: a gang broken after
binding). A pending pod with such a rule is therefore not scheduled: it becomes a
finding, an ``InvalidSpec`` Event says which rule, and its gang waits for it. The one
rule of a bound pod that binds others, its required anti-affinity (kube-scheduler checks
it both ways), is modelled: a pending pod it selects is held to a ``NodeRule`` that keeps
it out of the bound pod's topology domain. Bound pods are read as they are: they hold their
room wherever they run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapter.kube.budgets import selects
from adapter.kube.fields import Obj, mappings
from solver.model import Node, Pod
from solver.predicates import EXISTING_ANTI_AFFINITY, held_to
from solver.scheduling_terms import NodeRule, NodeSelectorRequirement, NodeSelectorTerm

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# Inline volumes that VolumeRestrictions lets no two pods of a node (or any node) share.
EXCLUSIVE_DISKS = ("gcePersistentDisk", "awsElasticBlockStore", "iscsi", "rbd")
NOT_SCHEDULED = "which gangsat does not check: not scheduled (kube-scheduler would check it)"


def unmodelled(spec: Obj) -> str | None:
    """The first rule of a pending pod's ``spec`` that gangsat does not check, if any."""
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        for kind in ("podAffinity", "podAntiAffinity"):
            rules = affinity.get(kind)
            if isinstance(rules, Mapping) and rules.get(REQUIRED):
                return f"asks for required {kind}, {NOT_SCHEDULED}"
    for constraint in mappings(spec.get("topologySpreadConstraints")):
        if constraint.get("whenUnsatisfiable") == "DoNotSchedule":
            return f"asks for a DoNotSchedule topologySpreadConstraint, {NOT_SCHEDULED}"
    # kube-scheduler's NodePorts reads the app containers' host ports; of the init
    # containers only sidecars (restartPolicy Always), which run beside them, are taken to
    # hold theirs. Refused for an init container that runs to completion first, a pod
    # kube-scheduler places waited for ever.
    sidecars = [
        c for c in mappings(spec.get("initContainers")) if c.get("restartPolicy") == "Always"
    ]
    for container in [*mappings(spec.get("containers")), *sidecars]:
        for port in mappings(container.get("ports")):
            if port.get("hostPort"):
                return f"asks for hostPort {port['hostPort']}, {NOT_SCHEDULED}"
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


@dataclass
class BoundAntiAffinity:
    """The required anti-affinity terms of the bound pods of a snapshot, as the nodes
    they keep the pods they select off: those whose label ``topologyKey`` has the value
    the bound pod's node has (no node without that label: it is in no domain)."""

    # (namespaces the term reads, None for any; its labelSelector; topologyKey; node)
    terms: list[tuple[frozenset[str] | None, Any, str, str]] = field(default_factory=list)

    def add(self, pod: Obj, spec: Obj, node: str) -> None:
        """Read a bound pod's terms from its ``spec`` (most pods have no affinity: one
        lookup, and no check against an abstract type, which costs more than it)."""
        affinity = spec.get("affinity")
        if affinity is None or not isinstance(affinity, Mapping):
            return
        rules = affinity.get("podAntiAffinity")
        if not isinstance(rules, Mapping):
            return
        own = str((pod.get("metadata") or {}).get("namespace") or "default")
        for term in mappings(rules.get(REQUIRED)):
            namespaces: frozenset[str] | None = frozenset({own})
            if term.get("namespaceSelector") is not None:
                namespaces = None  # read as selecting any namespace: never too few
            elif isinstance(term.get("namespaces"), list) and term["namespaces"]:
                namespaces = frozenset(str(n) for n in term["namespaces"])
            key = term.get("topologyKey")
            if isinstance(key, str) and key:
                self.terms.append((namespaces, term.get("labelSelector"), key, node))

    def requirements_for(
        self, pod: Obj, nodes: Mapping[str, Node]
    ) -> tuple[NodeSelectorRequirement, ...]:
        """Requirements that keep a pending pod (its namespace and labels) off the
        domains of the terms that select it: per topology key, NotIn its values."""
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        labels = metadata.get("labels") or {}
        if not isinstance(labels, Mapping):
            labels = {}
        values: dict[str, set[str]] = {}
        for namespaces, selector, key, node_name in self.terms:
            if namespaces is not None and namespace not in namespaces:
                continue
            if selector is None or not selects(selector, labels):
                continue
            node = nodes.get(node_name)
            value = node.labels.get(key) if node is not None else None
            if value is not None:
                values.setdefault(key, set()).add(value)
        return tuple(
            NodeSelectorRequirement(key=key, operator="NotIn", values=tuple(sorted(vals)))
            for key, vals in sorted(values.items())
        )


def kept_off(pod: Pod, requirements: tuple[NodeSelectorRequirement, ...]) -> Pod:
    """``pod`` held to ``requirements`` besides its own affinity, wherever it goes; a node
    that fails them is one that "didn't satisfy existing pods anti-affinity rules"."""
    if not requirements:
        return pod
    rule = NodeRule(
        reason=EXISTING_ANTI_AFFINITY, terms=(NodeSelectorTerm(match_expressions=requirements),)
    )
    return held_to(pod, (rule,))
