"""How much of a group of pending pods fits in each topology domain (``DomainRoom``):
the free room of every node (allocatable less what its bound pods hold) as arrays, the
domains of a topology key, and first-fit placement of a group's pods into a domain's
nodes (``fill``). ``solver.together`` chooses groups' domains with it: array passes
over the nodes per group, not a loop over them (1,152 groups on 5,000 nodes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from solver.arrays import BoolArray, IntArray
from solver.equivalence import NodeViews
from solver.model import DEFAULT_QUEUE, PODS, ClusterState, Pod, apart_room


class DomainRoom:
    """Every node's free room (allocatable less what its bound pods hold; none on a node
    out of service) and the domains of each topology key, read once per snapshot: a
    group's choice then costs array passes over the nodes, not a loop over them."""

    def __init__(self, state: ClusterState, pending: Sequence[Pod]) -> None:
        nodes = list(state.nodes)
        self.views = NodeViews(nodes, pending)
        names = sorted(
            {r for n in nodes for r in n.allocatable.root}
            | {r for p in pending for r, _ in p.requests.pod_demand_items()}
        )
        self.r_index = {name: i for i, name in enumerate(names)}
        allocatable = np.array(
            [[n.allocatable[r] for r in names] for n in nodes], dtype=np.int64
        ).reshape(len(nodes), len(names))
        allocatable[~np.array([n.in_service for n in nodes], dtype=np.bool_)] = 0
        self.allocatable = allocatable
        # What the cluster has of each resource (1 at least): the share a group asks of
        # it orders specs and picks the resource tightness is read in, group by group.
        self.totals = np.maximum(allocatable.sum(axis=0), 1)
        n_index = {n.name: i for i, n in enumerate(nodes)}
        rows: list[int] = []
        sets: list[int] = []
        vectors: dict[tuple[tuple[str, int], ...], int] = {}
        gangs = {g.name: g for g in state.gangs}
        # Bound pods a preemption might evict, by priority and queue (``evictable``).
        self._victims: list[tuple[int, int, str, int]] = []  # row, set, queue, priority
        for pod in state.pods:
            if pod.node_name is not None and (row := n_index.get(pod.node_name)) is not None:
                rows.append(row)
                sets.append(vectors.setdefault(pod.requests.pod_demand_items(), len(vectors)))
                gang = gangs.get(pod.gang) if pod.gang is not None else None
                if not pod.daemon and (gang is None or gang.preemptible):
                    queue = gang.queue if gang is not None else DEFAULT_QUEUE
                    self._victims.append((row, sets[-1], queue, pod.priority))
        held = np.zeros((len(vectors), len(names)), dtype=np.int64)
        for demand, i in vectors.items():
            for resource, amount in demand:
                if (column := self.r_index.get(resource)) is not None:
                    held[i, column] = amount
        self.free = allocatable.copy()
        np.subtract.at(
            self.free, np.array(rows, dtype=np.int64), held[np.array(sets, dtype=np.int64)]
        )
        self._held = held
        self._freeable: dict[tuple[int, str], IntArray] = {}
        self._nodes = nodes
        self._name_rank = np.argsort(np.argsort(np.array([n.name for n in nodes], dtype=object)))
        self._domains: dict[str, tuple[IntArray, list[str], list[IntArray]]] = {}
        self._demands: dict[tuple[tuple[str, int], ...], IntArray] = {}
        self._index: dict[str, dict[str, int]] = {}
        self._masks: dict[tuple[str, tuple[str, ...]], BoolArray] = {}

    def evictable(self, priority: int, queue: str) -> IntArray:
        """Per node, the free room and what the bound pods a preemption or reclaim might
        evict for a gang of ``priority`` in ``queue`` hold: of lower priority or another
        queue, not a DaemonSet's, of a preemptible gang. An upper bound on what it can
        free: a domain it does not fit so is no domain to wait in for preemption."""
        if (priority, queue) not in self._freeable:
            room = self.free.copy()
            picked = [(r, i) for r, i, q, p in self._victims if p < priority or q != queue]
            if picked:
                rows, sets = (np.array(c, dtype=np.int64) for c in zip(*picked, strict=True))
                np.add.at(room, rows, self._held[sets])
            self._freeable[priority, queue] = np.minimum(room, self.allocatable)
        return self._freeable[priority, queue]

    def domains(self, key: str) -> tuple[IntArray, list[str], list[IntArray]]:
        """Per node, the index of its domain of ``key`` (-1: none); the domains' values;
        and each domain's nodes (rows)."""
        if key not in self._domains:
            labels = [n.labels.get(key) for n in self._nodes]
            values = sorted({v for v in labels if v is not None})
            index = {v: i for i, v in enumerate(values)}
            of = np.array([index[v] if v is not None else -1 for v in labels], dtype=np.int64)
            # Each domain's nodes in name order, the order first fit fills them: a
            # snapshot's node order (a watch's arrival order, another after a re-list or
            # a new leader's) chose another domain for the same cluster.
            order = np.lexsort((self._name_rank, of))
            starts = np.searchsorted(of[order], np.arange(len(values) + 1))
            members = [order[starts[d] : starts[d + 1]] for d in range(len(values))]
            self._domains[key] = (of, values, members)
        return self._domains[key]

    def demand(self, pod: Pod) -> IntArray:
        """A pod's demand as a row (its requests and pod slot), made once per request set."""
        items = pod.requests.pod_demand_items()
        if (out := self._demands.get(items)) is None:
            out = self._demands[items] = np.zeros(len(self.r_index), dtype=np.int64)
            for resource, amount in items:
                out[self.r_index[resource]] = amount
        return out

    def in_domains(self, key: str, values: tuple[str, ...]) -> BoolArray:
        """Per node, whether it is in one of the domains ``values`` of ``key`` (made once
        per domains: every group kept from one reads its mask)."""
        if (key, values) not in self._masks:
            of, names, _ = self.domains(key)
            if key not in self._index:
                self._index[key] = {v: i for i, v in enumerate(names)}
            index = self._index[key]
            wanted = [index[v] for v in values if v in index]
            self._masks[key, values] = np.isin(of, np.array(wanted, dtype=np.int64))
        return self._masks[key, values]

    def per_node(self, pod: Pod, room: IntArray, rows: IntArray) -> IntArray:
        """How many of ``pod`` each of the nodes ``rows`` takes, in ``room`` (theirs)."""
        demand = self.demand(pod)
        asked = np.flatnonzero(demand)
        fits = (np.maximum(room[:, asked], 0) // demand[asked]).min(axis=1)
        if pod.apart:  # at most its groups' room a node
            fits = np.minimum(fits, min(apart_room(g) for g in pod.apart))
        return np.where(self.views.feasible_nodes(pod)[rows], fits, 0)


def specs_of(room: DomainRoom, pods: Sequence[Pod]) -> list[tuple[Pod, int]]:
    """A group's pods by spec (an exemplar, its count), the biggest first: by the largest
    share of the cluster's allocatable one pod asks (bytes of memory, summed with
    millicores, outweighed every CPU request)."""
    counts: dict[tuple[object, ...], list[Pod]] = defaultdict(list)
    for pod in pods:
        counts[pod.spec_key()].append(pod)
    return sorted(
        ((same[0], len(same)) for same in counts.values()),
        key=lambda pair: (-float((room.demand(pair[0]) / room.totals).max()), pair[0].name),
    )


def fill(
    room: DomainRoom, specs: Sequence[tuple[Pod, int]], space: IntArray, rows: IntArray
) -> int:
    """Place the group's pods into ``space`` (the room of the nodes ``rows``, taken as
    they go), first fit in node order; returns how many fitted."""
    fitted = 0
    for exemplar, count in specs:
        fits = room.per_node(exemplar, space, rows)
        before = np.cumsum(fits) - fits
        take = np.minimum(fits, np.maximum(0, count - before))
        space -= take[:, None] * room.demand(exemplar)[None, :]
        fitted += int(take.sum())
    return fitted


def asked_most(room: DomainRoom, specs: Sequence[tuple[Pod, int]]) -> int:
    """The column of the resource the group asks most of, as a share of what the
    cluster has (the pod slot aside)."""
    asked = sum(
        (room.demand(p) * count for p, count in specs), np.zeros(len(room.r_index), np.int64)
    )
    share = asked / room.totals
    if (slot := room.r_index.get(PODS)) is not None and share.sum() > share[slot]:
        share[slot] = 0
    return int(np.argmax(share))
