"""Fluent builders for test snapshots, so a test reads like the cluster it describes.

    pod("p").req(cpu="1", memory="1Gi", gpu=1).gang("g").build()
    node("n1").cap(cpu="4", memory="8Gi", pods=2).label(gpu="v100").taint("k", "v", "NoSchedule")
    gang("g", min_member=4).queue("q").priority(5).build()
    queue("q", weight=3).capability(cpu="8").build()
    state(nodes=[...], pods=[...], gangs=[...], queues=[...])

Quantities are Kubernetes quantities, as strings ("500m", "1.5", "1Gi", "1e3") or
numbers, and mean what they would in a manifest: ``cpu=2`` is two cores (2000
millicores), ``memory="1Gi"`` is 2**30 bytes. Keyword ``gpu`` is ``nvidia.com/gpu`` and
``ephemeral_storage`` is ``ephemeral-storage``; any other resource name can be passed
with ``**{"example.com/fpga": 1}``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from solver.model import (
    CPU,
    DEFAULT_QUEUE,
    GPU,
    OPEN_QUEUE,
    ClusterState,
    Gang,
    Node,
    Pod,
    Queue,
    Resources,
    VictimMark,
)
from solver.scheduling_terms import (
    DomainSpread,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
)

Quantity = str | int | float | Decimal
_ALIASES = {"gpu": GPU, "ephemeral_storage": "ephemeral-storage"}


def quantity(name: str, value: Quantity) -> int:
    """A Kubernetes quantity in model units: millicores for cpu, else the base unit.

    Fractions round up, as the kubelet does when it admits a pod.
    """
    parsed = parse_quantity(value)
    if name == CPU:
        parsed *= 1000
    return math.ceil(parsed)


def resources(**quantities: Quantity) -> dict[str, int]:
    """Keyword quantities as a resource mapping in model units."""
    out: dict[str, int] = {}
    for key, value in quantities.items():
        name = _ALIASES.get(key, key)
        out[name] = quantity(name, value)
    return out


def _requirement(key: str, op: str, *values: object) -> NodeSelectorRequirement:
    return NodeSelectorRequirement.model_validate(
        {"key": key, "operator": op, "values": tuple(str(v) for v in values)}
    )


class PodBuilder:
    def __init__(self, name: str) -> None:
        self._fields: dict[str, object] = {"name": name}
        self._requests: dict[str, int] = {}
        self._selector: dict[str, str] = {}
        self._terms: list[list[NodeSelectorRequirement]] = []
        self._tolerations: list[Toleration] = []

    def req(self, **quantities: Quantity) -> PodBuilder:
        self._requests.update(resources(**quantities))
        return self

    def gang(self, name: str | None) -> PodBuilder:
        self._fields["gang"] = name
        return self

    def priority(self, value: int) -> PodBuilder:
        self._fields["priority"] = value
        return self

    def namespace(self, value: str) -> PodBuilder:
        self._fields["namespace"] = value
        return self

    def created(self, seconds: float) -> PodBuilder:
        self._fields["created_s"] = seconds
        return self

    def on(self, node_name: str) -> PodBuilder:
        """Already bound to ``node_name``."""
        self._fields["node_name"] = node_name
        return self

    bound = on

    def started(self, seconds: float) -> PodBuilder:
        self._fields["started_s"] = seconds
        return self

    def task(self, name: str) -> PodBuilder:
        self._fields["task"] = name
        return self

    def apart(self, *groups: str) -> PodBuilder:
        """Required pod anti-affinity on a per-node topology, by group (``Pod.apart``)."""
        self._fields["apart"] = groups
        return self

    def never_preempts(self) -> PodBuilder:
        """spec.preemptionPolicy: Never."""
        self._fields["may_preempt"] = False
        return self

    def together(self, *groups: str) -> PodBuilder:
        """Required pod affinity among pending pods, by group ``<name>@<topologyKey>``
        (``Pod.together``)."""
        self._fields["together"] = groups
        return self

    def spread(self, *spreads: DomainSpread) -> PodBuilder:
        """DoNotSchedule topology spreads over zones (``Pod.spreads``)."""
        self._fields["spreads"] = spreads
        return self

    def exclusive(self, *groups: str) -> PodBuilder:
        """Kept together groups whose domain this pod's may not share (``Pod.exclusive_of``)."""
        self._fields["exclusive_of"] = groups
        return self

    def terminating(self) -> PodBuilder:
        self._fields["terminating"] = True
        return self

    def nominated(self, node_name: str) -> PodBuilder:
        """status.nominatedNodeName: a preempting scheduler will bind it there."""
        self._fields["nominated_node"] = node_name
        return self

    def marked_victim(self, why: str, at_s: float = 0.0, by: str = "") -> PodBuilder:
        """Marked by a scheduler to be evicted for a preemption (its DisruptionTarget)."""
        self._fields["marked_victim"] = VictimMark(why=why, at_s=at_s, by=by)
        return self

    def selector(self, labels: Mapping[str, str] | None = None, **kw: str) -> PodBuilder:
        self._selector.update(labels or {})
        self._selector.update(kw)
        return self

    def affinity(self, key: str, op: str, *values: object) -> PodBuilder:
        """Add a requirement to the first term (requirements of a term are ANDed)."""
        if not self._terms:
            self._terms.append([])
        self._terms[0].append(_requirement(key, op, *values))
        return self

    def affinity_term(self, *requirements: tuple[object, ...]) -> PodBuilder:
        """Add a term, ORed with the others; each requirement is ``(key, op, *values)``."""
        self._terms.append([_requirement(str(r[0]), str(r[1]), *r[2:]) for r in requirements])
        return self

    def tolerate(
        self, key: str = "", op: str = "Equal", value: str = "", effect: str = ""
    ) -> PodBuilder:
        self._tolerations.append(
            Toleration.model_validate(
                {"key": key, "operator": op, "value": value, "effect": effect}
            )
        )
        return self

    def build(self) -> Pod:
        return Pod.model_validate(
            {
                **self._fields,
                "requests": self._requests,
                "node_selector": self._selector,
                "affinity": tuple(
                    NodeSelectorTerm(match_expressions=tuple(t)) for t in self._terms
                ),
                "tolerations": tuple(self._tolerations),
            }
        )


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._allocatable: dict[str, int] = {}
        self._labels: dict[str, str] = {}
        self._taints: list[Taint] = []
        self._unschedulable = False

    def cap(self, **quantities: Quantity) -> NodeBuilder:
        self._allocatable.update(resources(**quantities))
        return self

    def label(self, labels: Mapping[str, str] | None = None, **kw: str) -> NodeBuilder:
        self._labels.update(labels or {})
        self._labels.update(kw)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        self._taints.append(Taint(key=key, value=value, effect=TaintEffect(effect)))
        return self

    def cordon(self) -> NodeBuilder:
        self._unschedulable = True
        return self

    def build(self) -> Node:
        return Node.model_validate(
            {
                "name": self._name,
                "allocatable": self._allocatable,
                "labels": self._labels,
                "taints": tuple(self._taints),
                "unschedulable": self._unschedulable,
            }
        )


