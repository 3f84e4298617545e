"""A prepared problem -> a CP-SAT model over *counts*, never one boolean per pod and node.

The model places pod classes into *bins*. A bin is one node (the node-level model, which
is exact) or a class of identical nodes (the aggregated model, a relaxation that gives
an upper bound and decides admission fast). The same constraint families serve both:

- ``n[pod@bin]``: how many pods of a class go to the bin; exists only where the class's
  predicates admit the bin and at least one pod fits there.
- ``admitted[g]``: gang g reaches minMember this cycle. admitted => placed >= need;
  not admitted => placed = 0. Members beyond minMember are elastic.
- capacity per bin and resource; queue capability (hard); per class, at most its pods.
- ``opened[bin]``: empty nodes of the bin that receive pods (packing terms).
- ``short[q]``: queue q's shortfall below its deserved share (fairness term).

Models reach tens of thousands of variables, so constraints are written straight into
the model's proto from flat arrays: building through expression objects cost more than
solving. ``build_variables`` is the one place variables are made; each family of
constraints has one ``add_*`` function; the objective's prices come from
``objective.coefficients``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from solver.model import PODS
from solver.objective import Coefficients
from solver.problem import IntArray, PodClass, Problem

INF = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Bin:
    name: str
    nodes: tuple[int, ...]
    free: IntArray  # summed over the bin's nodes
    node_allocatable: IntArray  # of one node (a bin's nodes share it)
    empty_nodes: int
    used_free: IntArray  # free capacity on the bin's non-empty nodes
    gpu: bool


def max_fit(cls: PodClass, free: IntArray) -> IntArray:
    """Per node (rows of ``free``): how many pods of the class's spec fit on their own."""
    asked = cls.demand > 0
    per_resource = np.floor_divide(np.maximum(free[:, asked], 0), cls.demand[asked])
    fit: IntArray = per_resource.min(axis=1)
    return fit


def node_bins(problem: Problem) -> list[Bin]:
    zero = np.zeros(len(problem.resources), dtype=np.int64)
    return [
        Bin(
            name=problem.nodes[i].name,
            nodes=(i,),
            free=problem.free[i],
            node_allocatable=problem.allocatable[i],
            empty_nodes=int(problem.empty[i]),
            used_free=zero if problem.empty[i] else problem.free[i],
            gpu=bool(problem.gpu_node[i]),
        )
        for i in range(len(problem.nodes))
    ]


def class_bins(problem: Problem) -> list[Bin]:
    bins = []
    zero = np.zeros(len(problem.resources), dtype=np.int64)
    for k, members in enumerate(problem.node_classes):
        rows = np.array(members)
        used = rows[~problem.empty[rows]]
        bins.append(
            Bin(
                name=f"class{k}({problem.nodes[members[0]].name}+{len(members) - 1})",
                nodes=tuple(members),
                free=problem.free[rows].sum(axis=0),
                node_allocatable=problem.allocatable[members[0]],
                empty_nodes=int(problem.empty[rows].sum()),
                used_free=problem.free[used].sum(axis=0) if len(used) else zero,
                gpu=bool(problem.gpu_node[members[0]]),
            )
        )
    return bins


@dataclass(frozen=True)
class Pairs:
    """The (class, bin) pairs that get a count variable, grouped by class and by gang."""

    cls: IntArray
    bin: IntArray
    cap: IntArray  # most pods of the class the bin can take

    def __len__(self) -> int:
        return len(self.cls)


def feasible_pair_estimate(problem: Problem, gangs: set[int] | None = None) -> int:
    """An upper bound on the node-level model's pairs, without computing fits."""
    return sum(
        int(cls.feasible.sum()) for cls in problem.classes if gangs is None or cls.gang in gangs
    )


