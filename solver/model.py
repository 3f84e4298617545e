"""Frozen domain types: the snapshot a scheduler reads (its answer: ``solver.decision``).

Everything that crosses a boundary (a state file, the adapter's conversion of Kubernetes
objects, a decision printed as JSON) is one of these pydantic models, so bad data is
rejected here with the path of the field, before any scheduler sees it.

Quantities are plain integers in the units Kubernetes normalises to: ``cpu`` in
millicores, ``memory`` and ``ephemeral-storage`` in bytes, ``pods`` in slots, and any
extended resource (``nvidia.com/gpu``) in its own count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any, Self

from pydantic import (
    ConfigDict,
    Field,
    RootModel,
    field_validator,
    model_validator,
)

from solver.frozen import Frozen, forget_made
from solver.scheduling_terms import DomainSpread, NodeRule, NodeSelectorTerm, Taint, Toleration

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
# Problem columns of pods kept apart (``Pod.apart``, ``solver.problem``): no Kubernetes
# resource name has a colon.
APART_PREFIX = "apart:"
# A group a node takes up to k pods of (topology spread's maxSkew on a per-node key) ends
# in ``APART_EACH`` and k; any other, one (``apart_room``).
APART_EACH = "#each="
# A group of pods asking for one host port (``adapter.kube.host_ports``) begins so.
APART_PORT = "port:"
GPU = "nvidia.com/gpu"
EPHEMERAL_STORAGE = "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"
MIB = 2**20
DEFAULT_QUEUE = "default"
OPEN_QUEUE = "Open"
CLOSED_QUEUE_STATES = frozenset({"Closed", "Closing"})
DEFAULT_MAX_PODS = 110
IMPLICIT_GANG_PREFIX = "pod:"


def _not_an_implicit_gang(name: str) -> str:
    """A PodGroup's name, refused where it is one of the gangs of one that pods of no
    PodGroup make (``Pod.gang_name``): named so, it took in a pod of no group (and the
    queue that pod is counted against), and the validator saw neither."""
    if name.startswith(IMPLICIT_GANG_PREFIX):
        raise ValueError(f"{name!r}: names starting {IMPLICIT_GANG_PREFIX!r} are gangs of one")
    return name


# A real API server accepts `cpu: "1e30"`. Above this (a million cores, ~900 TiB) no
# machine has it, and sums over thousands of nodes would leave 64-bit integers: such an
# object is refused where it enters, with a finding, instead of failing every cycle.
MAX_QUANTITY = 10**15
# A Kubernetes resource name: an optional DNS-subdomain prefix, then a name part.
RESOURCE_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


class Resources(RootModel[dict[str, int]]):
    """A resource vector by Kubernetes resource name; absent names are zero."""

    model_config = ConfigDict(frozen=True)

    @field_validator("root")
    @classmethod
    def _non_negative(cls, value: dict[str, int]) -> dict[str, int]:
        # Zeros are kept: a capability of 0 cpu is a cap, and a node's 0 pod slots are not
        # the kubelet default.
        for name, quantity in value.items():
            if not RESOURCE_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a resource name (e.g. cpu, nvidia.com/gpu)")
            if quantity < 0:
                raise ValueError(f"resource {name!r} is negative ({quantity})")
            if quantity > MAX_QUANTITY:
                raise ValueError(
                    f"resource {name!r} is {quantity:.3g}, above the largest any machine "
                    f"has ({MAX_QUANTITY:.0e}; cpu in millicores, memory in bytes)"
                )
        return value

    @classmethod
    def of(
        cls,
        cpu_milli: int = 0,
        memory_bytes: int = 0,
        gpu: int = 0,
        pods: int = 0,
        extended: Mapping[str, int] | None = None,
    ) -> Resources:
        named = {CPU: cpu_milli, MEMORY: memory_bytes, GPU: gpu, PODS: pods}
        values = {name: q for name, q in named.items() if q}
        values.update(extended or {})
        return cls(values)

    def __getitem__(self, name: str) -> int:
        return self.root.get(name, 0)

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.root)

    def items(self) -> Iterator[tuple[str, int]]:
        return iter(self.root.items())

    def names(self) -> frozenset[str]:
        return frozenset(self.root)

    def nonzero(self) -> dict[str, int]:
        return {name: q for name, q in self.root.items() if q}

    def pod_amount(self, name: str) -> int:
        """What a pod with these requests takes of ``name``: its request, and for the pod
        slot at least the one every pod takes."""
        return (self[name] or 1) if name == PODS else self[name]

    def pod_demand(self) -> dict[str, int]:
        """A pod's demand with these requests: them, plus the pod slot every pod takes."""
        return dict(self.pod_demand_items())

    @cached_property
    def _pod_demand(self) -> tuple[tuple[str, int], ...]:
        return tuple({**self.nonzero(), PODS: self.pod_amount(PODS)}.items())

    def pod_demand_items(self) -> tuple[tuple[str, int], ...]:
        """``pod_demand``'s items, made once: pods share a few request sets, and sums over
        every pod on a node or in a queue read them (the validator, each cycle)."""
        return self._pod_demand

    @cached_property
    def _key(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((name, q) for name, q in self.root.items() if q))

    def key(self) -> tuple[tuple[str, int], ...]:
        # Read once per pod per cycle by every grouping; frozen, so computed once.
        return self._key

    def __hash__(self) -> int:
        return hash(self.key())

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        forget_made(copied)  # of the amounts copied: the copy's may differ
        return copied



