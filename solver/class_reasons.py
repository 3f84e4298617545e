"""Why the nodes a pod class may not use rule it out, in kube-scheduler's words: the
placement predicates' reasons counted over nodes alike (``Problem.key_nodes``), and the
nodes whose first failing predicate is a ``NodeRule``, which kube-scheduler checks only
after a node's room."""

from __future__ import annotations

from collections import Counter

import numpy as np

from solver.arrays import IntArray
from solver.problem import PodClass, Problem


def placement_reasons(problem: Problem, cls: PodClass) -> Counter[str]:
    """Per reason, how many nodes the class's placement predicates reject."""
    key = ("placement_reasons", cls.exemplar.placement_key())
    cached = problem.memo.get(key)
    if not isinstance(cached, Counter):
        cached = _placement_reasons(problem, cls)
        problem.memo[key] = cached
    return Counter(cached)


def _placement_reasons(problem: Problem, cls: PodClass) -> Counter[str]:
    reasons: Counter[str] = Counter()
    rejected = np.bincount(problem.node_key_index[~cls.feasible], minlength=len(problem.key_nodes))
    for k, reason in _reasons_by_view(problem, cls, np.flatnonzero(rejected).tolist()).items():
        if reason:
            reasons[reason] += int(rejected[k])
    return reasons


def _reasons_by_view(problem: Problem, cls: PodClass, views: list[int]) -> dict[int, str | None]:
    """Per view of ``views`` (``Problem.key_nodes``), why the class may not use it."""
    exemplars = [problem.key_nodes[k] for k in views]
    placement = cls.exemplar.placement_key()
    found = problem.feasibility.reasons_of(cls.exemplar, exemplars, placement)
    return dict(zip(views, found, strict=True))


def ruled_out(problem: Problem, cls: PodClass) -> tuple[IntArray, list[str]]:
    """The nodes whose first failing predicate for the class is one of its pods'
    ``NodeRule``s (a volume's, a bound pod's anti-affinity), and each one's reason:
    kube-scheduler checks a node's room (NodeResourcesFit) before those, so a node short
    of room is counted for that (``Placer._node_reasons``)."""
    if not cls.exemplar.node_rules:
        return np.zeros(0, dtype=np.int64), []
    key = ("ruled_out", cls.exemplar.placement_key())
    cached = problem.memo.get(key)
    if not isinstance(cached, tuple):
        rules = {rule.reason for rule in cls.exemplar.node_rules}
        out = np.flatnonzero(~cls.feasible)
        views = problem.node_key_index[out]
        reasons = _reasons_by_view(problem, cls, np.unique(views).tolist())
        nodes: list[int] = []
        why: list[str] = []
        for n, k in zip(out.tolist(), views.tolist(), strict=True):
            if (reason := reasons[k]) is not None and reason in rules:
                nodes.append(n)
                why.append(reason)
        cached = problem.memo[key] = (np.array(nodes, dtype=np.int64), why)
    return cached
