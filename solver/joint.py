"""The joint stage: placement and preemption decided by one CP-SAT model
(``solver.encode_victims``: each node with a victim a bin of its own, the other nodes in
their classes), where that model fits in a cycle.

Its starts (the hint, and the candidates it must beat) are the placement stages' best
decision alone, followed by kube-batch-style greedy preempt/reclaim actions
(``solver.greedy_preemption``) or by the preemption model (``solver.preemption``), and
gang-greedy's followed by the greedy actions; the model is then free to move any
placement, evict, shrink or keep any victim, in one objective: what placements and
nominations earn, less what the evictions cost. Its bound is on that objective, so the
decision's gap is too.

Decoding: counts on classes of nodes are disaggregated around the victims' nodes. The
gangs with a pod on a node where a victim loses pods are *nominated* (bound once the
victims are gone), but those that fit in what the node has free now; the rest are
placements, bound now. Victims whose room the solution does not need are kept
(``evictions.restore_unneeded``): nothing is evicted "in case".
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from solver.arrays import IntArray
from solver.bins import Bin, Pairs
from solver.disaggregate import budgets, disaggregate
from solver.encode import Encoding
from solver.encode_victims import VictimSet, VictimVars, encode_joint, victim_nodes
from solver.evictions import (
    evictions_of,
    named_takers,
    placed_load,
    restore_unneeded,
    split_withdrawn,
)
from solver.freed_room import hall_rows
from solver.greedy_preemption import apply_withdrawals, greedy_choice
from solver.objective import evaluate
from solver.placement import Placer
from solver.preemption import preempt
from solver.preemption_rules import never_preempting
from solver.problem import Problem
from solver.restricted import restricted_pairs
from solver.search import MIN_STAGE_S, Search
from solver.shapes import Shapes
from solver.solution import decode_admitted, decode_counts, hint_values, solution_of
from solver.victims import Preemption, candidates

# Of the stage's time: the LP at most (HiGHS took 0.01-0.05 s on real-shaped 40-node joint
# models, whose stage has 0.25-0.3 s), then the restricted search, of what is left; the
# whole model gets the rest.
LP_SHARE = 0.7
GUIDED_SHARE = 0.5
GUIDED_MAX_SHORT = 100  # pairs of a restricted model searched with less than MIN_STAGE_S


@dataclass
class JointDecision:
    placer: Placer  # placements, bound now
    preemption: Preemption  # evictions and the nominations they make room for
    score: int  # placements + nominations (as if bound) + disruption
    origin: str


def joint_score(problem: Problem, placer: Placer, preemption: Preemption, search: Search) -> int:
    """What the joint model's objective says of a decision: nominated pods earn as placed
    ones do, evictions cost their disruption."""
    placed = {**placer.placed, **preemption.nominated}
    return sum(evaluate(problem, placed, search.config.weights).values()) + preemption.disruption


def greedy_joint(search: Search, incumbent: Placer) -> JointDecision:
    """The incumbent placement, then the greedy preempt/reclaim actions on what it left."""

    def choose(placer: Placer) -> Preemption:
        problem = search.problem
        cand = candidates(
            problem,
            placer.placed,
            placer.free,
            placer.queue_room,
            search.coef,
            search.config.weights,
        )
        if cand is None:
            return Preemption()
        return split_withdrawn(cand, greedy_choice(problem, cand, search.coef))

    return _then(search, incumbent, choose, "greedy-preemption")


def modelled_joint(search: Search, incumbent: Placer, time_left_s: float | None) -> JointDecision:
    """The incumbent placement, then the preemption model on what it left
    (``solver.preemption``, what decides above the joint model's size): a start the
    joint model must beat, where that model's focus finds evictions in less time."""

    def choose(placer: Placer) -> Preemption:
        choice = preempt(search.problem, placer, search.coef, search.config, time_left_s)
        if choice.stage is not None:
            search.stages.append(choice.stage)
            choice.stage = None
        return choice

    return _then(search, incumbent, choose, "preemption")


def _then(
    search: Search, incumbent: Placer, choose: Callable[[Placer], Preemption], name: str
) -> JointDecision:
    """A copy of the incumbent placement, then the preemption ``choose`` makes on it
    (placements it takes back withdrawn), named after it if it evicts."""
    problem = search.problem
    placer = Placer(problem)  # a copy: candidates stay unchanged
    placer.place_like(incumbent.placed)
    choice = choose(placer)
    apply_withdrawals(problem, placer, choice)
    origin = search.origin.get(id(incumbent), "gang-greedy")
    if choice.evictions:
        origin += f"+{name}"
    return JointDecision(placer, choice, joint_score(problem, placer, choice, search), origin)


def kept_placement(search: Search, placer: Placer) -> JointDecision:
    """A placement as it is, nothing evicted."""
    origin = search.origin.get(id(placer), "gang-greedy")
    return JointDecision(placer, Preemption(), search.score(placer), origin)


def joint_stage(
    search: Search,
    shapes: Shapes,
    vs: VictimSet,
    start: JointDecision,
    time_limit_s: float,
    bins: Sequence[Bin],
    pairs: Pairs,
) -> tuple[JointDecision | None, int | None]:
    """The joint model over the victims ``vs``, ``bins`` and ``pairs`` (``joint_bins``,
    ``joint_pairs``): its decision (None if it found none that beats ``start``) and its
    bound.

    As the placement stages search: the LP relaxation bounds the model and guides a
    search restricted to what it or ``start`` uses; the whole model is then searched from
    the best decision with what time is left, unless that is already at the bound. The
    whole model alone, hinted, stayed 2-6% below its optimum after 0.25 s on real-shaped
    40-node clusters."""
    started, solved = time.perf_counter(), search.deterministic_s

    def left() -> float:
        # Deterministic solves count the solves' deterministic time, as ``Search`` does.
        if search.config.deterministic:
            return time_limit_s - (search.deterministic_s - solved)
        return time_limit_s - (time.perf_counter() - started)

    if left() < 2 * MIN_STAGE_S:
        return None, None  # no time for an LP and a search: the starts stand, unbounded
    problem, coef = search.problem, search.coef
    enc, out = encode_joint(problem, shapes, coef, vs, bins, pairs)
    decode = partial(_decode, problem, vs=vs, search=search, left=left)
    bounds: list[int] = []
    lp = search.lp(enc, max(MIN_STAGE_S, LP_SHARE * left()), "joint-lp")
    best = start
    if lp is not None:
        bounds.append(lp.bound)
        values = _values(enc, vs, out, best, search)
        pairs_used = restricted_pairs(enc.pairs, lp.values, values)
        # Given less than MIN_STAGE_S, a large one is skipped: real-shaped 200-node ones
        # (about 480 pairs) found their first solution after 0.08-0.09 s, and 0.05 s
        # ended with none, past the limit; the philly trace's (at most 13) need far less.
        if GUIDED_SHARE * left() >= MIN_STAGE_S or len(pairs_used) <= GUIDED_MAX_SHORT:
            narrow, narrow_out = encode_joint(
                problem, shapes, coef, vs, bins, pairs_used, room=enc.room
            )
            hint_values(narrow, _values(narrow, vs, narrow_out, best, search))
            limit = max(MIN_STAGE_S, GUIDED_SHARE * left())
            result = search.run(narrow, "joint-lp-guided", limit)
            search.no_bound()  # restricted: not a relaxation
            best = _better(decode(narrow, narrow_out, result.solution), best)
    # Within the gap limit of a bound, as ``Search.settled`` ends the placement stages: the
    # whole model would stop there too (CP-SAT's ``relative_gap_limit``), but only once its
    # own search had proved as much.
    at_bound = bool(bounds) and search.close_enough(best.score, min(bounds))
    if not at_bound and left() >= MIN_STAGE_S:
        hint_values(enc, _values(enc, vs, out, best, search))
        result = search.run(enc, "joint", left())
        if result.report.bound is not None:
            bounds.append(result.report.bound)
        best = _better(decode(enc, out, result.solution), best)
    bound = min(bounds) if bounds else None
    return (best if best is not start else None), bound


def _better(found: JointDecision | None, best: JointDecision) -> JointDecision:
    return found if found is not None and found.score > best.score else best


def _values(
    enc: Encoding, vs: VictimSet, out: VictimVars, decision: JointDecision, search: Search
) -> IntArray:
    """A decision as values of the joint model's variables (``solution.solution_of`` for
    the placements and nominations, the victims' from the evictions)."""
    placed = {**decision.placer.placed, **decision.preemption.nominated}
    values = solution_of(enc, placed, search.coef)
    lost: dict[int, int] = defaultdict(int)
    for g, var in out.removed.items():
        grp = vs.groups[g]
        count = sum(1 for pod in grp.pods if pod in decision.preemption.evictions)
        values[var] = count
        lost[grp.victim] += count
        if count:
            values[out.touches[(grp.victim, grp.node)]] = 1
    for v, var in out.evicted.items():
        values[var] = int(lost[v] >= vs.victims[v].bound)
    return values


def _decode(
    problem: Problem,
    enc: Encoding,
    out: VictimVars,
    solution: Sequence[int] | None,
    *,
    vs: VictimSet,
    search: Search,
    left: Callable[[], float],
) -> JointDecision | None:
    if solution is None:
        return None
    where = _placed(problem, enc, vs, solution, search, left)
    removed = {g: int(solution[var]) for g, var in out.removed.items()}
    load, queue_load = placed_load(problem, where)
    queue_room = np.array([q.room() for q in problem.queues], dtype=np.int64)
    # What a gang may take from, by its shape (``Shapes`` index, not ``GangInfo.shape``).
    shape_of = {g: shape.index for shape in enc.shapes.shapes for g in shape.gangs}

    def takes(gang: int) -> frozenset[int]:
        return vs.eligible.get(shape_of[gang], frozenset())

    removed = restore_unneeded(
        problem,
        vs.victims,
        vs.groups,
        removed,
        problem.free,
        load,
        queue_room,
        queue_load,
        keeps=hall_holds(problem, vs, where, takes),
    )
    touched = {vs.groups[g].node for g, count in removed.items() if count}

    waiting = _waiting(problem, vs, where, removed, touched, takes)
    dropped = _within_capability(problem, where, waiting) | _gone_whole(problem, vs, removed)
    placer = Placer(problem)
    nominated: dict[str, int] = {}
    next_pod: dict[int, int] = defaultdict(int)
    takers: dict[int, list[int]] = defaultdict(list)  # node -> nominated gangs there
    for c, node, count in where:
        cls = problem.classes[c]
        if cls.gang in dropped:
            continue
        if cls.gang not in waiting:
            placer.place_on(cls, node, count)
            continue
        start = next_pod[c]
        nominated.update(dict.fromkeys(cls.pods[start : start + count], node))
        next_pod[c] = start + count
        takers[node].append(cls.gang)
    taken = evictions_of(
        problem, vs.victims, vs.groups, removed, partial(_takers, vs, takers=takers, takes=takes)
    )
    if taken is None:
        return None  # the model forbids it; should it ever happen, it is not used
    evictions, cost = taken
    preemption = Preemption(evictions=evictions, nominated=nominated, disruption=-cost)
    score = joint_score(problem, placer, preemption, search)
    return JointDecision(placer, preemption, score, "joint")


def hall_holds(
    problem: Problem,
    vs: VictimSet,
    where: list[tuple[int, int, int]],
    takes: Callable[[int], frozenset[int]],
) -> Callable[[dict[int, int], Iterable[int]], bool]:
    """Whether, with given removals (pods per victim group), the pods ``where`` places on
    given nodes fit in the free room and the room of the victims they may take from
    (``takes``: by gang), never another's: Hall's condition (``solver.freed_room``), as
    the model's rows and the validator have it. Restoring a victim whose room a node's
    total still covered left a pod on a victim it may not take from (a fuzzer's find: the
    validator refused the whole decision)."""
    arriving: dict[int, list[tuple[IntArray, frozenset[int]]]] = defaultdict(list)
    for c, node, count in where:
        cls = problem.classes[c]
        arriving[node].append((cls.demand * count, takes(cls.gang)))
    on_node: dict[int, list[int]] = defaultdict(list)
    for g, grp in enumerate(vs.groups):
        on_node[grp.node].append(g)
    nothing = np.zeros(len(problem.resources), dtype=np.int64)

    def holds(removed: dict[int, int], nodes: Iterable[int]) -> bool:
        for n in nodes:
            freed: dict[int, IntArray] = defaultdict(lambda: nothing.copy())
            for g in on_node[n]:
                if removed.get(g):
                    freed[vs.groups[g].victim] += vs.groups[g].demand * removed[g]
            victims = frozenset(freed)
            pods = [(demand, eligible & victims) for demand, eligible in arriving[n]]
            if not victims or not pods:
                continue  # no freed room to tell apart: the node's total decides
            for u, within in hall_rows([own for _, own in pods], victims):
                asked = sum((d for (d, _), w in zip(pods, within, strict=True) if w), nothing)
                room = problem.free[n] + sum((freed[v] for v in u), nothing)
                if (asked > room).any():
                    return False
        return True

    return holds


def _gone_whole(problem: Problem, vs: VictimSet, removed: dict[int, int]) -> set[int]:
    """The gangs the decision evicts whole: none of their pods is placed. The model keeps
    a victim evicted whole from its own pending pods, but the disaggregation's top-up of
    the room left (``topup.topped_up``) does not know it, and placed one: the gang kept
    one pod below its minMember, and the validator refused the whole decision."""
    lost: dict[int, int] = defaultdict(int)
    for g, count in removed.items():
        lost[vs.groups[g].victim] += count
    index = {gang.name: gang.index for gang in problem.gangs}
    return {index[v.name] for v in vs.victims if lost[v.index] >= v.bound and v.name in index}


def _placed(
    problem: Problem,
    enc: Encoding,
    vs: VictimSet,
    solution: Sequence[int],
    search: Search,
    left: Callable[[], float],
) -> list[tuple[int, int, int]]:
    """A solution's counts on nodes: (pod class, node, count). Counts on the victims'
    nodes (bins of one node) are placed as they are; counts on classes of nodes are
    disaggregated around them (``solver.disaggregate``), the victims' nodes closed to
    it: what goes there is the model's alone."""
    counts = decode_counts(enc, solution)
    placer = Placer(problem)
    aggregated: dict[int, list[tuple[int, int]]] = {}
    for c, bins in sorted(counts.items()):
        for b, count in bins:
            if len(enc.bins[b].nodes) == 1:
                placer.place_on(problem.classes[c], enc.bins[b].nodes[0], count)
            else:
                aggregated.setdefault(c, []).append((b, count))
    if aggregated:
        placer.close(victim_nodes(vs))
        config = search.config
        pack, reorder, lp = budgets(config.time_limit_s, left())
        placer = disaggregate(
            problem,
            enc,
            aggregated,
            decode_admitted(enc, solution),
            config.weights,
            pack,
            config.deterministic,
            reorder,
            placer=placer,
            until=time.perf_counter() + left(),
            lp_budget_s=lp,
        )
    cells = problem.cell_counts(placer.placed)
    return [(c, node, count) for (c, node), count in sorted(cells.items())]


def _waiting(
    problem: Problem,
    vs: VictimSet,
    where: list[tuple[int, int, int]],
    removed: dict[int, int],
    touched: set[int],
    takes: Callable[[int], frozenset[int]],
) -> set[int]:
    """The gangs that wait for the victims: those with a pod on a node where one loses
    pods, but those that fit in what those nodes have free now, which are bound at once
    (gangs that may take from no victim first, then the oldest), as long as every victim
    keeps a waiting gang allowed to take from it where it must (``_served``); ``takes``
    says which victims a gang may take from."""
    on_touched: dict[int, dict[int, IntArray]] = defaultdict(dict)  # gang -> node -> load
    for c, node, count in where:
        if node in touched:
            cls = problem.classes[c]
            loads = on_touched[cls.gang]
            loads[node] = loads.get(node, 0) + cls.demand * count
    free = {n: problem.free[n].copy() for n in touched}
    waiting = set(on_touched)
    order = sorted(waiting, key=lambda g: (bool(takes(g)), problem.gangs[g].created_s, g))
    for gang in order:
        loads = on_touched[gang]
        if not all((load <= free[n]).all() for n, load in loads.items()):
            continue
        if takes(gang) and not _served(vs, removed, on_touched, waiting - {gang}, takes):
            continue
        waiting.discard(gang)
        for n, load in loads.items():
            free[n] -= load
    return waiting


def _within_capability(
    problem: Problem, where: list[tuple[int, int, int]], waiting: set[int]
) -> set[int]:
    """The model lets a queue's pods use the capability its victims free, wherever they
    go; but gangs bound now (not ``waiting``) count against it while the victims still
    run. Per capped queue over its room as it is now, its gangs bound now join
    ``waiting`` (they are nominated: they fit once the victims are gone), newest first,
    until the rest fit; those whose pods may never preempt cannot wait nominated and are
    returned, to be left out of the decision."""
    load: dict[int, IntArray] = {}
    for c, _, count in where:
        cls = problem.classes[c]
        if cls.gang not in waiting:
            load[cls.gang] = load.get(cls.gang, 0) + cls.demand * count
    never = never_preempting(problem)
    dropped: set[int] = set()
    by_queue: dict[int, list[int]] = defaultdict(list)
    for g in load:
        by_queue[problem.gangs[g].queue].append(g)
    for q, gangs in by_queue.items():
        room = problem.queues[q].room()
        now = sum((load[g] for g in gangs), np.zeros_like(room))
        for g in sorted(gangs, key=lambda g: (-problem.gangs[g].created_s, problem.gangs[g].name)):
            if (now <= room).all():
                break
            now = now - load[g]
            (dropped if problem.gangs[g].name in never else waiting).add(g)
    return dropped


def _served(
    vs: VictimSet,
    removed: dict[int, int],
    on_touched: dict[int, dict[int, IntArray]],
    waiting: set[int],
    takes: Callable[[int], frozenset[int]],
) -> bool:
    """Every victim losing pods has a waiting gang allowed to take from it on each node
    where it loses them, or, evicted whole, on one of its nodes."""
    nodes_of: dict[int, set[int]] = defaultdict(set)
    whole: dict[int, int] = defaultdict(int)
    for g, count in removed.items():
        if count:
            nodes_of[vs.groups[g].victim].add(vs.groups[g].node)
            whole[vs.groups[g].victim] += count
    for v, nodes in nodes_of.items():
        served = {n for n in nodes if any(v in takes(g) and n in on_touched[g] for g in waiting)}
        if not (served if whole[v] >= vs.victims[v].bound else served == nodes):
            return False
    return True


def _takers(
    vs: VictimSet,
    v: int,
    node: int,
    *,
    takers: dict[int, list[int]],
    takes: Callable[[int], frozenset[int]],
) -> list[int]:
    """The nominated gangs allowed to take from the victim on ``node``, else on any of
    its nodes (``evictions.evictions_of``), each once."""
    nodes = [node, *(vs.groups[g].node for g in vs.victims[v].groups)]
    return named_takers(nodes, lambda n: [g for g in takers.get(n, []) if v in takes(g)])