def pair_capacity(problem: Problem, bins: Sequence[Bin], gangs: set[int] | None = None) -> Pairs:
    bin_of_node = np.zeros(len(problem.nodes), dtype=np.int64)
    for b, bin_ in enumerate(bins):
        bin_of_node[list(bin_.nodes)] = b
    per_spec: dict[int, IntArray] = {}  # pods of a spec that fit per bin, uncapped
    cls_idx: list[IntArray] = []
    bin_idx: list[IntArray] = []
    caps: list[IntArray] = []
    for cls in problem.classes:
        if gangs is not None and cls.gang not in gangs:
            continue
        if cls.spec not in per_spec:
            per_node = np.where(cls.feasible, max_fit(cls, problem.free), 0)
            per_spec[cls.spec] = np.bincount(
                bin_of_node, weights=per_node, minlength=len(bins)
            ).astype(np.int64)
        per_bin = np.minimum(per_spec[cls.spec], cls.count)
        where = np.flatnonzero(per_bin > 0)
        cls_idx.append(np.full(len(where), cls.index, dtype=np.int64))
        bin_idx.append(where)
        caps.append(per_bin[where])
    if not cls_idx:
        empty = np.zeros(0, dtype=np.int64)
        return Pairs(empty, empty, empty)
    return Pairs(np.concatenate(cls_idx), np.concatenate(bin_idx), np.concatenate(caps))


@dataclass
class Encoding:
    """The model and where its variables are: count variables are indices 0..len(pairs)-1."""

    problem: Problem
    bins: Sequence[Bin]
    pairs: Pairs
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    admitted: dict[int, int] = field(default_factory=dict)  # gang -> variable index
    opened: dict[int, int] = field(default_factory=dict)  # bin -> variable index
    short: dict[int, int] = field(default_factory=dict)  # queue -> variable index
    class_span: dict[int, tuple[int, int]] = field(default_factory=dict)  # [start, end)

    def gang_span(self, g: int) -> tuple[int, int] | None:
        spans = [self.class_span[c] for c in self.problem.gangs[g].classes if c in self.class_span]
        if not spans:
            return None
        return spans[0][0], spans[-1][1]

    def size(self) -> tuple[int, int]:
        proto = self.model.proto
        return len(proto.variables), len(proto.constraints)


def _new_var(enc: Encoding, low: int, high: int, name: str) -> int:
    var = enc.model.proto.variables.add()
    var.domain.extend([low, high])
    var.name = name
    return len(enc.model.proto.variables) - 1


def _linear(
    enc: Encoding,
    variables: Sequence[int],
    coeffs: Sequence[int],
    low: int,
    high: int,
    enforce: int | None = None,
) -> None:
    ct = enc.model.proto.constraints.add()
    if enforce is not None:
        ct.enforcement_literal.append(enforce)
    ct.linear.vars.extend(variables)
    ct.linear.coeffs.extend(coeffs)
    ct.linear.domain.extend([max(low, -INF), min(high, INF)])


def _runs(keys: IntArray) -> list[tuple[int, int]]:
    """[start, end) of each run of equal consecutive values."""
    if not len(keys):
        return []
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]).tolist()
    return list(zip(starts, [*starts[1:], len(keys)], strict=True))


def build_variables(problem: Problem, bins: Sequence[Bin], pairs: Pairs) -> Encoding:
    enc = Encoding(problem=problem, bins=bins, pairs=pairs)
    for p in range(len(pairs)):
        c, b = int(pairs.cls[p]), int(pairs.bin[p])
        _new_var(enc, 0, int(pairs.cap[p]), f"n[{problem.classes[c].pods[0]}@{bins[b].name}]")
    for s, e in _runs(pairs.cls):
        enc.class_span[int(pairs.cls[s])] = (s, e)
    modelled = sorted({problem.classes[c].gang for c in enc.class_span})
    for g in modelled:
        if not problem.gangs[g].running:
            enc.admitted[g] = _new_var(enc, 0, 1, f"admitted[{problem.gangs[g].name}]")
    for b in sorted({int(b) for b in pairs.bin}):
        if bins[b].empty_nodes:
            enc.opened[b] = _new_var(enc, 0, bins[b].empty_nodes, f"opened[{bins[b].name}]")
    return enc


