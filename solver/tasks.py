"""Per-task minimums (Volcano's minTaskMember) as ``prepare`` reads them: what each
task of a gang still needs this cycle, and its classes placed first; or why the gang
cannot meet them. Types only from ``solver.problem`` (which calls this), so no cycle."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from solver.model import Gang, Pod

if TYPE_CHECKING:
    from solver.problem import GangInfo, PodClass


def task_needs(
    gang: Gang, info: GangInfo, bound: list[Pod], classes: list[PodClass], gated: list[Pod]
) -> str | None:
    """Fill ``info.task_needs`` from the gang's per-task minimums (pods of a task already
    bound count), its tasks' classes first in ``info.classes``; or why the gang cannot
    meet them with the pods it has."""
    running = Counter(p.task for p in bound)
    running.update(gang.succeeded_by_task)  # members that finished count, as in Volcano
    of_task: dict[str | None, list[int]] = defaultdict(list)
    for c in info.classes:
        of_task[classes[c].exemplar.task].append(c)
    for task, least in sorted(gang.task_minimums.items()):
        missing = least - running[task]
        if missing <= 0:
            continue
        have = sum(classes[c].count for c in of_task.get(task, []))
        if have < missing:
            held_back = sum(1 for p in gated if p.task == task)
            if have + held_back >= missing:
                return (
                    f"SchedulingGated: {held_back} pod(s) of task {task!r} wait for "
                    f"scheduling gates; minTaskMember {least} needs them"
                )
            return (
                f"NotEnoughTasks: task {task!r} has {have + running[task]} pod(s), "
                f"minTaskMember is {least}"
            )
        info.task_needs.append((tuple(of_task[task]), missing))
    first = [c for cs, _ in info.task_needs for c in cs]
    info.classes = first + [c for c in info.classes if c not in first]
    return None
