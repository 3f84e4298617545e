"""Who may take from whom: the preempt and reclaim rules every preemption path reads
(``victims``, the models, the greedy actions), and why a victim is evicted.

- **preempt**, within a queue: from running gangs of lower priority;
- **reclaim**, across queues: a gang whose queue ends the decision below its deserved
  share, from queues above theirs (the models keep them at or above it), never from one
  marked not reclaimable (Volcano's ``spec.reclaimable: false``); ``reclaim_limit``.

A gang with a pending pod of ``preemptionPolicy: Never`` takes from none
(``never_preempting``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from solver.arrays import BoolArray
from solver.problem import GangInfo, Problem

Kind = tuple[int, int]  # a victim's queue and priority: all who may take from it read


def reason(problem: Problem, victim_queue: int, victim_priority: int, taker: GangInfo) -> str:
    """Why a victim is evicted, as its Event and status say it."""
    if victim_queue == taker.queue:
        return f"preempted by {_named(taker)} (priority {taker.priority} > {victim_priority})"
    return (
        f"reclaimed by queue {problem.queues[taker.queue].name} "
        f"(below its deserved share) for {_named(taker)}"
    )


def _named(taker: GangInfo) -> str:
    """A gang as its users know it: a GangGroup by its gangs, not by the name gangsat
    gives the group it decides on (``gang-group:...``), which no object carries."""
    if taker.members:
        return f"gangs {', '.join(taker.members)} (one GangGroup)"
    return f"gang {taker.name}"


def takes_kinds(
    kinds: Collection[Kind], below: BoolArray, above: BoolArray
) -> Callable[[int, int], set[Kind]]:
    """Of victims' ``kinds``, those a gang of a queue and a priority may take from: lower
    priorities of its queue (preempt), and, when its queue is ``below`` its deserved
    share, queues ``above`` theirs (reclaim). Each set is made once."""
    known: dict[Kind, set[Kind]] = {}

    def takes(queue: int, priority: int) -> set[Kind]:
        if (queue, priority) not in known:
            known[queue, priority] = {
                (q, p)
                for q, p in kinds
                if (q == queue and p < priority) or (q != queue and below[queue] and above[q])
            }
        return known[queue, priority]

    return takes


def reclaimable(problem: Problem) -> BoolArray:
    """Per queue, whether other queues may reclaim from it (``Queue.reclaimable``)."""
    closed = {q.name for q in problem.state.queues if not q.reclaimable}
    return np.array([q.name not in closed for q in problem.queues], dtype=np.bool_)


def never_preempting(problem: Problem) -> set[str]:
    """Gangs with a pending pod whose PriorityClass has ``preemptionPolicy: Never``."""
    state = problem.state
    return {p.gang_name() for p in state.pods if p.node_name is None and not p.may_preempt}


def reclaim_limit(deserved: int, held: int) -> int:
    """The most share units the gangs a queue that reclaims is given may add, less the
    gang placed last.

    A gang reclaims only while its queue is below its deserved share (as kube-batch's
    reclaim action checks before each job). Order the decision's gangs of the queue with
    one of them last (the models choose which): every gang before it, reclaiming or not,
    finds the queue below its share when what they add, all but that last gang's gain,
    keeps ``held`` below ``deserved``."""
    return deserved - 1 - held
