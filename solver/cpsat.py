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
from concurrent.futures import ThreadPoolExecutor

from solver.bins import class_bins, feasible_pair_estimate, node_bins, pair_capacity
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.decode import decision_from_placements
from solver.disaggregate import placer_from_counts
from solver.encode import Encoding, encode
from solver.exchanges import best_exchanged
from solver.guided import class_search_taken, guided_search
from solver.last_stage import decide_after, decide_jointly
from solver.model import ClusterState
from solver.neighbourhoods import beside_whole_search
from solver.objective import coefficients
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.search import (
    MIN_STAGE_S,
    Ahead,
    Search,
    gang_greedy_placer,
)
from solver.shapes import Shapes, group
from solver.solution import (
    decode_counts,
    hint_values,
    solution_of,
)
from solver.topup import topped_up

# The wide (RINS) neighbourhood is searched on node-class models up to this many times
# max_exact_class_pairs: above, real-shaped 1,000-node models found nothing in 0.5 s.
RINS_PAIRS = 2
GUIDED_SHARE = 0.6  # of the node-level stage's time, for its LP-guided searches


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
    guided_search(
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
    class_search_taken(search, agg, search.run(agg, "node-classes", left(), presolve=False))


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

        guided_search(search, enc, "node-level", left, large=False)
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
        class_search_taken(search, ahead.enc, ahead.result())


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
