"""A few branches of a class model's LP on the gangs it admits in part that are worth the
most: a tighter valid bound, and an LP optimum to round that keeps such a gang whole or
drops it whole.

A gang whose admission price is a large share of the objective (a high priority: priority
x rank x need) can be admitted 0.3-0.7 of a gang by the LP; rounded, it is dropped, the
room the LP gave it goes to what the top-up finds, and the bound still counts its
fraction (real-shaped 200 nodes, seed 60: one 8-pod gang worth 14% of the bound at 0.67;
the decision 6.7% from the bound, where no decision can be within 2.5% of it). Every
placement admits it whole or not at all: the LP with its admission at least the integer
above (up) and the LP with it at most the integer below (down) hold every placement
between them, so the larger of their optima is a bound too, at most the LP's. Branching
on, best first (the open LP of the largest optimum, on its gang worth most in its
fraction), a few times, the largest optimum over the open LPs stays a bound; the LP that
holds it guides what follows (the rounding, the dive, the RINS rounds) in the first LP's
place. The two LPs of a branch are solved at once, one on each core (HiGHS releases the
GIL). Timed: "The LP branched" and "Small parts of valuable gangs, and small clusters,
branched" in benchmarks/solver_history.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from solver.config import ObjectiveWeights
from solver.encode import Encoding
from solver.grouped_lp import model_lp
from solver.relaxation import LpSolution, Meanwhile, NoSolution
from solver.search import DETERMINISTIC_WALL_FACTOR, Search
from solver.solution import ROUND_UP_ADMITTED, ROUNDING_TOLERANCE
from solver.topup import gang_prices

# A gang is branched on where rounding would drop it (admitted past an integer by less than
# ROUND_UP_ADMITTED) and that fraction of what a gang of its shape earns (admission and
# pods) is at least BRANCH_MIN_STAKE of the LP's optimum; a fraction below
# BRANCH_MIN_FRACTION only where that stake is at least BRANCH_LARGE_STAKE of it. Small
# fractions are mostly the LP's filler, not worth a branch's time, but one of a gang worth
# a fifth of the optimum holds a large share of the gap (real-shaped 200 nodes, seed 44:
# 0.094 of such a gang; branched, the bound fell 1.3% and the gap 2.27 -> 0.56%).
BRANCH_MIN_FRACTION = 0.2
BRANCH_MIN_STAKE = 0.002
BRANCH_LARGE_STAKE = 0.01
MAX_BRANCHES = 3
# Of the time left, what the branches may take in all: the rounding, its placement and
# the searches after it need the rest (real-shaped 1,000 nodes: a branch's two LPs
# 0.09-0.15 s at once, 0.6-0.7 s left).
BRANCH_SHARE = 0.3
# ... and the least time left for one to start: what follows the branches (the rounding,
# its placement, the searches) takes longer on larger models. At most BRANCH_MIN_LEFT of
# the limit (placing a 1,000-node cycle's counts takes 0.45-0.5 s), at most BRANCH_FOLLOW
# branches' time (BRANCH_S_PER_PAIR): on real-shaped 40 nodes (600 pairs, a branch 9 ms),
# where the stage before the node-level one has 0.2-0.3 s, that is 0.09 s.
BRANCH_MIN_LEFT = 0.4
BRANCH_FOLLOW = 10
# What a branch (its two LPs at once) takes per pair: what the least time left to start
# counts, and what deterministic solves count for one (their wall time may not decide
# what runs). Real-shaped 1,000 nodes, 12,500 pairs, 0.09-0.18 s; 40 nodes, 600 pairs,
# 8-10 ms (and about 1.5 ms of its own on any model).
BRANCH_S_PER_PAIR = 1.5e-5

Narrowed = tuple[tuple[int, int, int], ...]  # (variable, low, high), by variable


@dataclass(frozen=True)
class _Node:
    """An open LP: the variables' bounds it narrows, a bound on every placement it holds
    (its optimum's, or its parent's where it was not solved in time), and its optimum."""

    narrowed: Narrowed
    bound: int
    lp: LpSolution | None


@dataclass(frozen=True)
class Tree:
    """What the branches left: the largest bound over the open LPs (a bound on every
    placement), the optimum of the solved one with the largest, and how many branches."""

    bound: int
    guide: LpSolution
    branches: int


def branch_variable(enc: Encoding, lp: LpSolution, weights: ObjectiveWeights) -> int | None:
    """The admitted count whose fraction is worth most (what a gang of its shape earns
    placed whole, ``topup.gang_prices``: as much is lost where rounding drops it), where
    rounding would drop that fraction and it is worth a branch; None if there is none."""
    prices = gang_prices(enc.problem, weights).base
    best: tuple[float, int] | None = None
    for s, var in enc.admitted.items():
        value = float(lp.values[var])
        fraction = value - math.floor(value + ROUNDING_TOLERANCE)
        if not ROUNDING_TOLERANCE < fraction < ROUND_UP_ADMITTED:
            continue
        stake = fraction * float(prices[enc.shapes.shapes[s].gangs[0]])
        least = BRANCH_MIN_STAKE if fraction >= BRANCH_MIN_FRACTION else BRANCH_LARGE_STAKE
        worth_it = stake > 0 and stake >= least * abs(lp.bound)
        if worth_it and (best is None or stake > best[0]):
            best = (stake, var)
    return None if best is None else best[1]


def branched(
    enc: Encoding,
    root: LpSolution,
    weights: ObjectiveWeights,
    time_limit_s: float,
    until: float | None,
    most: int = MAX_BRANCHES,
) -> Tree:
    """Best first from ``root`` (``enc``'s LP optimum), at most ``most`` branches: the open
    LP of the largest bound is split on its ``branch_variable``, its two LPs solved at once
    within ``time_limit_s`` and by ``until`` (a ``time.perf_counter`` instant; None: the
    limit alone, and ``most`` decides how many, as deterministic solves need). An LP with
    no solution holds no placement and is closed; one not solved in time keeps its
    parent's bound. The guide is the LP of the largest bound, the root where that one was
    not solved."""
    open_ = [_Node(narrowed=(), bound=root.bound, lp=root)]
    branches = 0
    while branches < most and open_:
        limit = time_limit_s if until is None else min(time_limit_s, until - time.perf_counter())
        node = max(open_, key=lambda n: n.bound)
        var = branch_variable(enc, node.lp, weights) if node.lp is not None else None
        if node.lp is None or var is None or limit <= 0:
            break  # nothing to branch on lowers the largest bound, or no time
        value = float(node.lp.values[var])
        up = _narrowed(enc, node.narrowed, var, low=math.ceil(value))
        down = _narrowed(enc, node.narrowed, var, high=math.floor(value))
        children = _solved_at_once(enc, up, down, limit)
        open_.remove(node)
        for narrowed, (solved, proof) in zip((up, down), children, strict=True):
            if solved is not None:
                open_.append(_Node(narrowed, min(node.bound, solved.bound), solved))
            elif not proof.proved:
                open_.append(_Node(narrowed, node.bound, None))
        branches += 1
    if not open_:
        # Every LP proved to hold no placement: not so in exact arithmetic (a down branch
        # of a feasible LP is feasible), only where HiGHS' tolerances misjudged one.
        return Tree(bound=root.bound, guide=root, branches=branches)
    best = max(open_, key=lambda n: n.bound)
    return Tree(bound=best.bound, guide=best.lp or root, branches=branches)


def branch_stage(
    search: Search, enc: Encoding, lp: LpSolution, name: str, left: Callable[[], float]
) -> LpSolution:
    """Where a gang is worth a branch and the time left holds one, the branches, reported
    as a stage named ``name``: their bound counts where it is lower than ``lp``'s, and the
    LP that holds it is returned to guide the rest; else ``lp``. Deterministic solves
    count BRANCH_S_PER_PAIR of their time per branch, and give the LPs that times
    DETERMINISTIC_WALL_FACTOR of the wall as a guard only."""
    config = search.config
    weights = config.weights
    need = min(
        BRANCH_MIN_LEFT * config.time_limit_s, BRANCH_FOLLOW * BRANCH_S_PER_PAIR * len(enc.pairs)
    )
    if branch_variable(enc, lp, weights) is None or left() < need:
        return lp
    found: list[Tree] = []
    deterministic = config.deterministic
    share = BRANCH_SHARE * left()

    def solve(seconds: float) -> LpSolution:
        if deterministic:
            most = max(1, min(MAX_BRANCHES, int(share / (BRANCH_S_PER_PAIR * len(enc.pairs)))))
            tree = branched(enc, lp, weights, seconds * DETERMINISTIC_WALL_FACTOR, None, most)
            search.deterministic_s += tree.branches * BRANCH_S_PER_PAIR * len(enc.pairs)
        else:
            tree = branched(enc, lp, weights, seconds, time.perf_counter() + seconds)
        found.append(tree)
        return tree.guide

    guide = search.lp(enc, share, name, relaxation=False, solve=solve)
    tree = found[0]
    if tree.bound < lp.bound:
        search.bounds.append(tree.bound)
        search.stages[-1] = search.stages[-1].model_copy(update={"bound": tree.bound})
    return guide if guide is not None else lp


def _solved_at_once(
    enc: Encoding, first: Narrowed, second: Narrowed, time_limit_s: float
) -> list[tuple[LpSolution | None, NoSolution]]:
    """Both LPs, the second on this thread while HiGHS solves the first on its own."""
    proofs = (NoSolution(), NoSolution())
    other: list[LpSolution | None] = []

    def meanwhile() -> None:
        other.append(model_lp(_narrowed_encoding(enc, second), time_limit_s, proof=proofs[1]))

    solved = model_lp(_narrowed_encoding(enc, first), time_limit_s, Meanwhile(meanwhile), proofs[0])
    return [(solved, proofs[0]), (other[0] if other else None, proofs[1])]


def _narrowed(
    enc: Encoding, narrowed: Narrowed, var: int, low: int | None = None, high: int | None = None
) -> Narrowed:
    """``narrowed`` with ``var`` narrowed further to at least ``low``, at most ``high``."""
    bounds = {v: (lo, hi) for v, lo, hi in narrowed}
    lo, hi = bounds.get(var, (enc.rows.low[var], enc.rows.high[var]))
    bounds[var] = (lo if low is None else max(lo, low), hi if high is None else min(hi, high))
    return tuple(sorted((v, lo, hi) for v, (lo, hi) in bounds.items()))


def _narrowed_encoding(enc: Encoding, narrowed: Narrowed) -> Encoding:
    """``enc`` with its variables' bounds narrowed (the bounds copied, the rows shared)."""
    rows = replace(enc.rows, low=list(enc.rows.low), high=list(enc.rows.high))
    for var, low, high in narrowed:
        rows.low[var] = low
        rows.high[var] = high
    return replace(enc, rows=rows)
