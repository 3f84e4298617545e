"""A prepared problem -> a CP-SAT model over *counts*, never one boolean per pod and node.

The model places gang shapes (``solver.shapes``: identical gangs merged, exactly) into
*bins* (``solver.bins``). A bin is one node (the node-level model, which is exact) or a
class of nodes the pending pods cannot tell apart (the aggregated model, a relaxation
that gives an upper bound and decides admission fast). The same constraint families
serve both:

- ``n[pod@bin]``: how many pods of a shape class go to the bin; exists only where the
  class's predicates admit the bin and at least one pod fits there.
- ``admitted[shape]``: how many of the shape's gangs reach minMember this cycle (a
  boolean for a lone gang), at most the room their pods have divided by need. Pods
  placed >= need x admitted; per class, pods placed <= pods per gang x admitted — so no
  pod is placed for a gang that is not admitted, and members beyond minMember are
  elastic.
- capacity per bin and resource, and for a class of nodes the same rounded to large pod
  sizes (big pods need room on one node); queue capability (hard).
- ``opened[bin]``: empty nodes of the bin that receive pods (packing terms).
- ``short[q]``: queue q's shortfall below its deserved share (fairness term).
- ``over[q]``: queue q's excess above its deserved share (overuse term, when priced).

Models reach tens of thousands of variables, so constraints are written straight into
the model's proto from flat arrays: building through expression objects cost more than
solving. ``build_variables`` is the one place variables are made; each family of
constraints has one ``add_*`` function; prices come from ``objective.coefficients``.
The same rows are recorded for the LP relaxation (``relaxation.LinearRows``), and
``solver.restricted`` builds the smaller models searched around an LP optimum. Running gangs'
pods, as variables that free room (``Encoding.freed``), come from
``solver.encode_victims``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import IntArray
from solver.bins import Bin, Pairs
from solver.model import APART_PREFIX, PODS
from solver.objective import Coefficients
from solver.problem import Problem
from solver.relaxation import LinearRows, RowEntries
from solver.room import usable_free
from solver.shapes import Shapes, task_positions

INF = np.iinfo(np.int64).max
# Pod sizes above 1/ROUNDING of a node's allocatable get rounded capacity rows
# (``add_rounded_capacity``). At 1/64 rather than 1/16, real-shaped 200-node class models'
# LP bounds fell 0.2-0.4% and the decisions' median gap to them, over 20 seeds, from
# 3.1-3.2% to 2.6%. 1,000-node models kept 1/16 while their LP took 0.08-0.13 s longer at
# 1/64; measured again (seeds 0-9), 0.06 s longer in the LP and 0.01-0.03 s in the cycle,
# whose disaggregation now yields the time: the bound lower on every seed, mean gap 2.6 ->
# 2.2%, worst 4.2 -> 3.0%. Every model now uses 1/64.
ROUNDING = 64
# One node's rows rounded too, in models of at most this many pairs (the node-level models
# searched whole, and small class models' single-node classes): exact for integers, they
# still cut the LP relaxation, which was looser than the node classes' (real-shaped 40
# nodes, seed 22: 5.34e9 against 5.24e9; 5.23e9 with them). Seeds 0-47 at 40 nodes,
# deterministic: mean gap 2.13 -> 2.04%, the bound 0.09% lower, decisions the same on
# average (timed runs: benchmarks/solver_history.md). The LP over the admitted gangs'
# 9,000-12,000 node pairs (200 nodes) took longer for no gain.
ROUNDED_NODE_PAIRS = 5_000


@dataclass
class Encoding:
    """The model and where its variables are: count variables are indices 0..len(pairs)-1."""

    problem: Problem
    shapes: Shapes
    bins: Sequence[Bin]
    pairs: Pairs
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    admitted: dict[int, int] = field(default_factory=dict)  # shape -> variable index
    opened: dict[int, int] = field(default_factory=dict)  # bin -> variable index
    short: dict[int, int] = field(default_factory=dict)  # queue -> variable index
    over: dict[int, int] = field(default_factory=dict)  # queue -> variable index
    class_span: dict[int, tuple[int, int]] = field(default_factory=dict)  # [start, end)
    rows: LinearRows = field(default_factory=LinearRows)  # the same model, for the LP
    # Only the rows, no CP-SAT model: for a model only its LP is solved of (a large class
    # model, whose searches are over ``restricted`` ones). Building the CP-SAT model
    # too took 0.1-0.15 s of a 1,000-node cycle.
    lp_only: bool = False
    # Rows [0, gang_rows) are the gangs' (``add_gang_all_or_nothing``), each over whole
    # shape classes; every other row is over whole groups of pairs alike on one bin
    # (``grouped_lp``). 0 until the rows are added.
    gang_rows: int = 0
    rounding: int = ROUNDING  # see ROUNDING; kept by ``restricted`` models
    # Per class of nodes, the room its nodes can give (``bin_room``); a restricted model
    # keeps its model's: still valid for fewer pod classes, and not computed again.
    room: dict[int, IntArray] = field(default_factory=dict)
    # Variables that free room when they grow (pods of running gangs evicted, see
    # ``solver.encode_victims``): per bin and per queue, (variable, demand of one unit);
    # and prices of further variables, for the objective.
    freed: dict[int, list[tuple[int, IntArray]]] = field(default_factory=dict)
    queue_freed: dict[int, list[tuple[int, IntArray]]] = field(default_factory=dict)
    costs: list[tuple[int, int]] = field(default_factory=list)

    def shape_spans(self, s: int) -> list[tuple[int, int]]:
        return [self.class_span[c] for c in self.shapes.shapes[s].classes if c in self.class_span]

    def shape_span(self, s: int) -> list[int]:
        return self.classes_span(self.shapes.shapes[s].classes)

    def classes_span(self, classes: Sequence[int]) -> list[int]:
        """The count variables of these shape classes (a shape's, or one of its tasks')."""
        return [
            v for c in classes if c in self.class_span for v in range(*self.class_span[c])
        ]

    def size(self) -> tuple[int, int]:
        """Variables and constraints (the CP-SAT model's and the rows' are the same)."""
        return len(self.rows.low), len(self.rows.row_low)


def _new_var(enc: Encoding, low: int, high: int, name: str) -> int:
    if not enc.lp_only:
        var = enc.model.proto.variables.add()
        var.domain.extend([low, high])
        var.name = name
    enc.rows.add_var(low, high)
    return len(enc.rows.low) - 1


def _new_count_vars(enc: Encoding) -> None:
    """``n[pod@bin]`` for every pair, as variables 0..len(pairs)-1, in one loop that reads
    plain lists: a 1,000-node class model has 13,000 of them, and building them one call
    each took 0.18 s of a one-second cycle."""
    problem, pairs = enc.problem, enc.pairs
    classes = pairs.cls.tolist()
    caps = pairs.cap.tolist()
    bin_names = [b.name for b in enc.bins]
    pod_of = {
        c: problem.classes[enc.shapes.classes[c].members[0]].pods[0] for c in set(classes)
    }
    if not enc.lp_only:
        variables = enc.model.proto.variables
        for c, b, cap in zip(classes, pairs.bin.tolist(), caps, strict=True):
            var = variables.add()
            var.domain.extend((0, cap))
            var.name = f"n[{pod_of[c]}@{bin_names[b]}]"
    enc.rows.add_vars([0] * len(caps), caps)


def _linear(
    enc: Encoding,
    variables: RowEntries,
    coeffs: RowEntries,
    low: int,
    high: int,
) -> None:
    """A row, into the CP-SAT model (unless ``lp_only``) and the LP's rows. Rows over a
    bin's or a queue's pairs come as arrays, which the LP's rows keep as they are."""
    if not enc.lp_only:
        ct = enc.model.proto.constraints.add()
        ct.linear.vars.extend(_listed(variables))
        ct.linear.coeffs.extend(_listed(coeffs))
        ct.linear.domain.extend([max(low, -INF), min(high, INF)])
    enc.rows.add_row(variables, coeffs, low, high)


