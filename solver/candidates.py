"""Decisions made from a model's counts: placed on real nodes, scored, kept as candidates.

``place_counts`` places any model's counts (node classes or nodes); ``repack_counts``
re-decides what a class's nodes could not hold of them. ``place_node_lp`` adds a candidate
of its own where the node-class model's searches are the cycle's last (200 real-shaped
nodes): the LP over every node of the gangs the class LP admits, its optimum rounded. The
class model sums a class's room; where its nodes are nearly full on two resources (3-node
classes asked for 98% of their cpu and 100% of their memory), its counts do not pack, and
the gangs the disaggregation then withdraws cost 2-3% of the objective. Per node, counts
rounded down fit where the LP put them; those rounded up to make a gang whole may not,
and the disaggregation places them elsewhere or withdraws the gang.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

import numpy as np
import numpy.typing as npt

from solver.arrays import FloatArray
from solver.bins import Bin, Pairs, node_bins, pair_capacity
from solver.disaggregate import budgets, disaggregate
from solver.encode import Encoding, encode
from solver.placement import Placer
from solver.relaxation import LpSolution, Matrices, lp_solution, matrices
from solver.repacked import repacked_bins
from solver.restricted import RESTRICT_ZERO, restricted
from solver.search import DETERMINISTIC_WALL_FACTOR, MIN_STAGE_S, Beside, Search, StageResult
from solver.solution import decode_admitted, decode_counts, rounded_for_gangs

REPACK_ROUNDS = 2
REPACK_LOSS = 0.002  # of a class model's objective: below, its disaggregation stands
# The node-level LP's pairs (pod class x node) of the gangs the class LP admits: real-shaped
# 200 nodes, 9,200-11,800; larger models (more nodes) keep the class searches alone.
NODE_LP_PAIRS = 15_000
# What the node-level LP, its encoding and the placement of its counts take per pair:
# real-shaped 200 nodes, 10,000 pairs: 0.02 s encoding, 0.15-0.23 s LP, 0.07-0.11 s
# placing. At 3e-5 the time left (0.16-0.36 s after the dive) held it on 3 of seeds 0-23,
# and cycles ended 0.3 s early; the LP's limit keeps the placement's time instead.
NODE_LP_S_PER_PAIR = 2e-5
# Of that, what its LP's limit leaves: the placement. The LP's set-up outside HiGHS' own
# limit (its matrices: 0.011 s at 10,935 pairs) and part of the placement then come out
# of the decoding's reserve (``search.DECODE_RESERVE``, 0.08 s; decoding took 2 ms at
# 200 nodes). Leaving 1.1e-5 s per pair instead cut the LP short on most seeds (given
# 0.16 s, it needs 0.17-0.19), for cycles of 0.91 s.
NODE_PLACE_S_PER_PAIR = 8e-6
# The class LP's optimum is one of many: alike gangs of different sizes score the same per
# pod, and which optimum rounds and packs best on nodes is a coin flip (stop 52: guessed
# from what each admits, right on 13 of 24 seeds). Where the cycle's time holds them, the
# optima with the pods' prices tilted by this share of themselves, toward smaller gangs
# then toward larger ones, are rounded and placed too (``place_other_optima``).
TILT = 1e-5
# What solving, rounding and placing one such optimum takes per pair, counted where a
# solve is deterministic (its wall time may not decide what runs): real-shaped 100-1,000
# nodes, deterministic placements, 3.5e-5 - 7e-5.
OTHER_OPTIMUM_S_PER_PAIR = 7e-5
# The tilted LPs are solved over the model's own columns; a large model's LP may have
# been solved over groups (``grouped_lp``), in a fraction of that time. Real-shaped,
# seeds 0-3, best of 3: 1,000 x 1,500 gangs 0.074-0.086 against 0.094-0.144 s (x1.25-1.75),
# 500 x 1,500 x1.14-1.70; 5,000 nodes, where no other optimum has time, 0.23 against
# 0.68 s (x2.9). (200 x 600 x0.95-0.99: its LP falls back to the model's own.)
UNGROUPED_LP_FACTOR = 1.8


def place_counts(
    search: Search, enc: Encoding, solution: Sequence[int], name: str
) -> tuple[Placer, dict[int, list[tuple[int, int]]]]:
    """The solution disaggregated, as a candidate named ``name``; returned with the
    counts it came from."""
    admitted = decode_admitted(enc, solution)
    counts = decode_counts(enc, solution)
    config = search.config
    # No floor: once the cycle's time is used, an exact packing would only add to it
    # (real-shaped 1,000 nodes: 0.04 s past the limit, for no gain on any seed measured).
    started = time.perf_counter()
    budget, reorder, lp = budgets(config.time_limit_s, search.remaining())
    placer = disaggregate(
        search.problem,
        enc,
        counts,
        admitted,
        config.weights,
        budget,
        config.deterministic,
        reorder,
        until=time.perf_counter() + search.remaining(),
        lp_budget_s=lp,
    )
    if search.admitted is None or all(
        search.score(placer) >= search.score(p) for p in search.solved
    ):
        search.admitted = admitted
    search.solved.append(placer)
    search.origin[id(placer)] = name
    search.placing_s = max(search.placing_s, time.perf_counter() - started)
    return placer, counts


def dive_beside(
    search: Search, enc: Encoding, lp: LpSolution, name: str, time_limit_s: float
) -> Beside | None:
    """Where the class searches are the cycle's last (200 nodes), the dive over what the
    LP uses, searching on the other core while the rounded LP is placed on nodes, which
    is pure Python (0.15-0.25 s at 200 nodes; the dive, stopped at its first solution,
    took 0.05-0.07 s after it, and the other core sat idle). Its result ends it as soon
    as it has a solution. Not in deterministic solves: where it stops would depend on
    the load."""
    if search.config.deterministic:
        return None
    narrow = restricted(enc, search.coef, lp.values)
    return Beside(search, narrow, name, max(time_limit_s, MIN_STAGE_S), lp_worker=True)


def run_restricted(
    search: Search,
    enc: Encoding,
    name: str,
    time_limit_s: float,
    lp_worker: bool = False,
    first_only: bool = False,
) -> StageResult:
    """A solve of a model that is no relaxation (restricted, or repacked): see
    ``Search.no_bound``."""
    result = search.run(enc, name, time_limit_s, lp_worker=lp_worker, first_only=first_only)
    search.no_bound()
    return result


def repack_counts(
    search: Search,
    enc: Encoding,
    counts: dict[int, list[tuple[int, int]]],
    placer: Placer,
    objective: int | None,
    name: str,
    left: Callable[[], float],
) -> None:
    """Up to REPACK_ROUNDS times: each class's capacity less what its nodes could not
    hold of the last counts (``repacked_bins``), the same pairs dived again, disaggregated
    again; every result is a candidate, scored like the rest. Not when the nodes lost
    less than REPACK_LOSS of the model's objective (5,000 nodes: 0.01%, three rounds for
    nothing)."""
    for _ in range(REPACK_ROUNDS):
        if objective is None or objective - search.score(placer) <= REPACK_LOSS * abs(objective):
            return
        bins = repacked_bins(search.problem, enc, counts, placer)
        if bins is None or left() < MIN_STAGE_S:
            return
        problem, rounding = search.problem, enc.rounding
        enc = encode(problem, enc.shapes, bins, search.coef, enc.pairs, rounding=rounding)
        result = run_restricted(search, enc, f"{name}-repacked", left() / 2, lp_worker=True)
        if result.solution is None:
            return
        placer, counts = place_counts(search, enc, result.solution, result.report.name)
        objective = result.report.objective


def node_lp_pairs(
    search: Search, classes: Encoding, values: npt.NDArray[np.float64]
) -> tuple[list[Bin], Pairs] | None:
    """Every node (one bin each), and the node-level pairs of the shapes the class
    model's LP optimum ``values`` admits (any fraction of a gang); None where it admits
    none, or the pairs are more than NODE_LP_PAIRS."""
    only = {s for s, var in classes.admitted.items() if values[var] >= RESTRICT_ZERO}
    if not only:
        return None
    nodes = node_bins(search.problem)
    pairs = pair_capacity(search.problem, classes.shapes, nodes, only)
    return (nodes, pairs) if len(pairs) <= NODE_LP_PAIRS else None


def node_lp_s(node_pairs: tuple[list[Bin], Pairs]) -> float:
    """The time the node-level LP over ``node_pairs`` needs left to be started."""
    return NODE_LP_S_PER_PAIR * len(node_pairs[1])


def place_node_lp(
    search: Search,
    classes: Encoding,
    node_pairs: tuple[list[Bin], Pairs],
    left: Callable[[], float],
    during: Callable[[], object] | None = None,
) -> bool:
    """The LP over the node-level pairs (``node_lp_pairs``) of ``classes``' shapes, its
    optimum rounded and placed as the candidate ``node-level-admitted-lp-rounded``;
    returns whether it was placed. Not where the time ``left`` cannot hold it. Over some
    gangs only, it is no relaxation: its stage reports no bound. Its rounded counts must
    go through the disaggregation (not ``placer_from_counts``): a count rounded up may
    ask a node for more than it has.

    ``during``: run here, always, while HiGHS solves the LP on the other core (the
    dive's placement, pure Python: real-shaped 200 nodes, 0.18-0.25 s beside an LP of
    0.21-0.29 s, where one after the other took 0.40-0.54 s)."""
    nodes, pairs = node_pairs
    enc: Encoding | None = None
    limit = 0.0
    if left() >= node_lp_s(node_pairs):
        enc = encode(search.problem, classes.shapes, nodes, search.coef, pairs, lp_only=True)
        # An LP that has not ended when only its placement's time is left is cut short:
        # the cycle keeps its time limit, and the decision so far stands. Deterministic
        # solves count CP-SAT's time only, so ``left`` holds plenty; HiGHS stops on the
        # wall clock, which then only guards, as for CP-SAT's solves.
        limit = left() - NODE_PLACE_S_PER_PAIR * len(pairs)
        if search.config.deterministic:
            limit *= DETERMINISTIC_WALL_FACTOR
    if enc is None or limit < MIN_STAGE_S:
        if during is not None:
            during()
        return False
    name = "node-level-admitted-lp"
    if during is None:
        lp = search.lp(enc, limit, name, relaxation=False)
    else:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="node-lp") as beside:
            job = beside.submit(search.lp, enc, limit, name, relaxation=False)
            during()
            lp = job.result()
    if lp is None:
        return False
    solution = rounded_for_gangs(enc, lp.values)
    place_counts(search, enc, solution, "node-level-admitted-lp-rounded")
    return True


def tilted_costs(enc: Encoding, cost: FloatArray, toward_smaller: bool) -> FloatArray:
    """The LP's ``cost`` with each pod's price lowered by up to TILT of itself, the more
    the larger its gang (``toward_smaller``) or the smaller: of the LP's optima, HiGHS
    then returns one that leaves the other gangs fractional or out. A gang's size here is
    the pods it still needs (``Shape.need``: 0 for a running gang's extras). Other prices
    are kept."""
    pairs = len(enc.pairs)
    tilted = cost.copy()
    if not pairs:
        return tilted
    needs = np.array([enc.shapes.shapes[sc.shape].need for sc in enc.shapes.classes], np.float64)
    size = needs[enc.pairs.cls] / max(1.0, float(needs.max()))
    tilted[:pairs] *= 1 - TILT * (size if toward_smaller else 1 - size)
    return tilted


def place_other_optima(search: Search) -> None:
    """Where the time left holds each, the node-class LP's optimum with its pods' prices
    tilted toward smaller gangs, then toward larger ones (``tilted_costs``), rounded and
    placed as candidates (``node-classes-lp-smaller-rounded``, ``-larger-``) unless the
    rounding is one already placed (the LP's own, where it was). Neither LP is the
    model's: they report no bound. Timed, each needs the class LP's time (over the
    model's own columns) and the longest placement's so far left; deterministic,
    OTHER_OPTIMUM_S_PER_PAIR per pair, counted as spent."""
    if search.class_lp is None:
        return
    enc, class_lp, lp_s = search.class_lp
    deterministic = search.config.deterministic
    if class_lp.over_groups:
        lp_s *= UNGROUPED_LP_FACTOR
    per_pairs = OTHER_OPTIMUM_S_PER_PAIR * len(enc.pairs)
    plain: Matrices | None = None
    seen = {search.class_rounded} if search.class_rounded is not None else set()
    for name, toward_smaller in (("smaller", True), ("larger", False)):
        # Again for the second: the first's placement may have been the longest so far.
        need = per_pairs if deterministic else lp_s + search.placing_s
        if search.settled(wait_for_baseline=False) or search.remaining() < need:
            return
        plain = plain if plain is not None else matrices(enc.rows)
        limit = search.remaining() - search.placing_s
        if deterministic:
            search.deterministic_s += need
            limit = need * DETERMINISTIC_WALL_FACTOR  # a guard only, as for CP-SAT's solves
        tilted = replace(plain, cost=tilted_costs(enc, plain.cost, toward_smaller))
        name_lp = f"node-classes-lp-{name}"
        solve = partial(lp_solution, tilted)
        lp_tilted = search.lp(enc, limit, name_lp, relaxation=False, solve=solve)
        if lp_tilted is None:
            return
        solution = tuple(rounded_for_gangs(enc, lp_tilted.values))
        if solution not in seen:
            seen.add(solution)
            place_counts(search, enc, solution, f"{name_lp}-rounded")
