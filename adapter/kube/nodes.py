"""A Node object as the snapshot reads it: what it has to allocate, its labels and taints,
whether it is cordoned or ready (``adapter.kube.unusable``: nodes kept that take no pod)."""

from __future__ import annotations

from adapter.kube.fields import BadObject, Obj, meta, quantities
from solver.model import Node, Resources
from solver.scheduling_terms import Taint

NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"


def node_of_object(obj: Obj) -> Node:
    """A Node object as the snapshot reads it; ``BadObject`` where it cannot be read."""
    _, name = meta(obj)
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    allocatable = status.get("allocatable") or status.get("capacity")
    if not allocatable:
        raise BadObject("status.allocatable is missing")
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    taints = tuple(
        Taint(key=t["key"], value=t.get("value") or "", effect=t["effect"])
        for t in spec.get("taints") or []
    )
    # kube-scheduler reads readiness through the taints the node lifecycle controller
    # adds (not-ready when Ready is False, unreachable when Unknown); a node read before
    # the controller tainted it gets the taint here, so only pods that tolerate it go
    # there, as they will once it is tainted.
    ready = conditions.get("Ready", "True")
    condition_taint = None if ready == "True" else UNREACHABLE if ready == "Unknown" else NOT_READY
    # (NoSchedule: every pod tolerates the NoExecute one a while, DefaultTolerationSeconds)
    if condition_taint and not any(
        t.key == condition_taint and t.effect == "NoSchedule" for t in taints
    ):
        taints = (*taints, Taint(key=condition_taint, effect="NoSchedule"))
    return Node(
        name=name,
        allocatable=Resources(quantities(allocatable, "status.allocatable", held=True)),
        labels=(obj.get("metadata") or {}).get("labels") or {},
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=condition_taint is None,
    )