def _listed(entries: RowEntries) -> Sequence[int]:
    listed: Sequence[int] = entries.tolist() if isinstance(entries, np.ndarray) else entries
    return listed


def _with(first: int, rest: IntArray) -> IntArray:
    """``first`` and then ``rest``, as one array."""
    return np.concatenate((np.array([first], dtype=np.int64), rest.astype(np.int64)))


def _runs(keys: IntArray) -> list[tuple[int, int]]:
    """[start, end) of each run of equal consecutive values."""
    if not len(keys):
        return []
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]).tolist()
    return list(zip(starts, [*starts[1:], len(keys)], strict=True))


def build_variables(
    problem: Problem,
    shapes: Shapes,
    bins: Sequence[Bin],
    pairs: Pairs,
    lp_only: bool = False,
    rounding: int = ROUNDING,
) -> Encoding:
    enc = Encoding(
        problem=problem, shapes=shapes, bins=bins, pairs=pairs, lp_only=lp_only, rounding=rounding
    )
    _new_count_vars(enc)
    room_before = np.concatenate([[0], np.cumsum(pairs.cap)]).tolist()  # room of pairs [0, i)
    for s, e in _runs(pairs.cls):
        enc.class_span[int(pairs.cls[s])] = (s, e)
    for s in sorted({shapes.classes[c].shape for c in enc.class_span}):
        shape = shapes.shapes[s]
        if not shape.running:
            name = problem.gangs[shape.gangs[0]].name
            label = name if shape.size == 1 else f"{name}+{shape.size - 1} alike"
            # No more gangs than the room there is for need pods each: without this the
            # LP admits part of a gang that fits nowhere, at a part of its (large) price.
            room = sum(room_before[b] - room_before[a] for a, b in enc.shape_spans(s))
            most = min(shape.size, room // shape.need) if shape.need else shape.size
            enc.admitted[s] = _new_var(enc, 0, most, f"admitted[{label}]")
    for b in sorted({int(b) for b in pairs.bin}):
        if bins[b].empty_nodes:
            enc.opened[b] = _new_var(enc, 0, bins[b].empty_nodes, f"opened[{bins[b].name}]")
    return enc


def add_gang_all_or_nothing(enc: Encoding) -> None:
    """need x admitted <= placed; per class, placed <= pods per gang x admitted.

    In a model only its LP is solved of (``Encoding.lp_only``), where a gang needs every
    pod (minMember = its pods, the usual case) and each of its classes has pairs, each
    class's row is an equality and the need row, implied, is left out: the same LP in
    fewer rows (real-shaped 5,000 nodes x 7,500 gangs: 8,100 instead of 11,200; the LP
    1.65 -> 1.17 s, 2,000 nodes 0.61 -> 0.44 s, the same bounds). Not in CP-SAT models:
    their searches did worse with it (real-shaped 40 nodes, seeds 0-23, two solves each:
    mean gap 0.97 -> 1.21%)."""
    shapes = enc.shapes
    whole = (
        {
            s
            for s in enc.admitted
            if all(c in enc.class_span for c in shapes.shapes[s].classes)
            and sum(shapes.classes[c].per_gang for c in shapes.shapes[s].classes)
            == shapes.shapes[s].need
        }
        if enc.lp_only
        else set()
    )
    for c, (start, end) in enc.class_span.items():
        sc = shapes.classes[c]
        members = list(range(start, end))
        admitted = enc.admitted.get(sc.shape)
        if admitted is None:  # running gangs: extras only, up to the pods there are
            if len(members) > 1:
                _linear(enc, members, [1] * len(members), 0, sc.count)
            continue
        low = 0 if sc.shape in whole else -INF
        _linear(enc, [*members, admitted], [1] * len(members) + [-sc.per_gang], low, 0)
    for s, admitted in enc.admitted.items():
        members = enc.shape_span(s)
        need = shapes.shapes[s].need
        if s not in whole:
            _linear(enc, [*members, admitted], [1] * len(members) + [-need], 0, INF)
        for task_classes, task_need in task_positions(enc.problem, enc.shapes, s):
            of_task = enc.classes_span(task_classes)
            # each admitted gang places its task's minimum (Volcano's minTaskMember)
            _linear(enc, [*of_task, admitted], [1] * len(of_task) + [-task_need], 0, INF)


def _by_bin(enc: Encoding) -> dict[int, IntArray]:
    order = np.argsort(enc.pairs.bin, kind="stable")
    bins = enc.pairs.bin[order]
    return {int(bins[s]): order[s:e] for s, e in _runs(bins)}


def demand_matrix(enc: Encoding) -> IntArray:
    return np.array([sc.demand for sc in enc.shapes.classes], dtype=np.int64).reshape(
        len(enc.shapes.classes), len(enc.problem.resources)
    )


def bin_room(enc: Encoding, by_bin: Mapping[int, IntArray]) -> dict[int, IntArray]:
    """Per class of nodes (bins of one node need none), the room each of its nodes can give
    the pod classes paired with it (``room.usable_free``): what its capacity rows count."""
    # Thousands of pod classes share a few hundred demands: each bin's are found among
    # those (real-shaped 5,000 nodes: 51 -> 28 ms).
    specs, spec_of_class = np.unique(demand_matrix(enc), axis=0, return_inverse=True)
    spec_of_class = spec_of_class.reshape(-1)
    free = enc.problem.free
    apart = [r for r, name in enumerate(enc.problem.resources) if name.startswith(APART_PREFIX)]
    return {
        b: usable_free(
            free[list(enc.bins[b].nodes)],
            specs[np.unique(spec_of_class[enc.pairs.cls[members]])],
            apart,
        )
        for b, members in by_bin.items()
        if len(enc.bins[b].nodes) > 1
    }


def _capacity(enc: Encoding, room: Mapping[int, IntArray], b: int) -> IntArray:
    """A bin's capacity per resource: its free room, at most what its nodes can give."""
    free = enc.bins[b].free
    return np.minimum(free, room[b].sum(axis=0)) if b in room else free


def _at_most(
    enc: Encoding,
    members: IntArray,
    coeffs: IntArray,
    freed: Sequence[tuple[int, IntArray]],
    r: int,
    high: int,
) -> None:
    """Resource ``r``: the pairs' demand, less what the ``freed`` variables free of it,
    at most ``high``."""
    gains = [(var, -int(d[r])) for var, d in freed if d[r]]
    variables = np.concatenate((members, np.array([v for v, _ in gains], dtype=np.int64)))
    scaled = np.concatenate((coeffs, np.array([c for _, c in gains], dtype=np.int64)))
    _linear(enc, variables, scaled, -INF, high)


def add_capacity(
    enc: Encoding, by_bin: Mapping[int, IntArray], room: Mapping[int, IntArray]
) -> None:
    demand = demand_matrix(enc)
    for b, members in by_bin.items():
        freed = enc.freed.get(b, [])
        # A lone class on one node: its variable's domain is already the exact capacity.
        if len(members) == 1 and len(enc.bins[b].nodes) == 1 and not freed:
            continue
        coeffs = demand[enc.pairs.cls[members]]
        capacity = _capacity(enc, room, b)
        for r in np.flatnonzero(coeffs.any(axis=0)):
            _at_most(enc, members, coeffs[:, r], freed, int(r), int(capacity[r]))


def add_rounded_capacity(
    enc: Encoding, by_bin: Mapping[int, IntArray], room: Mapping[int, IntArray]
) -> None:
    """Per bin, per resource and large pod size u: sum of floor(demand / u) over the pods
    placed <= sum over the nodes of floor(room / u).

    Valid for any placement, since on one node the pods' floor(demand / u) add up to at
    most floor(room / u). Summed capacity alone lets a class take more big pods than any
    node has room for (ten 8-GPU pods on ten nodes with 6 GPUs free each); this is
    what the disaggregation then failed to place. Sizes below 1/``enc.rounding`` of a
    node's allocatable fragment little and are left to the plain capacity constraint.
    """
    demand = demand_matrix(enc)
    for b, members in by_bin.items():
        bin_ = enc.bins[b]
        if enc.freed.get(b) or (len(bin_.nodes) < 2 and len(enc.pairs) > ROUNDED_NODE_PAIRS):
            continue  # evictions free room these rows do not count; or see ROUNDED_NODE_PAIRS
        coeffs = demand[enc.pairs.cls[members]]
        rows = room[b] if b in room else enc.problem.free[list(bin_.nodes)]
        capacity = _capacity(enc, room, b)
        for r in np.flatnonzero(coeffs.any(axis=0)):
            big = int(bin_.node_allocatable[r]) // enc.rounding
            for u in np.unique(coeffs[:, r]):
                if u <= max(big, 1):
                    continue
                rounded = coeffs[:, r] // u
                rhs = int((rows[:, r] // u).sum())
                if rhs * u == int(capacity[r]) and (rounded * u == coeffs[:, r]).all():
                    continue  # nothing rounds: the capacity constraint says the same
                keep = rounded > 0
                _linear(enc, members[keep], rounded[keep], -INF, rhs)


def add_capability(enc: Encoding) -> None:
    demand = demand_matrix(enc)
    pair_queue = queue_of_pair(enc)
    for q in enc.problem.queues:
        capped = np.flatnonzero(q.capability >= 0)
        members = np.flatnonzero(pair_queue == q.index)
        if not len(capped) or not len(members):
            continue
        coeffs = demand[enc.pairs.cls[members]]
        room, over = q.room(), q.over()
        freed = enc.queue_freed.get(q.index, [])
        for r in capped:
            _at_most(enc, members, coeffs[:, r], [] if over[r] else freed, int(r), int(room[r]))


def add_opened_nodes(
    enc: Encoding, by_bin: Mapping[int, IntArray], room: Mapping[int, IntArray]
) -> None:
    """opened x one node's room covers the load the used nodes cannot hold.

    Exact for one node (a pod always takes a pod slot, so that resource alone decides);
    for a class of nodes, a relaxation that ignores fragmentation (the room counted is
    what ``room.usable_free`` leaves: the used nodes' summed, the empty nodes' largest).
    """
    demand = demand_matrix(enc)
    slot = enc.problem.r(PODS)
    for b, opened in enc.opened.items():
        bin_ = enc.bins[b]
        members = by_bin[b]
        coeffs = demand[enc.pairs.cls[members]]
        resources = [slot] if len(bin_.nodes) == 1 else np.flatnonzero(coeffs.any(axis=0))
        per_node, used = bin_.node_allocatable, bin_.used_free
        if b in room:
            empty = enc.problem.empty[list(bin_.nodes)]
            per_node = np.minimum(per_node, room[b][empty].max(axis=0))
            used = np.minimum(used, room[b][~empty].sum(axis=0))
        for r in resources:
            load = _with(int(per_node[r]), -coeffs[:, r])
            _linear(enc, _with(opened, members), load, -int(used[r]), INF)


def queue_of_pair(enc: Encoding) -> IntArray:
    shape_queue = np.array([s.queue for s in enc.shapes.shapes], dtype=np.int64)
    class_shape = np.array([sc.shape for sc in enc.shapes.classes], dtype=np.int64)
    queues: IntArray = shape_queue[class_shape[enc.pairs.cls]] if len(enc.pairs) else enc.pairs.cls
    return queues


def add_fairness_shortfall(enc: Encoding, coef: Coefficients) -> None:
    pair_queue = queue_of_pair(enc)
    share = np.array([sc.pod_share for sc in enc.shapes.classes], dtype=np.int64)
    for q in enc.problem.queues:
        target = int(coef.deserved[q.index] - coef.held[q.index])
        if target <= 0:
            continue
        members = np.flatnonzero(pair_queue == q.index)
        short = _new_var(enc, 0, target, f"short[{q.name}]")
        enc.short[q.index] = short
        shares = share[enc.pairs.cls[members]] if len(members) else np.zeros(0, np.int64)
        _linear(enc, _with(short, members), _with(1, shares), target, INF)


def add_overuse_excess(enc: Encoding, coef: Coefficients) -> None:
    """over[q] >= held + gained - deserved: only priced when the overuse weight is set, so
    the default (work-conserving) model carries no extra variables."""
    if not coef.excess:
        return
    pair_queue = queue_of_pair(enc)
    share = np.array([sc.pod_share for sc in enc.shapes.classes], dtype=np.int64)
    for q in enc.problem.queues:
        base = int(coef.held[q.index] - coef.deserved[q.index])
        members = np.flatnonzero(pair_queue == q.index)
        if base <= 0 and not len(members):
            continue
        shares = share[enc.pairs.cls[members]] if len(members) else np.zeros(0, np.int64)
        high = max(0, base) + int((shares * enc.pairs.cap[members]).sum())
        over = _new_var(enc, max(0, base), high, f"over[{q.name}]")
        enc.over[q.index] = over
        _linear(enc, _with(over, members), _with(1, -shares), base, INF)


def set_objective(enc: Encoding, coef: Coefficients) -> None:
    """Maximise: CP-SAT minimises, so coefficients are negated with scaling factor -1."""
    price = np.array([sc.pod_price for sc in enc.shapes.classes], dtype=np.int64)
    variables = list(range(len(enc.pairs)))
    prices = price[enc.pairs.cls].tolist() if len(enc.pairs) else []
    for s, var in enc.admitted.items():
        variables.append(var)
        prices.append(enc.shapes.shapes[s].admit_price)
    for var in enc.short.values():
        variables.append(var)
        prices.append(coef.shortfall)
    for var in enc.over.values():
        variables.append(var)
        prices.append(coef.excess)
    for b, var in enc.opened.items():
        variables.append(var)
        prices.append(coef.node_opened + (coef.gpu_node_opened if enc.bins[b].gpu else 0))
    for var, cost in enc.costs:
        variables.append(var)
        prices.append(cost)
    enc.rows.maximise(variables, prices)
    if enc.lp_only:
        return
    objective = enc.model.proto.objective
    objective.vars.extend(variables)
    objective.coeffs.extend(-p for p in prices)
    objective.scaling_factor = -1


def encode(
    problem: Problem,
    shapes: Shapes,
    bins: Sequence[Bin],
    coef: Coefficients,
    pairs: Pairs,
    lp_only: bool = False,
    rounding: int = ROUNDING,
    room: dict[int, IntArray] | None = None,
) -> Encoding:
    enc = build_variables(problem, shapes, bins, pairs, lp_only, rounding)
    add_rows_and_objective(enc, coef, room)
    return enc


def add_rows_and_objective(
    enc: Encoding, coef: Coefficients, room: dict[int, IntArray] | None = None
) -> None:
    """Every family of constraints, then the objective, over the variables built."""
    by_bin = _by_bin(enc)
    enc.room = room = bin_room(enc, by_bin) if room is None else room
    add_gang_all_or_nothing(enc)
    enc.gang_rows = len(enc.rows.row_low)
    add_capacity(enc, by_bin, room)
    add_rounded_capacity(enc, by_bin, room)
    add_capability(enc)
    add_opened_nodes(enc, by_bin, room)
    add_fairness_shortfall(enc, coef)
    add_overuse_excess(enc, coef)
    set_objective(enc, coef)
