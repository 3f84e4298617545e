"""Koordinator's GangGroups: gangs that start together or not at all.

A job of several roles (a master and its workers, parameter servers and workers) makes
each role a gang with a minimum of its own, and lists the gangs of the job in one group:
the annotation ``gang.scheduling.koordinator.sh/groups``, a JSON list of
``namespace/name``, on each PodGroup, or on each pod of a gang the pods alone declare.
Koordinator binds no gang of a group before every gang of it can have its minimum. Read
as separate gangs, a master could be bound while its workers wait for room that may never
come, holding what it took: the partial job that gang scheduling exists to prevent.

The gangs of a group that do not hold their own minimum (bound pods and those that
succeeded) become one gang of the snapshot (``merge``), whose tasks are those gangs: its
minimum is theirs summed, each task's minimum a gang's own, and so what serves Volcano's
minTaskMember serves groups too (each task's minimum placed first by every scheduler,
refused short by the validator, a failed bind rolled back for the whole group). A gang
that holds its minimum runs on its own: a worker gang made again beside its running
master waits for room for its own minimum, not for the master's as well (merged with it,
the master's extra pods counted towards the worker's minimum, and a worker was bound
below it). Statuses are reported per gang (``Gang.members``). No gang of a group is a
victim of preemption.
Gangs that list each other, directly or not, are one group, so that no gang anyone
listed starts without the others. A group that cannot be formed (a gang it lists does not
exist or cannot be used, its gangs are in different queues, or one has minTaskMember of
its own) holds every pending pod of its gangs, each told why.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from adapter.kube.fields import BadObject, Obj
from adapter.kube.reading import Finding
from solver.model import Gang, Pod

GROUPS_ANNOTATION = "gang.scheduling.koordinator.sh/groups"
# A merged gang's name: no PodGroup's (``namespace/name``) nor a pod's implicit one.
GROUP_PREFIX = "gang-group:"


def listed(obj: Obj, namespace: str) -> tuple[str, ...]:
    """The gangs ``obj`` (a PodGroup, or a pod declaring its gang) lists in its group, as
    ``namespace/name``; an entry without a namespace is in ``namespace``. Raises
    ``BadObject`` where the annotation is no JSON list of names: started alone, the gang
    could be part of a partial job."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(GROUPS_ANNOTATION)
    if raw is None or raw == "":
        return ()
    try:
        names = json.loads(raw) if isinstance(raw, str) else None
    # RecursionError: "[" nested 100,000 deep fits in an annotation, and failed every
    # snapshot, so that nothing anywhere was scheduled.
    except (ValueError, RecursionError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        shown = raw if len(str(raw)) <= 200 else f"{str(raw)[:200]}..."
        raise BadObject(
            f"annotation {GROUPS_ANNOTATION} must be a JSON list of names, got {shown!r}"
        )
    return tuple(n if "/" in n else f"{namespace}/{n}" for n in names)


class GangGroups:
    """The groups a snapshot's gangs list (``note``), merged into gangs (``merge``)."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def note(self, gang: str, names: Iterable[str]) -> None:
        for name in names:
            self._join(gang, name)

    def _root(self, name: str) -> str:
        self._parent.setdefault(name, name)
        while (parent := self._parent[name]) != name:
            name = parent
        return name

    def _join(self, a: str, b: str) -> None:
        ra, rb = self._root(a), self._root(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[tuple[str, ...]]:
        """Each group of more than one gang, its gangs sorted."""
        by_root: dict[str, list[str]] = {}
        for name in list(self._parent):
            by_root.setdefault(self._root(name), []).append(name)
        return sorted(tuple(sorted(names)) for names in by_root.values() if len(names) > 1)

    def merge(
        self,
        gangs: dict[str, Gang],
        pods: dict[str, Pod],
        findings: list[Finding],
        unreadable: Mapping[str, str],
    ) -> None:
        """The gangs of each group that do not hold their own minimum made one (into
        ``gangs``, their pods in ``pods`` moved to it, each with its gang as its task). A
        group that cannot be formed keeps its gangs apart, and their pending pods out of
        ``pods``, with a finding each."""
        groups = self.groups()
        if not groups:
            return
        grouped = {name for names in groups for name in names}
        held: Counter[str] = Counter()  # per grouped gang, its pods bound (members)
        theirs: list[tuple[str, Pod]] = []  # the grouped gangs' pods: one pass over all
        for key, pod in pods.items():
            if pod.gang in grouped:
                theirs.append((key, pod))
                if pod.node_name is not None and not pod.terminating:
                    held[pod.gang] += 1
        of_gang: dict[str, str] = {}
        waits: dict[str, str] = {}  # gang -> why its pending pods wait
        for names in groups:
            why = _unformable(names, gangs, unreadable)
            if why is not None:
                for name in names:
                    waits[name] = f"gang group [{', '.join(names)}] {why}"
                continue
            # No gang of a group is a victim of preemption: evicting one of a running group
            # broke its job (a master evicted, its workers kept), and evicting the group
            # whole is not modelled.
            for n in names:
                if gangs[n].preemptible:
                    gangs[n] = gangs[n].model_copy(update={"preemptible": False})
            short = [n for n in names if held[n] + gangs[n].succeeded < gangs[n].min_member]
            if len(short) < 2:
                continue  # each runs, or the one short waits for its own minimum
            members = [gangs.pop(name) for name in short]
            name = GROUP_PREFIX + ",".join(short)
            gangs[name] = Gang(
                name=name,
                min_member=sum(g.min_member for g in members),
                queue=members[0].queue,
                priority=max(g.priority for g in members),
                created_s=min(g.created_s for g in members),
                preemptible=False,
                min_task_member={g.name: g.min_member for g in members},
                # Each below its own minimum: none covers another's.
                succeeded=sum(g.succeeded for g in members),
                succeeded_by_task={g.name: g.succeeded for g in members if g.succeeded},
                members=tuple(short),
            )
            of_gang.update(dict.fromkeys(short, name))
        for key, pod in theirs:
            gang = pod.gang
            if gang in of_gang:
                pods[key] = pod.model_copy(update={"gang": of_gang[gang], "task": gang})
            elif gang in waits and pod.node_name is None:
                del pods[key]
                findings.append(
                    Finding(kind="Pod", name=key, message=waits[gang], reason="FailedScheduling")
                )


def _unformable(
    names: Sequence[str], gangs: Mapping[str, Gang], unreadable: Mapping[str, str]
) -> str | None:
    """Why the group of ``names`` cannot be one gang, if it cannot."""
    for name in names:
        if name in unreadable:
            return f"cannot start: its PodGroup {name!r} cannot be used ({unreadable[name]})"
        if name not in gangs:
            return f"cannot start: it lists {name!r}, which does not exist"
    queues = sorted({gangs[name].queue for name in names})
    if len(queues) > 1:
        return f"cannot start: its gangs are in different queues ({', '.join(queues)})"
    tasked = [name for name in names if gangs[name].min_task_member]
    if tasked:
        return f"cannot start: {tasked[0]!r} has minTaskMember, which a group's gangs may not"
    return None
