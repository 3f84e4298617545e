"""A prepared problem -> a CP-SAT model over *counts*, never one boolean per pod and node.

The model places pod classes into *bins*. A bin is one node (the node-level model, which
is exact) or a class of identical nodes (the aggregated model, a relaxation that gives
an upper bound and decides admission fast). The same constraint families serve both:

- ``x[c@b]``: integer count of class-c pods placed in bin b; exists only where the
  class's predicates admit the bin and at least one pod fits there.
- ``admitted[g]``: gang g reaches minMember this cycle. admitted => placed >= need;
  not admitted => placed = 0. Members beyond minMember are elastic.
- capacity per bin and resource; queue capability (hard); per class, at most its pods.
- ``opened[b]``: empty nodes of the bin that receive pods (for packing terms).
- ``short[q]``: queue q's shortfall below its deserved share (fairness term).

Variables are built in ``build_variables`` only; each family of constraints is added
by one function; the objective comes from ``objective.weighted_terms``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from solver.config import ObjectiveWeights
from solver.objective import Quantities, fairness_target, weighted_terms
from solver.problem import IntArray, PodClass, Problem


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
    """Per node (rows of ``free``): how many pods of the class fit on their own."""
    asked = cls.demand > 0
    if not asked.any():
        return np.full(len(free), cls.count, dtype=np.int64)
    per_resource = np.floor_divide(np.maximum(free[:, asked], 0), cls.demand[asked])
    fit: IntArray = np.minimum(per_resource.min(axis=1), cls.count)
    return fit


def node_bins(problem: Problem, nodes: list[int] | None = None) -> list[Bin]:
    indices = range(len(problem.nodes)) if nodes is None else nodes
    return [
        Bin(
            name=problem.nodes[i].name,
            nodes=(i,),
            free=problem.free[i],
            node_allocatable=problem.allocatable[i],
            empty_nodes=int(problem.empty[i]),
            used_free=np.zeros_like(problem.free[i]) if problem.empty[i] else problem.free[i],
            gpu=bool(problem.gpu_node[i]),
        )
        for i in indices
    ]


def class_bins(problem: Problem) -> list[Bin]:
    bins = []
    for k, members in enumerate(problem.node_classes):
        rows = np.array(members)
        used = rows[~problem.empty[rows]]
        bins.append(
            Bin(
                name=f"class{k}:{problem.nodes[members[0]].name}+{len(members) - 1}",
                nodes=tuple(members),
                free=problem.free[rows].sum(axis=0),
                node_allocatable=problem.allocatable[members[0]],
                empty_nodes=int(problem.empty[rows].sum()),
                used_free=problem.free[used].sum(axis=0)
                if len(used)
                else np.zeros_like(problem.free[0]),
                gpu=bool(problem.gpu_node[members[0]]),
            )
        )
    return bins


def pair_capacity(
    problem: Problem, bins: list[Bin], gangs: set[int] | None = None
) -> dict[tuple[int, int], int]:
    """(class, bin) -> most pods of the class the bin can take; only feasible pairs."""
    pairs: dict[tuple[int, int], int] = {}
    for cls in problem.classes:
        if gangs is not None and cls.gang not in gangs:
            continue
        per_node = np.where(cls.feasible, max_fit(cls, problem.free), 0)
        for b, bin_ in enumerate(bins):
            cap = int(min(per_node[list(bin_.nodes)].sum(), cls.count))
            if cap > 0:
                pairs[(cls.index, b)] = cap
    return pairs


@dataclass
class Encoding:
    problem: Problem
    bins: list[Bin]
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    x: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    cap: dict[tuple[int, int], int] = field(default_factory=dict)  # x's upper bound
    admitted: dict[int, cp_model.IntVar] = field(default_factory=dict)
    opened: dict[int, cp_model.IntVar] = field(default_factory=dict)
    short: dict[int, cp_model.IntVar] = field(default_factory=dict)
    by_class: dict[int, list[tuple[int, cp_model.IntVar]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    by_bin: dict[int, list[tuple[int, cp_model.IntVar]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    gangs: list[int] = field(default_factory=list)

    def placed_class(self, c: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.sum([v for _, v in self.by_class.get(c, [])])

    def placed(self, g: int) -> cp_model.LinearExpr:
        classes = self.problem.gangs[g].classes
        return cp_model.LinearExpr.sum([v for c in classes for _, v in self.by_class.get(c, [])])

    def load(self, b: int, r: int) -> cp_model.LinearExpr:
        placed = self.by_bin.get(b, [])
        return cp_model.LinearExpr.weighted_sum(
            [v for _, v in placed], [int(self.problem.classes[c].demand[r]) for c, _ in placed]
        )

    def size(self) -> tuple[int, int]:
        proto = self.model.Proto()
        return len(proto.variables), len(proto.constraints)


def build_variables(
    problem: Problem, bins: list[Bin], pairs: Mapping[tuple[int, int], int]
) -> Encoding:
    enc = Encoding(problem=problem, bins=bins)
    model = enc.model
    for (c, b), cap in sorted(pairs.items()):
        var = model.new_int_var(0, cap, f"n[{problem.classes[c].pods[0]}@{bins[b].name}]")
        enc.x[(c, b)] = var
        enc.cap[(c, b)] = cap
        enc.by_class[c].append((b, var))
        enc.by_bin[b].append((c, var))
    enc.gangs = sorted({problem.classes[c].gang for c, _ in pairs})
    for g in enc.gangs:
        gang = problem.gangs[g]
        if not gang.running:
            enc.admitted[g] = model.new_bool_var(f"admitted[{gang.name}]")
    for b in sorted(enc.by_bin):
        if bins[b].empty_nodes:
            enc.opened[b] = model.new_int_var(0, bins[b].empty_nodes, f"opened[{bins[b].name}]")
    for q in range(len(problem.queues)):
        deserved, held = fairness_target(problem, q)
        if deserved > held:
            enc.short[q] = model.new_int_var(0, deserved - held, f"short[{problem.queues[q].name}]")
    return enc


def add_class_counts(enc: Encoding) -> None:
    for c, placed in enc.by_class.items():
        if len(placed) > 1:
            enc.model.add(sum(v for _, v in placed) <= enc.problem.classes[c].count)


def add_gang_all_or_nothing(enc: Encoding) -> None:
    for g, admitted in enc.admitted.items():
        gang = enc.problem.gangs[g]
        pending = sum(enc.problem.classes[c].count for c in gang.classes)
        placed = enc.placed(g)
        enc.model.add(placed >= gang.need).only_enforce_if(admitted)
        enc.model.add(placed == 0).only_enforce_if(admitted.negated())
        enc.model.add(placed <= pending)


def add_capacity(enc: Encoding) -> None:
    for b, placed in enc.by_bin.items():
        asked = np.zeros(len(enc.problem.resources), dtype=np.bool_)
        for c, _ in placed:
            asked |= enc.problem.classes[c].demand > 0
        for r in np.flatnonzero(asked):
            # A lone class's domain already encodes capacity exactly.
            if len(placed) > 1 or len(enc.bins[b].nodes) > 1:
                enc.model.add(enc.load(b, int(r)) <= int(enc.bins[b].free[r]))


def add_capability(enc: Encoding) -> None:
    problem = enc.problem
    by_queue: dict[int, list[int]] = defaultdict(list)
    for c in enc.by_class:
        by_queue[problem.gangs[problem.classes[c].gang].queue].append(c)
    for q, classes in by_queue.items():
        room = problem.queues[q].room()
        for r in np.flatnonzero(problem.queues[q].capability >= 0):
            added = sum(int(problem.classes[c].demand[r]) * enc.placed_class(c) for c in classes)
            enc.model.add(added <= int(room[r]))


def add_opened_nodes(enc: Encoding) -> None:
    """opened x one node's allocatable covers the load that used nodes cannot hold.

    Exact for one node; for a class of nodes, a relaxation (fragmentation aside).
    """
    for b, opened in enc.opened.items():
        bin_ = enc.bins[b]
        for r in np.flatnonzero(bin_.node_allocatable > 0):
            load = enc.load(b, int(r))
            enc.model.add(opened * int(bin_.node_allocatable[r]) >= load - int(bin_.used_free[r]))


def add_fairness_shortfall(enc: Encoding) -> None:
    problem = enc.problem
    terms: dict[int, list[cp_model.LinearExpr]] = defaultdict(list)
    for c in enc.by_class:
        cls = problem.classes[c]
        q = problem.gangs[cls.gang].queue
        terms[q].append(int(cls.share[problem.queues[q].dominant]) * enc.placed_class(c))
    for q, short in enc.short.items():
        deserved, held = fairness_target(problem, q)
        enc.model.add(short + cp_model.LinearExpr.sum(terms[q]) >= deserved - held)


def objective_quantities(enc: Encoding) -> Quantities[cp_model.LinearExprT]:
    return Quantities(
        placed=enc.placed_class,
        admitted=lambda g: enc.admitted.get(g, 0),
        shortfall=lambda q: enc.short.get(q, 0),
        nodes_opened=cp_model.LinearExpr.sum(list(enc.opened.values())),
        gpu_nodes_opened=cp_model.LinearExpr.sum(
            [v for b, v in enc.opened.items() if enc.bins[b].gpu]
        ),
    )


def encode(
    problem: Problem,
    bins: list[Bin],
    weights: ObjectiveWeights,
    pairs: Mapping[tuple[int, int], int] | None = None,
) -> Encoding:
    """``pairs`` from ``pair_capacity`` (default: every class); restricts the gangs modelled."""
    enc = build_variables(problem, bins, pair_capacity(problem, bins) if pairs is None else pairs)
    add_class_counts(enc)
    add_gang_all_or_nothing(enc)
    add_capacity(enc)
    add_capability(enc)
    add_opened_nodes(enc)
    add_fairness_shortfall(enc)
    terms = weighted_terms(problem, objective_quantities(enc), weights)
    enc.model.maximize(sum(terms.values()))
    return enc


def hint(enc: Encoding, placements: Mapping[str, int]) -> None:
    """A complete hint from a decision (pod -> node index): every variable gets a value."""
    problem = enc.problem
    bin_of_node = {n: b for b, bin_ in enumerate(enc.bins) for n in bin_.nodes}
    counts: dict[tuple[int, int], int] = defaultdict(int)
    opened_nodes: dict[int, set[int]] = defaultdict(set)
    of_pod = problem.class_of_pod()
    for pod, node in placements.items():
        b = bin_of_node.get(node)
        if b is None:
            continue
        counts[(of_pod[pod], b)] += 1
        if problem.empty[node]:
            opened_nodes[b].add(node)
    placed_gang: dict[int, int] = defaultdict(int)
    share: dict[int, int] = defaultdict(int)
    for key, var in enc.x.items():
        value = min(counts.get(key, 0), enc.cap[key])
        enc.model.add_hint(var, value)
        cls = problem.classes[key[0]]
        placed_gang[cls.gang] += value
        q = problem.gangs[cls.gang].queue
        share[q] += int(cls.share[problem.queues[q].dominant]) * value
    for g, var in enc.admitted.items():
        enc.model.add_hint(var, int(placed_gang[g] >= problem.gangs[g].need and placed_gang[g] > 0))
    for b, var in enc.opened.items():
        enc.model.add_hint(var, len(opened_nodes[b]))
    for q, var in enc.short.items():
        deserved, held = fairness_target(problem, q)
        enc.model.add_hint(var, max(0, deserved - held - share[q]))


def node_counts(enc: Encoding, solver: cp_model.CpSolver) -> dict[tuple[int, int], int]:
    """(class, bin) -> count in the solver's solution."""
    counts = {}
    for key, var in enc.x.items():
        value = int(solver.value(var))
        if value:
            counts[key] = value
    return counts


def admitted_in(enc: Encoding, solver: cp_model.CpSolver) -> set[int]:
    chosen = {g for g, v in enc.admitted.items() if solver.value(v)}
    running = {g for g in enc.gangs if enc.problem.gangs[g].running}
    return chosen | running
