"""A snapshot prepared for scheduling: indexed, grouped, checked — once per cycle.

Every scheduler (CP-SAT, the greedy baselines) and the validator's scorer read this one
view, so they agree on what a gang needs, which nodes a pod may use, what a queue
deserves and how a quantity converts to share units. Data is fully prepared here so
that modelling code only reads arrays.

Grouping is what makes the model scale: pending pods of one gang with the same spec form
a *pod class* (one feasibility computation, one count variable per node), and nodes with
the same allocatable on which every pending pod class has the same feasibility form a
*node class* (the aggregated model's bins; ``solver.equivalence``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from solver.apart import apart_names, give_room, left_out, no_share, take_bound, with_apart
from solver.arrays import BoolArray, IntArray
from solver.equivalence import NodeViews, node_classes
from solver.held import Held
from solver.model import (
    DEFAULT_QUEUE,
    GPU,
    PODS,
    ClusterState,
    Gang,
    Node,
    Pod,
    Queue,
)
from solver.predicates import Feasibility
from solver.queue_info import QueueInfo, queue_infos
from solver.tasks import task_needs
from solver.together import settle
from solver.units import (
    model_capacity,
    model_demand,
    pod_share_units,
    units,
    vector,
)
from solver.zone_spread import split


@dataclass(frozen=True)
class PodClass:
    index: int
    gang: int
    pods: tuple[str, ...]  # pending pod names, in the order they are placed
    exemplar: Pod
    demand: IntArray  # per resource, one pod
    feasible: BoolArray  # per node: placement predicates hold (capacity aside)
    share: IntArray  # demand in share units, per resource
    value: int  # share units of the pod's dominant resource (>= 1)
    spec: int  # classes with equal specs (requests, placement) share it, across gangs

    @property
    def count(self) -> int:
        return len(self.pods)


@dataclass
class GangInfo:
    index: int
    name: str
    queue: int
    priority: int
    created_s: float
    min_member: int
    bound: int
    classes: list[int] = field(default_factory=list)
    rank: int = 0  # Problem.ranks of its priority
    members: tuple[str, ...] = ()  # a GangGroup's gangs (``Gang.members``), as users know them
    shape: int = 0  # gangs of one shape are interchangeable (see solver.shapes)
    # Per task with a minimum (Volcano's minTaskMember) still unmet: its pod classes and
    # how many of them must be placed this cycle; its classes come first in ``classes``.
    task_needs: list[tuple[tuple[int, ...], int]] = field(default_factory=list)

    @property
    def need(self) -> int:
        """Pods that must be placed this cycle for the gang to reach minMember (and each
        task its minimum)."""
        # Read tens of thousands of times a cycle (5,000 nodes: 44,000), for most gangs
        # without a task minimum: no generator built for none.
        if not self.task_needs:
            return max(self.min_member - self.bound, 0)
        return max(self.min_member - self.bound, sum(n for _, n in self.task_needs), 0)

    def tasks_met(self, placed_of: Mapping[int, int]) -> bool:
        """Whether pods placed per class (``placed_of``) meet every task's minimum."""
        if not self.task_needs:
            return True
        return all(sum(placed_of.get(c, 0) for c in cs) >= n for cs, n in self.task_needs)

    def reaches(self, placed: int) -> bool:
        """With ``placed`` more pods, does the gang hold at least minMember (and run)?

        A gang already running holds them; any other needs pods placed this cycle.
        """
        return self.running or (placed > 0 and placed >= self.need)

    @property
    def running(self) -> bool:
        """Already at minMember: its pending pods are elastic extras."""
        return self.bound >= self.min_member


NODE_INDEX = ("node index",)  # ``Problem.memo``'s key of ``Problem.node_index``


