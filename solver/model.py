"""Frozen domain types: the snapshot a scheduler reads and the decision it returns.

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
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    field_validator,
    model_validator,
)

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
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


_MADE: dict[type, frozenset[str]] = {}


def _made(cls: type) -> frozenset[str]:
    """The names of ``cls``'s cached properties: values made from its fields once read,
    kept in the instance's ``__dict__``. A copy (whose fields may differ) makes them
    afresh, and a pickle does not carry them (a hash would differ in another process; an
    index of every pod only weighs)."""
    made = _MADE.get(cls)
    if made is None:
        made = _MADE[cls] = frozenset(
            name
            for klass in cls.__mro__
            for name, value in vars(klass).items()
            if isinstance(value, cached_property)
        )
    return made


def _forget_made(obj: BaseModel) -> None:
    for name in _made(type(obj)):
        obj.__dict__.pop(name, None)


class _Frozen(BaseModel):
    # NaN and infinities order nothing and sum to nothing: refused where they enter.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        # What pydantic's copy does for a model of no extra or private attributes, in less
        # time: a snapshot copies a pod per pod of a known shape (1.8-2.0 -> 1.3-1.4 us),
        # and the cycle's state again with its binds. Not validated, as there.
        if deep or getattr(self, "__pydantic_private__", None) is not None:
            copied = super().model_copy(update=update, deep=deep)
            _forget_made(copied)
            return copied
        cls = type(self)
        copied = cls.__new__(cls)
        fields_set = self.__pydantic_fields_set__
        _set = object.__setattr__
        _set(copied, "__dict__", {**self.__dict__, **update} if update else dict(self.__dict__))
        _set(copied, "__pydantic_extra__", None)
        fields_set = fields_set | update.keys() if update else set(fields_set)
        _set(copied, "__pydantic_fields_set__", fields_set)
        _set(copied, "__pydantic_private__", None)
        made = _MADE.get(cls)
        if made is None or made:  # most models make nothing: one lookup for them
            _forget_made(copied)
        return copied

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        made = _made(type(self))
        if made:
            state["__dict__"] = {k: v for k, v in state["__dict__"].items() if k not in made}
        return state


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
        _forget_made(copied)  # of the amounts copied: the copy's may differ
        return copied


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class _Hashed(_Frozen):
    """A small frozen model hashed once: pods' placement keys hold tolerations and
    affinity terms, and each grouping of pods hashes them again (pydantic hashes every
    field at every call; cached, ``prepare`` of 5,000 real-shaped nodes took 0.05 s, 9%,
    less)."""

    @cached_property
    def _hash(self) -> int:
        return hash(tuple(self.__dict__[name] for name in type(self).model_fields))

    def __hash__(self) -> int:
        # Made again by a copy, and not pickled: strings hash differently in another
        # process (PYTHONHASHSEED). See ``_made``.
        return self._hash


class Taint(_Frozen):
    key: str
    value: str = ""
    effect: TaintEffect


class Toleration(_Hashed):
    """An empty ``key`` with operator Exists tolerates every taint; an empty effect, all
    effects. Gt and Lt (Kubernetes 1.35, feature gate TaintTolerationComparisonOperators)
    compare integers: the taint's value above (below) the toleration's; a value that is
    no integer, on either side, tolerates nothing."""

    key: str = ""
    operator: Literal["Equal", "Exists", "Gt", "Lt"] = "Equal"
    value: str = ""
    effect: TaintEffect | Literal[""] = ""

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists must not have a value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key must use operator Exists")
        return self


_INT64 = re.compile(r"[+-]?[0-9]+")


def int64_of(text: str) -> int | None:
    """``text`` as Kubernetes reads a Gt/Lt operand (Go's ParseInt, base 10, 64 bits);
    None where it reads none. Python's int() also takes "1_0", " 7", Arabic-Indic digits
    and numbers past 64 bits: a node label Kubernetes never matches would match here."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


class NodeSelectorRequirement(_Hashed):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> NodeSelectorRequirement:
        op = self.operator
        if op in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {op} takes no values")
        # A Gt or Lt value that is no integer is admitted by the API server (it is a valid
        # label value), and kube-scheduler's node affinity reads the requirement as
        # matching no node; refusing the pod made its gang wait forever where another
        # term of the pod matched.
        if op in ("Gt", "Lt") and len(self.values) != 1:
            raise ValueError(f"operator {op} takes exactly one value")
        return self


# The one node field a node selector term may read (``matchFields``): the node's name.
NODE_NAME_FIELD = "metadata.name"


class NodeSelectorTerm(_Hashed):
    """Requirements that must all hold; a pod's terms are ORed, as in Kubernetes.
    ``match_fields`` read node fields (only ``metadata.name``: the DaemonSet controller
    pins each of its pods to a node so)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class Node(_Frozen):
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


class Pod(_Frozen):
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

    @field_validator("gang")
    @classmethod
    def _not_implicit(cls, value: str | None) -> str | None:
        return None if value is None else _not_an_implicit_gang(value)

    def demand(self) -> dict[str, int]:
        """Requests plus the pod slot every pod takes."""
        return self.requests.pod_demand()

    def spec_key(self) -> tuple[object, ...]:
        """Pods of one gang with equal keys are interchangeable to every scheduler."""
        return (self.requests.key(), self.placement_key(), self.task)

    def same_spec(self, other: Pod) -> bool:
        """Whether both have one ``spec_key``, read without building either (55,000
        pending pods: 50 ms to key them all, 21 ms to compare each with the one before
        it, most often from the same template)."""
        return (
            (self.requests is other.requests or self.requests.key() == other.requests.key())
            and self.same_placement(other)
            and self.task == other.task
        )

    def same_placement(self, other: Pod) -> bool:
        """Whether both have one ``placement_key``, read without building either."""
        return (
            self.node_selector == other.node_selector
            and self.affinity == other.affinity
            and self.tolerations == other.tolerations
        )

    def placement_key(self) -> tuple[object, ...]:
        """What node predicates read from the pod (resources aside)."""
        return (tuple(sorted(self.node_selector.items())), self.affinity, self.tolerations)

    def gang_name(self) -> str:
        return self.gang if self.gang is not None else IMPLICIT_GANG_PREFIX + self.name

    def __hash__(self) -> int:
        return hash(self.name)


class Gang(_Frozen):
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


class Queue(_Frozen):
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


class ClusterState(_Frozen):
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
        # again by a copy, and not pickled (``_made``).
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


class SolveStatus(StrEnum):
    OPTIMAL = "OPTIMAL"  # proven optimal (over the model that was solved)
    FEASIBLE = "FEASIBLE"  # a solution, with a bound and a gap
    GREEDY = "GREEDY"  # a baseline decided; no solver ran
    FALLBACK = "FALLBACK"  # the solver found nothing better in time; the greedy hint stands
    NOTHING_TO_DO = "NOTHING_TO_DO"


class StageReport(_Frozen):
    """What one CP-SAT call did, so a slow or loose cycle can be explained."""

    name: str
    variables: int
    constraints: int
    status: str
    objective: int | None
    bound: int | None
    wall_s: float
    first_solution_s: float | None = None


NonNegInt = Annotated[int, Field(ge=0)]


class Decision(_Frozen):
    """A scheduler's answer for one snapshot. ``placements`` are the new bindings only."""

    scheduler: str
    placements: dict[str, str] = Field(default_factory=dict, description="pod -> node")
    admitted: tuple[str, ...] = Field(
        default=(), description="gangs that hold at least minMember pods after this decision"
    )
    unschedulable: dict[str, str] = Field(
        default_factory=dict, description="gang -> why it was not admitted, for the user"
    )
    waiting_pods: dict[str, str] = Field(
        default_factory=dict, description="pod -> why it is not considered (e.g. no PodGroup)"
    )
    status: SolveStatus
    objective: int | None = None
    terms: dict[str, int] = Field(default_factory=dict)
    bound: int | None = None
    gap: float | None = None
    wall_s: float = 0.0
    stages: tuple[StageReport, ...] = ()
    decided_by: str = Field(
        default="", description="the stage whose candidate was returned, or the scheduler"
    )
    evictions: dict[str, str] = Field(
        default_factory=dict,
        description="running pod -> why it is evicted (preemption or reclaim, and for whom)",
    )
    nominated: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "pending pod -> node, for gangs placed into the room the evictions free: bound "
            "once the victims are gone, the room held for them until then"
        ),
    )
    left_over: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "gang admitted or running -> why its pending pods beyond those placed wait "
            "(an elastic job's extras, a member made again): each pod is told"
        ),
    )
    # Why each gang not admitted waits, and why an admitted one's pods left over wait,
    # still to be worked out (SolverConfig's defer_explanations): merged into
    # ``unschedulable`` and ``left_over`` by ``explained``.
    _explain: Callable[[], tuple[dict[str, str], dict[str, str]]] | None = PrivateAttr(
        default=None
    )

    def explained(self) -> Decision:
        """This decision with every gang not admitted explained: itself, unless its
        explanations were deferred."""
        if self._explain is None:
            return self
        reasons, left_over = self._explain()
        done = self.with_reasons(reasons)
        if left_over:
            done = done.model_copy(update={"left_over": {**left_over, **self.left_over}})
        return done

    def with_reasons(self, reasons: Mapping[str, str]) -> Decision:
        """This decision with ``reasons`` (gang -> why it waits) added to ``unschedulable``
        (where it has none yet) and nothing left to explain."""
        done = self.model_copy(update={"unschedulable": {**reasons, **self.unschedulable}})
        done._explain = None
        return done

    @property
    def explanations_pending(self) -> bool:
        return self._explain is not None
