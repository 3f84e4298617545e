"""Running gangs as variables of the placement model: placement, preemption and
reclaim decided by one CP-SAT model, in one objective, under one bound.

Who may take from whom is settled at the start of the cycle (``victim_set``), as
kube-batch's actions settle it: a pending gang may take from running gangs of lower
priority in its queue (preempt), and, when its queue is below its deserved share, from
queues above theirs (reclaim). A shape with a gang whose pods may not preempt
(``preemptionPolicy: Never``) takes from none. Victims are ``solver.victims``' running
PodGroups, grouped per (gang, node, spec).

On top of ``solver.encode``'s families, over ``joint_bins`` (each node with a victim a bin
of its own; the other nodes in their classes, as the aggregated placement model has them):

- ``removed[group]``: a victim's pods evicted from one node; ``evicted[victim]``: it loses
  them all, else at most those above minMember (never left short); ``touches[victim@node]``
  marks the nodes where it loses pods;
- capacity: the pods removed free their room on the node and in their queue's
  capability (``Encoding.freed``, ``Encoding.queue_freed``, read by ``encode``'s rows);
- **no eviction without a placement**: a node where a victim loses pods gets a pod of a
  shape allowed to take from it (or the victim goes whole, for one such pod on one of its
  nodes); pods use only the room of victims they may take from, with Hall's rows per
  node (``solver.freed_room``), and pods that may never preempt are not placed there;
- **reclaim floor**: a queue above its deserved share ends at or above it;
- **reclaim ceiling**: a queue reclaims only while below its own (``reclaim_limit``):
  its pods placed where a victim of another queue they may take from loses pods mark it
  as reclaiming (stricter than whether they use that room, never looser);
- objective: minus each removed pod's cost (the value it stops earning, the
  ``disruption`` weight, ``disruption_per_hour`` per hour it ran) and an evicted gang's
  priority term, priced on the same ranks as the pending gangs'.

The rows go to the LP relaxation too, so the model's bound is one on placement and
preemption together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from solver.arrays import IntArray
from solver.bins import Bin, Pairs, bin_index, class_bin, node_bins, pair_capacity
from solver.config import ObjectiveWeights
from solver.encode import (
    INF,
    Encoding,
    _linear,
    _new_var,
    add_rows_and_objective,
    build_variables,
    queue_of_pair,
)
from solver.freed_room import hall_rows
from solver.objective import Coefficients
from solver.preemption_rules import never_preempting, reclaim_limit, reclaimable
from solver.problem import Problem
from solver.shapes import Shapes
from solver.victims import (
    MAX_VICTIM_GROUPS,
    Victim,
    VictimGroup,
    cheapest_victims,
    running_victims,
    takes_from,
    used_groups,
)


@dataclass
class VictimSet:
    victims: list[Victim]
    groups: list[VictimGroup]  # only those of victims some shape may take from
    eligible: dict[int, frozenset[int]]  # shape -> victims it may take from
    never: frozenset[int]  # shapes with a gang whose pods may never preempt
    room: IntArray  # (nodes, resources): what the groups' pods hold


@dataclass
class VictimVars:
    removed: dict[int, int] = field(default_factory=dict)  # group -> variable
    touches: dict[tuple[int, int], int] = field(default_factory=dict)  # (victim, node)
    evicted: dict[int, int] = field(default_factory=dict)  # victim -> variable


def victim_set(
    problem: Problem, shapes: Shapes, coef: Coefficients, w: ObjectiveWeights
) -> VictimSet | None:
    """The victims some pending shape may take from; None when there are none."""
    never = never_preempting(problem)
    victims, groups = running_victims(problem, w)
    if not victims:
        return None
    below = coef.deserved - coef.held > 0
    above = (coef.held - coef.deserved > 0) & reclaimable(problem)
    eligible: dict[int, frozenset[int]] = {}
    refuses: set[int] = set()
    takes_for = takes_from(victims, below, above)
    for shape in shapes.shapes:
        gangs = [problem.gangs[g] for g in shape.gangs]
        if any(g.name in never for g in gangs):
            refuses.add(shape.index)
        if shape.running or shape.index in refuses:
            continue
        takes = takes_for(shape.queue, gangs[0].priority)
        if takes:
            eligible[shape.index] = takes
    used = set().union(*eligible.values()) if eligible else set()
    if not used:
        return None
    if sum(len(victims[v].groups) for v in used) > MAX_VICTIM_GROUPS:
        used = cheapest_victims(victims, groups, used)
        eligible = {s: vs & used for s, vs in eligible.items() if vs & used}
    kept = used_groups(victims, groups, used)
    room = np.zeros_like(problem.free)
    for grp in kept:
        room[grp.node] += grp.demand * len(grp.pods)
    for victim in victims:
        # On the pending gangs' scale (``Problem.ranks``): what a preemptor's priority
        # earns against what the victim's loses.
        rank = problem.ranks.get(victim.priority, 0)
        victim.evict_cost = w.priority * rank * victim.min_member * victim.value
    return VictimSet(
        victims=victims, groups=kept, eligible=eligible, never=frozenset(refuses), room=room
    )


def narrowed(
    problem: Problem,
    vs: VictimSet,
    bins: Sequence[Bin],
    pairs: Pairs,
    first: Collection[int],
    limit: int,
    then: Collection[int] = (),
) -> VictimSet | None:
    """The victims a joint model of at most ``limit`` pairs holds, where all of them make
    it larger (each victim's node is a bin of its own, ``joint_bins``): those in ``first``
    (the decision it starts from evicts them), then those in ``then`` (other starts evict
    them), then the cheapest (``cheapest_victims``'s order), while their nodes' pairs fit
    in what the other nodes' bins leave. The others stay where they run, their nodes back
    in their classes. None when not even ``first`` fits, or when every node is a class of
    its own: a node returned keeps its pairs there, so fewer victims make no smaller model.

    Pair counts are those of the model over every victim: a node returned to a class with
    a bin already adds none there, and saves its own (real-shaped 200 nodes: the
    narrowed model had 4,048 pairs for an estimate of 4,000); one whose class holds no
    other node keeps its pairs in a bin of its own, and costs nothing to hold."""
    if len(problem.node_classes) == len(problem.nodes):
        return None
    single = victim_nodes(vs)
    per_node = np.bincount(pairs.bin, minlength=len(bins))
    bin_of_node = bin_index(problem, bins)
    victim_node = set(single)
    shared = {
        n
        for members in problem.node_classes
        if any(m not in victim_node for m in members)
        for n in members
    }
    cost = {n: int(per_node[bin_of_node[n]]) if n in shared else 0 for n in single}
    room = limit - (len(pairs) - sum(cost.values()))
    used = {grp.victim for grp in vs.groups}

    def order(v: int) -> tuple[bool, bool, int, int]:
        victim = vs.victims[v]
        evicting = sum(vs.groups[g].cost * len(vs.groups[g].pods) for g in victim.groups)
        return (v not in first, v not in then, victim.priority, evicting)

    kept: set[int] = set()
    taken: set[int] = set()
    for v in sorted(used, key=order):
        nodes = {vs.groups[g].node for g in vs.victims[v].groups} - taken
        more = sum(cost[n] for n in nodes)
        if more > room:
            if v in first:
                return None
            continue
        room -= more
        taken |= nodes
        kept.add(v)
    if not kept:
        return None
    # Copies: ``used_groups`` renumbers each victim's groups, and ``vs`` stays whole.
    victims = [replace(v, groups=list(v.groups)) for v in vs.victims]
    groups = used_groups(victims, vs.groups, kept)
    eligible = {s: vs_ & kept for s, vs_ in vs.eligible.items() if vs_ & kept}
    room_held = np.zeros_like(problem.free)
    for grp in groups:
        room_held[grp.node] += grp.demand * len(grp.pods)
    return VictimSet(
        victims=victims, groups=groups, eligible=eligible, never=vs.never, room=room_held
    )


def victim_nodes(vs: VictimSet) -> list[int]:
    return sorted({grp.node for grp in vs.groups})


def joint_bins(problem: Problem, vs: VictimSet) -> list[Bin]:
    """One bin per node with a victim (its room is decided pod by pod there), and the
    classes of the other nodes the pending pods cannot tell apart (``class_bins``, less
    those nodes): exact where evictions happen, aggregated elsewhere."""
    if len(problem.node_classes) == len(problem.nodes):
        return node_bins(problem)
    single = set(victim_nodes(vs))
    by_node = node_bins(problem)
    bins = [by_node[n] for n in sorted(single)]
    for members in problem.node_classes:
        rest = [n for n in members if n not in single]
        if len(rest) == 1:
            bins.append(by_node[rest[0]])
        elif rest:
            bins.append(class_bin(problem, rest, len(bins)))
    return bins


def joint_pairs(problem: Problem, shapes: Shapes, bins: Sequence[Bin], vs: VictimSet) -> Pairs:
    """Pairs in the room the nodes have free; and for shapes that may take from some
    victim, in that room plus what the victims hold. Others may use only free room where
    a victim loses pods (``_add_node_rules``), so more would be pairs for nothing."""
    free = pair_capacity(problem, shapes, bins)
    takers = set(vs.eligible)
    freed = pair_capacity(problem, shapes, bins, only=takers, free=problem.free + vs.room)
    cls = np.concatenate([free.cls, freed.cls])
    bin_ = np.concatenate([free.bin, freed.bin])
    cap = np.concatenate([free.cap, freed.cap])
    order = np.lexsort((-cap, bin_, cls))  # by class, then bin; the larger cap first
    cls, bin_, cap = cls[order], bin_[order], cap[order]
    first = np.r_[True, (cls[1:] != cls[:-1]) | (bin_[1:] != bin_[:-1])] if len(cls) else cls
    return Pairs(cls[first], bin_[first], cap[first])


def encode_joint(
    problem: Problem,
    shapes: Shapes,
    coef: Coefficients,
    vs: VictimSet,
    bins: Sequence[Bin],
    pairs: Pairs,
    room: dict[int, IntArray] | None = None,
) -> tuple[Encoding, VictimVars]:
    """The model over ``bins`` (``joint_bins``) and ``pairs`` (``joint_pairs``, or a
    subset: a restricted model, searched around a guide), with the victims' variables
    and rules. ``room``: as ``encode`` takes it."""
    enc = build_variables(problem, shapes, bins, pairs)
    out = _add_victim_variables(enc, vs)
    add_rows_and_objective(enc, coef, room)
    _add_victim_rules(enc, vs, out)
    shape_of_pair, on_node = _pairs_on_nodes(enc)
    _add_node_rules(enc, vs, out, shape_of_pair, on_node)
    _add_reclaim_floor(enc, vs, out, coef)
    _add_reclaim_ceiling(enc, vs, out, coef, shape_of_pair, on_node)
    return enc, out


def _pairs_on_nodes(enc: Encoding) -> tuple[IntArray, dict[int, list[int]]]:
    """Each pair's shape, and the pairs of each node that is a bin of its own (every
    victim's node is, ``joint_bins``)."""
    classes = enc.shapes.classes
    shape_of_pair = np.array([sc.shape for sc in classes], dtype=np.int64)[enc.pairs.cls]
    on_node: dict[int, list[int]] = defaultdict(list)
    for p, b in enumerate(enc.pairs.bin.tolist()):
        if len(enc.bins[b].nodes) == 1:
            on_node[enc.bins[b].nodes[0]].append(p)
    return shape_of_pair, on_node


def _add_victim_variables(enc: Encoding, vs: VictimSet) -> VictimVars:
    """Built before the rows: capacity and capability rows read what they free."""
    out = VictimVars()
    bin_of_node = bin_index(enc.problem, enc.bins)
    for g, grp in enumerate(vs.groups):
        victim = vs.victims[grp.victim]
        node = enc.problem.nodes[grp.node].name
        var = _new_var(enc, 0, len(grp.pods), f"removed[{victim.name}@{node}]")
        out.removed[g] = var
        enc.freed.setdefault(int(bin_of_node[grp.node]), []).append((var, grp.demand))
        enc.queue_freed.setdefault(victim.queue, []).append((var, grp.demand))
        enc.costs.append((var, -grp.cost))
        key = (grp.victim, grp.node)
        if key not in out.touches:
            out.touches[key] = _new_var(enc, 0, 1, f"touches[{victim.name}@{node}]")
        if grp.victim not in out.evicted:
            out.evicted[grp.victim] = var = _new_var(enc, 0, 1, f"evicted[{victim.name}]")
            if victim.evict_cost:
                enc.costs.append((var, -victim.evict_cost))
    return out


def _add_victim_rules(enc: Encoding, vs: VictimSet, out: VictimVars) -> None:
    """Kept, shrunk to no fewer than minMember, or evicted whole; pods removed only where
    the victim is marked as touched."""
    by_victim: dict[int, list[int]] = defaultdict(list)
    for g, var in out.removed.items():
        grp = vs.groups[g]
        by_victim[grp.victim].append(var)
        touches = out.touches[(grp.victim, grp.node)]
        _linear(enc, [var, touches], [1, -len(grp.pods)], -INF, 0)
    # A running gang's pending pods are its shape's pairs: evicted whole, it is given
    # none of them (they would run below minMember).
    growth: dict[str, list[int]] = defaultdict(list)
    for shape in enc.shapes.shapes:
        if shape.running:
            for g in shape.gangs:
                growth[enc.problem.gangs[g].name] += enc.shape_span(shape.index)
    for v, removed in by_victim.items():
        victim = vs.victims[v]
        evicted = out.evicted[v]
        ones = [1] * len(removed)
        _linear(enc, [*removed, evicted], [*ones, -victim.bound], 0, INF)
        _linear(enc, [*removed, evicted], [*ones, -victim.min_member], -INF, victim.spare)
        if extras := growth.get(victim.name):
            most = int(sum(int(enc.pairs.cap[p]) for p in extras))
            _linear(enc, [*extras, evicted], [1] * len(extras) + [most], -INF, most)


def _add_node_rules(
    enc: Encoding,
    vs: VictimSet,
    out: VictimVars,
    shape_of_pair: IntArray,
    on_node: dict[int, list[int]],
) -> None:
    """Where a victim loses pods, a pod that may take from it is placed; a victim evicted
    whole has such a pod on one of its nodes. Pods use the free room and the room of the
    victims they may take from, never another's (``_add_freed_room``; every pod on such a
    node waits for its victims, ``solver.joint``). Pods that may never preempt are not
    placed where a victim loses pods at all: they would wait, nominated, as their policy
    forbids."""
    groups_on: dict[int, list[int]] = defaultdict(list)
    for g, grp in enumerate(vs.groups):
        groups_on[grp.node].append(g)
    served: dict[int, list[int]] = defaultdict(list)  # victim -> allowed pairs on its nodes
    for (v, n), touches in out.touches.items():
        allowed: list[int] = []
        never: list[int] = []
        for p in on_node.get(n, []):
            s = int(shape_of_pair[p])
            if v in vs.eligible.get(s, ()):
                allowed.append(p)
            elif s in vs.never:
                never.append(p)
        served[v] += allowed
        # touches <= pods allowed placed here + evicted (then its other nodes serve it)
        _linear(enc, [touches, *allowed, out.evicted[v]], [1, *[-1] * len(allowed), -1], -INF, 0)
        if never:
            most = int(enc.pairs.cap[never].sum())
            _linear(enc, [*never, touches], [*[1] * len(never), most], -INF, most)
    for n, groups in groups_on.items():
        if on_node.get(n):
            _add_freed_room(enc, vs, out, n, on_node[n], groups, shape_of_pair)
    for v, evicted in out.evicted.items():
        allowed = served.get(v, [])
        _linear(enc, [evicted, *allowed], [1, *[-1] * len(allowed)], -INF, 0)


def _add_freed_room(
    enc: Encoding,
    vs: VictimSet,
    out: VictimVars,
    n: int,
    pairs: list[int],
    groups: list[int],
    shape_of_pair: IntArray,
) -> None:
    """Node ``n``'s Hall rows (``solver.freed_room``): for each set U of its victims, per
    resource, the pairs eligible for none outside U ask for no more than the free room
    plus what U's victims free. Only where those pairs could ask for more than the free
    room (else the row is moot)."""
    victims = frozenset(vs.groups[g].victim for g in groups)
    own = [vs.eligible.get(int(shape_of_pair[p]), frozenset()) & victims for p in pairs]
    rows = [
        ([p for p, w in zip(pairs, within, strict=True) if w], u)
        for u, within in hall_rows(own, victims)
    ]
    free = enc.problem.free[n]
    for members, u in rows:
        if not members:
            continue
        demand = np.array([enc.shapes.classes[c].demand for c in enc.pairs.cls[members]])
        most = (demand * enc.pairs.cap[members][:, None]).sum(axis=0)
        freed = [(out.removed[g], vs.groups[g].demand) for g in groups if vs.groups[g].victim in u]
        for r in np.flatnonzero(most > free).tolist():
            gains = [(var, -int(d[r])) for var, d in freed if d[r]]
            _linear(
                enc,
                [*members, *(var for var, _ in gains)],
                [*demand[:, r].tolist(), *(c for _, c in gains)],
                -INF,
                int(free[r]),
            )


def _add_reclaim_floor(enc: Encoding, vs: VictimSet, out: VictimVars, coef: Coefficients) -> None:
    """A queue above its deserved share loses no more than it holds above it (less what
    its own pods placed this cycle add)."""
    lost: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for g, var in out.removed.items():
        grp = vs.groups[g]
        if grp.share:
            lost[vs.victims[grp.victim].queue].append((var, grp.share))
    share = np.array([sc.pod_share for sc in enc.shapes.classes], dtype=np.int64)
    pair_queue = queue_of_pair(enc)
    for q, terms in lost.items():
        above = int(coef.held[q] - coef.deserved[q])
        if above < 0:
            continue  # a queue below its share loses only to its own higher priorities
        won = np.flatnonzero(pair_queue == q)
        _linear(
            enc,
            [*won.tolist(), *(var for var, _ in terms)],
            [*share[enc.pairs.cls[won]].tolist(), *(-s for _, s in terms)],
            -above,
            INF,
        )


def _add_reclaim_ceiling(
    enc: Encoding,
    vs: VictimSet,
    out: VictimVars,
    coef: Coefficients,
    shape_of_pair: IntArray,
    on_node: dict[int, list[int]],
) -> None:
    shapes = enc.shapes
    victim_queue = {v: vs.victims[v].queue for v in range(len(vs.victims))}
    reclaimers: dict[int, list[int]] = defaultdict(list)  # queue -> shapes
    for s, takes in vs.eligible.items():
        q = shapes.shapes[s].queue
        if any(victim_queue[v] != q for v in takes):
            reclaimers[q].append(s)
    if not reclaimers:
        return
    classes = shapes.classes
    share = np.array([sc.pod_share for sc in classes], dtype=np.int64)[enc.pairs.cls]
    pair_queue = queue_of_pair(enc)
    for q, members in reclaimers.items():
        limit = reclaim_limit(int(coef.deserved[q]), int(coef.held[q]))
        won = np.flatnonzero(pair_queue == q)
        most = int((share[won] * enc.pairs.cap[won]).sum())
        if most <= limit:
            continue  # the queue stays below its share whatever it is given
        reclaims = _new_var(enc, 0, 1, f"reclaims[{enc.problem.queues[q].name}]")
        # When it reclaims, one gang of one of its shapes is last: what the queue is given
        # less that gang's least gain (minMember pods of its cheapest class) is in limit.
        lasts = []
        for shape in shapes.shapes:
            if shape.queue != q or shape.index not in enc.admitted:
                continue
            gain = shape.need * min(classes[c].pod_share for c in shape.classes)
            last = _new_var(enc, 0, 1, f"last[{enc.problem.gangs[shape.gangs[0]].name}]")
            _linear(enc, [last, enc.admitted[shape.index]], [1, -1], -INF, 0)
            # won <= limit + gain when last (else <= most)
            slack = max(0, most - limit - gain)
            _linear(
                enc,
                [*won.tolist(), last],
                [*share[won].tolist(), slack],
                -INF,
                limit + gain + slack,
            )
            lasts.append(last)
        _linear(enc, [*lasts, reclaims], [*[1] * len(lasts), -1], 0, INF)
        for (v, n), touches in out.touches.items():
            if victim_queue[v] == q:
                continue
            taking = [
                p
                for p in on_node.get(n, [])
                if v in vs.eligible.get(int(shape_of_pair[p]), ())
                and int(shape_of_pair[p]) in members
            ]
            if not taking:
                continue
            # pods placed here + touches - reclaims <= 1, scaled to the pods' most
            cap = int(enc.pairs.cap[taking].sum())
            _linear(
                enc,
                [*taking, touches, reclaims],
                [*[1] * len(taking), cap, -cap],
                -INF,
                cap,
            )
