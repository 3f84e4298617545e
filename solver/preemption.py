"""Preemption and reclaim: which running gangs to shrink or evict, for which pending gangs.

Run after placement, on what it left (``solver.victims`` says who may take from whom).
One CP-SAT model decides jointly, per node, the pods each candidate gang would place in
the room the evictions free and the pods each victim loses:

- ``x[pod@node]``: pods of a preemptor's class nominated to the node;
- ``admitted[gang]``: the preemptor placed whole (minMember), or not at all;
- ``removed[victim@node]``: a victim's pods evicted from the node, and ``evicted[victim]``:
  it loses all its pods, else at most those above minMember — never left short;
- capacity per node: nominated pods <= room the decision left + what is removed there;
  queue capability for the preemptors;
- **no eviction without a placement**: a victim shrunk loses pods only on nodes where a
  preemptor allowed to take from it is nominated; one evicted whole needs one such node
  (its other pods go because a gang cannot run in part); no preemptor that may not take
  from a victim is nominated where it loses pods;
- **reclaim floor**: a queue above its deserved share is never pushed below it;
- **reclaim ceiling**: a queue reclaims only while below its own
  (``victims.reclaim_limit``).

The objective prices what ``solver.objective`` prices (pod value, priority, the
preemptors' queues' shortfall), priority on the ranks of every gang's
(``Problem.ranks``), minus what eviction costs: the value a victim's pods stop earning,
the ``disruption`` weight per pod and the ``disruption_per_hour`` weight per hour of
work lost, and an evicted gang's priority. Priority is a trade here, not a rule: a gang
evicts lower ones only where its priority term outweighs what they lose (raise
``priority`` for kube-scheduler's strictness).
After solving, victims whose room turns out not to be needed are kept
(``evictions.restore_unneeded``), so nothing is evicted "in case".
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from ortools.sat.python import cp_model

from solver.arrays import IntArray
from solver.config import SolverConfig
from solver.decision import StageReport
from solver.evictions import (
    evictions_of,
    named_takers,
    placed_load,
    restore_unneeded,
    split_withdrawn,
)
from solver.greedy_preemption import greedy_choice
from solver.objective import Coefficients
from solver.placement import Placer
from solver.preemption_rules import reclaim_limit
from solver.problem import Problem
from solver.search import set_limits
from solver.units import fit_per_node
from solver.victims import Candidates, Preemption, candidates

MAX_FREE_NODES = 64  # per preemptor class, nodes without victims it may also use
MIN_SOLVE_S = 0.05


@dataclass
class _Model:
    cand: Candidates
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    x: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (class, node)
    admitted: dict[int, cp_model.IntVar] = field(default_factory=dict)  # preemptor index
    removed: dict[int, cp_model.IntVar] = field(default_factory=dict)  # victim group
    evicted: dict[int, cp_model.IntVar] = field(default_factory=dict)  # victim
    cap: dict[tuple[int, int], int] = field(default_factory=dict)  # x's upper bounds
    owner: dict[int, int] = field(default_factory=dict)  # class -> preemptor index
    uses: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (pre, node)
    touches: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (vic, node)
    cost: list[cp_model.LinearExprT] = field(default_factory=list)


def preempt(
    problem: Problem,
    placer: Placer,
    coef: Coefficients,
    config: SolverConfig,
    time_left_s: float | None = None,
) -> Preemption:
    """Evictions and nominations after the decision ``placer`` holds. The greedy actions'
    choice (``solver.greedy_preemption``) is the model's hint, and stands when the model
    finds nothing in its time: never worse than the baseline. The model gets what is
    left of the cycle (``time_left_s``), at most ``preemption_time_share`` of it and at
    least MIN_SOLVE_S."""
    started = time.perf_counter()
    cand = candidates(
        problem, placer.placed, placer.free, placer.queue_room, coef, config.weights
    )
    if cand is None:
        return Preemption()
    baseline = greedy_choice(problem, cand, coef)
    if time_left_s is not None and time_left_s - (time.perf_counter() - started) <= 0:
        # The cycle's time is up: building a model it could not solve would only add to it.
        return split_withdrawn(cand, baseline)
    m = _Model(cand)
    _build_variables(problem, m, baseline)
    if not m.x or not m.removed:
        return split_withdrawn(cand, baseline)
    _add_gang_rules(problem, m)
    _add_capacity(problem, m)
    _add_node_rules(m)
    _add_reclaim_floor(problem, m, coef)
    _add_reclaim_ceiling(problem, m, coef)
    _set_objective(problem, m, coef, config)
    _hint(problem, m, baseline)
    solver = cp_model.CpSolver()
    limit = config.preemption_time_share * config.time_limit_s
    if time_left_s is not None:
        limit = min(limit, time_left_s - (time.perf_counter() - started))
    set_limits(solver.parameters, config, max(MIN_SOLVE_S, limit))
    solve_started = time.perf_counter()
    status = solver.solve(m.model)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    result = split_withdrawn(cand, (_decode(problem, m, solver) if found else None) or baseline)
    # Its objective is what this model adds to the placement's: own bound, own gap.
    result.stage = StageReport(
        name="preemption",
        variables=len(m.model.proto.variables),
        constraints=len(m.model.proto.constraints),
        status=solver.status_name(status),
        objective=round(solver.objective_value) if found else None,
        bound=int(np.floor(solver.best_objective_bound + 1e-6)) if found else None,
        wall_s=time.perf_counter() - solve_started,
    )
    return result


def _hint(problem: Problem, m: _Model, choice: Preemption) -> None:
    """The greedy choice as the model's starting solution (what it sets; the rest CP-SAT
    completes)."""
    counts = problem.cell_counts(choice.nominated)
    uses: set[tuple[int, int]] = set()
    for (c, n), var in m.x.items():
        m.model.add_hint(var, counts.get((c, n), 0))
        if counts.get((c, n)):
            uses.add((m.owner[c], n))
    nominated_gangs = {problem.classes[c].gang for c, _ in counts}
    for i, var in m.admitted.items():
        m.model.add_hint(var, int(m.cand.preemptors[i].gang in nominated_gangs))
    for key, var in m.uses.items():
        m.model.add_hint(var, int(key in uses))
    touched: set[tuple[int, int]] = set()
    lost: dict[int, int] = defaultdict(int)
    for g, var in m.removed.items():
        grp = m.cand.groups[g]
        count = sum(1 for pod in grp.pods if pod in choice.evictions)
        m.model.add_hint(var, count)
        lost[grp.victim] += count
        if count:
            touched.add((grp.victim, grp.node))
    for key, var in m.touches.items():
        m.model.add_hint(var, int(key in touched))
    for v, var in m.evicted.items():
        m.model.add_hint(var, int(lost[v] >= m.cand.victims[v].bound))


def _build_variables(problem: Problem, m: _Model, baseline: Preemption) -> None:
    """Count variables on the nodes with victims, the nodes with most room, and wherever
    the baseline nominates (so that it is a complete hint)."""
    cand = m.cand
    hinted: dict[int, set[int]] = defaultdict(set)
    for c, node in problem.cell_counts(baseline.nominated):
        hinted[c].add(node)
    with_victims = np.array(sorted(cand.victim_nodes()), dtype=np.int64)
    room_by_victim: dict[int, dict[int, IntArray]] = defaultdict(dict)  # victim -> node
    for grp in cand.groups:
        per_node = room_by_victim[grp.victim]
        per_node[grp.node] = per_node.get(grp.node, 0) + grp.demand * len(grp.pods)
    for i, pre in enumerate(cand.preemptors):
        gang = problem.gangs[pre.gang]
        freed = np.zeros_like(cand.free)
        for v in pre.eligible:
            for node, room in room_by_victim.get(v, {}).items():
                freed[node] += room
        for c in gang.classes:
            m.owner[c] = i
            cls = problem.classes[c]
            fit_now = np.where(cls.feasible, fit_per_node(cls.demand, cand.free), 0)
            fit_freed = np.where(cls.feasible, fit_per_node(cls.demand, cand.free + freed), 0)
            spare = np.flatnonzero(fit_now > 0)
            spare = spare[np.argsort(-fit_now[spare], kind="stable")][:MAX_FREE_NODES]
            nodes = set(spare.tolist()) | hinted[c]
            nodes |= set(
                with_victims[fit_freed[with_victims] > 0].tolist() if len(with_victims) else []
            )
            for n in sorted(nodes):
                cap = min(cls.count, int(fit_freed[n]))
                m.x[(c, n)] = m.model.new_int_var(0, cap, f"x[{cls.pods[0]}@{n}]")
                m.cap[(c, n)] = cap
                if (i, n) not in m.uses:
                    m.uses[(i, n)] = m.model.new_bool_var(f"uses[{gang.name}@{n}]")
        m.admitted[i] = m.model.new_bool_var(f"admitted[{gang.name}]")
    for g, grp in enumerate(cand.groups):
        victim = cand.victims[grp.victim]
        m.removed[g] = m.model.new_int_var(0, len(grp.pods), f"removed[{victim.name}@{grp.node}]")
        key = (grp.victim, grp.node)
        if key not in m.touches:
            m.touches[key] = m.model.new_bool_var(f"touches[{victim.name}@{grp.node}]")
        if grp.victim not in m.evicted:
            m.evicted[grp.victim] = m.model.new_bool_var(f"evicted[{victim.name}]")


def _add_gang_rules(problem: Problem, m: _Model) -> None:
    """Preemptors whole or not at all; victims kept, shrunk to minMember, or evicted."""
    cand = m.cand
    by_class: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for (c, _), var in m.x.items():
        by_class[c].append(var)
    for i, pre in enumerate(cand.preemptors):
        gang = problem.gangs[pre.gang]
        admitted = m.admitted[i]
        placed = []
        for c in gang.classes:
            of_class = by_class[c]
            m.model.add(sum(of_class) <= problem.classes[c].count * admitted)
            placed += of_class
        m.model.add(sum(placed) >= gang.need * admitted)
        for task_classes, task_need in gang.task_needs:  # Volcano's minTaskMember
            of_task = [var for c in task_classes for var in by_class[c]]
            m.model.add(sum(of_task) >= task_need * admitted)
    by_victim: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for g, grp in enumerate(cand.groups):
        by_victim[grp.victim].append(m.removed[g])
    for v, removed in by_victim.items():
        victim = cand.victims[v]
        evicted = m.evicted[v]
        m.model.add(sum(removed) >= victim.bound * evicted)
        m.model.add(sum(removed) <= victim.spare + victim.min_member * evicted)


def _add_capacity(problem: Problem, m: _Model) -> None:
    cand = m.cand
    load: dict[int, list[tuple[IntArray, cp_model.IntVar]]] = defaultdict(list)
    for (c, n), var in m.x.items():
        load[n].append((problem.classes[c].demand, var))
    freed: dict[int, list[tuple[IntArray, cp_model.IntVar]]] = defaultdict(list)
    for g, grp in enumerate(cand.groups):
        freed[grp.node].append((grp.demand, m.removed[g]))
    for n, placed in load.items():
        for r in range(len(problem.resources)):
            terms = [int(d[r]) * var for d, var in placed if d[r]]
            if not terms:
                continue
            gains = [int(d[r]) * var for d, var in freed.get(n, []) if d[r]]
            m.model.add(sum(terms) <= int(cand.free[n, r]) + sum(gains))
    # Queue capability: what a queue's preemptors add, less what its own victims free.
    for q, room in enumerate(cand.queue_room):
        capped = np.flatnonzero(problem.queues[q].capability >= 0)
        if not len(capped):
            continue
        mine = [
            (problem.classes[c].demand, var)
            for (c, _), var in m.x.items()
            if problem.gangs[problem.classes[c].gang].queue == q
        ]
        theirs = [
            (grp.demand, m.removed[g])
            for g, grp in enumerate(cand.groups)
            if cand.victims[grp.victim].queue == q
        ]
        over = problem.queues[q].over()
        for r in capped.tolist():
            if mine:
                add = sum(int(d[r]) * var for d, var in mine)
                back = 0 if over[r] else sum(int(d[r]) * var for d, var in theirs)
                m.model.add(add - back <= int(room[r]))


def _add_node_rules(m: _Model) -> None:
    """Nominations mark the nodes a preemptor uses. A victim shrunk loses pods only on
    nodes where a preemptor allowed to take from it is nominated; a victim evicted whole
    needs one such node (its other pods go because a gang cannot run in part). No
    preemptor that may not take from a victim is nominated where it loses pods."""
    cand = m.cand
    nominated: dict[tuple[int, int], list[cp_model.IntVar]] = defaultdict(list)
    for (c, n), var in m.x.items():
        m.model.add(var <= m.cap[(c, n)] * m.uses[(m.owner[c], n)])
        nominated[(m.owner[c], n)].append(var)
    for key, uses in m.uses.items():
        m.model.add(sum(nominated[key]) >= uses)
    for g, grp in enumerate(cand.groups):
        m.model.add(m.removed[g] <= len(grp.pods) * m.touches[(grp.victim, grp.node)])
    served: dict[int, list[cp_model.IntVar]] = defaultdict(list)  # victim -> nodes taken
    for (v, n), touches in m.touches.items():
        allowed = [
            m.uses[(i, n)]
            for i, pre in enumerate(cand.preemptors)
            if v in pre.eligible and (i, n) in m.uses
        ]
        m.model.add(touches <= sum(allowed) + m.evicted[v])
        if allowed:
            taken = m.model.new_bool_var(f"taken[{cand.victims[v].name}@{n}]")
            m.model.add(taken <= touches)
            m.model.add(taken <= sum(allowed))
            served[v].append(taken)
        for i, pre in enumerate(cand.preemptors):
            if v not in pre.eligible and (i, n) in m.uses:
                m.model.add(touches + m.uses[(i, n)] <= 1)
    for v, evicted in m.evicted.items():
        m.model.add(sum(served.get(v, [])) >= evicted)


def _add_reclaim_floor(problem: Problem, m: _Model, coef: Coefficients) -> None:
    """A queue above its deserved share ends at or above it."""
    cand = m.cand
    for q in range(len(problem.queues)):
        held = int(coef.held[q] + cand.gained[q])
        if held <= int(coef.deserved[q]):
            continue
        lost = [
            grp.share * m.removed[g]
            for g, grp in enumerate(cand.groups)
            if grp.share and cand.victims[grp.victim].queue == q
        ]
        if not lost:
            continue
        won = [
            int(coef.pod_share[c]) * var
            for (c, _), var in m.x.items()
            if problem.gangs[problem.classes[c].gang].queue == q
        ]
        m.model.add(held + sum(won) - sum(lost) >= int(coef.deserved[q]))


def _add_reclaim_ceiling(problem: Problem, m: _Model, coef: Coefficients) -> None:
    """A queue reclaims only while below its deserved share: when it reclaims, one of its
    nominated gangs is ``last`` and the others' gains keep it below (``reclaim_limit``).
    A preemptor nominated where a victim of another queue that it may take from loses
    pods counts as reclaiming, whether or not it uses that room: stricter, never looser."""
    cand = m.cand
    of_queue: dict[int, list[int]] = defaultdict(list)  # queue -> preemptor indices
    reclaimers: dict[int, list[int]] = defaultdict(list)
    for i, pre in enumerate(cand.preemptors):
        q = problem.gangs[pre.gang].queue
        of_queue[q].append(i)
        if any(cand.victims[v].queue != q for v in pre.eligible):
            reclaimers[q].append(i)
    for q, members in reclaimers.items():
        limit = reclaim_limit(int(coef.deserved[q]), int(coef.held[q] + cand.gained[q]))
        won = [
            (int(coef.pod_share[c]), var, m.cap[(c, n)], m.owner[c])
            for (c, n), var in m.x.items()
            if problem.gangs[problem.classes[c].gang].queue == q
        ]
        if sum(share * cap for share, _, cap, _ in won) <= limit:
            continue  # the queue stays below its share whatever it is given
        reclaims = m.model.new_bool_var(f"reclaims[{problem.queues[q].name}]")
        lasts = []
        for i in of_queue[q]:
            last = m.model.new_bool_var(f"last[{problem.gangs[cand.preemptors[i].gang].name}]")
            m.model.add_implication(last, m.admitted[i])
            others = [share * var for share, var, _, owner in won if owner != i]
            m.model.add(sum(others) <= limit).only_enforce_if(last)
            lasts.append(last)
        m.model.add_bool_or(lasts).only_enforce_if(reclaims)
        for i in members:
            pre = cand.preemptors[i]
            for (v, n), touches in m.touches.items():
                if v in pre.eligible and cand.victims[v].queue != q and (i, n) in m.uses:
                    m.model.add_bool_or([touches.Not(), m.uses[(i, n)].Not(), reclaims])


def _set_objective(problem: Problem, m: _Model, coef: Coefficients, config: SolverConfig) -> None:
    cand = m.cand
    w = config.weights
    gains: list[cp_model.LinearExprT] = []
    for (c, _), var in m.x.items():
        gains.append(int(coef.pod[c]) * var)
    for i, pre in enumerate(cand.preemptors):
        gang = problem.gangs[pre.gang]
        cheapest = min(problem.classes[c].value for c in gang.classes)
        bonus = w.priority * cand.ranks.get(gang.priority, 0) * gang.need * cheapest + coef.started
        gains.append(bonus * m.admitted[i])
    for g, grp in enumerate(cand.groups):
        m.cost.append(grp.cost * m.removed[g])
    for v, evicted in m.evicted.items():
        victim = cand.victims[v]
        if victim.evict_cost + victim.withdraw_cost:
            m.cost.append((victim.evict_cost + victim.withdraw_cost) * evicted)
    # Fairness: what the preemptors' queues gain below their deserved shares, less what
    # placements taken back lose there (the placement counted them in its shares). What
    # running victims lose is not counted: reclaim never takes a queue below its share
    # (the floor), and a queue preempting its own lower-priority gangs chose to.
    for q in range(len(problem.queues)):
        won = [
            int(coef.pod_share[c]) * var
            for (c, _), var in m.x.items()
            if problem.gangs[problem.classes[c].gang].queue == q
        ]
        withdrawn = [
            (grp.share, m.removed[g], len(grp.pods))
            for g, grp in enumerate(cand.groups)
            if cand.victims[grp.victim].placed and cand.victims[grp.victim].queue == q
        ]
        base = int(coef.deserved[q] - coef.held[q] - cand.gained[q])
        most = base + sum(share * count for share, _, count in withdrawn)
        if not (won or withdrawn) or most <= 0:
            continue
        short = m.model.new_int_var(0, most, f"short[{problem.queues[q].name}]")
        lost = [share * var for share, var, _ in withdrawn]
        m.model.add(short >= base - sum(won) + sum(lost))
        # Measured from the decision's own shortfall: the term is what this model changes.
        gains.append(int(coef.shortfall) * short - int(coef.shortfall) * max(base, 0))
    m.model.maximize(cp_model.LinearExpr.sum(gains) - cp_model.LinearExpr.sum(m.cost))


def _decode(problem: Problem, m: _Model, solver: cp_model.CpSolver) -> Preemption | None:
    cand = m.cand
    nominated: dict[str, int] = {}
    admitted = {i for i, var in m.admitted.items() if solver.value(var)}
    next_pod: dict[int, int] = defaultdict(int)
    placed: list[tuple[int, int, int]] = []
    users: dict[int, list[int]] = defaultdict(list)  # node -> preemptors nominated there
    for (c, n), var in sorted(m.x.items()):
        count = int(solver.value(var))
        if not count or m.owner[c] not in admitted:
            continue
        cls = problem.classes[c]
        start = next_pod[c]
        for pod in cls.pods[start : start + count]:
            nominated[pod] = n
        next_pod[c] = start + count
        placed.append((c, n, count))
        users[n].append(m.owner[c])
    removed = {g: int(solver.value(var)) for g, var in m.removed.items()}
    # Against the room and capability the placement decision left (``Candidates``).
    load, queue_load = placed_load(problem, placed)
    queue_room = np.array(cand.queue_room, dtype=np.int64).reshape(queue_load.shape)
    removed = restore_unneeded(
        problem, cand.victims, cand.groups, removed, cand.free, load, queue_room, queue_load
    )
    takers = partial(_takers, cand, users=users)
    taken = evictions_of(problem, cand.victims, cand.groups, removed, takers)
    if taken is None:
        return None  # the model forbids it; should it ever happen, it is not used
    evictions, cost = taken
    if not evictions:
        # Every victim was kept: the nominated gangs fit without them, and the next cycle
        # places them as any other.
        return Preemption()
    return Preemption(evictions=evictions, nominated=nominated, disruption=-cost)


def _takers(cand: Candidates, v: int, node: int, *, users: dict[int, list[int]]) -> list[int]:
    """The gangs (indices) the victim's pods on ``node`` may be evicted for: those
    nominated there and allowed to take from it, else on any of its nodes
    (``evictions.evictions_of``), each once."""
    nodes = [node, *(cand.groups[g].node for g in cand.victims[v].groups)]
    return named_takers(
        nodes,
        lambda n: [
            cand.preemptors[i].gang for i in users.get(n, []) if v in cand.preemptors[i].eligible
        ],
    )
