"""What gangsat writes back to Kubernetes after a cycle, as plain request bodies.

Building the bodies is kept apart from sending them, so each dialect's status shape, the
pod condition and the Event policy are testable without an API server:

- ``podgroup_status``: the PodGroup ``status`` patch in the PodGroup's own dialect
  (kube-batch and Volcano: phase, running count, an ``Unschedulable`` condition with the
  solver's reason; Coscheduling: phase and running count, it has no conditions; the
  Workload API: only its ``PodGroupScheduled`` condition, ``PodGroupInitiallyScheduled``
  from v1alpha3 on, which stays True once set). A condition keeps its
  ``lastTransitionTime`` while its status does not change, as conditions are meant to.
- ``pod_unschedulable``: the pod condition ``PodScheduled=False, reason=Unschedulable``
  users and tools already read.
- ``EventRecorder``: Events deduplicated and rate-limited, so a big cluster's API server
  is not sent the same "3/5 pods fit" for every pending gang on every cycle. A repeat of
  an Event already sent becomes a count update at most once per ``refresh_s``, and so
  does one whose message moved in its counts alone, until it is due to be told again
  (``adapter.kube.recount``); new Events beyond the rate are dropped and counted (the
  next cycle says it again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from adapter.cluster import GangStatus
from adapter.kube.dialects import (
    COSCHEDULING_GROUPS,
    KUBE_BATCH_GROUPS,
    VOLCANO_GROUP,
    WORKLOAD_GROUP,
)
from adapter.kube.fields import api_group, stamp
from adapter.kube.recount import alike_reasons, recount_s

COMPONENT = "gangsat"
CLUSTER_EVENTS_NAMESPACE = "default"  # where Events about cluster-scoped objects go
# The Workload API's condition; v1alpha3 renamed it and made True final.
WORKLOAD_CONDITIONS = {
    "v1alpha2": "PodGroupScheduled",
    "v1alpha3": "PodGroupInitiallyScheduled",
    "v1beta1": "PodGroupInitiallyScheduled",
}


def podgroup_status(
    status: GangStatus,
    api_version: str,
    now: datetime,
    current: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``status`` of a PodGroup of ``api_version`` after a cycle; ``current`` is the
    status it has now (its conditions' transition times are kept where nothing flips)."""
    group = api_group(api_version)
    body: dict[str, Any]
    if group == WORKLOAD_GROUP:
        version = api_version.rpartition("/")[2]
        body = {"conditions": [_workload_condition(status, version, now, current or {})]}
    else:
        body = _phase_status(status, group, now)
        if group == VOLCANO_GROUP:
            body["phase"] = _volcano_phase(str(body["phase"]), status, current or {})
    _keep_transition_times(body, current or {})
    return body


def _volcano_phase(phase: str, status: GangStatus, current: Mapping[str, Any]) -> str:
    """Volcano's own scheduler never takes a PodGroup back from Inqueue to Pending, nor
    a Running one with pods still running (its ``jobStatus``), and its job controller
    creates and re-creates a Job's pods only while the PodGroup is not Pending: written
    over them, Pending stalled the Job (a pod deleted, or a member gone, was never made
    again). The Unschedulable condition still says why the gang waits."""
    was = current.get("phase")
    if phase == "Pending" and (was == "Inqueue" or (was == "Running" and status.bound > 0)):
        return str(was)
    return phase


def queue_status(
    group: str,
    pending: int,
    running: int,
    allocated: Mapping[str, str],
    was_allocated: Any = None,
) -> dict[str, Any]:
    """The ``status`` of a Queue of ``group``: its PodGroups pending and running, and for
    Volcano's what its bound pods request (``allocated``; its CRD requires the field in
    any status written, and Volcano's scheduler, which gangsat replaces, owns it).
    ``was_allocated`` is what the Queue says now: a merge patch merges maps, so a
    resource the queue no longer holds is removed by name (null)."""
    body: dict[str, Any] = {"pending": pending, "running": running}
    if group == VOLCANO_GROUP:
        gone = was_allocated.keys() - allocated.keys() if isinstance(was_allocated, dict) else ()
        body["allocated"] = {**dict.fromkeys(sorted(gone)), **allocated}
    return body


