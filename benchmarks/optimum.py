"""Where a cycle's decision stands against the problem's optimum, found offline.

    gangsat-bench optimum [--nodes 40] [--gangs 60] [--seeds 0,1,2] [--time-limit 1]
                          [--mip-time-limit 30] [--node-level/--no-node-level]
                          [--pattern-bound SECONDS] [--class-packing SECONDS]

A decision's reported gap is to the cycle's bound, so a large gap may be a weak search
or a loose bound. Per seed, on one real-shaped cluster (``benchmarks.instances.realistic``)
this decides the cycle as gangsat does (``solver.cpsat.solve``), then solves the same
encodings to (near) optimality with HiGHS' branch and cut, which a cycle has no time for:

- the node-class model (``solver.encode`` over ``bins.class_bins``): its optimum, then
  that optimum placed on real nodes by the cycle's own disaggregation
  (``solver.disaggregate``, its exact packings given seconds instead of a cycle's share):
  what the class model is worth once packed;
- with ``--node-level``, the exact model over every node (``bins.node_bins``): its best
  solution, checked against ``solver.objective.evaluate``, and its dual bound, a valid
  bound on the real problem. Real-shaped 40-node clusters solve to MIP_GAP in 1-20 s;
  200 nodes do not in minutes;
- with ``--pattern-bound``, the node-level model with each node's pods as whole packings
  (``benchmarks.pattern_bound``), from the decision's packings on, for about that many
  seconds: a valid bound that no fractional pod loosens;
- with ``--class-packing``, the class LP's optimum rounded as the cycle rounds it (what
  1,000-node cycles place; this LP is solved over the model's own columns, so its
  optimum may be another of the same bound than the cycle's) packed class by class
  exactly, for up to that many seconds a class (``benchmarks.class_packing``): how many
  classes are proved asked for more than any packing of their nodes holds, and that
  worth's share of what is asked. Not about the row's decision.

"Optimum" is HiGHS' best within MIP_GAP of its dual bound, or at the time limit.
Printed per seed, as fractions of the class LP's bound (the cycle's first bound): the
decision, the class optimum and its packing, the node-level optimum and dual bound; the
decision's gap to the best bound found (an upper bound on its real gap), and how far it
lies below the best solution found. In-process and synthetic; the MIPs take seconds to
minutes, not a cycle's second.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.optimize import Bounds, LinearConstraint, milp

from benchmarks.class_packing import Overstated, class_packings, overstated
from benchmarks.instances import realistic
from benchmarks.pattern_bound import PatternBound, pattern_bound
from benchmarks.suite import at_least_one, positive
from solver.bins import class_bins, node_bins, pair_capacity
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decode import relative_gap
from solver.disaggregate import disaggregate, placer_from_counts
from solver.encode import Encoding, encode
from solver.objective import coefficients, evaluate
from solver.problem import prepare
from solver.relaxation import LinearRows, bound_of, matrices, solve_lp
from solver.shapes import group
from solver.solution import decode_admitted, decode_counts, rounded_for_gangs

MIP_GAP = 0.002  # HiGHS stops within this relative gap of its dual bound
PACK_S = 2.0  # for the class optimum's exact packings, in all


@dataclass(frozen=True)
class MipResult:
    objective: int | None  # of the best solution found; None if none
    bound: int | None  # on the model's objective (rounded up)
    values: list[int] | None
    wall_s: float


def solve_mip(rows: LinearRows, time_limit_s: float) -> MipResult:
    """The encoding's rows as an integer program (every CP-SAT variable is an integer)."""
    m = matrices(rows)
    started = time.perf_counter()
    result = milp(
        -m.cost,  # milp minimises
        constraints=LinearConstraint(m.matrix, m.low, m.high),
        integrality=np.ones(len(m.cost)),
        bounds=Bounds(m.col_low, m.col_high),
        options={"time_limit": time_limit_s, "mip_rel_gap": MIP_GAP, "disp": False},
    )
    wall = time.perf_counter() - started
    values = [round(v) for v in result.x] if result.x is not None else None
    dual = getattr(result, "mip_dual_bound", None)
    bound = bound_of(-float(dual)) if dual is not None and math.isfinite(dual) else None
    # Of the rounded values (what is decoded and scored), not of HiGHS' own x.
    objective = round(float(m.cost @ np.array(values))) if values is not None else None
    return MipResult(objective, bound, values, wall)


@dataclass(frozen=True)
class SeedResult:
    seed: int
    decision: int
    decision_bound: int | None
    class_lp: int
    class_mip: MipResult
    class_packed: int | None  # the class optimum placed on nodes, scored
    node_mip: MipResult | None
    node_scored: int | None  # the node-level solution as evaluate scores it
    pattern: PatternBound | None = None
    class_packing: Overstated | None = None  # of the class LP's optimum, rounded

    def best_bound(self) -> int:
        # The class model relaxes the real problem: its MIP's dual bound holds for it too.
        bounds = [self.class_lp, self.decision_bound, self.class_mip.bound]
        if self.node_mip is not None:
            bounds.append(self.node_mip.bound)
        if self.pattern is not None:
            bounds.append(self.pattern.bound)
        return min(b for b in bounds if b is not None)

    def best_found(self) -> int:
        found = [self.decision, self.class_packed, self.node_scored]
        return max(f for f in found if f is not None)