class Node(Frozen):
    name: str = Field(min_length=1)
    allocatable: Resources
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = Field(
        default=True,
        description=(
            "the kubelet reports it Ready (and what it has free is known): one that is "
            "not counts towards no queue's share and no enqueue room (a not-ready "
            "taint, or no pod slot, keeps pods off it)"
        ),
    )

    @field_validator("allocatable", mode="before")
    @classmethod
    def _default_pod_slots(cls, value: object) -> object:
        # Kubernetes always reports a pod limit; a hand-written node that omits it means
        # the kubelet default, not "no pods fit".
        if isinstance(value, Mapping) and PODS not in value:
            return {**value, PODS: DEFAULT_MAX_PODS}
        if isinstance(value, Resources) and PODS not in value.root:
            return {**value.root, PODS: DEFAULT_MAX_PODS}
        return value

    @property
    def in_service(self) -> bool:
        """Neither cordoned nor not ready: its room counts towards the queues' shares
        and the room a gang is enqueued into."""
        return not self.unschedulable and self.ready

    def __hash__(self) -> int:
        return hash(self.name)


class VictimMark(Frozen):
    """A scheduler's record on a bound pod that it evicts for a preemption (on Kubernetes,
    its DisruptionTarget condition): a leader after it reads it."""

    why: str = Field(description="for whom, and why (preemption or reclaim)")
    at_s: float = Field(description="when it was marked (refreshed as it is sent again)")
    by: str = Field(
        default="", description="who marked it (a deployment's scheduler names); '': unsaid"
    )


