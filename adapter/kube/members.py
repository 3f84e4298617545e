"""The gangs a snapshot's pods make, beyond the PodGroups read on their own: a 1.35
Workload's instances, gangs the pods alone declare, the priority of a PodGroup that has
none, and the pods whose PodGroup cannot be used.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from adapter.kube.dialects import declared_minimum, workload_template
from adapter.kube.fields import BadObject, Obj
from adapter.kube.gang_groups import GangGroups, listed
from adapter.kube.reading import Finding
from solver.model import Gang, Pod


def priorities_of_pods(names: Collection[str], pods: Iterable[Pod], gangs: dict[str, Gang]) -> None:
    """The gangs ``names`` at their pods' highest priority: scheduler-plugins' PodGroup
    has no priority of its own, and Coscheduling orders (and kube-scheduler preempts) by
    each pod's. Read as the cluster's default, a gang of priority-1000 pods lost its room
    to a priority-500 pod, and was evicted for it."""
    highest: dict[str, int] = {}
    for pod in pods:
        if (gang := pod.gang) is not None and gang in names:
            highest[gang] = max(highest.get(gang, pod.priority), pod.priority)
    for name, priority in highest.items():
        if name in gangs and gangs[name].priority != priority:
            gangs[name] = gangs[name].model_copy(update={"priority": priority})


def workload_instances(
    templates: Mapping[str, Gang], pods: Iterable[Pod], gangs: dict[str, Gang]
) -> None:
    """The gangs pods name through a 1.35 Workload: one per (pod group, replica key), of
    the pod group's policy, at its pods' highest priority (the Workload carries none).
    A pod naming a Workload or pod group that does not exist waits, as for a PodGroup."""
    members: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.gang is not None and pod.gang not in gangs:
            template = workload_template(pod.gang)
            if template is not None and template in templates:
                members.setdefault(pod.gang, []).append(pod)
    for name, its_pods in members.items():
        of = templates[workload_template(name) or ""]
        priority = max(p.priority for p in its_pods)
        gangs[name] = of.model_copy(update={"name": name, "priority": priority})


def wait_for_unreadable(
    unreadable: Mapping[str, str],
    pods: dict[str, Pod],
    gangs: Mapping[str, Gang],
    findings: list[Finding],
) -> None:
    """The pending pods of PodGroups that cannot be read (``unreadable``: name -> why)
    wait, each told why: left in the snapshot, they were told their PodGroup was "not
    found" while it was there, with an ``InvalidSpec`` Event of its own. Bound pods stay:
    they run, and hold their room."""
    for name, pod in list(pods.items()):
        gang = pod.gang
        if gang is not None and pod.node_name is None and gang in unreadable and gang not in gangs:
            del pods[name]
            why = f"PodGroup {gang!r} cannot be used: {unreadable[gang]}"
            findings.append(Finding(kind="Pod", name=name, message=why, reason="FailedScheduling"))


class Declared:
    """Gangs the pods alone declare, with no PodGroup object (``dialects.DECLARED``: a
    name and a minMember on each pod, as scheduler-plugins' lightweight coscheduling and
    Koordinator have them), and the groups they list (``gang_groups``). Unread, each pod
    was a gang of one, bound on its own: a partial gang."""

    def __init__(self, findings: list[Finding], groups: GangGroups) -> None:
        self.findings = findings
        self.minimum: dict[str, int] = {}  # gang -> the largest minMember its pods declare
        self.groups = groups  # what their pods list (Koordinator's GangGroups)

    def read(self, o: Obj, pod: Pod) -> bool:
        """Note what ``pod`` (read from ``o``; its gang no PodGroup) declares; whether it
        stays in the snapshot: a pending pod whose minimum cannot be read waits, with a
        finding (bound, it stays: it holds its room)."""
        assert pod.gang is not None
        try:
            minimum = declared_minimum(o)
            if minimum is not None:
                self.minimum[pod.gang] = max(minimum, self.minimum.get(pod.gang, 0))
                if group := listed(o, pod.namespace):
                    self.groups.note(pod.gang, group)
        # (Other errors: a shape no API server stores, a fake's; read as the message.)
        except (BadObject, AttributeError, TypeError, ValueError) as e:
            if pod.node_name is not None:
                return True
            self.findings.append(Finding(kind="Pod", name=pod.name, message=str(e)))
            return False
        return True

    def gangs(self, pods: Iterable[Pod], gangs: dict[str, Gang]) -> set[str]:
        """The declared gangs, into ``gangs``, in the default queue, created with their
        first pod; returns their names, whose priority is their pods' (they carry none)."""
        if not self.minimum:
            return set()
        created: dict[str, float] = {}
        for pod in pods:
            if (gang := pod.gang) in self.minimum and gang is not None:
                created[gang] = min(created.get(gang, pod.created_s), pod.created_s)
        for name, minimum in self.minimum.items():
            gangs[name] = Gang(name=name, min_member=minimum, created_s=created.get(name, 0.0))
        return set(self.minimum)
