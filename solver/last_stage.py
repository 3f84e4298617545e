"""How a solve ends: from the placement stages' best decision to the ``Decision``, with
preemption (when on) decided jointly with placement where that model fits
(``decide_jointly``, ``solver.joint``), else after placement (``decide_after``,
``solver.preemption``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from solver.bins import Bin, Pairs, class_bin, pair_capacity
from solver.decision import Decision, SolveStatus
from solver.decode import decision_from_placements, relative_gap
from solver.encode_victims import (
    VictimSet,
    joint_bins,
    joint_pairs,
    narrowed,
    victim_nodes,
    victim_set,
)
from solver.greedy_preemption import apply_withdrawals
from solver.joint import JointDecision, greedy_joint, joint_stage, kept_placement, modelled_joint
from solver.objective import evaluate
from solver.placement import Placer
from solver.preemption import preempt
from solver.problem import Problem
from solver.search import MIN_STAGE_S, OPTIMAL_GAP, Search, gang_greedy_placer
from solver.shapes import Shapes
from solver.victims import Preemption

# Largest joint model: real-shaped 200-node ones over every victim (4,450-4,920 pairs)
# left the model no time after its starts within a 1 s cycle (its LP alone took 0.06-0.09
# s); 40-node ones have about 1,000 pairs, the philly trace's at most 755. Above it the
# model holds fewer victims (``encode_victims.narrowed``), where the nodes without one
# leave room for some.
JOINT_MAX_PAIRS = 4_000
SEQUENTIAL_SHARE = 0.4  # of the time left after placement, for the preemption model's start


def decide_after(search: Search, best: Placer) -> Decision:
    """The best placement, then (with preemption on) the preemption model on what it left."""
    problem, config = search.problem, search.config
    gap = relative_gap(search.score(best), min(search.bounds)) if search.bounds else None
    if gap is not None and gap <= OPTIMAL_GAP:
        status = SolveStatus.OPTIMAL  # whoever found it, nothing scores more
    elif best is search.baseline:
        status = SolveStatus.FALLBACK
    else:
        status = SolveStatus.FEASIBLE
    preemption = None
    final = best
    if config.preemption:
        # What placement held back, less the decoding reserve; deterministic decisions must
        # not depend on how long placement took.
        time_left = None if config.deterministic else search.remaining() + search.held_back_s
        preemption = preempt(problem, best, search.coef, config, time_left)
        if preemption.withdrawn:
            final, preemption, status = with_withdrawals(search, best, preemption, status)
    return decision_from_placements(
        problem,
        final,
        config,
        scheduler="cpsat",
        status=status,
        bound=min(search.bounds) if search.bounds else None,
        stages=search.stages,
        wall_s=time.perf_counter() - search.started,
        decided_by=search.origin.get(id(final), "gang-greedy"),
        preemption=preemption,
    )


def with_withdrawals(
    search: Search, best: Placer, preemption: Preemption, status: SolveStatus
) -> tuple[Placer, Preemption, SolveStatus]:
    """``best`` less the placements ``preemption`` takes back (and, when it evicts
    nothing, with its nominations placed), and the status that decision earns. Where
    nothing is evicted the decision is a placement like any other: scored below ``best``
    (the greedy actions withdraw whenever a gang fits, whatever it loses), ``best``
    stands. Status and gap are the placement's after the withdrawals: what the decision
    reports it scores."""
    problem = search.problem
    before = dict(best.placed)
    score_before = search.score(best)
    apply_withdrawals(problem, best, preemption)
    after = sum(evaluate(problem, best.placed, search.config.weights).values())
    if not preemption.evictions and after < score_before:
        kept = Placer(problem)
        kept.place_like(before)
        search.origin[id(kept)] = search.origin.get(id(best), "gang-greedy")
        return kept, Preemption(), status
    gap = relative_gap(after, min(search.bounds)) if search.bounds else None
    if status is SolveStatus.OPTIMAL and (gap is None or gap > OPTIMAL_GAP):
        status = SolveStatus.FEASIBLE
    return best, preemption, status


def decide_jointly(search: Search, shapes: Shapes, best: Placer) -> Decision:
    """Placement and preemption re-decided by one model (``solver.joint``), from the best
    placement alone and followed by preemption (greedy, and the preemption model), where
    that model fits: JOINT_MAX_PAIRS pairs (and ``max_node_level_pairs``). Over every
    victim it may be larger: then it holds the victims its starts evict and the cheapest
    others whose nodes fit (``narrowed``), and the decision reports no bound (the model's
    covers only decisions that evict those). Where not even the other nodes' classes fit
    (real-shaped 1,000 nodes: 11,500 pairs), preemption is decided after placement
    (``decide_after``). The placement stages' bounds are not bounds on it (evictions free
    room): only its own is reported."""
    problem, config = search.problem, search.config
    most = min(config.max_node_level_pairs, JOINT_MAX_PAIRS)
    if pairs_away_from_victims(problem, shapes) > most:
        return decide_after(search, best)  # as below, without finding the victims first
    victims = victim_set(problem, shapes, search.coef, config.weights)
    if victims is None:
        return decide_after(search, best)  # nothing running to take from: placement is all
    bins = joint_bins(problem, victims)
    # The pairs of the nodes without a victim, which every model, whole or narrowed,
    # holds: counted first, on their few bins (the pairs of every victim's node too took
    # 0.04 s of real-shaped 1,000-node cycles, already at their limit, for nothing).
    single = set(victim_nodes(victims))
    others = [b for b in bins if not (len(b.nodes) == 1 and b.nodes[0] in single)]
    base = len(pair_capacity(problem, shapes, others))
    if base > most:
        return decide_after(search, best)
    pairs = joint_pairs(problem, shapes, bins, victims)
    # Too large whole, a narrowed model needs room beside those, and node classes: where
    # every node is a class of its own, a node left out keeps its pairs (``narrowed``).
    if len(pairs) > most and (base >= most or len(problem.node_classes) == len(problem.nodes)):
        return decide_after(search, best)
    # The best placement alone (greedy actions evict whenever a gang would fit, whatever
    # it costs); gang-greedy's followed by the greedy actions: the gang-greedy scheduler's
    # decision with preemption, so that this one is never below it (its placement whole:
    # where a solver's placement made the rest moot, ``cpsat`` stopped it, and its
    # preemption may still have mattered; a model this small takes it in milliseconds);
    # and the preemption model after the best placement (its hint is the greedy
    # actions), with at most SEQUENTIAL_SHARE of the time left: on real-shaped 200-node
    # clusters it found evictions worth 0.2-0.5% that the joint model, in the same time,
    # did not.
    starts = [kept_placement(search, best)]
    whole = [] if search.stop_baseline.is_set() else search.finished_baseline()
    baseline = whole[0] if whole else gang_greedy_placer(problem)
    starts.append(greedy_joint(search, baseline))
    left = search.remaining() + search.held_back_s
    share = SEQUENTIAL_SHARE * min(left, config.preemption_time_share * config.time_limit_s)
    starts.append(modelled_joint(search, best, None if config.deterministic else share))
    start = max(starts, key=lambda s: s.score)
    narrow = len(pairs) > most
    if narrow:
        first = _evicted(victims, [start])
        then = _evicted(victims, starts) - first
        fits = _narrowed(problem, shapes, victims, bins, pairs, first, then, most)
        if fits is None:
            return _decided(search, start, None)
        victims, bins, pairs = fits
    limit = max(MIN_STAGE_S, search.remaining() + search.held_back_s)
    found, bound = joint_stage(search, shapes, victims, start, limit, bins, pairs)
    # Over some victims only, the model's bound is none on the cycle's decision: another
    # eviction might score more. Its stage reports keep it.
    return _decided(search, found or start, None if narrow else bound)


def pairs_away_from_victims(problem: Problem, shapes: Shapes) -> int:
    """At most the pairs the joint model has away from every victim (``base`` above),
    known before the victims are: the pairs in what each class of nodes keeps of the
    nodes that run no pod of a PodGroup, so no victim. The joint model's bin of the
    class (``joint_bins``) holds those nodes and maybe more, and a bin has a pair where
    any of its nodes fits a pod of the shape. At real-shaped 1,000 nodes, finding the
    victims and counting their model's pairs to learn it was too big took 0.09 s of a
    cycle already past its limit."""
    running = {p.node_name for p in problem.state.pods if p.gang is not None and p.node_name}
    bins: list[Bin] = []
    for members in problem.node_classes:
        clean = [n for n in members if problem.nodes[n].name not in running]
        if clean:
            bins.append(class_bin(problem, clean, len(bins)))
    return len(pair_capacity(problem, shapes, bins)) if bins else 0


def _decided(search: Search, chosen: JointDecision, bound: int | None) -> Decision:
    gap = relative_gap(chosen.score, bound)
    if gap is not None and gap <= OPTIMAL_GAP:
        status = SolveStatus.OPTIMAL
    elif chosen.origin.startswith("gang-greedy"):
        status = SolveStatus.FALLBACK
    else:
        status = SolveStatus.FEASIBLE
    chosen.preemption.joint_score = chosen.score
    return decision_from_placements(
        search.problem,
        chosen.placer,
        search.config,
        scheduler="cpsat",
        status=status,
        bound=bound,
        stages=search.stages,
        wall_s=time.perf_counter() - search.started,
        decided_by=chosen.origin,
        preemption=chosen.preemption,
    )


def _narrowed(
    problem: Problem,
    shapes: Shapes,
    vs: VictimSet,
    bins: Sequence[Bin],
    pairs: Pairs,
    first: set[int],
    then: set[int],
    most: int,
) -> tuple[VictimSet, list[Bin], Pairs] | None:
    """The joint model over the victims ``narrowed`` keeps within ``most`` pairs. Its
    count is an estimate (real-shaped 200 nodes: 4,048 pairs for 4,000); the limit is one
    of time, not of correctness, so it is not redone (each ``joint_pairs`` took 0.02 s)."""
    held = narrowed(problem, vs, bins, pairs, first, most, then)
    if held is None:
        return None
    held_bins = joint_bins(problem, held)
    return held, held_bins, joint_pairs(problem, shapes, held_bins, held)


def _evicted(vs: VictimSet, starts: Sequence[JointDecision]) -> set[int]:
    """The victims some start evicts pods of."""
    evicted = {pod for s in starts for pod in s.preemption.evictions}
    return {grp.victim for grp in vs.groups if evicted.intersection(grp.pods)}
