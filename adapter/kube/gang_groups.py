"""Koordinator's GangGroups: gangs that start together or not at all.

A job of several roles (a master and its workers, parameter servers and workers) makes
each role a gang with a minimum of its own, and lists the gangs of the job in one group:
the annotation ``gang.scheduling.koordinator.sh/groups``, a JSON list of
``namespace/name``, on each PodGroup, or on each pod of a gang the pods alone declare.
Koordinator binds no gang of a group before every gang of it can have its minimum. Read
as separate gangs, a master could be bound while its workers wait for room that may never
come, holding what it took: the partial job that gang scheduling exists to prevent.

Each group becomes one gang of the snapshot (``merged``) whose tasks are its gangs: its
minimum is theirs summed, each task's minimum is a gang's own, and so what serves
Volcano's minTaskMember serves groups too (each task's minimum placed first by every
scheduler, refused short by the validator, a failed bind rolled back for the whole
group, a victim evicted whole or kept). The report splits the group's status back into
one per PodGroup (``member_statuses``). A group lists gangs transitively: gangs that
name each other, directly or not, are one group, so that no gang anyone listed starts
without the others. A group that cannot be formed (a gang it lists does not exist or
cannot be used, its gangs are in different queues, or one has minTaskMember of its own)
holds every pending pod of its gangs, each told why.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from adapter.cluster import GangStatus
from adapter.kube.fields import BadObject, Obj
from adapter.kube.reading import Finding
from solver.model import ClusterState, Gang, Pod

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
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise BadObject(f"annotation {GROUPS_ANNOTATION} must be a JSON list of names, got {raw!r}")
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
    ) -> dict[str, tuple[str, ...]]:
        """Each group's gangs made one (into ``gangs``, their pods in ``pods`` moved to
        it, each with its gang as its task); returns merged gang -> its gangs. A group
        that cannot be formed keeps its gangs apart, and their pending pods out of
        ``pods``, with a finding each."""
        groups = self.groups()
        if not groups:
            return {}
        merged: dict[str, tuple[str, ...]] = {}
        of_gang: dict[str, str] = {}
        held: dict[str, str] = {}  # gang -> why its pending pods wait
        for names in groups:
            why = _unformable(names, gangs, unreadable)
            if why is not None:
                for name in names:
                    held[name] = f"gang group [{', '.join(names)}] {why}"
                continue
            members = [gangs.pop(name) for name in names]
            name = GROUP_PREFIX + ",".join(names)
            gangs[name] = Gang(
                name=name,
                min_member=sum(g.min_member for g in members),
                queue=members[0].queue,
                priority=max(g.priority for g in members),
                created_s=min(g.created_s for g in members),
                preemptible=all(g.preemptible for g in members),
                min_task_member={g.name: g.min_member for g in members},
                succeeded=sum(g.succeeded for g in members),
                succeeded_by_task={g.name: g.succeeded for g in members if g.succeeded},
            )
            merged[name] = names
            of_gang.update(dict.fromkeys(names, name))
        for key, pod in list(pods.items()):
            gang = pod.gang
            if gang is None:
                continue
            if gang in of_gang:
                pods[key] = pod.model_copy(update={"gang": of_gang[gang], "task": gang})
            elif gang in held and pod.node_name is None:
                del pods[key]
                findings.append(
                    Finding(kind="Pod", name=key, message=held[gang], reason="FailedScheduling")
                )
        return merged


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


def member_statuses(
    statuses: Iterable[GangStatus],
    groups: Mapping[str, tuple[str, ...]],
    state: ClusterState | None,
) -> tuple[list[GangStatus], dict[str, list[str]], dict[str, int]]:
    """``statuses`` with each merged gang's split into one per gang of its group (its
    phase and reason the group's; its bound pods, minimum and succeeded its own); and per
    such gang, its pending pods and its pods in ``state``."""
    if not groups:
        return list(statuses), {}, {}
    gangs = {g.name: g for g in state.gangs} if state is not None else {}
    pending: dict[str, list[str]] = {}
    members: Counter[str] = Counter()
    bound: Counter[str] = Counter()
    for pod in state.pods if state is not None else ():
        if pod.gang in groups and pod.task is not None:
            members[pod.task] += 1
            if pod.node_name is None:
                pending.setdefault(pod.task, []).append(pod.name)
            elif not pod.terminating:
                bound[pod.task] += 1
    split: list[GangStatus] = []
    for status in statuses:
        names = groups.get(status.gang)
        if names is None:
            split.append(status)
            continue
        group = gangs.get(status.gang)
        for name in names:
            split.append(
                status.model_copy(
                    update={
                        "gang": name,
                        "bound": bound[name],
                        "min_member": group.min_task_member.get(name, 1) if group else 1,
                        "succeeded": group.succeeded_by_task.get(name, 0) if group else 0,
                        "message": (
                            f"gang group [{', '.join(names)}]: {status.message}"
                            if status.message
                            else ""
                        ),
                    }
                )
            )
    return split, pending, dict(members)
