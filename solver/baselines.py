"""The greedy schedulers gangsat is measured against, with the CP-SAT scheduler's signature.

- ``greedy``: the stock kube-scheduler's shape — pod by pod (priority, then age), filter,
  score LeastAllocated, bind. It knows nothing of gangs or queues, so it can leave gangs
  partially placed: the seed talk's deadlock.
- ``gang_greedy``: kube-batch's allocate action — the queue with the lowest weighted
  dominant share goes next, its gangs by priority then age; a gang's members are placed
  tentatively and committed only if minMember is reached, else rolled back. With
  ``SolverConfig.preemption``, then its preempt and reclaim actions
  (``solver.greedy_preemption``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.decode import decision_from_placements
from solver.greedy_preemption import apply_withdrawals, greedy_preempt
from solver.model import ClusterState
from solver.objective import coefficients
from solver.placement import Placer, Policy
from solver.problem import GangInfo, Problem, prepare
from solver.units import share_units


def _baseline(
    state: ClusterState,
    config: SolverConfig | None,
    scheduler: str,
    place: Callable[[Problem, Placer], None],
    respect_capability: bool = True,
    preempts: bool = False,
) -> Decision:
    started = time.perf_counter()
    config = config or SolverConfig()
    problem = prepare(state)
    placer = Placer(problem, respect_capability=respect_capability)
    place(problem, placer)
    preemption = None
    if preempts and config.preemption and problem.schedulable_gangs():
        coef = coefficients(problem, config.weights)
        preemption = greedy_preempt(problem, placer, coef, config)
        apply_withdrawals(problem, placer, preemption, Policy.SPREAD)
    return decision_from_placements(
        problem,
        placer,
        config,
        scheduler=scheduler,
        status=SolveStatus.GREEDY,
        wall_s=time.perf_counter() - started,
        preemption=preemption,
    )


def place_pod_by_pod(problem: Problem, placer: Placer) -> None:
    """Every pending pod by priority then age, each on its LeastAllocated node."""
    of_pod = problem.class_of_pod()
    order = sorted(
        (-pod.priority, pod.created_s, pod.name, of_pod[pod.name])
        for pod in problem.state.pending_pods()
        if pod.name in of_pod
    )
    for _, _, _, c in order:
        cls = problem.classes[c]
        node = placer.best_node(cls, Policy.SPREAD)
        if node is not None:
            placer.place(cls, node)


def gang_order_key(gang: GangInfo) -> tuple[int, float, str]:
    return (-gang.priority, gang.created_s, gang.name)


def allocate_gangs(
    problem: Problem,
    placer: Placer,
    gangs: Sequence[GangInfo] | None = None,
    policy: Policy = Policy.SPREAD,
    stop: Callable[[], bool] | None = None,
) -> None:
    """kube-batch's allocate loop over ``gangs`` (default: all), one attempt per gang.

    ``stop`` is asked before each gang: a loop stopped early has placed whole gangs only.
    """
    pending: dict[int, list[GangInfo]] = {}
    for gang in sorted(
        gangs if gangs is not None else problem.schedulable_gangs(), key=gang_order_key
    ):
        pending.setdefault(gang.queue, []).append(gang)
    held = np.array([q.used for q in problem.queues], dtype=np.int64).reshape(
        len(problem.queues), len(problem.resources)
    )

    def weighted_share(q: int) -> float:
        dominant = float(share_units(held[q], problem.totals).max(initial=0))
        return dominant / problem.queues[q].weight

    # Recomputed only for the queue that just got pods: the most underserved queue next.
    share = {q: weighted_share(q) for q in pending}
    # Room only shrinks in this loop (an attempt commits or rolls back whole), so a gang
    # of one pod class that did not fit never fits later: its pods go wherever each fits.
    # Repeats of its shape are skipped, not placed and rolled back (on real-shaped
    # 1,000-node clusters about half the gangs fail, many of them alike).
    failed: set[tuple[int, int, int, int]] = set()
    while pending and not (stop is not None and stop()):
        queue = min(pending, key=lambda q: (share[q], problem.queues[q].name))
        gang = pending[queue].pop(0)
        if not pending[queue]:
            del pending[queue]
        shape = one_class_shape(problem, gang)
        if shape in failed:
            continue
        placed = placer.try_gang(gang, policy)
        if placed:
            for pod in placed:
                held[queue] += problem.classes[problem.class_of_pod()[pod]].demand
            share[queue] = weighted_share(queue)
        elif shape is not None:
            failed.add(shape)


def one_class_shape(problem: Problem, gang: GangInfo) -> tuple[int, int, int, int] | None:
    """What decides whether a gang of one pod class fits: queue, need, spec, pod count."""
    if len(gang.classes) != 1:
        return None
    cls = problem.classes[gang.classes[0]]
    return (gang.queue, gang.need, cls.spec, cls.count)


def greedy(state: ClusterState, config: SolverConfig | None = None) -> Decision:
    return _baseline(state, config, "greedy", place_pod_by_pod, respect_capability=False)


def gang_greedy(state: ClusterState, config: SolverConfig | None = None) -> Decision:
    return _baseline(state, config, "gang-greedy", allocate_gangs, preempts=True)