def add_class_counts(enc: Encoding) -> None:
    for c, (s, e) in enc.class_span.items():
        if e - s > 1:
            _linear(enc, range(s, e), [1] * (e - s), 0, enc.problem.classes[c].count)


def add_gang_all_or_nothing(enc: Encoding) -> None:
    for g, admitted in enc.admitted.items():
        span = enc.gang_span(g)
        assert span is not None  # admitted[g] exists only for modelled gangs
        members = range(*span)
        ones = [1] * len(members)
        _linear(enc, members, ones, enc.problem.gangs[g].need, INF, enforce=admitted)
        _linear(enc, members, ones, 0, 0, enforce=-admitted - 1)


def _by_bin(enc: Encoding) -> dict[int, IntArray]:
    order = np.argsort(enc.pairs.bin, kind="stable")
    bins = enc.pairs.bin[order]
    return {int(bins[s]): order[s:e] for s, e in _runs(bins)}


def add_capacity(enc: Encoding, by_bin: Mapping[int, IntArray]) -> None:
    demand = np.array([cls.demand for cls in enc.problem.classes], dtype=np.int64)
    for b, members in by_bin.items():
        # A lone class on one node: its variable's domain is already the exact capacity.
        if len(members) == 1 and len(enc.bins[b].nodes) == 1:
            continue
        coeffs = demand[enc.pairs.cls[members]]
        for r in np.flatnonzero(coeffs.any(axis=0)):
            _linear(enc, members.tolist(), coeffs[:, r].tolist(), -INF, int(enc.bins[b].free[r]))


def add_capability(enc: Encoding) -> None:
    problem = enc.problem
    for q in problem.queues:
        capped = np.flatnonzero(q.capability >= 0)
        spans = [
            enc.class_span[c]
            for g in problem.gangs
            if g.queue == q.index
            for c in g.classes
            if c in enc.class_span
        ]
        if not len(capped) or not spans:
            continue
        members = np.concatenate([np.arange(s, e) for s, e in spans])
        coeffs = np.array([problem.classes[c].demand for c in enc.pairs.cls[members]])
        room = q.room()
        for r in capped:
            _linear(enc, members.tolist(), coeffs[:, r].tolist(), -INF, int(room[r]))


def add_opened_nodes(enc: Encoding, by_bin: Mapping[int, IntArray]) -> None:
    """opened x one node's allocatable covers the load the used nodes cannot hold.

    Exact for one node (a pod always takes a pod slot, so that resource alone decides);
    for a class of nodes, a relaxation that ignores fragmentation.
    """
    demand = np.array([cls.demand for cls in enc.problem.classes], dtype=np.int64)
    slot = enc.problem.r(PODS)
    for b, opened in enc.opened.items():
        bin_ = enc.bins[b]
        members = by_bin[b]
        coeffs = demand[enc.pairs.cls[members]]
        resources = [slot] if len(bin_.nodes) == 1 else np.flatnonzero(coeffs.any(axis=0))
        for r in resources:
            alloc = int(bin_.node_allocatable[r])
            _linear(
                enc,
                [opened, *members.tolist()],
                [alloc, *(-coeffs[:, r]).tolist()],
                -int(bin_.used_free[r]),
                INF,
            )


def add_fairness_shortfall(enc: Encoding, coef: Coefficients) -> None:
    problem = enc.problem
    queue_of_pair = np.array(
        [problem.gangs[problem.classes[c].gang].queue for c in enc.pairs.cls], dtype=np.int64
    )
    for q in problem.queues:
        target = int(coef.deserved[q.index] - coef.held[q.index])
        if target <= 0:
            continue
        members = np.flatnonzero(queue_of_pair == q.index)
        short = _new_var(enc, 0, target, f"short[{q.name}]")
        enc.short[q.index] = short
        shares = coef.pod_share[enc.pairs.cls[members]]
        _linear(enc, [short, *members.tolist()], [1, *shares.tolist()], target, INF)