@dataclass
class Problem:
    state: ClusterState
    resources: list[str]
    nodes: list[Node]
    allocatable: IntArray  # (nodes, resources)
    free: IntArray  # (nodes, resources): allocatable minus bound pods
    # (nodes, resources): bound pods hold more than the allocatable (it shrank): what an
    # eviction frees there first repays that, and is not counted as room
    overcommitted: BoolArray
    empty: BoolArray  # no pod bound on the node but DaemonSet pods
    gpu_node: BoolArray
    totals: IntArray  # per resource, over schedulable nodes
    queues: list[QueueInfo]
    gangs: list[GangInfo]
    classes: list[PodClass]
    node_classes: list[list[int]]  # node indices pending pods cannot tell apart (equivalence)
    invalid: dict[str, str]  # gang -> why it cannot be scheduled at all
    waiting_pods: dict[str, str]
    feasibility: Feasibility
    node_key_index: IntArray  # per node: index of its view (what pending pods can read)
    key_nodes: list[Node]  # per view: one node that has it
    # priority -> rank among every PodGroup's priority, pending or running, 0 = lowest:
    # one scale for what a preemptor earns and what a victim loses
    ranks: dict[int, int] = field(default_factory=dict)
    _class_of_pod: dict[str, int] = field(default_factory=dict)
    memo: dict[tuple[object, ...], object] = field(default_factory=dict)  # derived per cycle

    def class_of_pod(self) -> dict[str, int]:
        if not self._class_of_pod:
            self._class_of_pod.update({p: c.index for c in self.classes for p in c.pods})
        return self._class_of_pod

    def node_index(self) -> dict[str, int]:
        """Node name -> index in ``nodes``, made once (``memo``; ``prepare`` leaves the
        one it made there)."""
        if NODE_INDEX not in self.memo:
            self.memo[NODE_INDEX] = {n.name: i for i, n in enumerate(self.nodes)}
        return cast(dict[str, int], self.memo[NODE_INDEX])

    def cell_counts(self, placements: Mapping[str, int]) -> dict[tuple[int, int], int]:
        """Pods (pod -> node index) counted per (pod class, node)."""
        of_pod = self.class_of_pod()
        counts: dict[tuple[int, int], int] = defaultdict(int)
        for pod, node in placements.items():
            counts[(of_pod[pod], node)] += 1
        return dict(counts)

    def r(self, name: str) -> int:
        return self.resources.index(name)

    def schedulable_gangs(self) -> list[GangInfo]:
        return [g for g in self.gangs if g.classes]

    def gang(self, name: str) -> GangInfo | None:
        for g in self.gangs:
            if g.name == name:
                return g
        return None

    def schedulable_node_count(self) -> int:
        return int(sum(1 for n in self.nodes if n.in_service))


def _resource_names(state: ClusterState) -> tuple[list[str], bool]:
    """The problem's columns; and whether pending pods keep apart (``solver.apart``)."""
    names: set[str] = {PODS}
    for node in state.nodes:
        names |= node.allocatable.names()
    # Pods share a few request sets (conversion builds each once): read each once.
    for requests in {id(pod.requests): pod.requests for pod in state.pods}.values():
        names |= requests.names()
    # Fixed order keeps models, and so decisions, reproducible.
    apart, keeps_apart = apart_names(state)
    return sorted(names) + apart, keeps_apart


def _pod_order(pod: Pod) -> tuple[int, float, str]:
    return (-pod.priority, pod.created_s, pod.name)


