"""The greedy schedulers gangsat is measured against, with the CP-SAT scheduler's signature.

- ``greedy``: the stock kube-scheduler's shape — pod by pod (priority, then age), filter,
  score LeastAllocated, bind. It knows nothing of gangs or queues, so it can leave gangs
  partially placed: the seed talk's deadlock.
- ``gang_greedy``: kube-batch's allocate action — the queue with the lowest weighted
  dominant share goes next, its gangs by priority then age; a gang's members are placed
  tentatively and committed only if minMember is reached, else rolled back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from solver.config import SolverConfig
from solver.decode import decision_from_placements
from solver.model import ClusterState, Decision, SolveStatus
from solver.placement import Placer, Policy
from solver.problem import GangInfo, Problem, prepare, share_units


def greedy(state: ClusterState, config: SolverConfig | None = None) -> Decision:
    started = time.perf_counter()
    config = config or SolverConfig()
    problem = prepare(state)
    placer = Placer(problem, respect_capability=False)
    of_pod = problem.class_of_pod()
    order = sorted(
        (-pod.priority, pod.created_s, pod.name, of_pod[pod.name])
        for pod in state.pending_pods()
        if pod.name in of_pod
    )
    for _, _, _, c in order:
        cls = problem.classes[c]
        node = placer.best_node(cls, Policy.SPREAD)
        if node is not None:
            placer.place(cls, node)
    return decision_from_placements(
        problem,
        placer,
        config,
        scheduler="greedy",
        status=SolveStatus.GREEDY,
        wall_s=time.perf_counter() - started,
    )


def gang_order_key(gang: GangInfo) -> tuple[int, float, str]:
    return (-gang.priority, gang.created_s, gang.name)


def allocate_gangs(
    problem: Problem,
    placer: Placer,
    gangs: Sequence[GangInfo] | None = None,
    policy: Policy = Policy.SPREAD,
) -> None:
    """kube-batch's allocate loop over ``gangs`` (default: all), one attempt per gang."""
    pending: dict[int, list[GangInfo]] = {}
    for gang in sorted(
        gangs if gangs is not None else problem.schedulable_gangs(), key=gang_order_key
    ):
        pending.setdefault(gang.queue, []).append(gang)
    held = np.array([q.used for q in problem.queues], dtype=np.int64).reshape(
        len(problem.queues), len(problem.resources)
    )
    while pending:
        # Weighted dominant share, recomputed as gangs land: the most underserved queue next.
        def share(q: int) -> tuple[float, str]:
            dominant = float(share_units(held[q], problem.totals).max(initial=0))
            return dominant / problem.queues[q].weight, problem.queues[q].name

        queue = min(pending, key=share)
        gang = pending[queue].pop(0)
        if not pending[queue]:
            del pending[queue]
        for pod in placer.try_gang(gang, policy) or ():
            held[queue] += problem.classes[problem.class_of_pod()[pod]].demand


def gang_greedy(state: ClusterState, config: SolverConfig | None = None) -> Decision:
    started = time.perf_counter()
    config = config or SolverConfig()
    problem = prepare(state)
    placer = Placer(problem)
    allocate_gangs(problem, placer)
    return decision_from_placements(
        problem,
        placer,
        config,
        scheduler="gang-greedy",
        status=SolveStatus.GREEDY,
        wall_s=time.perf_counter() - started,
    )