class Pod(Frozen):
    name: str = Field(min_length=1, description="unique key, namespace/name in a cluster")
    namespace: str = "default"
    requests: Resources = Field(default_factory=lambda: Resources({}))
    priority: int = 0
    gang: str | None = Field(default=None, description="the PodGroup; none = a gang of one")
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: tuple[NodeSelectorTerm, ...] = Field(
        default=(), description="required node affinity terms, ORed"
    )
    tolerations: tuple[Toleration, ...] = ()
    node_rules: tuple[NodeRule, ...] = Field(
        default=(),
        description="node affinity its volumes or bound pods' anti-affinity add, each to hold",
    )
    apart: tuple[str, ...] = Field(
        default=(),
        description=(
            "required pod anti-affinity, or a topology spread's maxSkew, on a topology of "
            "one node per domain (as kubernetes.io/hostname), or a host port: no more pods "
            "sharing a name here on one node than its apart_room (one, without "
            "APART_EACH), bound ones counted"
        ),
    )
    host_ports: tuple[tuple[str, str, int], ...] = Field(
        default=(),
        description="host ports it holds or asks for: (host IP, protocol, port)",
    )
    together: tuple[str, ...] = Field(
        default=(),
        description=(
            "required pod affinity among pending pods: the pods sharing a name here "
            "(ending in @<topologyKey>) go to one domain of that key (``solver.together``)"
        ),
    )
    spreads: tuple[DomainSpread, ...] = Field(
        default=(), description="DoNotSchedule topology spreads over zones (zone_spread)"
    )
    exclusive_of: tuple[str, ...] = Field(
        default=(),
        description=(
            "groups kept together whose domain this pod's groups may not share: required "
            "anti-affinity over a zone between jobs each kept in a domain of their own"
        ),
    )
    node_name: str | None = Field(default=None, description="set when already bound")
    created_s: float = 0.0
    gates: tuple[str, ...] = Field(
        default=(),
        description=(
            "spec.schedulingGates: a gated pod is not scheduled until a controller "
            "removes them, and its gang waits for it"
        ),
    )
    daemon: bool = Field(
        default=False,
        description=(
            "a DaemonSet's pod: one runs on every node, so a node holding only these "
            "counts as empty for packing"
        ),
    )
    may_preempt: bool = Field(
        default=True,
        description="false for spec.preemptionPolicy Never: its gang never evicts others",
    )
    started_s: float | None = Field(
        default=None, description="when a bound pod started: its running work, if evicted"
    )
    terminating: bool = Field(
        default=False,
        description="evicted or deleted, still holding its node's room until it is gone",
    )
    task: str | None = Field(
        default=None,
        description="its task in its gang (Volcano's volcano.sh/task-spec annotation)",
    )
    nominated_node: str | None = Field(
        default=None,
        description=(
            "a pending pod's status.nominatedNodeName: where the scheduler that evicted "
            "pods for its gang will bind it once they are gone"
        ),
    )
    marked_victim: VictimMark | None = Field(
        default=None,
        description=(
            "a bound pod's mark as a victim of a preemption, where it has one: a leader "
            "after the one that marked it sends the eviction again where the pod's gang "
            "runs below its minimum"
        ),
    )

    @field_validator("gang")
    @classmethod
    def _not_implicit(cls, value: str | None) -> str | None:
        return None if value is None else _not_an_implicit_gang(value)

    def demand(self) -> dict[str, int]:
        """Requests plus the pod slot every pod takes."""
        return self.requests.pod_demand()

    def spec_key(self) -> tuple[object, ...]:
        """Pods of one gang with equal keys are interchangeable to every scheduler."""
        return (self.requests.key(), self.placement_key(), self.task, self.apart)

    def same_spec(self, other: Pod) -> bool:
        """Whether both have one ``spec_key``, read without building either (55,000
        pending pods: 50 ms to key them all, 21 ms to compare each with the one before
        it, most often from the same template)."""
        return (
            (self.requests is other.requests or self.requests.key() == other.requests.key())
            and self.same_placement(other)
            and self.task == other.task
            and self.apart == other.apart
        )

    def same_placement(self, other: Pod) -> bool:
        """Whether both have one ``placement_key``, read without building either."""
        return (
            self.node_selector == other.node_selector
            and self.affinity == other.affinity
            and self.tolerations == other.tolerations
            and self.node_rules == other.node_rules
        )

    def placement_key(self) -> tuple[object, ...]:
        """What node predicates read from the pod (resources aside)."""
        return (
            tuple(sorted(self.node_selector.items())),
            self.affinity,
            self.tolerations,
            self.node_rules,
        )

    def gang_name(self) -> str:
        return self.gang if self.gang is not None else IMPLICIT_GANG_PREFIX + self.name

    def __hash__(self) -> int:
        return hash(self.name)