def prepare(state: ClusterState) -> Problem:
    state = split(settle(state))
    resources, keeps_apart = _resource_names(state)
    r_index = {name: i for i, name in enumerate(resources)}
    nodes = list(state.nodes)
    n_index = {n.name: i for i, n in enumerate(nodes)}
    model_units = units(resources)
    raw_allocatable = np.array(
        [vector(n.allocatable.root, r_index) for n in nodes], dtype=np.int64
    ).reshape(len(nodes), len(resources))
    apart = give_room(raw_allocatable, r_index)
    raw_free = raw_allocatable.copy()
    allocatable = model_capacity(raw_allocatable, model_units)
    empty = np.ones(len(nodes), dtype=np.bool_)
    schedulable = np.array([n.in_service for n in nodes], dtype=np.bool_)
    totals = allocatable[schedulable].sum(axis=0) if nodes else np.zeros(len(resources), np.int64)
    totals = no_share(totals, apart)
    gpu_node = (
        allocatable[:, r_index[GPU]] > 0 if GPU in r_index else np.zeros(len(nodes), np.bool_)
    )

    gangs_by_name: dict[str, Gang] = {g.name: g for g in state.gangs}
    queues_by_name: dict[str, Queue] = {q.name: q for q in state.queues}
    waiting: dict[str, str] = {}
    invalid: dict[str, str] = {}
    members: dict[str, list[Pod]] = defaultdict(list)

    # Bound pods of no gang (DaemonSets: one per node and kind) only hold room in the
    # default queue: summed here rather than each made a gang of one (5,000 nodes: 15,000
    # such gangs took 0.3 s of a one-second cycle). A pod naming such an implicit gang
    # ("pod:<name>", which no Kubernetes object can be called) finds no PodGroup.
    held = Held(r_index, model_units)
    busy: list[int] = []  # nodes running a pod other than a DaemonSet's
    outside_gangs: list[Pod] = []
    unbound: list[Pod] = []  # ``state.pending_pods()``, in one pass with the rest
    # Gangs with a pod not bound: the others (most of a big cluster's) only hold room.
    with_unbound: set[str] = set()
    bound_apart: list[tuple[int, Pod]] = []  # bound pods kept apart from others
    on_nodes, on_sets = held.on_nodes, held.on_sets
    for pod in state.pods:
        node_name, gang_of = pod.node_name, pod.gang  # read once for the tests below
        if node_name is not None:
            node_i = n_index.get(node_name)
            if node_i is not None:
                on_nodes.append(node_i)
                on_sets.append(pod.requests)
                if pod.apart:
                    bound_apart.append((node_i, pod))
                # Every node runs DaemonSet pods: only other pods make a node used.
                if not pod.daemon:
                    busy.append(node_i)
        else:
            unbound.append(pod)
        if gang_of is not None:
            if gang_of in gangs_by_name:
                members[gang_of].append(pod)
                if node_name is None:
                    with_unbound.add(gang_of)
            elif node_name is None:
                waiting[pod.name] = f"PodGroup {gang_of!r} not found"
            continue
        name = pod.gang_name()
        if name not in gangs_by_name:
            if pod.node_name is not None:
                outside_gangs.append(pod)
                continue
            # Valid by construction.
            gangs_by_name[name] = Gang.model_construct(
                name=name,
                min_member=1,
                queue=DEFAULT_QUEUE,
                priority=pod.priority,
                created_s=pod.created_s,
            )
        members[name].append(pod)
        with_unbound.add(name)

    held.take_from(raw_free)
    take_bound(raw_free, bound_apart, r_index)
    empty[np.array(busy, dtype=np.int64)] = False
    # A node can hold more than its allocatable (it shrank, or a device plugin restarted);
    # it then has no room for that resource, and still has room for the others.
    signed_free = model_capacity(raw_free, model_units)
    free = np.maximum(signed_free, 0)
    overcommitted = signed_free < 0
    queue_names = sorted(queues_by_name)
    if DEFAULT_QUEUE not in queues_by_name and (
        bool(outside_gangs) or any(g.queue == DEFAULT_QUEUE for g in gangs_by_name.values())
    ):
        queue_names.append(DEFAULT_QUEUE)
        queues_by_name[DEFAULT_QUEUE] = Queue(name=DEFAULT_QUEUE, weight=1)
    q_index = {name: i for i, name in enumerate(queue_names)}

    views = NodeViews(nodes, unbound)
    feasible_nodes = views.feasible_nodes

    gangs: list[GangInfo] = []
    classes: list[PodClass] = []
    spec_ids: dict[tuple[object, ...], int] = {}
    # Thousands of gangs share a handful of pod specs: convert each spec once.
    per_spec: dict[tuple[object, ...], tuple[IntArray, IntArray, BoolArray, int]] = {}
    # ... and far fewer request sets (5,000 real-shaped nodes: 1,307 specs, 81 request
    # sets, 128 placements): each request set's demand, share and value made once.
    per_requests: dict[tuple[object, ...], tuple[IntArray, IntArray, int]] = {}
    used = np.zeros((len(queue_names), len(resources)), dtype=np.int64)
    if outside_gangs:
        held.by_queues += [q_index[DEFAULT_QUEUE]] * len(outside_gangs)
        held.by_sets += [pod.requests for pod in outside_gangs]
    pending_demand = np.zeros_like(used)

    # Per admitted class: its queue, its spec's demand and its pods, summed once at the
    # end (a numpy update per class took 10% of preparing 5,000 nodes x 7,500 gangs).
    demand_queues: list[int] = []
    demand_specs: list[IntArray] = []
    demand_counts: list[int] = []
    for gang in sorted(gangs_by_name.values(), key=lambda g: g.name):
        pods = members.get(gang.name, [])
        if gang.name not in with_unbound:
            # Every pod bound (terminating ones too: they hold room until gone), as the
            # loop below would find them one by one: only their queue's usage to note.
            if pods and (q := q_index.get(gang.queue)) is not None:
                held.by_queues += [q] * len(pods)
                held.by_sets += [pod.requests for pod in pods]
            continue
        # One pass: bound (terminating too: they hold room), gated, and pending, where a
        # pod being deleted is no pod to bind (kube-scheduler skips it too).
        bound: list[Pod] = []
        gated: list[Pod] = []
        pending: list[Pod] = []
        leaving = 0
        for pod in pods:
            if pod.terminating:
                leaving += 1
            if pod.node_name is not None:
                bound.append(pod)
            elif pod.gates:
                gated.append(pod)
            elif not pod.terminating:
                pending.append(pod)
        if len(pending) > 1:
            pending.sort(key=_pod_order)
        for pod in gated:
            waiting[pod.name] = f"scheduling gates: {', '.join(pod.gates)}"
        q = q_index.get(gang.queue)
        if q is None:
            if pending:
                invalid[gang.name] = f"queue {gang.queue!r} not found"
            continue
        held.by_queues += [q] * len(bound)
        held.by_sets += [pod.requests for pod in bound]
        if not pending:
            continue
        if not (queue := queues_by_name[gang.queue]).admits():
            # Closing a queue is how an admin drains it (Volcano refuses new jobs in it):
            # its running gangs keep their pods, nothing new is bound.
            invalid[gang.name] = f"queue {gang.queue!r} is {queue.state}: it takes no new pods"
            continue
        # A terminating pod (evicted, deleted) holds its room until it is gone but is no
        # member any more: counted, a gang preempted whole looked running, and its
        # pending pods were bound on their own, below minMember.
        if leaving:
            bound = [p for p in bound if not p.terminating]
        members_left = len(pods) - leaving
        min_running = gang.min_running
        if members_left < min_running:
            also = f" (and {leaving} terminating)" if leaving else ""
            done = f", {gang.succeeded} succeeded" if gang.succeeded else ""
            invalid[gang.name] = (
                f"NotEnoughTasks: {members_left} pod(s) exist{also}{done}, "
                f"minMember is {gang.min_member}"
            )
            continue
        if len(bound) + len(pending) < min_running:
            # Binding what is not gated would leave the gang short of minMember: it waits,
            # untouched, until a controller (Kueue, a job operator) lifts the gates.
            gates = sorted({g for p in gated for g in p.gates})
            invalid[gang.name] = (
                f"SchedulingGated: {len(gated)} pod(s) wait for scheduling gates "
                f"({', '.join(gates)}); minMember {gang.min_member} needs them"
            )
            continue
        if keeps_apart and (why := left_out(pending, r_index)):
            invalid[gang.name] = why
            continue
        info = GangInfo(
            index=len(gangs),
            name=gang.name,
            queue=q,
            priority=gang.priority,
            created_s=gang.created_s,
            min_member=min_running,  # its members that succeeded count
            bound=len(bound),
            members=gang.members,
        )
        by_spec: dict[tuple[object, ...], list[Pod]] = {}
        prev: Pod | None = None
        same: list[Pod] = []
        for pod in pending:
            if prev is not None and pod.same_spec(prev):
                same.append(pod)  # a gang's pods come from a few templates, in runs
            else:
                key = pod.spec_key()
                same = by_spec.setdefault(key, [])
                same.append(pod)
            prev = pod
        first_class = len(classes)
        for spec_key, same in by_spec.items():
            exemplar = same[0]
            if spec_key not in per_spec:
                asked = (exemplar.requests.key(), exemplar.apart)
                if asked not in per_requests:
                    asks = with_apart(exemplar.demand(), exemplar)
                    demand = model_demand(vector(asks, r_index), model_units)
                    share = pod_share_units(demand, totals)
                    value = max(1, int(share.max()) if len(share) else 1)
                    per_requests[asked] = (demand, share, value)
                demand, share, value = per_requests[asked]
                per_spec[spec_key] = (demand, share, feasible_nodes(exemplar), value)
            demand, share, feasible, value = per_spec[spec_key]
            info.classes.append(len(classes))
            classes.append(
                PodClass(
                    index=len(classes),
                    gang=info.index,
                    pods=tuple([p.name for p in same]),
                    exemplar=exemplar,
                    demand=demand,
                    feasible=feasible,
                    share=share,
                    value=value,
                    spec=spec_ids.setdefault(spec_key, len(spec_ids)),
                )
            )
        if gang.task_minimums:
            short = task_needs(gang, info, bound, classes, gated)
            if short is not None:
                invalid[gang.name] = short
                del classes[first_class:]
                continue
        for cls in classes[first_class:]:
            demand_queues.append(q)
            demand_specs.append(cls.demand)
            demand_counts.append(cls.count)
        gangs.append(info)
    if demand_specs:
        np.add.at(
            pending_demand,
            np.array(demand_queues, dtype=np.int64),
            np.array(demand_specs, dtype=np.int64)
            * np.array(demand_counts, dtype=np.int64)[:, None],
        )

    held.add_to(used)

    ranks = _ranked_and_shaped(gangs, classes, state)
    queues = queue_infos(queue_names, queues_by_name, r_index, used, used + pending_demand, totals)
    return Problem(
        state=state,
        resources=resources,
        nodes=nodes,
        allocatable=allocatable,
        free=free,
        overcommitted=overcommitted,
        empty=empty,
        gpu_node=gpu_node,
        totals=totals,
        queues=queues,
        gangs=gangs,
        classes=classes,
        node_classes=node_classes(allocatable, list(views.feasible.values())),
        invalid=invalid,
        waiting_pods=waiting,
        feasibility=views.feasibility,
        node_key_index=views.view_of_node,
        key_nodes=views.exemplars,
        ranks=ranks,
        memo={NODE_INDEX: n_index},
    )


def _ranked_and_shaped(
    gangs: list[GangInfo], classes: list[PodClass], state: ClusterState
) -> dict[int, int]:
    """Each gang's rank among the priorities in ``state``, and its shape (gangs of one
    shape are interchangeable: ``solver.shapes``); returns the ranks by priority."""
    levels = {g.priority for g in gangs} | {g.priority for g in state.gangs}
    ranks = {p: i for i, p in enumerate(sorted(levels))}
    shape_ids: dict[tuple[object, ...], int] = {}
    for g in gangs:
        g.rank = ranks[g.priority]
        key = (
            g.queue,
            g.rank,
            g.need,
            g.running,
            tuple((classes[c].spec, classes[c].count) for c in g.classes),
            tuple((len(cs), n) for cs, n in g.task_needs),
            # A running gang's pending pods are a shape of their own: the joint model
            # gives none to a victim it evicts whole, which it must tell apart.
            g.name if g.running else None,
        )
        g.shape = shape_ids.setdefault(key, len(shape_ids))
    return ranks
