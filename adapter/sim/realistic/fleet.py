"""The generator's view of the nodes: free capacity per node, nodes grouped into classes,
and Kubernetes' predicates for the constraints the generator writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from adapter.sim.realistic.catalog import HOSTNAME, JITTERED
from solver.model import GPU, PODS, Node, Pod
from solver.predicates import tolerates
from solver.scheduling_terms import NodeSelectorTerm, TaintEffect, Toleration


class Constraints(NamedTuple):
    """What a gang's pods say about the nodes they may use."""

    selector: tuple[tuple[str, str], ...]
    affinity: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]


@dataclass
class NodeClass:
    """Nodes equal but for their hostname, their jitter of capacity (``JITTERED``) and what
    was bound after the fleet was made; ``node`` is the first of them.
    """

    node: Node
    base: dict[str, int]  # the least free of any member when the fleet was made
    members: list[int] = field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return self.node.allocatable[GPU] > 0


class Fleet:
    """Free capacity per node, and the nodes grouped into classes for the predicates.

    A class's ``base`` is the least free capacity of its members, resource by resource: a
    pod that fits it fits every member, and ``len(members)`` copies of it fit the class.
    """

    def __init__(self, nodes: Sequence[Node], bound: Sequence[Pod]) -> None:
        index = {n.name: i for i, n in enumerate(nodes)}
        self.free = [dict(n.allocatable.root) for n in nodes]
        for pod in bound:
            if pod.node_name in index:
                free = self.free[index[pod.node_name]]
                take(free, pod.requests.root)
                if not pod.requests[PODS]:  # as Pod.demand(): every pod takes a slot
                    free[PODS] = free.get(PODS, 0) - 1
        self.classes: dict[tuple[object, ...], NodeClass] = {}
        self.class_of: list[NodeClass] = []
        for i, n in enumerate(nodes):
            labels = dict(n.labels)
            labels.pop(HOSTNAME, None)  # unsorted: another label order only splits a class
            free, allocatable = self.free[i], n.allocatable
            # Jittered resources by what is bound (equal labels: equal nominal capacity).
            room = tuple((q, allocatable[q] - v if q in JITTERED else v) for q, v in free.items())
            key = (tuple(labels.items()), n.taints, n.unschedulable, room)
            cls = self.classes.get(key)
            if cls is None:
                cls = self.classes[key] = NodeClass(n, dict(free))
            else:
                for q in JITTERED:
                    if q in cls.base:
                        cls.base[q] = min(cls.base[q], free[q])
            cls.members.append(i)
            self.class_of.append(cls)
        self._matching: dict[Constraints, list[NodeClass]] = {}
        self._values: dict[tuple[str, bool], list[str]] = {}

    def matching(self, c: Constraints) -> list[NodeClass]:
        """Schedulable classes whose nodes admit ``c`` (as ``solver.predicates`` would)."""
        if c not in self._matching:
            self._matching[c] = [k for k in self.classes.values()
                                 if not k.node.unschedulable and admits(c, k.node)]
        return self._matching[c]

    def values(self, key: str, gpu: bool) -> list[str]:
        """The values of label ``key`` on GPU (or on CPU) nodes."""
        if (key, gpu) not in self._values:
            self._values[key, gpu] = sorted({k.node.labels[key] for k in self.classes.values()
                                             if key in k.node.labels and k.gpu == gpu})
        return self._values[key, gpu]


def take(free: dict[str, int], demand: Mapping[str, int]) -> None:
    """Subtract ``demand`` from ``free`` in place."""
    for name, q in demand.items():
        free[name] = free.get(name, 0) - q


def fits(free: Mapping[str, int], demand: Mapping[str, int]) -> bool:
    return all(free.get(name, 0) >= q for name, q in demand.items())


def admits(c: Constraints, node: Node) -> bool:
    """Kubernetes' predicates for the operators written here (In, NotIn, Exists); no cordon."""
    labels = node.labels
    if any(labels.get(k) != v for k, v in c.selector):
        return False
    for r in (r for term in c.affinity for r in term.match_expressions):
        value = labels.get(r.key)
        if ((r.operator == "In" and value not in r.values)
                or (r.operator == "NotIn" and value in r.values)
                or (r.operator == "Exists" and value is None)):
            return False
    return all(
        t.effect == TaintEffect.PREFER_NO_SCHEDULE
        or any(tolerates(tol, t) for tol in c.tolerations)
        for t in node.taints)
