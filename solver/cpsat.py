"""solve(state, config) -> Decision: the CP-SAT scheduler.

Stages, all within one time limit (``search.Search`` holds what they share):
1. Prepare the problem. Gang-greedy starts with the first CP-SAT solve that is neither
   tiny nor a dive, in a thread (the solvers release the GIL): the baseline, a
   candidate, and a hint for the node level.
2. Where nodes fall into fewer classes than there are nodes, the aggregated model (bins
   = classes of nodes this cycle's pending pods cannot tell apart, ``equivalence``): a
   relaxation, so its bounds hold for the real problem. Its LP relaxation (HiGHS) comes
   first: a bound, and a guide; where the time left holds them, a few branches of it on
   the gangs it admits in part (``branching``) may lower the bound and take over as the
   guide. On large models, and where these searches are the cycle's last, the LP's
   optimum rounded is placed first. CP-SAT searches the model restricted to what the LP
   uses (a dive, stopped at its first solution; on large models the model itself is
   encoded as LP rows only), then, on models of moderate size, to what the LP or the
   best decision so far uses (RINS rounds); small models are also searched whole. Every
   candidate's counts are packed onto real nodes (``disaggregate``); what a class's
   nodes could not hold is re-decided (``candidates.repack_counts``), or, where these
   searches are the cycle's last and the node-level LP over the gangs the class LP
   admits is small enough, that LP's optimum is rounded and placed instead
   (``candidates.place_node_lp``).
3. If the node-level model (all gangs, else the admitted ones) is small enough: the same
   LP-guided searches over nodes, then the whole model from the best decision so far.
4. The best candidate goes through an exchange (``displace.exchanged``); then, where
   time is left, the node-class LP's other optima (prices tilted a hair by gang size)
   are rounded and placed too (``candidates.place_other_optima``), and the runner-up
   goes through an exchange as well (``exchanges.best_exchanged``); time still left goes to
   further exchanges of the best, over waiting gangs not tried yet
   (``exchanges.exchanged_again``). Every candidate is scored by
   the same solver-free objective and the best is returned, so a decision is never
   below the greedy baseline, but where it could add little
   (``Search.baseline_cannot_matter`` says when the baseline may stop early).
5. With preemption on, placement holds back ``preemption_time_share`` of the limit for
   what follows (``solver.last_stage``): the joint model of placement and preemption
   where it fits, from the best decision; else the preemption model after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from solver.bins import class_bins, feasible_pair_estimate, node_bins, pair_capacity
from solver.branching import branch_stage
from solver.candidates import (
    dive_beside,
    node_lp_pairs,
    node_lp_s,
    place_counts,
    place_node_lp,
    repack_counts,
    run_restricted,
)
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.decode import decision_from_placements
from solver.disaggregate import PLACING_SHARE, placer_from_counts
from solver.encode import Encoding, encode
from solver.exchanges import best_exchanged
from solver.last_stage import decide_after, decide_jointly
from solver.model import ClusterState
from solver.neighbourhoods import beside_whole_search
from solver.objective import coefficients
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.relaxation import LpSolution
from solver.restricted import restricted, waiting_pairs
from solver.search import (
    MIN_STAGE_S,
    Ahead,
    Beside,
    Search,
    StageResult,
    gang_greedy_placer,
)
from solver.shapes import Shapes, group
from solver.solution import (
    decode_counts,
    hint,
    hint_values,
    rounded_for_gangs,
    solution_of,
)
from solver.topup import topped_up

# The wide (RINS) neighbourhood is searched on node-class models up to this many times
# max_exact_class_pairs: above, real-shaped 1,000-node models found nothing in 0.5 s.
RINS_PAIRS = 2
RINS_ROUNDS = 3
# Of the time limit, or of FLOOR_LIMIT_S when the limit is shorter: the cycle's first LP,
# and the search for its first solver decision, run at least this long even when
# preparing took the cycle's time. HiGHS took 0.23-0.36 s on real-shaped 1,000-node
# models, 0.44-0.47 s in this VM's slow phases, where a floor of 0.35 let one LP time out
# and the cycle fall back to greedy with no bound; the floor is only reached when the LP
# needs it. The LP-guided search's first solution came at 0.12-0.16 s beside a busy
# baseline.
LP_FLOOR = 0.5
DIVE_FLOOR = 0.25
# A shorter limit does not shorten what the first LP and the first solution need: with
# floors scaled to it, real-shaped 200-node cycles at limits of 0.2-0.5 s and 1,000-node
# ones at 0.5 s fell back to gang-greedy, 9-24% from the bound, as slow or slower.
FLOOR_LIMIT_S = 1.0
# A class model this large (real-shaped 2,000 nodes x 3,000 gangs, 21,000 pending pods:
# 23,000 variables) may need more than the floor for its LP (0.5-0.7 s; 1.1-1.3 s at
# 5,000 nodes x 7,500 gangs, 55,000 pending pods, which took 1.1 s to prepare and encode).
# Its first LP may then run to HUGE_LP_CAP of the limit: given the floor, such cycles
# timed out and fell back to gang-greedy, run after the LP (1.1-1.4 s there: 3.1-3.3 s in
# all; at 2,000 nodes, some of them). The baseline is not started beside the LP: sharing
# the GIL with the disaggregation that follows, it cost 5,000-node cycles 1 s. See
# "Tens of thousands of pending pods" in benchmarks/solver_history.md.
HUGE_LP_VARS = 20_000
HUGE_LP_CAP = 2.0
GUIDED_SHARE = 0.6  # of the node-level stage's time, for its LP-guided searches
# What a large model's dive and the disaggregation of its decision take, per pair
# (real-shaped 1,000 nodes, 12,000 pairs: 0.2-0.25 s each); below, the dive after the
# rounded LP is skipped (on large models and where the class searches are the last).
DIVE_S_PER_PAIR = 4e-5


def _lp_stage(search: Search, enc: Encoding, time_limit_s: float, name: str) -> LpSolution | None:
    lp = search.lp(enc, time_limit_s, name)
    if lp is not None:
        search.bounds.append(lp.bound)
    return lp


def _node_class_stage(
    search: Search, shapes: Shapes, share: float, repack: bool, ahead: bool
) -> None:
    """Admission on classes of nodes: the LP relaxation bounds it and guides a restricted
    search; small models are then also searched whole: with ``ahead`` (a node-level
    stage over every shape follows), on the other core from the first decision on, and
    read by that stage (``search.Ahead``); else here. ``repack``: see
    ``candidates.repack_counts``."""
    problem = search.problem
    config = search.config
    deadline = search.remaining() * (1 - share)  # what this stage leaves to the next

    def left() -> float:
        return search.remaining() - deadline

    bins = class_bins(problem)
    pairs = pair_capacity(problem, shapes, bins)
    large = len(pairs) > RINS_PAIRS * config.max_exact_class_pairs
    # A large model is only searched restricted: its own CP-SAT model is never built.
    agg = encode(problem, shapes, bins, search.coef, pairs, lp_only=large)
    too_big = len(pairs) > config.max_exact_class_pairs
    if ahead and not too_big and not config.deterministic:
        search.ahead_of = lambda: Ahead(search, agg, "node-classes")
    # Its RINS rounds are the cycle's last search: no whole search of this model follows,
    # nor a node-level stage over every shape (one over the admitted shapes only, topped
    # up greedily, may still take what they leave).
    last = too_big and share >= 1.0
    _guided_search(
        search,
        agg,
        "node-classes",
        left,
        large,
        repack,
        free_waiting=True,
        last=last,
        class_lp=True,
    )
    if search.settled(wait_for_baseline=False) or too_big or left() < MIN_STAGE_S:
        return
    if search.ahead is not None:
        return  # searched whole on the other core already
    # No hint: the greedy decision, followed first, held the search near it (real-shaped
    # 200-node models: 18% gap after 0.6 s hinted, proven optimal in 0.45 s unhinted).
    _class_search_taken(search, agg, search.run(agg, "node-classes", left(), presolve=False))


def _class_search_taken(search: Search, agg: Encoding, result: StageResult) -> None:
    """A whole search of the node-class model, here or ahead: its bound counts (the model
    is a relaxation of the real problem), its decision is placed."""
    if result.solution is not None and result.report.bound is not None:
        search.bounds.append(result.report.bound)
        place_counts(search, agg, result.solution, result.report.name)


def _guided_search(
    search: Search,
    enc: Encoding,
    prefix: str,
    left: Callable[[], float],
    large: bool,
    repack: bool = False,
    free_waiting: bool = False,
    last: bool = False,
    class_lp: bool = False,
) -> None:
    """The model's LP relaxation bounds it and guides restricted searches (``restricted``).

    Large models: only what the LP uses is searched (real-shaped 1,000 nodes: 0.3% from
    the LP bound in 0.5 s, where wider neighbourhoods found nothing). Others: what the LP
    uses first, then what the LP or the best decision so far uses, again around each
    better decision (RINS as a large-neighbourhood search): the LP's support alone lost
    up to 16% on real-shaped 200-node clusters. With ``free_waiting`` (node classes), the
    gangs the best decision leaves waiting may take any bin too (``waiting_pairs``). The
    first search, over the LP's support, stops at its first solution. Large models, and
    ``last`` ones, first place the LP's optimum rounded (``solution.rounded_for_gangs``).
    ``last``: no search follows in the cycle, so a RINS round may take all of the time
    left but what disaggregating its decision takes; where the node-level LP over the
    gangs the class LP admits is small enough, its optimum rounded follows the dive
    instead of the repacking and the RINS rounds (``candidates.place_node_lp``).
    ``class_lp``: the node-class model's LP, branched on (``branching``) and kept in
    ``search.class_lp``.
    """
    # The cycle's first LP and first search get a floor even when preparing took the
    # cycle's time: without it, 1,000-node cycles fell back to greedy, and so did
    # 5,000-node ones whose (tiny) model would have been solved in 10 ms.
    limit = max(search.config.time_limit_s, FLOOR_LIMIT_S)
    lp_floor = LP_FLOOR * limit if not search.bounds else MIN_STAGE_S
    allowed = max(left(), lp_floor)
    if large and not search.bounds and enc.size()[0] >= HUGE_LP_VARS:
        allowed = max(allowed, HUGE_LP_CAP * limit)
    lp = _lp_stage(search, enc, allowed, f"{prefix}-lp")
    if lp is None:
        return
    beside: Beside | None = None
    if class_lp:
        search.class_lp = (enc, lp, search.stages[-1].wall_s)  # for ``place_other_optima``
        # A gang the LP admits in part, worth much, is branched on: a tighter bound, and
        # an optimum that keeps it whole or drops it to guide what follows. Not the
        # node-level LP: over the same gangs, its branches lowered no bound where the
        # class LP's had (real-shaped 40 nodes, seed 63: 0.06 s for none).
        lp = branch_stage(search, enc, lp, f"{prefix}-lp-branched", left)
    if large or last:
        # The LP's optimum rounded down (about 110 of 12,000 values are fractional on
        # real-shaped 1,000 nodes; an admitted gang's pods that rounding took below its
        # need put back), disaggregated and topped up: a decision without a
        # search. On large models the dive follows only where its model, its search and
        # the disaggregation of its decision fit in the stage's time left (it then needs
        # no floor: a solver's decision is there). Seeds 0-7 at a 1 s limit, rounding
        # (down, as it was then) alone against the dive alone, alternately: cycle 1.32 ->
        # 1.13 s median, objective x0.9979 (x0.9915-1.0074), mean gap 2.18 -> 2.39%.
        # Where the model's searches are the cycle's last (200 nodes), the dive's first
        # solution can be far below the LP (seed 33: its counts 28% below, the decision
        # 15% from the bound), and the RINS rounds after it found nothing in their time on
        # 11-12 of the 12 seeds (of 0-23) that ran them. Placed after the dive (stop 40),
        # the rounded LP decided 6 of seeds 0-23 and had no time left on most others: the
        # dive's disaggregation, and the repacking a short one starts, took it. Placed
        # first (stop 41), seeds 0-23 at 200 nodes, old and new alternately: see
        # "The rounded LP first" in benchmarks/solver_history.md. The baseline is not
        # read: deterministic solves must not depend on when it finishes.
        if not large:
            beside = dive_beside(search, enc, lp, f"{prefix}-lp-guided", left())
        try:
            rounded = rounded_for_gangs(enc, lp.values)
            if class_lp:  # ``candidates.place_other_optima`` places it no second time
                search.class_rounded = tuple(rounded)
            place_counts(search, enc, rounded, f"{prefix}-lp-rounded")
        except BaseException:
            if beside is not None:
                beside.discard()  # not left searching into the next cycle
            raise
        # The dive after it needs no floor (a solver's decision is there), and runs only
        # where it and the placement of its counts fit in the time left: given 0.05 s at
        # a 0.3 s limit, 200-node dives found nothing (a review, stop 41).
        at_bound = search.settled(wait_for_baseline=False)
        if at_bound or left() < DIVE_S_PER_PAIR * len(enc.pairs):
            if beside is not None:
                beside.discard()
            return
    # Where the node-level LP over the gangs the class LP admits is small enough (200
    # nodes), its rounded optimum follows the dive, which leaves it its time, instead of
    # the repacking and the RINS rounds: see ``candidates`` and "The node-level
    # LP rounded" in benchmarks/solver_history.md.
    node_pairs = node_lp_pairs(search, enc, lp.values) if last and not large else None
    for_node_lp = node_lp_s(node_pairs) if node_pairs is not None else 0.0
    name = f"{prefix}-lp-guided"
    first_floor = DIVE_FLOOR * limit if not search.solved else MIN_STAGE_S
    narrow = beside.enc if beside is not None else restricted(enc, search.coef, lp.values)
    # To its first solution only, on every model. Searched on for a third of the stage,
    # real-shaped 40-node models spent 0.11 s there for a decision the RINS rounds then
    # had no time left to improve; seeds 0-95, one solve each way, against the better of
    # the two: mean loss 0.36 -> 0.09%, worst 8.3 -> 1.2%; gaps over 2% 28 -> 21 (200
    # nodes, seeds 0-15: no change). As the cycle's first solver decision it gets at
    # least the floor: a short limit found nothing in its share (real-shaped 200 nodes at
    # 0.5 s, before the rounded LP came first there: 0.05 s; every cycle fell back to
    # gang-greedy).
    if beside is not None and node_pairs is not None:
        # The node-level LP solves on the other core while the dive's counts are placed.
        place_node_lp(
            search,
            enc,
            node_pairs,
            left,
            during=lambda: _search_classes(search, narrow, name, 0.0, beside=beside),
        )
        return
    _search_classes(
        search,
        narrow,
        name,
        max(left() - for_node_lp, first_floor),
        lp_worker=True,
        first_only=True,
        repack=left if repack and not large and node_pairs is None else None,
        beside=beside,
    )
    if not search.settled(wait_for_baseline=False):
        search.start_ahead()
    if large:
        return
    if node_pairs is not None:
        # Where it has no time, neither have the RINS rounds (they need MIN_STAGE_S and
        # the disaggregation's shares, as much as 10,000 pairs need here).
        if not search.settled(wait_for_baseline=False):
            place_node_lp(search, enc, node_pairs, left)
        return
    after = PLACING_SHARE * search.config.time_limit_s
    incumbent: Placer | None = None
    for _ in range(RINS_ROUNDS):
        if search.settled(wait_for_baseline=False):
            break  # at the LP's bound: no neighbourhood holds more (an easy cycle ends here)
        # Deterministic solves wait for the baseline: whether it has finished by now
        # depends on the load, and the incumbent must not. So does a search without a
        # candidate of its own (no rounded LP placed, and the dive found nothing): the
        # baseline is then the only start, a dive does not start it (``Search.run``),
        # and a cycle without a solver's candidate waits for it anyway, at its end.
        waits = search.config.deterministic or not search.solved
        baseline = [search.baseline] if waits else search.finished_baseline()
        candidates = [*search.solved, *baseline]
        if left() < MIN_STAGE_S or not candidates:
            break
        best = max(candidates, key=search.score)
        if incumbent is not None and search.score(best) <= search.score(incumbent):
            break  # the last neighbourhood held nothing better
        incumbent = best
        values = solution_of(enc, incumbent.placed, search.coef)
        # Over nodes, every waiting gang's pairs made a neighbourhood too big to search in
        # a cycle's share (real-shaped 40 nodes: nothing found in 0.1 s).
        also = waiting_pairs(enc, values) if free_waiting else None
        wide = restricted(enc, search.coef, lp.values, values, also)
        if not search.solved:
            # No solver candidate yet: the incumbent is the baseline. Hinted, the search
            # starts from it; unhinted, real-shaped 200-node models (before the rounded
            # LP came first there) sometimes found nothing in the time left, and the
            # cycle fell back to greedy (a 29% gap).
            # Not hinted otherwise: a hinted search ran longer for the same decisions
            # (500 nodes at 20 gangs/s: creation-to-bound p99 1.36 s instead of 1.15 s).
            hint(wide, incumbent.placed, search.coef)
        # Unhinted, a round's first solution came late: real-shaped 200 nodes, seed 22, at
        # 0.23 s and 5% above the best so far; given 0.6 of the time left (0.31 s) it
        # found nothing, and the cycle ended at 0.71 s. Where it is the last search it
        # now gets all but the disaggregation's shares (seeds 0-23, one solve against two
        # of the old code: mean loss to the best of the three 0.35 -> 0.02%, worst 4.6 ->
        # 0.4%; at 40 nodes, where a node-level stage follows, the same rule lost 0.1%).
        # A shorter round than MIN_STAGE_S would take the disaggregation's time.
        if last and left() - after < MIN_STAGE_S:
            break
        round_s = left() - after if last else left() * 0.6
        if _search_classes(search, wide, f"{prefix}-rins", round_s) and also is None:
            # Its optimum is known: searching around it again finds the same. Not so with
            # the waiting gangs' pairs: those of the new best decision differ.
            break


def _search_classes(
    search: Search,
    enc: Encoding,
    name: str,
    time_limit_s: float,
    lp_worker: bool = False,
    first_only: bool = False,
    repack: Callable[[], float] | None = None,
    beside: Beside | None = None,
) -> bool:
    """A restricted node-class model: its solution is a candidate, its bound is not one.
    With ``repack`` (time left), what its nodes could not hold is re-decided
    (``candidates.repack_counts``).
    ``lp_worker``, ``first_only``: see ``search.run_cpsat``; ``beside``: the model's
    search, already running (the other arguments then unused).

    Returns whether the restricted model was solved to optimality."""
    if beside is not None:
        result = beside.result()
    else:
        result = run_restricted(search, enc, name, time_limit_s, lp_worker, first_only)
    if result.solution is not None:
        placer, counts = place_counts(search, enc, result.solution, result.report.name)
        if repack is not None:
            repack_counts(search, enc, counts, placer, result.report.objective, name, repack)
    return result.optimal


def _node_stage(search: Search, shapes: Shapes, only: set[int] | None) -> None:
    """The exact model over every shape, or over ``only`` (then topped up greedily).

    Over every shape, its LP guides restricted searches first, as on node classes: the
    whole model's search from a hint improved little within a cycle (real-shaped 40-node
    clusters: 2-13% from the bound). The node-class model's search ahead is read before
    the last phase, so that its decision may be the one that phase starts from."""
    problem = search.problem
    enc = _node_encoding(search, shapes, only)
    if only is None:
        deadline = search.remaining() * (1 - GUIDED_SHARE)

        def left() -> float:
            return search.remaining() - deadline

        _guided_search(search, enc, "node-level", left, large=False)
        if search.settled(wait_for_baseline=False) or search.remaining() < MIN_STAGE_S:
            return
    name = "node-level" if only is None else "node-level-admitted"
    _read_ahead(search)
    values = solution_of(enc, _hint_source(search).placed, search.coef)
    hint_values(enc, values)
    if only is None:
        result, improved = beside_whole_search(search, enc, name, values)
        placer = placer_from_counts(problem, enc, decode_counts(enc, improved.tolist()))
        search.solved.append(placer)
        search.origin[id(placer)] = "node-level-lns"
    else:
        result = search.run(enc, name, search.remaining())
    if result.solution is not None and result.report.bound is not None:
        placer = placer_from_counts(problem, enc, decode_counts(enc, result.solution))
        if only is None:
            search.bounds.append(result.report.bound)
            search.solved.insert(0, placer)
        else:
            placer = topped_up(problem, placer, search.config.weights)
            search.solved.append(placer)
        search.origin[id(placer)] = name


def _read_ahead(search: Search) -> None:
    """The search ahead, if one runs, stopped: its bound counts, its decision is placed."""
    ahead, search.ahead = search.ahead, None
    if ahead is not None:
        _class_search_taken(search, ahead.enc, ahead.result())


def _node_encoding(search: Search, shapes: Shapes, only: set[int] | None) -> Encoding:
    problem = search.problem
    nodes = node_bins(problem)
    return encode(problem, shapes, nodes, search.coef, pair_capacity(problem, shapes, nodes, only))


def _hint_source(search: Search) -> Placer:
    """The best decision so far, without waiting for a baseline that has not finished
    (it may not have started: waiting would run it now, on the cycle's time), unless the
    solve is deterministic and must not depend on when it finishes."""
    if search.config.deterministic or not search.solved:
        return search.best_so_far()
    return max([*search.solved, *search.finished_baseline()], key=search.score)


def solve(state: ClusterState, config: SolverConfig | None = None, joint: bool = True) -> Decision:
    """``joint``: with preemption on, decide it with placement where the joint model fits
    (``last_stage.decide_jointly``); False decides it after placement always, as above
    that size (the comparison ``gangsat-bench joint`` makes)."""
    started = time.perf_counter()
    config = config or SolverConfig()
    problem = prepare(state)
    if not problem.schedulable_gangs():
        return decision_from_placements(
            problem,
            gang_greedy_placer(problem),
            config,
            scheduler="cpsat",
            status=SolveStatus.NOTHING_TO_DO,
            wall_s=time.perf_counter() - started,
        )
    # The baseline runs in a thread beside the CP-SAT solves (Search.start_baseline).
    # When a solver's decision makes it moot, it stops at its next gang (a prefix of
    # gang-greedy's decision: whole gangs only); see Search.baseline_cannot_matter.
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gang-greedy") as pool:
        try:
            return _solve(problem, config, started, pool, stop, joint)
        finally:
            stop.set()


def _solve(
    problem: Problem,
    config: SolverConfig,
    started: float,
    pool: ThreadPoolExecutor,
    stop_baseline: threading.Event,
    joint: bool = True,
) -> Decision:
    coef = coefficients(problem, config.weights)
    search = Search(problem, config, coef, started, pool, stop_baseline)
    if config.preemption:
        # Preemption follows placement within the same limit: finding its candidates and
        # the greedy choice took 0.17-0.27 s of real-shaped 200-node cycles, on top.
        search.held_back_s = config.preemption_time_share * config.time_limit_s
    shapes = group(problem, coef)

    pairs_estimate = feasible_pair_estimate(shapes)
    try:
        _placed(search, shapes, pairs_estimate)
    finally:
        if search.ahead is not None:
            search.ahead.discard()

    if search.baseline_cannot_matter():
        stop_baseline.set()
    best = best_exchanged(search)
    if joint and config.preemption:
        return decide_jointly(search, shapes, best)
    return decide_after(search, best)


def _placed(search: Search, shapes: Shapes, pairs_estimate: int) -> None:
    """The placement stages' candidates, into ``search``."""
    problem = search.problem
    config = search.config
    limit = config.max_node_level_pairs
    if len(problem.node_classes) < len(problem.nodes):
        # Where no node-level stage over every shape follows, the classes take all the
        # time (one over the admitted shapes may take what is left). Up to twice the
        # limit they had 0.4 of it, and that stage the rest: real-shaped 100 nodes x 150
        # gangs (6,400-7,500 pairs), seeds 0-11, two solves each way, alternately: mean
        # gap 4.95 -> 3.07%, objective x1.0205 (higher on 10 seeds, lower on none); 120
        # nodes: 2.87 -> 2.72%, x1.0016 (higher on 6, lower on 3).
        over = pairs_estimate > limit
        # Repacking class counts that nodes could not hold is left to the exact node-level
        # stage where one follows over every shape (real-shaped 40 nodes: a repacked dive
        # took 0.2 s of that stage's time for a decision 70% below the first).
        # Where one follows, the class model's search ahead (``search.Ahead``) is read by
        # it. In its place, the node-level model's own search ran ahead (stop 46): against
        # that, real-shaped 40 nodes x 60 gangs, seeds 0-23, three solves each way,
        # alternately: mean gap 1.33 -> 1.02%, above 2% in 16 -> 8 of 72, objective
        # x1.0026 (higher on 12 seeds, lower on 9); 60 nodes (seeds 0-11, two each):
        # 2.81 -> 2.01%, x1.0068 (11 / 1); 80 nodes 2.80 -> 2.33%, x1.0049 (3 / 3).
        share = 1.0 if over else config.aggregate_time_share
        _node_class_stage(search, shapes, share, repack=over, ahead=not over)
    search.ahead_of = None  # only the node-class stage's first decision starts it

    only: set[int] | None = None
    if pairs_estimate > limit and search.admitted is not None:
        only = {s.index for s in shapes.shapes if set(s.gangs) & search.admitted}
    if (
        (pairs_estimate <= limit or only is not None)
        and search.remaining() > MIN_STAGE_S
        and feasible_pair_estimate(shapes, only) <= limit
        and not search.settled(wait_for_baseline=False)
    ):
        _node_stage(search, shapes, only)