def measure(
    seed: int,
    nodes: int,
    gangs: int,
    time_limit_s: float,
    mip_s: float,
    node_level: bool,
    pattern_s: float = 0.0,
    class_packing_s: float = 0.0,
) -> SeedResult:
    state = realistic(seed, nodes, gangs)
    config = SolverConfig(seed=seed, time_limit_s=time_limit_s)
    decision = solve(state, config)
    if decision.objective is None:
        raise RuntimeError(f"seed {seed}: the decision has no objective ({decision.status})")
    problem = prepare(state)
    coef = coefficients(problem, config.weights)
    shapes = group(problem, coef)
    bins = class_bins(problem)
    classes = encode(problem, shapes, bins, coef, pair_capacity(problem, shapes, bins), True)
    lp = solve_lp(classes.rows, 60.0)
    if lp is None:
        raise RuntimeError(f"seed {seed}: the class LP found no optimum in 60 s")
    overstated_by = None
    if class_packing_s > 0:
        rounded = rounded_for_gangs(classes, lp.values)
        overstated_by = overstated(class_packings(problem, classes, rounded, class_packing_s))
    class_mip = solve_mip(classes.rows, mip_s)
    packed = None
    if class_mip.values is not None:
        counts = decode_counts(classes, class_mip.values)
        admitted = decode_admitted(classes, class_mip.values)
        # Offline: the packings get seconds of wall time, not a cycle's share of it.
        placer = disaggregate(
            problem,
            classes,
            counts,
            admitted,
            config.weights,
            PACK_S,
            False,
            PACK_S / 2,
            lp_budget_s=PACK_S / 2,
        )
        packed = sum(evaluate(problem, placer.placed, config.weights).values())
    node_mip = scored = pattern = None
    exact: Encoding | None = None
    if node_level or pattern_s > 0:
        every = node_bins(problem)
        exact = encode(problem, shapes, every, coef, pair_capacity(problem, shapes, every), True)
    if pattern_s > 0 and exact is not None:
        index = {n.name: i for i, n in enumerate(problem.nodes)}
        start = {pod: index[node] for pod, node in decision.placements.items()}
        pattern = pattern_bound(exact, coef, start, pattern_s)
    if node_level and exact is not None:
        node_mip = solve_mip(exact.rows, mip_s)
        if node_mip.values is not None:
            placer = placer_from_counts(problem, exact, decode_counts(exact, node_mip.values))
            scored = sum(evaluate(problem, placer.placed, config.weights).values())
    return SeedResult(
        seed=seed,
        decision=decision.objective,
        decision_bound=decision.bound,
        class_lp=lp.bound,
        class_mip=class_mip,
        class_packed=packed,
        node_mip=node_mip,
        node_scored=scored,
        pattern=pattern,
        class_packing=overstated_by,
    )


def _overstated(o: Overstated | None) -> str:
    if o is None:
        return "-"
    return f"{o.short_classes}/{o.classes}, {o.share:.2%} ({o.worst:.1%})"


def _of(value: int | None, base: int) -> str:
    # Objectives may be zero or below where the fairness term dominates.
    return "-" if value is None else f"{value / max(1, abs(base)):.4f}"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench optimum", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", type=at_least_one, default=40)
    parser.add_argument("--gangs", type=at_least_one, default=60, help="pending gangs")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--time-limit", type=positive, default=1.0, help="the cycle's")
    parser.add_argument("--mip-time-limit", type=positive, default=30.0, help="per MIP")
    parser.add_argument("--node-level", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--pattern-bound",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the bound over whole packings per node, for about this long (0: not computed)",
    )
    parser.add_argument(
        "--class-packing",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the class LP's rounded counts packed exactly, up to this long per class of "
        "nodes (0: not run)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    console = console or (Console() if sys.stdout.isatty() else Console(width=200))
    table = Table(
        title=f"Decision against the optimum: real-shaped {args.nodes} nodes, {args.gangs} "
        f"pending gangs, {args.time_limit:g} s cycle; HiGHS MIPs of at most "
        f"{args.mip_time_limit:g} s (in-process, synthetic); fractions of the class LP bound"
    )
    for column in (
        "seed",
        "decision",
        "decision's bound",
        "class optimum (s)",
        "class optimum packed",
        "node-level best / dual bound (s)",
        "packing bound (s, rounds)",
        "LP counts no packing holds: classes, worth (worst class)",
        "gap to best bound",
        "below best found",
    ):
        table.add_column(column, justify="right")
    mismatches = 0
    for seed in args.seeds:
        r = measure(
            seed,
            args.nodes,
            args.gangs,
            args.time_limit,
            args.mip_time_limit,
            args.node_level,
            args.pattern_bound,
            args.class_packing,
        )
        base = r.class_lp
        node = "-"
        if r.node_mip is not None:
            node = (
                f"{_of(r.node_scored, base)} / {_of(r.node_mip.bound, base)} "
                f"({r.node_mip.wall_s:.1f})"
            )
            # The exact model's objective is the real one: a difference is an encoding bug.
            if r.node_scored is not None and r.node_mip.objective is not None:
                mismatches += abs(r.node_scored - r.node_mip.objective) > 1e-6 * abs(base)
        table.add_row(
            str(seed),
            _of(r.decision, base),
            _of(r.decision_bound, base),
            f"{_of(r.class_mip.objective, base)} ({r.class_mip.wall_s:.1f})",
            _of(r.class_packed, base),
            node,
            "-"
            if r.pattern is None
            else f"{_of(r.pattern.bound, base)} ({r.pattern.wall_s:.1f}, {r.pattern.rounds})",
            _overstated(r.class_packing),
            f"{relative_gap(r.decision, r.best_bound()) or 0.0:.2%}",
            f"{relative_gap(r.decision, r.best_found()) or 0.0:.2%}",
        )
    console.print(table)
    if mismatches:
        console.print(f"node-level MIP objective differs from evaluate on {mismatches} seed(s)")
        return 1
    return 0