def _phase_status(status: GangStatus, group: str, now: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {"phase": status.phase, "running": status.bound}
    if group in COSCHEDULING_GROUPS:
        # Coscheduling's phases: a gang with some pods bound is Scheduling, not Pending.
        if status.phase == "Pending" and status.bound > 0:
            body["phase"] = "Scheduling"
        return body
    if group not in KUBE_BATCH_GROUPS | {VOLCANO_GROUP}:
        raise ValueError(f"no PodGroup dialect for API group {group!r}")
    if status.phase == "Pending":
        body["conditions"] = [
            {
                "type": "Unschedulable",
                "status": "True",
                "lastTransitionTime": stamp(now),
                "reason": _condition_reason(status),
                "message": unschedulable_message(status),
            }
        ]
    else:
        body["conditions"] = [
            {
                "type": "Scheduled",
                "status": "True",
                "lastTransitionTime": stamp(now),
                "reason": "tasks in gang are ready to be scheduled",
                "message": bound_text(status),
            }
        ]
    return body


def _workload_condition(
    status: GangStatus, version: str, now: datetime, current: Mapping[str, Any]
) -> dict[str, Any]:
    """The Workload API's scheduled condition (a ``metav1.Condition``: its reason is a
    CamelCase word; the upstream reasons are ``Unschedulable`` and ``SchedulerError``)."""
    kind = WORKLOAD_CONDITIONS.get(version)
    if kind is None:
        raise ValueError(f"no Workload API PodGroup condition known for {version!r}")
    if version != "v1alpha2":
        for c in current.get("conditions") or []:
            if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
                return dict(c)  # final once True: later evictions do not revert it
    if status.phase != "Pending":
        reason, state = "Scheduled", "True"
        message = bound_text(status)
    else:
        state, message = "False", unschedulable_message(status)
        failed = status.reason in ("SchedulerError", "InvalidDecision")
        reason = "SchedulerError" if failed else "Unschedulable"
    return {
        "type": kind,
        "status": state,
        "lastTransitionTime": stamp(now),
        "reason": reason,
        "message": message,
    }


def _keep_transition_times(body: dict[str, Any], current: Mapping[str, Any]) -> None:
    before = {
        (c.get("type"), c.get("status")): c.get("lastTransitionTime")
        for c in current.get("conditions") or []
        if isinstance(c, Mapping)
    }
    for c in body.get("conditions") or []:
        kept = before.get((c["type"], c["status"]))
        if kept:
            c["lastTransitionTime"] = kept


def _condition_reason(status: GangStatus) -> str:
    # The reasons kube-batch and Volcano users filter on; gangsat's own for the rest.
    if status.reason in (None, "Waiting", "NotEnoughResources"):
        return "NotEnoughResources"
    return status.reason


def bound_text(status: GangStatus) -> str:
    done = f", {status.succeeded} succeeded" if status.succeeded else ""
    return f"{status.bound}/{status.min_member} pods bound{done}"


def unschedulable_message(status: GangStatus) -> str:
    """How kube-batch words a waiting gang, then the solver's reason."""
    waiting = max(0, status.min_member - status.succeeded - status.bound)
    head = f"{waiting}/{status.min_member} tasks in gang unschedulable"
    return f"{head}: {status.message}" if status.message else head


def left_over_message(status: GangStatus) -> str:
    """What a Running gang's pods left pending are told: the gang runs, and why they do
    not fit (``GangStatus.left_over``), as kube-scheduler tells any pod it cannot place."""
    head = f"gang runs with {status.bound}/{status.min_member} pods bound; this pod waits"
    return f"{head}: {status.left_over}"


def pod_unschedulable(message: str, now: datetime) -> dict[str, Any]:
    """The pod condition a pending pod of an unscheduled gang carries."""
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": stamp(now),
    }


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str  # "" for a cluster-scoped object
    name: str
    api_version: str = "v1"
    # kubectl describe finds an object's Events by kind, namespace, name *and* UID; the
    # UID is no part of the dedup key (a recreated pod is forgotten by name when it goes).
    uid: str = field(default="", compare=False)


