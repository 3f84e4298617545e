"""One model's LP-guided searches (``guided_search``): its LP relaxation bounds it and
guides restricted CP-SAT searches, on node classes and on nodes alike (``cpsat``'s
stages 2 and 3), and the candidates they find are placed on real nodes."""

from __future__ import annotations

from collections.abc import Callable

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
from solver.disaggregate import PLACING_SHARE
from solver.encode import Encoding
from solver.placement import Placer
from solver.relaxation import LpSolution
from solver.restricted import restricted, waiting_pairs
from solver.search import MIN_STAGE_S, Beside, Search, StageResult
from solver.solution import hint, rounded_for_gangs, solution_of

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
# What a large model's dive and the disaggregation of its decision take, per pair
# (real-shaped 1,000 nodes, 12,000 pairs: 0.2-0.25 s each); below, the dive after the
# rounded LP is skipped (on large models and where the class searches are the last).
DIVE_S_PER_PAIR = 4e-5


def lp_stage(search: Search, enc: Encoding, time_limit_s: float, name: str) -> LpSolution | None:
    lp = search.lp(enc, time_limit_s, name)
    if lp is not None:
        search.bounds.append(lp.bound)
    return lp


def class_search_taken(search: Search, agg: Encoding, result: StageResult) -> None:
    """A whole search of the node-class model, here or ahead: its bound counts (the model
    is a relaxation of the real problem), its decision is placed."""
    if result.solution is not None and result.report.bound is not None:
        search.bounds.append(result.report.bound)
        place_counts(search, agg, result.solution, result.report.name)


def guided_search(
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
    lp = lp_stage(search, enc, allowed, f"{prefix}-lp")
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
            during=lambda: search_classes(search, narrow, name, 0.0, beside=beside),
        )
        return
    search_classes(
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
        if search_classes(search, wide, f"{prefix}-rins", round_s) and also is None:
            # Its optimum is known: searching around it again finds the same. Not so with
            # the waiting gangs' pairs: those of the new best decision differ.
            break


def search_classes(
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