class Gang(Frozen):
    """A PodGroup: placed with at least ``min_member`` pods running, or not at all."""

    name: str = Field(min_length=1)
    min_member: int = Field(ge=1)
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    created_s: float = 0.0
    preemptible: bool = Field(
        default=True,
        description=(
            "false: never a victim of preemption or reclaim (annotation "
            "gangsat.io/preemptible or volcano.sh/preemptable: \"false\")"
        ),
    )
    min_task_member: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "per task, the fewest of its pods that must run (Volcano's minTaskMember): "
            "the gang is placed only with each met"
        ),
    )
    succeeded: int = Field(
        default=0,
        ge=0,
        description=(
            "members that ran to completion (phase Succeeded): they count towards "
            "minMember, as Volcano's and kube-batch's gang plugins count them"
        ),
    )

    succeeded_by_task: dict[str, int] = Field(
        default_factory=dict, description="of ``succeeded``, per task (minTaskMember counts them)"
    )
    members: tuple[str, ...] = Field(
        default=(),
        description=(
            "the gangs (PodGroups) this one stands for, each one of its tasks with its own "
            "minimum: a Koordinator GangGroup, whose gangs start together; reported per member"
        ),
    )

    @field_validator("name")
    @classmethod
    def _not_implicit(cls, value: str) -> str:
        return _not_an_implicit_gang(value)

    @property
    def min_running(self) -> int:
        """Members that must run (or be placed) for the gang to meet minMember."""
        return max(0, self.min_member - self.succeeded)

    @property
    def task_minimums(self) -> dict[str, int]:
        """The per-task minimums that hold: Volcano skips them all (``CheckTaskValid`` and
        its kin) when minMember is below their sum, which its job controller writes for
        an elastic job (each task's replicas when it sets no minAvailable of its own)."""
        if self.min_member < sum(self.min_task_member.values()):
            return {}
        return self.min_task_member


class Queue(Frozen):
    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1)
    capability: Resources | None = Field(
        default=None, description="hard cap on what the queue may hold; names absent = no cap"
    )
    reclaimable: bool = Field(
        default=True,
        description="other queues may reclaim from it (Volcano's spec.reclaimable)",
    )
    state: str = Field(
        default=OPEN_QUEUE,
        description=(
            "Volcano's status.state: a queue Closed or Closing (being drained) takes no new "
            "pods; what already runs in it runs on"
        ),
    )

    def admits(self) -> bool:
        """Whether the queue takes new pods: any state but Closed and Closing (Volcano's
        ``Unknown`` is no admin's decision to drain it)."""
        return self.state not in CLOSED_QUEUE_STATES

    def __hash__(self) -> int:
        return hash(self.name)


def topology_key(group: str) -> str:
    """The topology key of a group of pods kept together (``Pod.together``: its name is
    ``<what its term selects>@<key>``)."""
    return group.rpartition("@")[2]


def apart_room(group: str) -> int:
    """How many pods of a group kept apart (``Pod.apart``; or its column's name) a node
    takes: the count after ``APART_EACH``, else one."""
    _, each, count = group.rpartition(APART_EACH)
    return max(int(count), 1) if each and count.isdigit() else 1


class ClusterState(Frozen):
    """One immutable snapshot: what a scheduling cycle decides on."""

    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    gangs: tuple[Gang, ...] = ()
    queues: tuple[Queue, ...] = ()
    now_s: float = Field(default=0.0, description="the snapshot's clock: ages of running pods")

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterState:
        for kind, names in (
            ("nodes", [n.name for n in self.nodes]),
            ("pods", [p.name for p in self.pods]),
            ("gangs", [g.name for g in self.gangs]),
            ("queues", [q.name for q in self.queues]),
        ):
            dupes = sorted(name for name, count in Counter(names).items() if count > 1)
            if dupes:
                raise ValueError(f"{kind}: duplicate name(s) {', '.join(dupes)}")
        return self

    def pods_by_name(self) -> Mapping[str, Pod]:
        """The pods by name, made once per snapshot for whoever looks pods up in it (the
        loop's gang index, the validator, the holds): each made its own, a pass over
        every pod of a big cluster apiece."""
        return self._pods_by_name

    @cached_property
    def _pods_by_name(self) -> dict[str, Pod]:
        # Private (a leading underscore): no field, nor iterated or dumped as one; made
        # again by a copy, and not pickled (``solver.frozen``).
        return {p.name: p for p in self.pods}

    def pending_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.node_name is None]

    def bound_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.node_name is not None]

    def with_bindings(self, placements: Mapping[str, str]) -> ClusterState:
        """This snapshot with ``placements`` (pod -> node) bound: what the cluster holds
        once a decision's binds went through, before any watch has shown them."""
        if not placements:
            return self
        pods = tuple(
            p.model_copy(update={"node_name": placements[p.name]}) if p.name in placements else p
            for p in self.pods
        )
        return self.model_copy(update={"pods": pods})