# object, type, reason, message, and the object's UID (an ObjectRef compares without it):
# a pod made again under its name has Events of its own, not its predecessor's.
EventKey = tuple[ObjectRef, str, str, str, str]


@dataclass(frozen=True)
class EventAction:
    """What to send: a new Event, or a count update of the one created for ``key``."""

    verb: Literal["create", "update"]
    key: EventKey
    body: dict[str, Any]


@dataclass
class _Sent:
    key: EventKey
    body: dict[str, Any]
    count: int
    last_sent: float  # monotonic seconds of the last write
    made: float  # monotonic seconds of the create: when its message was told


Topic = tuple[ObjectRef, str, str]  # object, type, reason: one Event remembered per topic
# The reasons a waiting object is told with, whose counts move with every decision.
RECOUNTED_REASONS = frozenset({"FailedScheduling", "Unschedulable"})
# Of the burst, what repeats' refreshes and counts made anew leave for news: half, so that
# a cycle's news (a pod bound, a gang newly waiting) finds tokens however many objects
# wait, while the refreshes still go out at what rate news leaves.
NEWS_RESERVE = 0.5


@dataclass
class EventRecorder:
    """Deduplicates Events per (object, type, reason, message) and limits the write rate.

    One Event is remembered per (object, type, reason): a new message (the counts in it
    change as the cluster does) is a new Event and replaces the old one in memory, so
    memory stays bounded by the objects, not by their history."""

    rate_per_s: float = 5.0
    burst: int = 25
    refresh_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    dropped: int = 0
    _tokens: float = field(init=False)
    _last: float = field(init=False)
    _sent: dict[Topic, _Sent] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._tokens = float(self.burst)
        self._last = self.clock()

    def _take(self, reserve: float = 0.0) -> bool:
        """A token, where at least ``reserve`` (at most the burst less one) is left."""
        reserve = min(reserve, self.burst - 1.0)
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now
        if self._tokens >= 1 + reserve:
            self._tokens -= 1
            return True
        return False

    def record(
        self,
        ref: ObjectRef,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
        news: bool = True,
    ) -> EventAction | None:
        """The write to make for this Event now, or None (a repeat too soon, or over rate).

        A waiting object's message that differs from the one last sent on its topic only
        in its counts is a repeat of that Event until ``recount_s`` has passed since it
        was made (``adapter.kube.recount``). Repeats' refreshes and counts made anew
        take the rate only above ``NEWS_RESERVE`` of the burst: news (an object not told
        yet, a message naming something else) takes the rest. Before, a backlog's
        repeats and moving counts spent the rate on the objects reported first, and an
        object with news waited behind them cycle after cycle. An object made again
        under its name (another UID) is news: its Events are its own. ``news`` False:
        the caller knows the object was told this before (a pod's condition says it, as
        after a start, where no Event is remembered): its create takes the rate as a
        refresh does."""
        key: EventKey = (ref, type_, reason, message, ref.uid)
        topic = (ref, type_, reason)
        sent = self._sent.get(topic)
        if sent is not None and sent.body["involvedObject"].get("uid", "") != ref.uid:
            sent = None
        recount = False  # counts made anew, once due: they take the rate as a refresh does
        if (
            sent is not None
            and sent.key != key
            and reason in RECOUNTED_REASONS
            and alike_reasons(sent.key[3], message)
        ):
            if self.clock() - sent.made < recount_s(ref.uid or f"{ref.namespace}/{ref.name}"):
                key = sent.key  # a repeat of the Event made, until due
            else:
                recount = True
        reserve = NEWS_RESERVE * self.burst
        if sent is not None and sent.key == key:
            sent.count += 1
            if self.clock() - sent.last_sent < self.refresh_s or not self._take(reserve):
                return None
            sent.last_sent = self.clock()
            sent.body = {
                **sent.body,
                "count": sent.count,
                "lastTimestamp": stamp(self.wall()),
            }
            return EventAction("update", key, sent.body)
        if not self._take(reserve if recount or not news else 0.0):
            self.dropped += 1
            return None
        made_at = stamp(self.wall())
        involved = {"kind": ref.kind, "name": ref.name, "apiVersion": ref.api_version}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.uid:
            involved["uid"] = ref.uid
        body = {
            "metadata": {
                "generateName": f"{ref.name}.",
                "namespace": ref.namespace or CLUSTER_EVENTS_NAMESPACE,
            },
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": made_at,
            "lastTimestamp": made_at,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
        }
        self._sent[topic] = _Sent(key, body, 1, self.clock(), self.clock())
        return EventAction("create", key, body)

    def topics(self) -> int:
        """Topics remembered (one per object, Event type and reason)."""
        return len(self._sent)

    def forget(self, refs: set[ObjectRef]) -> None:
        """Drop the memory of Events about objects that are gone (deleted or bound)."""
        self._sent = {k: v for k, v in self._sent.items() if k[0] not in refs}

    def keep(self, alive: Callable[[ObjectRef], bool]) -> set[EventKey]:
        """Forget every object ``alive`` says is gone; the Event keys still remembered."""
        self._sent = {k: v for k, v in self._sent.items() if alive(k[0])}
        return self.keys()

    def keys(self) -> set[EventKey]:
        """The Event keys remembered (one per topic: its latest message)."""
        return {sent.key for sent in self._sent.values()}


