"""Pod-by-pod placement on real nodes, with tentative gangs that commit or roll back.

The greedy baselines are built on it, and so is the CP-SAT scheduler's disaggregation
(node classes -> nodes) and its explanation of why a gang did not fit. Free capacity is
a (nodes x resources) array, so filtering and scoring a pod is one vectorised pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from enum import StrEnum

import numpy as np

from solver.arrays import BoolArray, FloatArray, IntArray
from solver.class_reasons import placement_reasons, ruled_out
from solver.model import APART_PREFIX, PODS
from solver.predicates import PORTS_CONFLICT, TOO_MANY_PODS, apart_reason
from solver.problem import GangInfo, PodClass, Problem
from solver.units import NO_LIMIT_FIT, fit_per_node

MAX_SCORED_SPECS = 32
MAX_SCORED_DEMANDS = 64
SCALAR_RESCORE = 4  # up to this many changed nodes are rescored one by one


class Policy(StrEnum):
    SPREAD = "spread"  # kube-scheduler's LeastAllocated: emptiest node first
    PACK = "pack"  # MostAllocated: fullest node first, keeps whole nodes free


class Placer:
    def __init__(self, problem: Problem, respect_capability: bool = True) -> None:
        self.problem = problem
        self.free: IntArray = problem.free.copy()
        self.respect_capability = respect_capability
        self.queue_room: list[IntArray] = [q.room() for q in problem.queues]
        self.placed: dict[str, int] = {}  # pod -> node index
        self.next_pod = [0] * len(problem.classes)
        self._explained: dict[tuple[object, ...], str] = {}
        # Per (placement and demand, room changes so far: ``_alike``): fits per node in
        # the room left, and why nodes fail once it is all taken (see _explain).
        self._fits_of: dict[tuple[int, bytes, int], IntArray] = {}
        self._reasons_of: dict[tuple[int, bytes, int], Counter[str]] = {}
        self._scored: dict[tuple[int, Policy], tuple[PodClass, FloatArray, int]] = {}
        self._by_demand: dict[tuple[bytes, Policy], tuple[FloatArray, int]] = {}
        self._changed: list[int] = []  # nodes whose room changed, in order (see _scores)
        alloc = problem.allocatable.astype(np.float64)
        self._inv_alloc = np.divide(1.0, alloc, out=np.zeros_like(alloc), where=alloc > 0)

    def copy(self) -> Placer:
        """The same placements and room, caches rebuilt as read: a second line of
        decisions tried from here, the better kept."""
        other = Placer(self.problem, self.respect_capability)
        other.free = self.free.copy()
        other.queue_room = [room.copy() for room in self.queue_room]
        other.placed = dict(self.placed)
        other.next_pod = list(self.next_pod)
        return other

    # -- scoring -----------------------------------------------------------------------
    def _score_rows(
        self, cls: PodClass, policy: Policy, rows: IntArray | slice, masked: bool = True
    ) -> FloatArray:
        """Scores of ``rows`` of the nodes, -inf where the class does not fit (``masked``:
        where its predicates fail too, else where its demand does not fit only)."""
        used = cls.demand > 0
        free = self.free[rows]
        left = (free[:, used] - cls.demand[used]) * self._inv_alloc[rows][:, used]
        score = left.mean(axis=1)
        if policy is Policy.PACK:
            score = -score
        fits = (free >= cls.demand).all(axis=1)
        if masked:
            fits &= cls.feasible[rows]
        scored: FloatArray = np.where(fits, score, -np.inf)
        return scored

    def _scores(self, cls: PodClass, policy: Policy) -> FloatArray:
        """Score per node, -inf where the class does not fit. Shared: do not modify.

        Cached per pod spec; nodes whose room changed since a spec was last read are
        rescored then, together, so thousands of gangs of a few hundred specs cost a few
        vectorised passes, not a Python loop over every spec on every placement.
        """
        key = (cls.spec, policy)
        entry = self._scored.get(key)
        if entry is None:
            if len(self._scored) >= MAX_SCORED_SPECS:
                del self._scored[next(iter(self._scored))]
            # Real-shaped 1,000-node clusters have ~600 specs of ~80 demands: a spec not
            # read lately is its demand's scores, masked where its predicates fail.
            scores = np.where(cls.feasible, self._demand_scores(cls, policy), -np.inf)
        else:
            _, scores, seen = entry
            if seen + SCALAR_RESCORE >= len(self._changed):
                # A node or two: numpy's per-call cost dwarfs 3-5 resources.
                for node in self._changed[seen:]:
                    scores[node] = self._node_score(cls, node, policy)
            else:
                rows = self._changed_since(seen)
                scores[rows] = self._score_rows(cls, policy, rows)
        self._scored[key] = (cls, scores, len(self._changed))
        return scores

    def _demand_scores(self, cls: PodClass, policy: Policy) -> FloatArray:
        """Scores per node of a pod asking ``cls.demand``, wherever it may run: kept like
        the specs' (rows whose room changed rescored when read), per demand."""
        key = (cls.demand.tobytes(), policy)
        entry = self._by_demand.get(key)
        if entry is None:
            if len(self._by_demand) >= MAX_SCORED_DEMANDS:
                del self._by_demand[next(iter(self._by_demand))]
            scores = self._score_rows(cls, policy, slice(None), masked=False)
        else:
            scores, seen = entry
            if seen < len(self._changed):
                rows = self._changed_since(seen)
                scores[rows] = self._score_rows(cls, policy, rows, masked=False)
        self._by_demand[key] = (scores, len(self._changed))
        return scores

    def _node_score(self, cls: PodClass, node: int, policy: Policy) -> float:
        if not cls.feasible[node]:
            return -np.inf
        free = self.free[node].tolist()
        demand = cls.demand.tolist()
        if any(f < d for f, d in zip(free, demand, strict=True)):
            return -np.inf
        inv = self._inv_alloc[node].tolist()
        left = [(f - d) * i for f, d, i in zip(free, demand, inv, strict=True) if d > 0]
        score = float(sum(left) / len(left))
        return -score if policy is Policy.PACK else score

    def _rescore(self, node: int) -> None:
        self._changed.append(node)

    def _changed_since(self, seen: int) -> IntArray:
        """The nodes whose room changed since the ``seen``-th change, each once."""
        return np.unique(np.array(self._changed[seen:], dtype=np.int64))

    def _room_changes(self) -> int:
        """How often some node's room changed: caches of what the room allows key on it
        (a count of pods placed stays the same when one is taken back and another
        placed)."""
        return len(self._changed)

    def best_node(self, cls: PodClass, policy: Policy = Policy.SPREAD) -> int | None:
        scores = self._scores(cls, policy)
        best = int(np.argmax(scores)) if len(scores) else 0
        return best if len(scores) and scores[best] > -np.inf else None

    def queue_allows(self, cls: PodClass) -> bool:
        if not self.respect_capability:
            return True
        room = self.queue_room[self.problem.gangs[cls.gang].queue].tolist()
        return all(r >= d for r, d in zip(room, cls.demand.tolist(), strict=True))

    # -- placing -----------------------------------------------------------------------
    def place(self, cls: PodClass, node: int) -> str:
        return self.place_on(cls, node, 1)[0]

    def place_on(self, cls: PodClass, node: int, count: int) -> list[str]:
        """``count`` pods of the class on ``node`` at once; the caller has checked room."""
        start = self.next_pod[cls.index]
        pods = list(cls.pods[start : start + count])
        self.next_pod[cls.index] = start + len(pods)
        total = cls.demand * len(pods)
        self.free[node] -= total
        self.queue_room[self.problem.gangs[cls.gang].queue] -= total
        self.placed.update(dict.fromkeys(pods, node))
        self._rescore(node)
        return pods

    def place_cells(self, cells: Sequence[tuple[PodClass, int, int]]) -> list[list[str]]:
        """``place_on`` of each (class, node, count) in turn, the room taken in one
        vectorised step: a decision's 11,400 cells at 5,000 nodes took 66 ms one by one,
        34 ms so (each numpy update of a row cost more than the rest of its placing)."""
        queue_of = [self.problem.gangs[cls.gang].queue for cls, _, _ in cells]
        next_pod, placed, changed = self.next_pod, self.placed, self._changed
        pods_of: list[list[str]] = []
        counts: list[int] = []
        for cls, node, count in cells:
            start = next_pod[cls.index]
            pods = list(cls.pods[start : start + count])
            next_pod[cls.index] = start + len(pods)
            placed.update(dict.fromkeys(pods, node))
            changed.append(node)
            pods_of.append(pods)
            counts.append(len(pods))
        if cells:
            width = self.free.shape[1]
            demand = np.array([cls.demand for cls, _, _ in cells], dtype=np.int64)
            taken = demand.reshape(len(cells), width) * np.array(counts, dtype=np.int64)[:, None]
            np.subtract.at(self.free, np.array([n for _, n, _ in cells], dtype=np.int64), taken)
            by_queue = np.zeros((len(self.queue_room), width), dtype=np.int64)
            np.add.at(by_queue, np.array(queue_of, dtype=np.int64), taken)
            for q in set(queue_of):
                self.queue_room[q] -= by_queue[q]
        return pods_of

    def place_like(self, placements: Mapping[str, int]) -> list[str]:
        """As many pods of each class on each node as ``placements`` (pod -> node) has
        there: the same counts, the class's next pods (which pod of a class goes where
        does not matter to the problem). Returns the pods placed."""
        classes = self.problem.classes
        cells = sorted(self.problem.cell_counts(placements).items())
        placed = self.place_cells([(classes[c], node, count) for (c, node), count in cells])
        return [pod for pods in placed for pod in pods]

    def close(self, nodes: Sequence[int]) -> None:
        """No more pods on ``nodes``, whatever room is left there (where victims lose
        pods, the joint model alone decides what goes: ``solver.joint``)."""
        for node in nodes:
            self.free[node] = np.minimum(self.free[node], 0)
            self._rescore(node)

    def room_for(self, cls: PodClass, node: int) -> int:
        """How many more pods of the class fit on ``node`` and in the queue's capability."""
        # Plain ints: called once per node filled, numpy's per-call cost dwarfed the work.
        demand = cls.demand.tolist()
        fit = _fit(self.free[node].tolist(), demand)
        if self.respect_capability:
            room = self.queue_room[self.problem.gangs[cls.gang].queue].tolist()
            fit = min(fit, _fit(room, demand))
        return fit

    def place_class(
        self, cls: PodClass, limit: int, policy: Policy, allowed: BoolArray | None = None
    ) -> list[str]:
        """Up to ``limit`` pods of the class (on ``allowed`` nodes only, if given)."""
        return self.place_alike([(cls, limit)], policy, allowed)[0]

    def place_alike(
        self,
        wanted: Sequence[tuple[PodClass, int]],
        policy: Policy,
        allowed: BoolArray | None = None,
    ) -> list[list[str]]:
        """``place_class`` for each (class, limit) in turn, for classes of one spec and one
        queue (thousands of identical gangs): the same decision, in one pass of the nodes.
        """
        placed: list[list[str]] = [[] for _ in wanted]
        todo = [
            (i, cls, min(limit, cls.count - self.next_pod[cls.index]))
            for i, (cls, limit) in enumerate(wanted)
        ]
        todo = [item for item in todo if item[2] > 0]
        if not todo or not len(self.free):
            return placed  # nothing to place, or no node to place it on
        first = todo[0][1]
        scores = self._scores(first, policy)
        view = scores if allowed is None else np.where(allowed, scores, -np.inf)
        k = 0
        while k < len(todo) and self.queue_allows(first):
            node = int(np.argmax(view))
            if view[node] == -np.inf:
                break
            # Packing, a node only gains score as it fills: it stays the best node until
            # it is full, so its room is filled at once (the same decision, pod by pod).
            room = max(1, self.room_for(first, node)) if policy is Policy.PACK else 1
            while room > 0 and k < len(todo):
                i, cls, limit = todo[k]
                take = min(limit - len(placed[i]), room)
                placed[i] += self.place_on(cls, node, take)
                room -= take
                if len(placed[i]) >= limit:
                    k += 1
            scores = self._scores(first, policy)  # the node's new score
            if allowed is not None:
                view[node] = scores[node]
        return placed

    def unplace(self, pods: list[str]) -> None:
        """Roll back the last pods placed, newest first."""
        by_name = self.problem.class_of_pod()
        for pod in reversed(pods):
            cls = self.problem.classes[by_name[pod]]
            node = self.placed.pop(pod)
            self.free[node] += cls.demand
            self.queue_room[self.problem.gangs[cls.gang].queue] += cls.demand
            self.next_pod[cls.index] -= 1
            self._rescore(node)

    def withdraw(self, gang: GangInfo) -> None:
        """Roll back every pod of the gang this decision placed: a class's placed pods are
        always its first ``next_pod`` (placed in order, rolled back newest first)."""
        classes = self.problem.classes
        self.unplace([p for c in gang.classes for p in classes[c].pods[: self.next_pod[c]]])

    def reached(self, gang: GangInfo) -> bool:
        """The gang has its minMember placed, and each task its minimum."""
        counts = {c: self.next_pod[c] for c in gang.classes}
        return gang.reaches(sum(counts.values())) and gang.tasks_met(counts)

    def try_gang(
        self, gang: GangInfo, policy: Policy = Policy.SPREAD, extras: bool = True
    ) -> list[str] | None:
        """Place the gang's members tentatively; keep them only if minMember is reached.

        Returns the pods placed, or None (and nothing placed) if the gang did not fit.
        """
        classes = [self.problem.classes[c] for c in gang.classes]
        placed: list[str] = []
        for task_classes, task_need in gang.task_needs:  # each task's minimum first
            got = 0
            for c in task_classes:
                more = self.place_class(self.problem.classes[c], task_need - got, policy)
                placed += more
                got += len(more)
                if got >= task_need:
                    break
            if got < task_need:
                self.unplace(placed)
                return None
        for cls in classes:
            if len(placed) >= gang.need:
                break
            placed += self.place_class(cls, gang.need - len(placed), policy)
        if len(placed) < gang.need:
            self.unplace(placed)
            return None
        if extras:
            for cls in classes:
                placed += self.place_class(cls, cls.count, policy)
        return placed

    # -- explaining ----------------------------------------------------------------------
    def explain(self, gang: GangInfo) -> str:
        """Why the gang does not fit in what is left, as a user reads it from Kubernetes.

        Gangs of one shape (same pod specs and counts, queue, minMember) share the answer
        while no room changes in between: big clusters have many such gangs.
        """
        shape = (
            self._room_changes(),
            gang.queue,
            gang.bound,
            gang.min_member,
            tuple(
                (self.problem.classes[c].spec, self.problem.classes[c].count, self.next_pod[c])
                for c in gang.classes
            ),
        )
        cached = self._explained.get(shape)
        if cached is None:
            cached = self._explain(gang)
            self._explained[shape] = cached
        return cached

    def _explain(self, gang: GangInfo) -> str:
        """Counts what would fit node by node, without placing: explaining a thousand
        pending gangs must not cost a placement pass each."""
        queue = self.problem.queues[gang.queue]
        total = gang.bound + sum(self.problem.classes[c].count for c in gang.classes)
        free = self.free  # copied once a class takes room from it
        room = self.queue_room[gang.queue].copy()
        fit = sum(self.next_pod[c] for c in gang.classes)  # placed by this decision
        reasons: Counter[str] = Counter()
        capped: list[str] = []
        for c in gang.classes:
            cls = self.problem.classes[c]
            want = cls.count - self.next_pod[c]
            per_node = self._fits(cls) if free is self.free else self._fits(cls, free)
            room_there = int(per_node.sum())
            by_queue = _fit(room.tolist(), cls.demand.tolist())
            if not self.respect_capability:
                by_queue = want
            placed = min(want, room_there, by_queue)
            fit += placed
            if placed < want:
                if by_queue < min(want, room_there):
                    room -= placed * cls.demand
                    capped = [self.problem.resources[r] for r in np.flatnonzero(room < cls.demand)]
                elif free is self.free and placed == room_there:
                    # Every node's room taken: what fails there is the same for every gang
                    # of this spec (explaining a thousand pending gangs must stay cheap).
                    reasons = self._full_reasons(cls)
                else:
                    reasons = self._node_reasons(cls, self._taken(cls, free, per_node, placed))
                break
            # Take the pods from the first nodes with room, so a later class sees less.
            free = self._taken(cls, free, per_node, placed)
            room -= placed * cls.demand
        head = f"{gang.bound + fit}/{total} pods fit (minMember {gang.min_member})"
        if not len(self.free):
            return f"{head}: 0/0 nodes are available"
        if capped:
            return f"{head}: queue {queue.name!r} at capability ({', '.join(capped)})"
        if reasons:
            parts = ", ".join(
                f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            return f"{head}: {parts}"
        return f"{head}: fits, but the objective preferred other gangs (priority, fairness, value)"

    def _fits(self, cls: PodClass, free: IntArray | None = None) -> IntArray:
        """Pods of the class that fit per node in ``free`` (default: the room left, cached
        per placement and demand, ``_alike``, while the decision does not change)."""
        if free is not None:
            return np.where(cls.feasible, fit_per_node(cls.demand, free), 0)
        key = (*_alike(cls), self._room_changes())
        cached = self._fits_of.get(key)
        if cached is None:
            cached = self._fits_of[key] = self._fits(cls, self.free)
        return cached

    def _taken(self, cls: PodClass, free: IntArray, per_node: IntArray, count: int) -> IntArray:
        """``free`` (a copy) less ``count`` pods of the class on the first nodes with room."""
        take = np.minimum(per_node, np.maximum(count - (np.cumsum(per_node) - per_node), 0))
        # Only the rows that give pods change: at 5,000 nodes a gang's few pods touch a
        # handful, and the product over every row was most of explaining 4,000 gangs.
        rows = np.flatnonzero(take)
        left: IntArray = free.copy()
        left[rows] -= take[rows, None] * cls.demand
        return left

    def _full_reasons(self, cls: PodClass) -> Counter[str]:
        key = (*_alike(cls), self._room_changes())
        cached = self._reasons_of.get(key)
        if cached is None:
            per_node = self._fits(cls)
            taken = self._taken(cls, self.free, per_node, int(per_node.sum()))
            cached = self._reasons_of[key] = self._node_reasons(cls, taken)
        return Counter(cached)

    def _node_reasons(self, cls: PodClass, free: IntArray) -> Counter[str]:
        """Kubernetes counts every resource a node is short of, so one node may count
        twice. A node a pod's volume or a bound pod's anti-affinity rules out but that is
        short of room is counted for its room, as kube-scheduler's NodeResourcesFit runs
        first (``class_reasons.ruled_out``); of the groups' room (``solver.apart``), a
        host port's is counted before the resources, a spread's or anti-affinity's after,
        each only where nothing before it fails (NodePorts, NodeResourcesFit,
        PodTopologySpread and InterPodAffinity run so)."""
        reasons = placement_reasons(self.problem, cls)
        checked = cls.feasible
        ruled, why = ruled_out(self.problem, cls)
        if len(ruled):
            short_ruled = np.flatnonzero((free[ruled] < cls.demand).any(axis=1))
            if len(short_ruled):
                reasons.subtract(why[i] for i in short_ruled.tolist())
                reasons = +reasons  # (counts left at 0 dropped)
                checked = cls.feasible.copy()
                checked[ruled[short_ruled]] = True
        short = free[checked] < cls.demand
        order = np.array([_filter_order(name) for name in self.problem.resources])
        first = np.where(short, order, len(FILTERS)).min(axis=1, initial=len(FILTERS))
        short &= order[None, :] == first[:, None]
        for r in np.flatnonzero(short.any(axis=0)):
            name = self.problem.resources[r]
            reasons[_short_of(name)] += int(short[:, r].sum())
        return reasons


# kube-scheduler's filters reading a node's room, in their order: a problem column's
# (``_filter_order``).
FILTERS = ("NodePorts", "NodeResourcesFit", "pod topology and affinity")


def _filter_order(resource: str) -> int:
    if not resource.startswith(APART_PREFIX):
        return 1
    return 0 if apart_reason(resource) == PORTS_CONFLICT else 2


def _short_of(resource: str) -> str:
    """kube-scheduler's words for a node short of ``resource``."""
    if resource == PODS:
        return TOO_MANY_PODS
    return (
        apart_reason(resource) if resource.startswith(APART_PREFIX) else f"Insufficient {resource}"
    )


def _alike(cls: PodClass) -> tuple[int, bytes]:
    """What ``Placer._fits`` and ``Placer._full_reasons`` read of a pod class: its
    placement (the classes of one placement key share its feasibility array,
    ``NodeViews.feasible_nodes``) and its demand. Specs differ by task too, and by
    placement keys that read alike: 5,000 real-shaped nodes, 1,307 pending specs, 81
    request sets, 128 placements."""
    return id(cls.feasible), cls.demand.tobytes()


def _fit(free: list[int], demand: list[int]) -> int:
    """``fit_per_node`` for one row, in plain ints."""
    fits = [max(f, 0) // d for f, d in zip(free, demand, strict=True) if d > 0]
    return min(fits) if fits else NO_LIMIT_FIT
