"""Large-neighbourhood search over the node-level model: a few nodes freed at a time.

On small heterogeneous clusters (real-shaped 40 nodes: big GPU pods, gangs of up to 23
pods, selectors that split the nodes into pools) neither CP-SAT's one worker nor HiGHS'
branch and bound improved a decision much within a cycle: the whole model's search spent
its time in the LP (51 conflicts in 0.8 s) and found nothing on its own. Freeing the
counts of a handful of nodes and fixing every other node at the best decision's counts
leaves a model CP-SAT solves in tens of milliseconds; the gangs may move between the
freed nodes, leave them, or (a waiting gang) be admitted there. Each round keeps the
better decision; the neighbourhoods alternate between nodes where a waiting gang fits
(the move the search lacked: one large gang traded for several smaller ones) and nodes
drawn at random.

A neighbourhood always contains the incumbent (the fixed counts are its own), so no round
loses what the last one found; its bound is not one of the real problem's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import IntArray
from solver.decision import StageReport
from solver.encode import Encoding
from solver.search import Search, StageResult, run_cpsat, set_limits

# Freed per round: a share of the nodes, within these limits (a sub-model of 8-12 nodes
# of a real-shaped 40-node cluster solved to optimality in 0.01-0.05 s).
FREE_SHARE = 0.25
MIN_FREE = 4
MAX_FREE = 12
ROOM_FACTOR = 2  # a waiting gang's neighbourhood holds this many times its demand
MIN_ROUND_WORK = 0.005
# Deterministic solves cannot ask whether the whole model's search has ended (that depends
# on the load): they stop after this many rounds in a row find nothing (an 8-node cluster
# whose whole model was optimal in 0.03 s ran 174 rounds, 0.58 s, without it).
STALL_ROUNDS = 20
ROUND_S = 0.05  # per sub-model: real-shaped 40 nodes, 0.03-0.1 s gave the same gains


def improve(
    search: Search,
    enc: Encoding,
    values: IntArray,
    time_limit_s: float,
    stop: Callable[[], bool] = lambda: False,
) -> IntArray:
    """The best solution of ``enc`` found from ``values`` (a solution of it) within the
    time, until it meets the search's bound, or until ``stop`` says so (not asked when
    ``deterministic``: the decision must not depend on when another thread finishes;
    STALL_ROUNDS stops it instead). Reported as one stage, ``node-level-lns``. It runs
    beside the whole model's search, within the same time: its work is not added to
    ``search.deterministic_s``."""
    started = time.perf_counter()
    config = search.config
    rng = random.Random(config.seed)
    objective = _objective(enc)
    best, best_value = values, int(objective @ values)
    bins = enc.pairs.bin
    shape_of = np.array([sc.shape for sc in enc.shapes.classes], dtype=np.int64)[enc.pairs.cls]
    free_count = min(len(enc.bins), max(MIN_FREE, min(MAX_FREE, round(FREE_SHARE * len(enc.bins)))))
    rounds = 0  # alternates the two kinds of neighbourhood
    spent = 0.0  # deterministic or wall, as search.remaining counts it

    def left() -> float:
        if config.deterministic:
            return time_limit_s - spent
        return time_limit_s - (time.perf_counter() - started)

    bound = min(search.bounds, default=None)
    stalled = 0  # rounds in a row that found nothing better
    while left() >= ROUND_S and free_count < len(enc.bins):
        if bound is not None and best_value >= bound:
            break  # optimal: no neighbourhood holds more
        if (stalled >= STALL_ROUNDS) if config.deterministic else stop():
            break
        waiting = _waiting_shapes(enc, best)
        if rounds % 2 == 0 and waiting:
            freed = _near_waiting(rng, enc, shape_of, waiting, free_count)
        else:
            freed = set(rng.sample(range(len(enc.bins)), free_count))
        rounds += 1
        solution, work = _solve_around(enc, best, ~np.isin(bins, list(freed)), search, ROUND_S)
        # A tiny sub-model's deterministic time rounds to nothing: each round costs at
        # least MIN_ROUND_WORK, so a deterministic search ends.
        spent += max(work, MIN_ROUND_WORK) if config.deterministic else 0.0
        stalled += 1
        if solution is not None and (value := int(objective @ solution)) > best_value:
            best, best_value = solution, value
            stalled = 0
    search.stages.append(
        StageReport(
            name="node-level-lns",
            variables=enc.size()[0],
            constraints=enc.size()[1],
            status="FEASIBLE",
            objective=best_value,
            bound=None,
            wall_s=time.perf_counter() - started,
        )
    )
    return best


def beside_whole_search(
    search: Search, enc: Encoding, name: str, values: IntArray
) -> tuple[StageResult, IntArray]:
    """The whole model's search (its bound, and its decisions) from the model's hint on
    one core, neighbourhoods of ``values`` on the other, for the rest of the cycle.
    Real-shaped 40 nodes x 60 gangs, seeds 0-29, two runs each, against the whole model's
    search alone: a higher objective in 39 of 60 solves, lower in 7; mean gap 2.30 -> 2.06%.
    Returns the search's result and the neighbourhoods' best."""
    search.start_baseline()
    time_s = search.remaining()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="node-level") as beside:
        whole = beside.submit(
            run_cpsat, enc, name, time_s, search.config, guard_s=search.wall_guard_left()
        )
        # Once the whole model's search ends (optimal, or its time is up) no
        # neighbourhood can hold more than its decision, or has time left.
        improved = improve(search, enc, values, time_s, stop=whole.done)
        result = whole.result()
    search.stages.append(result.report)
    search.deterministic_s += result.deterministic_s
    return result, improved


def _objective(enc: Encoding) -> IntArray:
    coeffs = np.zeros(enc.size()[0], dtype=np.int64)
    np.add.at(coeffs, enc.rows.objective_vars, enc.rows.objective_coeffs)
    return coeffs


def _waiting_shapes(enc: Encoding, values: IntArray) -> list[int]:
    return [s for s, var in enc.admitted.items() if values[var] < enc.shapes.shapes[s].size]


def _near_waiting(
    rng: random.Random, enc: Encoding, shape_of: IntArray, waiting: list[int], count: int
) -> set[int]:
    """Nodes where a waiting shape, drawn at random, may go: enough of them (drawn at
    random) to hold ROOM_FACTOR times one of its gangs, at least ``count`` and at most
    half of the nodes; topped up at random to ``count``. A gang of 57 pods spans more
    nodes than a fixed-size neighbourhood frees (real-shaped 40 nodes, seed 4)."""
    shape = enc.shapes.shapes[rng.choice(waiting)]
    need = sum(
        (enc.shapes.classes[c].per_gang * enc.shapes.classes[c].demand for c in shape.classes),
        start=np.zeros(len(enc.problem.resources), dtype=np.int64),
    )
    used = need > 0
    where = sorted({int(b) for b in enc.pairs.bin[shape_of == shape.index]})
    rng.shuffle(where)
    most = max(count, len(enc.bins) // 2)
    freed: list[int] = []
    room = np.zeros_like(need)
    for b in where:
        if len(freed) >= most or (
            len(freed) >= count and (room[used] >= ROOM_FACTOR * need[used]).all()
        ):
            break
        freed.append(b)
        room += enc.bins[b].free
    chosen = set(freed)
    others = [b for b in range(len(enc.bins)) if b not in chosen]
    chosen.update(rng.sample(others, max(0, count - len(chosen))))
    return chosen


def _solve_around(
    enc: Encoding, values: IntArray, fixed: np.ndarray, search: Search, limit_s: float
) -> tuple[IntArray | None, float]:
    """The model with the counts of ``fixed`` pairs at ``values``' and the rest free,
    hinted with ``values``: its solution, and the deterministic time it took."""
    model = enc.model.clone()
    variables = model.proto.variables
    for p in np.flatnonzero(fixed).tolist():
        domain = variables[p].domain
        value = int(values[p])
        domain.clear()
        domain.extend([value, value])
    hint = model.proto.solution_hint
    # The model's own hint, if any, is another decision's (twice hinted, it is invalid).
    hint.vars.clear()
    hint.values.clear()
    hint.vars.extend(range(len(values)))
    hint.values.extend(values.tolist())
    solver = cp_model.CpSolver()
    set_limits(solver.parameters, search.config, limit_s, 1, search.wall_guard_left())
    solver.parameters.linearization_level = search.config.linearization_level
    solver.parameters.relative_gap_limit = search.config.relative_gap_limit
    status = solver.solve(model)
    work = solver.response_proto.deterministic_time
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, work
    return np.asarray(solver.response_proto.solution, dtype=np.int64), work