def waiting_for_volumes(status: GangStatus, waiting: int, first: str, members: int) -> GangStatus:
    """A pending gang's status, saying that ``waiting`` of its pods wait for their
    volumes (``first``: the first of them and why). Where the members that do not wait
    (``members``, bound or pending, with those that succeeded) cannot reach minMember,
    the volumes are why it waits: its reason says so. Else its own reason stands (the
    cluster's room, a failed bind, ...) and the volumes are a note."""
    if not waiting or status.phase != "Pending":
        return status
    note = f"{waiting} pod(s) wait for their volumes ({first})"
    short = members + status.succeeded < status.min_member
    return _left_out(status, note, "WaitingForVolumes", short)


def with_refused_members(status: GangStatus, refused: int, first: str, members: int) -> GangStatus:
    """A pending gang's status, saying that ``refused`` of its pods exist but gangsat
    cannot schedule them (``first``: the first of them and why: an ``InvalidSpec``).
    Those pods are in no snapshot: without this, the gang's NotEnoughTasks counted only
    the others and read as if its controller had failed to make the rest. Where the
    other members (``members``, bound or pending, with those that succeeded) cannot
    reach minMember but would with them, they are why it waits: its reason says so
    (``InvalidSpec``, as their Events). Else its own reason stands, the note added."""
    if not refused or status.phase != "Pending":
        return status
    note = f"{refused} pod(s) of it exist that gangsat cannot schedule ({first})"
    had = members + status.succeeded
    return _left_out(status, note, "InvalidSpec", had < status.min_member <= had + refused)


# Reasons a gang's status takes from the snapshot alone: where pods the snapshot left
# out are why it waits, their reason replaces these. (NotEnoughTasks: no pod of it left
# to place, those left out being in no snapshot.)
SNAPSHOT_REASONS = (None, "Waiting", "NotEnoughTasks", "NotEnoughResources")


def _left_out(status: GangStatus, note: str, reason: str, why: bool) -> GangStatus:
    """A pending gang's status with ``note`` on pods the snapshot left out: where they
    are ``why`` it waits, its ``reason`` (the room it lacks kept after the note), else
    its own reason with the note added."""
    if why and status.reason in SNAPSHOT_REASONS:
        room = status.reason == "NotEnoughResources" and status.message
        message = f"{note}; {status.message}" if room else note
        return status.model_copy(update={"reason": reason, "message": message})
    message = f"{status.message}; {note}" if status.message else note
    return status.model_copy(update={"message": message})