class GangBuilder:
    def __init__(self, name: str, min_member: int = 1) -> None:
        self._fields: dict[str, object] = {"name": name, "min_member": min_member}

    def queue(self, name: str) -> GangBuilder:
        self._fields["queue"] = name
        return self

    def priority(self, value: int) -> GangBuilder:
        self._fields["priority"] = value
        return self

    def created(self, seconds: float) -> GangBuilder:
        self._fields["created_s"] = seconds
        return self

    def not_preemptible(self) -> GangBuilder:
        self._fields["preemptible"] = False
        return self

    def task_minimums(self, **least: int) -> GangBuilder:
        self._fields["min_task_member"] = dict(least)
        return self

    def build(self) -> Gang:
        return Gang.model_validate(self._fields)


class QueueBuilder:
    def __init__(self, name: str = DEFAULT_QUEUE, weight: int = 1) -> None:
        self._name = name
        self._weight = weight
        self._capability: dict[str, int] | None = None
        self._state = OPEN_QUEUE

    def capability(self, **quantities: Quantity) -> QueueBuilder:
        self._capability = {**(self._capability or {}), **resources(**quantities)}
        return self

    def state(self, state: str) -> QueueBuilder:
        self._state = state
        return self

    def build(self) -> Queue:
        return Queue(
            name=self._name,
            weight=self._weight,
            capability=None if self._capability is None else Resources(self._capability),
            state=self._state,
        )


def pod(name: str) -> PodBuilder:
    return PodBuilder(name)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def gang(name: str, min_member: int = 1) -> GangBuilder:
    return GangBuilder(name, min_member)


def queue(name: str = DEFAULT_QUEUE, weight: int = 1) -> QueueBuilder:
    return QueueBuilder(name, weight)


def pods_of(gang_name: str, n: int, **req: Quantity) -> list[Pod]:
    """``n`` identical pending pods ``<gang>-0`` … of one gang."""
    return [pod(f"{gang_name}-{i}").req(**req).gang(gang_name).build() for i in range(n)]


def _built(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(item.build() if hasattr(item, "build") else item for item in items)


def state(
    nodes: Iterable[Node | NodeBuilder] = (),
    pods: Iterable[Pod | PodBuilder] = (),
    gangs: Iterable[Gang | GangBuilder] = (),
    queues: Iterable[Queue | QueueBuilder] = (),
    now_s: float = 0.0,
) -> ClusterState:
    """A snapshot; builders are built, so ``.build()`` may be left off."""
    return ClusterState(
        nodes=_built(nodes),
        pods=_built(pods),
        gangs=_built(gangs),
        queues=_built(queues),
        now_s=now_s,
    )
