"""A pending pod's rules over other pods, read after every pod of the snapshot is: required
anti-affinity (``anti_affinity``), required affinity (``pod_affinity``, which reads the
anti-affinity terms between jobs each kept in a domain that the first hands over),
topology spread (``spread``) and host ports (``host_ports``)."""

from __future__ import annotations

from collections.abc import Mapping

from adapter.kube.anti_affinity import BoundAntiAffinity, keep_apart
from adapter.kube.fields import Obj
from adapter.kube.host_ports import keep_ports
from adapter.kube.pod_affinity import keep_together
from adapter.kube.reading import Finding
from adapter.kube.spread import keep_spread
from solver.model import Node, Pod


def read_pod_rules(
    pending: list[tuple[Obj, str]],
    bound: BoundAntiAffinity,
    pods: dict[str, Pod],
    nodes: Mapping[str, Node],
    findings: list[Finding],
) -> None:
    """Hold the ``pending`` pods (object, key) still in ``pods`` to their rules over the
    ``bound`` pods and each other; a pod whose rule cannot be checked is taken out of
    ``pods`` with a finding."""
    zone_wide = keep_apart(pending, bound, pods, nodes, findings)
    keep_together(pending, bound.bound, pods, nodes, zone_wide, findings)
    keep_spread(pending, bound.bound, pods, nodes, findings)
    keep_ports(pods, nodes)
