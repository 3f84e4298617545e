"""Which gangs a report writes a status for, and what each status says of the pods the
snapshot left out (``reported``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from adapter.cluster import GangStatus
from adapter.kube.cache import Obj
from adapter.kube.fields import stored_status
from adapter.kube.reading import Finding
from adapter.kube.resources import Resource
from adapter.kube.status import waiting_for_volumes, with_refused_members


def reported(
    statuses: Sequence[GangStatus],
    members: Mapping[str, int],
    findings: Sequence[Finding],
    podgroups: Mapping[str, tuple[Resource, Obj]],
) -> list[GangStatus]:
    """The statuses of the gangs with a live pod (``members``: per gang, its pods bound or
    pending), each saying which of its pods the snapshot left out and why. A gang without
    a live pod has finished (its pods Succeeded or Failed) or has no pods yet: it is not
    "unschedulable", and gangsat says nothing about it; unless its PodGroup still says it
    runs (``_said_running``)."""
    # Pods that wait for their volumes are in no snapshot: their gang is live too, and
    # its status says what it waits for (else a gang whose pods all wait said nothing,
    # and one missing a member blamed the cluster's room).
    waits = _pod_findings(findings, "FailedScheduling")
    # Pods gangsat cannot use (a rule it does not check) are in no snapshot either.
    refused = _pod_findings(findings, "InvalidSpec")
    return [
        _with_held_pods(s, waits, refused, members.get(s.gang, 0))
        for s in statuses
        if s.bound
        or s.gang in members
        or s.gang in waits
        or s.gang in refused
        or _said_running(s, podgroups.get(s.gang))
    ]


def _said_running(status: GangStatus, podgroup: tuple[Resource, Obj] | None) -> bool:
    """Whether a gang without a live pod, not finished, has a PodGroup that still says
    Running: its pods evicted or deleted (bare pods no controller makes again), it said
    so, its pods counted, for good. Pending then, as scheduler-plugins' PodGroup
    controller sets a group left without pods. Only Running: another phase (Volcano's
    controller's Completed) is not gangsat's to undo. A gang whose pods all Failed (their
    objects left) says Pending too, where that controller says Failed: finished pods are
    in no snapshot."""
    if podgroup is None or status.succeeded >= status.min_member:
        return False
    return stored_status(podgroup[1]).get("phase") == "Running"


def _pod_findings(findings: Sequence[Finding], reason: str) -> dict[str, list[Finding]]:
    """Per gang, its pods left out of the snapshot for ``reason``: those
    that wait for their volumes (FailedScheduling), those gangsat cannot use
    (InvalidSpec)."""
    found: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        if finding.gang is not None and finding.reason == reason:
            found[finding.gang].append(finding)
    return found


def _with_held_pods(
    status: GangStatus,
    waits: Mapping[str, list[Finding]],
    refused: Mapping[str, list[Finding]],
    members: int,
) -> GangStatus:
    """A gang's status, saying which of its pods the snapshot left out, and why."""
    gang = status.gang
    if gang in waits:
        status = waiting_for_volumes(status, len(waits[gang]), _first(waits[gang]), members)
    if gang in refused:
        status = with_refused_members(status, len(refused[gang]), _first(refused[gang]), members)
    return status


def _first(waits: Sequence[Finding]) -> str:
    """The first waiting pod by name, and why it waits: the same one every cycle."""
    first = min(waits, key=lambda f: f.name)
    return f"{first.name}: {first.message}"