def set_objective(enc: Encoding, coef: Coefficients) -> None:
    """Maximise: CP-SAT minimises, so coefficients are negated with scaling factor -1."""
    variables = list(range(len(enc.pairs)))
    prices = coef.pod[enc.pairs.cls].tolist()
    for g, var in enc.admitted.items():
        variables.append(var)
        prices.append(int(coef.admitted[g]))
    for var in enc.short.values():
        variables.append(var)
        prices.append(coef.shortfall)
    for b, var in enc.opened.items():
        variables.append(var)
        prices.append(coef.node_opened + (coef.gpu_node_opened if enc.bins[b].gpu else 0))
    objective = enc.model.proto.objective
    objective.vars.extend(variables)
    objective.coeffs.extend(-p for p in prices)
    objective.scaling_factor = -1


def encode(problem: Problem, bins: Sequence[Bin], coef: Coefficients, pairs: Pairs) -> Encoding:
    enc = build_variables(problem, bins, pairs)
    by_bin = _by_bin(enc)
    add_class_counts(enc)
    add_gang_all_or_nothing(enc)
    add_capacity(enc, by_bin)
    add_capability(enc)
    add_opened_nodes(enc, by_bin)
    add_fairness_shortfall(enc, coef)
    set_objective(enc, coef)
    return enc


def hint(enc: Encoding, placements: Mapping[str, int], coef: Coefficients) -> None:
    """A complete hint from a decision (pod -> node index): every variable gets a value."""
    problem = enc.problem
    bin_of_node = {n: b for b, bin_ in enumerate(enc.bins) for n in bin_.nodes}
    index = {
        (int(c), int(b)): p
        for p, (c, b) in enumerate(zip(enc.pairs.cls, enc.pairs.bin, strict=True))
    }
    values = np.zeros(len(enc.model.proto.variables), dtype=np.int64)
    opened: dict[int, set[int]] = {}
    of_pod = problem.class_of_pod()
    for pod, node in placements.items():
        p = index.get((of_pod[pod], bin_of_node.get(node, -1)))
        if p is not None and values[p] < enc.pairs.cap[p]:
            values[p] += 1
            if problem.empty[node]:
                opened.setdefault(bin_of_node[node], set()).add(node)
    per_gang = np.zeros(len(problem.gangs), dtype=np.int64)
    gained = np.zeros(len(problem.queues), dtype=np.int64)
    for p in range(len(enc.pairs)):
        cls = problem.classes[int(enc.pairs.cls[p])]
        per_gang[cls.gang] += values[p]
    for g, var in enc.admitted.items():
        reached = per_gang[g] >= problem.gangs[g].need and per_gang[g] > 0
        values[var] = int(reached)
        if not reached:  # a partial gang in the hint would make it infeasible: drop it
            span = enc.gang_span(g)
            if span:
                values[span[0] : span[1]] = 0
    for p in range(len(enc.pairs)):
        c = int(enc.pairs.cls[p])
        gained[problem.gangs[problem.classes[c].gang].queue] += coef.pod_share[c] * values[p]
    for b, var in enc.opened.items():
        values[var] = len(opened.get(b, ()))
    for q, var in enc.short.items():
        values[var] = max(0, int(coef.deserved[q] - coef.held[q] - gained[q]))
    proto_hint = enc.model.proto.solution_hint
    proto_hint.vars.extend(range(len(values)))
    proto_hint.values.extend(values.tolist())


def solution_counts(enc: Encoding, solution: Sequence[int]) -> dict[tuple[int, int], int]:
    """(class, bin) -> count in a solver's solution."""
    values = np.asarray(solution[: len(enc.pairs)], dtype=np.int64)
    return {
        (int(enc.pairs.cls[p]), int(enc.pairs.bin[p])): int(values[p])
        for p in np.flatnonzero(values)
    }


def solution_admitted(enc: Encoding, solution: Sequence[int]) -> set[int]:
    chosen = {g for g, var in enc.admitted.items() if solution[var]}
    running = {
        g
        for g in range(len(enc.problem.gangs))
        if enc.problem.gangs[g].running and enc.gang_span(g) is not None
    }
    return chosen | running
