"""What deciding preemption with placement, in one model, buys over deciding it after.

    gangsat-bench joint [--nodes 40] [--gangs 60] [--seeds 8] [--time-limit 1] [--deterministic]

Per seed, one real-shaped cluster (``benchmarks.instances.realistic``: running gangs on
a third of the nodes, pending gangs of several priorities and queues) is decided twice
with preemption on, alternately in the same minutes: by the joint model
(``solver.joint``) and by placement followed by the preemption model
(``solver.preemption``, ``solve(..., joint=False)``). Printed per seed: each decision's
joint objective (what placements and nominations earn, less what evictions cost:
``solver.joint.joint_score``, scored without a solver), their ratio, evictions,
nominations, the joint decision's gap to its bound, wall time, and the validator's
violations (0 expected). In-process and synthetic: no API server, the clusters are
generated. Timed solves differ from run to run by what each stage finds in its time,
placement's too; ``--deterministic`` (budgets in CP-SAT's deterministic time) makes
both runs' placement stages the same, so that the difference is the joint model's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from benchmarks.instances import realistic
from benchmarks.suite import at_least_one, positive
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import Decision
from solver.model import ClusterState
from solver.objective import score
from solver.validate import check


def joint_objective(state: ClusterState, decision: Decision, config: SolverConfig) -> int:
    """Nominated pods count as placed ones; evictions cost their disruption term."""
    placed = {**decision.placements, **decision.nominated}
    priced = decision.model_copy(update={"placements": placed})
    terms = score(state, priced, config.weights)
    return sum(terms.values()) + decision.terms.get("disruption", 0)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gangsat-bench joint", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", type=at_least_one, default=40)
    parser.add_argument("--gangs", type=at_least_one, default=60, help="pending gangs")
    parser.add_argument("--seeds", type=at_least_one, default=8)
    parser.add_argument("--time-limit", type=positive, default=1.0)
    parser.add_argument("--deterministic", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str], console: Console | None = None) -> int:
    args = parse_args(argv)
    # Piped output (logs, tee) gets a wide table instead of 80-column wrapping.
    console = console or (Console() if sys.stdout.isatty() else Console(width=200))
    config = SolverConfig(
        preemption=True, time_limit_s=args.time_limit, deterministic=args.deterministic
    )
    table = Table(
        title=f"Preemption decided with placement (joint) or after it (sequential): "
        f"real-shaped {args.nodes} nodes, {args.gangs} pending gangs, "
        f"{args.time_limit:g} s limit{' (deterministic)' if args.deterministic else ''} "
        "(in-process, synthetic)"
    )
    for column in (
        "seed",
        "joint objective",
        "sequential objective",
        "ratio",
        "evicted joint / seq",
        "nominated joint / seq",
        "joint decided by",
        "joint gap",
        "wall s joint / seq",
        "violations",
    ):
        table.add_column(column, justify="right")
    ratios = []
    for seed in range(args.seeds):
        state = realistic(seed, args.nodes, args.gangs)
        decisions, walls = [], []
        for joint in (True, False):
            started = time.perf_counter()
            decisions.append(solve(state, config, joint=joint))
            walls.append(time.perf_counter() - started)
        together, after = decisions
        scores = [joint_objective(state, d, config) for d in decisions]
        ratio = scores[0] / scores[1] if scores[1] > 0 else float("nan")
        ratios.append(ratio)
        table.add_row(
            str(seed),
            f"{scores[0]:,}",
            f"{scores[1]:,}",
            f"{ratio:.4f}",
            f"{len(together.evictions)} / {len(after.evictions)}",
            f"{len(together.nominated)} / {len(after.nominated)}",
            together.decided_by,
            "-" if together.gap is None else f"{together.gap:.2%}",
            f"{walls[0]:.2f} / {walls[1]:.2f}",
            str(len(check(state, together)) + len(check(state, after))),
        )
    console.print(table)
    console.print(
        f"joint / sequential: min {min(ratios):.4f}, max {max(ratios):.4f}; "
        f"joint higher on {sum(r > 1 for r in ratios)} of {len(ratios)} seeds, "
        f"lower on {sum(r < 1 for r in ratios)}"
    )
    return 0
