"""Pod-by-pod placement on real nodes, with tentative gangs that commit or roll back.

The greedy baselines are built on it, and so is the CP-SAT scheduler's disaggregation
(node classes -> nodes) and its explanation of why a gang did not fit. Free capacity is
a (nodes x resources) array, so filtering and scoring a pod is one vectorised pass.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from solver.arrays import BoolArray, IntArray
from solver.model import PODS
from solver.predicates import TOO_MANY_PODS
from solver.problem import GangInfo, PodClass, Problem, placement_reasons

MAX_SCORED_SPECS = 32
FloatArray = npt.NDArray[np.float64]


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
        self._scored: dict[tuple[int, Policy], tuple[PodClass, FloatArray]] = {}
        alloc = problem.allocatable.astype(np.float64)
        self._inv_alloc = np.divide(1.0, alloc, out=np.zeros_like(alloc), where=alloc > 0)

    # -- scoring -----------------------------------------------------------------------
    def _fits(self, cls: PodClass) -> BoolArray:
        fits: BoolArray = cls.feasible & (self.free >= cls.demand).all(axis=1)
        return fits

    def _scores(self, cls: PodClass, policy: Policy) -> FloatArray:
        """Score per node, -inf where the class does not fit. Shared: do not modify.

        Cached per pod spec and kept current by ``_rescore`` as pods come and go, so
        thousands of gangs of a few specs cost a few full passes, not one each.
        """
        key = (cls.spec, policy)
        if key not in self._scored:
            if len(self._scored) >= MAX_SCORED_SPECS:
                del self._scored[next(iter(self._scored))]
            used = cls.demand > 0
            left = (self.free[:, used] - cls.demand[used]) * self._inv_alloc[:, used]
            score = left.mean(axis=1)
            if policy is Policy.PACK:
                score = -score
            self._scored[key] = (cls, np.where(self._fits(cls), score, -np.inf))
        return self._scored[key][1]

    def _rescore(self, node: int) -> None:
        for (_, policy), (cls, scores) in self._scored.items():
            scores[node] = self._node_score(cls, node, policy)

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

    def room_for(self, cls: PodClass, node: int) -> int:
        """How many more pods of the class fit on ``node`` and in the queue's capability."""
        free = self.free[node]
        asked = cls.demand > 0
        fit = int((free[asked] // cls.demand[asked]).min()) if asked.any() else cls.count
        if self.respect_capability:
            room = self.queue_room[self.problem.gangs[cls.gang].queue]
            fit = min(fit, int((room[asked] // cls.demand[asked]).min()) if asked.any() else fit)
        return max(0, fit)

    def place_class(
        self, cls: PodClass, limit: int, policy: Policy, allowed: BoolArray | None = None
    ) -> list[str]:
        """Up to ``limit`` pods of the class (on ``allowed`` nodes only, if given)."""
        pods: list[str] = []
        limit = min(limit, cls.count - self.next_pod[cls.index])
        if limit <= 0:
            return pods
        scores = self._scores(cls, policy)
        view = scores if allowed is None else np.where(allowed, scores, -np.inf)
        while len(pods) < limit and self.queue_allows(cls):
            node = int(np.argmax(view))
            if view[node] == -np.inf:
                break
            # Packing, a node only gains score as it fills: it stays the best node until
            # it is full, so its share is placed at once (the same decision, pod by pod).
            batch = min(limit - len(pods), self.room_for(cls, node)) if policy is Policy.PACK else 1
            pods += self.place_on(cls, node, max(1, batch))
            if allowed is not None:
                view[node] = scores[node]
        return pods

    def _node_score(self, cls: PodClass, node: int, policy: Policy) -> float:
        """One node's score: plain Python, as numpy's per-call cost dwarfs 3-4 resources."""
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

    def try_gang(
        self, gang: GangInfo, policy: Policy = Policy.SPREAD, extras: bool = True
    ) -> list[str] | None:
        """Place the gang's members tentatively; keep them only if minMember is reached.

        Returns the pods placed, or None (and nothing placed) if the gang did not fit.
        """
        classes = [self.problem.classes[c] for c in gang.classes]
        placed: list[str] = []
        for cls in classes:
            placed += self.place_class(cls, gang.need - len(placed), policy)
            if len(placed) >= gang.need:
                break
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
        while nothing is placed in between: big clusters have many such gangs.
        """
        shape = (
            len(self.placed),
            gang.queue,
            gang.bound,
            gang.min_member,
            tuple(
                (
                    self.problem.classes[c].exemplar.spec_key(),
                    self.problem.classes[c].count,
                    self.next_pod[c],
                )
                for c in gang.classes
            ),
        )
        cached = self._explained.get(shape)
        if cached is None:
            cached = self._explain(gang)
            self._explained[shape] = cached
        return cached

    def _explain(self, gang: GangInfo) -> str:
        queue = self.problem.queues[gang.queue]
        total = gang.bound + sum(self.problem.classes[c].count for c in gang.classes)
        probe = self.copy()
        fit = sum(self.next_pod[c] for c in gang.classes)  # placed by this decision
        reasons: Counter[str] = Counter()
        capped: list[str] = []
        for c in gang.classes:
            cls = self.problem.classes[c]
            fit += len(probe.place_class(cls, cls.count, Policy.PACK))
            if probe.next_pod[c] < cls.count:
                if not probe.queue_allows(cls):
                    room = probe.queue_room[gang.queue]
                    capped = [self.problem.resources[r] for r in np.flatnonzero(room < cls.demand)]
                else:
                    reasons = probe._node_reasons(cls)
                break
        head = f"{gang.bound + fit}/{total} pods fit (minMember {gang.min_member})"
        if capped:
            return f"{head}: queue {queue.name!r} at capability ({', '.join(capped)})"
        if reasons:
            parts = ", ".join(
                f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            return f"{head}: {parts}"
        return f"{head}: fits, but the objective preferred other gangs (priority, fairness, value)"

    def _node_reasons(self, cls: PodClass) -> Counter[str]:
        """Kubernetes counts every reason a node fails, so one node may count twice."""
        reasons = placement_reasons(self.problem, cls)
        short = self.free[cls.feasible] < cls.demand
        for r in np.flatnonzero(short.any(axis=0)):
            name = self.problem.resources[r]
            reasons[TOO_MANY_PODS if name == PODS else f"Insufficient {name}"] += int(
                short[:, r].sum()
            )
        return reasons

    def copy(self) -> Placer:
        clone = Placer.__new__(Placer)
        clone.problem = self.problem
        clone.free = self.free.copy()
        clone.respect_capability = self.respect_capability
        clone.queue_room = [r.copy() for r in self.queue_room]
        clone.placed = dict(self.placed)
        clone.next_pod = list(self.next_pod)
        clone._explained = {}
        clone._scored = {}
        clone._inv_alloc = self._inv_alloc
        return clone
