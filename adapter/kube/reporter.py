"""After each cycle: PodGroup and Queue status, pod conditions and Events, as users read them.

Bodies come from ``adapter.kube.status`` (one per dialect); this module decides which
objects need a write and hands the writes to the ``Writer`` (coalesced, rate-limited,
off the loop). A write is skipped when the object already says the same thing — on a
big cluster nearly every status is unchanged from one cycle to the next, and an API
server must not be sent thousands of identical patches a second.

- PodGroup ``status``: phase, running count and the ``Unschedulable`` condition with the
  solver's reason, in the PodGroup's own dialect.
- Queue ``status``: how many of its PodGroups are pending and running.
- Pods of a waiting gang: ``PodScheduled=False, reason=Unschedulable`` with the message.
- Events (deduplicated and rate-limited by ``EventRecorder``): ``Scheduled`` on each pod
  bound; ``FailedScheduling`` on pending pods of a waiting gang and on pods that wait
  for a reason of their own (a PodGroup that does not exist); ``Unschedulable`` on the
  PodGroup; ``InvalidSpec`` on objects gangsat could not read (a PodGroup with
  ``minMember: -1``, an unparseable quantity); ``FailedScheduling`` and the
  ``PodScheduled`` condition on a pod whose volumes keep it pending
  (``adapter.kube.volumes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kubernetes import client

from adapter.cluster import CycleReport, GangStatus
from adapter.kube.cache import ClusterCache, Obj, key_of, split_key
from adapter.kube.connections import Connections
from adapter.kube.dialects import VOLCANO_GROUP
from adapter.kube.enqueue import to_enqueue
from adapter.kube.events import Events
from adapter.kube.fields import stored_status, uid_of
from adapter.kube.pod_report import PodReports
from adapter.kube.pod_tally import PodTally
from adapter.kube.queue_report import allocated_by_queue, queue_writes
from adapter.kube.reading import Finding
from adapter.kube.recount import RECOUNT_S, held_as_recount
from adapter.kube.reported import reported
from adapter.kube.resources import (
    DIALECTS,
    NODES,
    PODS,
    Resource,
)
from adapter.kube.status import (
    EventRecorder,
    ObjectRef,
    left_over_message,
    podgroup_status,
    unschedulable_message,
)
from adapter.kube.status_patches import patch_object_status
from adapter.kube.writer import Writer
from adapter.kube.written import Written
from solver.model import IMPLICIT_GANG_PREFIX, ClusterState

log = logging.getLogger(__name__)


def _signature(status: dict[str, Any]) -> tuple[Any, ...]:
    """What a status says, without timestamps."""
    conditions = tuple(
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
        for c in status.get("conditions") or []
    )
    return (status.get("phase"), status.get("running"), conditions)


class Reporter:
    def __init__(
        self,
        api: client.ApiClient,
        cache: ClusterCache,
        writer: Writer,
        recorder: EventRecorder | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        resources: Sequence[Resource] = (),
    ) -> None:
        self.api = api
        self.cache = cache
        self.writer = writer
        self.recorder = recorder or EventRecorder()
        # The writer's thread sends on it: status patches and Events, each within the
        # lease left when it goes out (a connect may take seconds).
        self.connections = Connections(api, fence=writer.fence)
        self.events = Events(self.connections, writer, self.recorder)
        self.now = now
        self._inline_status: set[Resource] = set()
        self.watching(resources)
        self.written = Written(writer)  # what was written, not to write again
        # The pods' clock is the reporter's, read at each call: one clock for all it says.
        self.pods = PodReports(
            cache, self.connections, self.events, self.written, lambda: self.now()
        )
        # gang -> (its PodGroup object, its status, the signatures of the status it would
        # be written and of the one it has, the phase it was built on), as the last
        # report saw them: a PodGroup whose object and status are both unchanged needs
        # neither built again (tens of thousands of running gangs, every cycle).
        self._compared: dict[
            str, tuple[Obj, GangStatus, tuple[Any, ...], tuple[Any, ...], Any]
        ] = {}
        self._pruned_at = -1  # the cache's removals when last pruned (``_prune``)
        # gang -> when its PodGroup's status was last sent: one that changed in its
        # conditions' counts alone is sent again only ``recount_s`` after
        # (``recount.held_as_recount``).
        self._status_sent: dict[str, float] = {}

    def report(
        self,
        report: CycleReport,
        state: ClusterState | None,
        findings: Sequence[Finding],
        foreign: Collection[str] = frozenset(),
    ) -> None:
        """Write what a cycle found; ``state`` is the cluster as the cycle left it (its
        snapshot with the cycle's binds). ``foreign``: gangs another scheduler runs
        (``Conversion.foreign_gangs``): neither their PodGroups' status nor Events are
        gangsat's to write (two schedulers writing one status overwrite each other)."""
        self.written.redo_failed()  # writes that failed: written again
        # Before the objects are read: one that leaves while this report runs is pruned
        # at the next (``_prune``).
        removals = self.cache.removals
        podgroups = self._podgroups()
        self.written.forget_recreated(podgroups)
        # As the cycle left the state: its binds included.
        tally = PodTally.of(state)
        pending_of, members = tally.pending, tally.members
        gang_queue = {g.name: g.queue for g in state.gangs} if state is not None else {}
        with_pods = set(members)
        live = reported(report.statuses, members, findings, podgroups)
        compared, self._compared = self._compared, {}
        self.pods.new_report()
        # What this cycle did (pods bound, evicted) before why others still wait: news
        # takes the Events' rate first.
        self._guarded("pod events", partial(self.pods.cycle_news, report))
        # A pod with a reason of its own (a gated pod of a gang that waits) is told that
        # one (``PodReports.cycle_news``), not its gang's as well: told both, it flipped between
        # them each cycle, a condition write and two Events a cycle.
        own = report.waiting_pods.keys()
        for status in live:
            if status.gang in foreign:
                continue
            try:
                self._gang(
                    status,
                    podgroups.get(status.gang),
                    [p for p in pending_of.get(status.gang, []) if p not in own]
                    if own
                    else pending_of.get(status.gang, []),
                    compared.get(status.gang),
                )
            except Exception:  # one gang's report must not stop the others'
                log.exception("report of gang %s failed", status.gang)
        # Each part on its own: one that fails (a poisonous object) is logged and the
        # others still run; before, a malformed Volcano PodGroup ended every report at
        # its enqueue, and no Event, Queue status or prune followed, cycle after cycle.
        if state is not None:
            placed = {s.gang for s in live if s.phase != "Pending"}  # its status just written
            self._guarded("enqueue", partial(self._enqueue, podgroups, state, with_pods, placed))
        self._guarded("findings", partial(self._findings, findings))
        allocated = partial(allocated_by_queue, tally, gang_queue)
        self._guarded("queues", partial(self._queues, live, allocated))
        bound = {ObjectRef("Pod", *split_key(p)) for p in report.bound}
        self._guarded("forget", partial(self.recorder.forget, bound))
        self._guarded("prune", partial(self._prune, podgroups, removals))

    def watching(self, resources: Sequence[Resource]) -> None:
        """The resources watched (at start, and as ``KubeCluster.rediscover`` finds
        them): those served without a status subresource (Volcano's PodGroup as it
        ships) have their status patched on the object itself."""
        self._inline_status = {r for r in resources if not r.status_subresource}
        self._watched = list(resources)

    @staticmethod
    def _guarded(part: str, write: Callable[[], None]) -> None:
        try:
            write()
        except Exception:
            log.exception("report: %s failed", part)

    def _findings(self, findings: Sequence[Finding]) -> None:
        for finding in findings:
            if finding.kind == "Pod" and finding.reason == "FailedScheduling":
                # A pod that waits (for its volumes) reads as one kube-scheduler cannot
                # place: the Event and PodScheduled=False, which `kubectl get` shows.
                self.pods.waiting(finding.name, finding.message)
            else:
                self._finding(finding)

    def failed_writes(self) -> bool:
        return self.written.any_failed()

    def close(self) -> None:
        """Close the writes' connections (the writer must be stopped)."""
        self.connections.close()

    def sizes(self) -> dict[str, int]:
        return {
            "statuses written": len(self.written),
            "statuses landed": len(self.written.landed),
            "statuses compared": len(self._compared),
            "statuses sent at": len(self._status_sent),
            "pods told they wait": self.pods.told_waiting(),
            "event topics": self.recorder.topics(),
            "event names": self.events.names(),
        }

    def _prune(self, podgroups: dict[str, tuple[Resource, Obj]], removals: int) -> None:
        """Forget what was written about objects that are gone, so a long-running
        scheduler's memory follows the cluster, not its history. ``removals``: the
        cache's count of objects that left it, read before ``podgroups`` was.

        Every report trims what the writer's thread adds after a report (the names of
        Events, some of whose topics that report forgot: a bound pod's; the statuses the
        server took): read against memories, not the cache. The memories themselves are
        checked against the cache only where an object left it since the last such
        check: they are of objects a snapshot since then read, and those are all still
        there (tens of thousands of pending pods' written conditions and Event topics
        took 45 ms a cycle to check, and more as topics accrue)."""
        queues = {key_of(o) for r in DIALECTS if r.kind == "Queue" for o in self.cache.of(r)}

        def alive(ref: ObjectRef) -> bool:
            key = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
            if ref.kind == "Pod":
                return self.cache.get(PODS, key) is not None
            if ref.kind == "PodGroup":
                return key in podgroups
            if ref.kind == "Queue":
                return ref.name in queues
            # A finding's object (a Node, a Job): gone once no resource of its kind has it.
            kinds = [r for r in self._watched if r.kind == ref.kind]
            return not kinds or any(self.cache.get(r, key) is not None for r in kinds)

        def exists(written: str) -> bool:
            kind, _, name = written.partition(" ")
            if kind == "podgroup":
                return name in podgroups
            if kind in ("pod", "nominated"):
                return self.cache.get(PODS, name) is not None
            return name.split(" ")[-1] in queues  # "queue <group> <name>"

        if removals == self._pruned_at:
            self.events.trim()
            self.written.keep_landed(exists)
            return
        self._pruned_at = removals
        # Older than any ``recount_s``, a time holds nothing back: forgotten.
        since = self.now().timestamp() - 2 * RECOUNT_S
        self._status_sent = {
            g: t for g, t in self._status_sent.items() if g in podgroups and t > since
        }
        self.events.keep(alive)  # and trims
        self.written.keep(exists)  # the landed statuses too

    # --- PodGroups and their pods -------------------------------------------------------------

    def _podgroups(self) -> dict[str, tuple[Resource, Obj]]:
        found: dict[str, tuple[Resource, Obj]] = {}
        for resource in DIALECTS:
            if resource.kind == "PodGroup":
                for obj in self.cache.of(resource):
                    found.setdefault(key_of(obj), (resource, obj))
        return found

    def _enqueue(
        self,
        podgroups: dict[str, tuple[Resource, Obj]],
        state: ClusterState,
        with_pods: set[str],
        placed: set[str],
    ) -> None:
        """Volcano PodGroups still Pending that now fit: Pending -> Inqueue, so that
        Volcano's job controller creates their pods (``adapter.kube.enqueue``). Not those
        this cycle ran (``placed``): their cached status is older than what was written."""
        volcano = [
            (k, obj)
            for k, (r, obj) in podgroups.items()
            if r.group == VOLCANO_GROUP and k not in placed
        ]
        for key in to_enqueue(volcano, state, with_pods):
            resource, _ = podgroups[key]
            namespace, name = split_key(key)
            sig = ("Inqueue",)
            if self.written.get(f"podgroup {key}") == sig:
                continue
            uid = uid_of(podgroups[key][1])
            self.written.submit(
                f"podgroup {key}",
                sig,
                f"status {resource.plural}.{resource.group} {key}",
                partial(self._patch_status, resource, namespace, name, {"phase": "Inqueue"}, uid),
                uid=uid,
            )

    def _as_written(self, gang: str, podgroup: Obj) -> Obj:
        """A PodGroup's status as the cache holds it, but at the phase the server took
        from gangsat where the cache does not show it yet (``_landed_phase``)."""
        stored = stored_status(podgroup)
        landed = self._landed_phase(gang, podgroup, stored.get("phase"))
        return stored if landed is None else {**stored, "phase": landed}

    def _landed_phase(self, gang: str, podgroup: Obj, stored_phase: Any) -> Any:
        """The phase the server took from gangsat (Inqueue, Running) where the cache,
        at ``stored_phase``, does not show it yet, else None: the PodGroup watch may lag
        the pods' (a Volcano job's pods come once Inqueue is seen), and built on the
        cache's Pending, the next status wrote Pending over gangsat's own Inqueue. Once
        the cache shows more than Pending, it stands (``Written.settled``)."""
        phase = self.written.phase(gang, uid_of(podgroup))
        if phase is None:
            return None
        if stored_phase not in (None, "Pending"):
            self.written.settled(gang)
            return None
        return phase if phase in ("Inqueue", "Running") else None

    def _gang(
        self,
        status: GangStatus,
        podgroup: tuple[Resource, Obj] | None,
        pending: list[str],
        compared: tuple[Obj, GangStatus, tuple[Any, ...], tuple[Any, ...], Any] | None = None,
    ) -> None:
        if status.gang.startswith(IMPLICIT_GANG_PREFIX):
            if status.phase == "Pending":
                pod = status.gang.removeprefix(IMPLICIT_GANG_PREFIX)
                self.pods.waiting(pod, status.message or "waiting for resources")
            return
        if podgroup is None:
            # A 1.35 Workload's pod group, or a gang its pods declare (``members.Declared``),
            # which have no object of their own, or one deleted since the snapshot: its
            # pods are still told why they wait.
            if self._unschedulable(status):
                for pod in pending:
                    self.pods.waiting(pod, unschedulable_message(status))
            self._left_over(status, pending)
            return
        resource, obj = podgroup
        body: dict[str, Any] | None = None
        # The phase the body is built on (the cache's, or ours: ``_landed_phase``), read
        # without copying the status where the comparison below is remembered (every
        # gang of a big cluster, every cycle).
        raw = obj.get("status")
        stored_phase = raw.get("phase") if type(raw) is dict else stored_status(obj).get("phase")
        landed = self._landed_phase(status.gang, obj, stored_phase)
        phase = stored_phase if landed is None else landed
        if (
            compared is not None
            and compared[0] is obj
            and compared[1] == status
            and compared[4] == phase
        ):
            sig, has = compared[2], compared[3]
        else:
            body = podgroup_status(
                status, resource.api_version, self.now(), self._as_written(status.gang, obj)
            )
            sig, has = _signature(body), _signature(stored_status(obj))
        self._compared[status.gang] = (obj, status, sig, has, phase)
        namespace, name = split_key(status.gang)
        written = self.written.get(f"podgroup {status.gang}")
        # The clock and the last send read only for a status that differs: most don't.
        if sig not in (has, written) and not held_as_recount(
            self._status_sent.get(status.gang),
            now := self.now().timestamp(),
            uid_of(obj),
            sig,
            has,
            written,
        ):
            if body is None:  # the comparison was remembered: built now, timestamps and all
                body = podgroup_status(
                    status, resource.api_version, self.now(), self._as_written(status.gang, obj)
                )
            self.written.submit(
                f"podgroup {status.gang}",
                sig,
                f"status {resource.plural}.{resource.group} {status.gang}",
                partial(self._patch_status, resource, namespace, name, body, uid_of(obj)),
                uid=uid_of(obj),
            )
            self._status_sent[status.gang] = now
        if self._unschedulable(status):
            message = unschedulable_message(status)
            uid = uid_of(obj)
            ref = ObjectRef("PodGroup", namespace, name, resource.api_version, uid)
            self.events.event(ref, "Warning", "Unschedulable", message)
            for pod in pending:
                self.pods.waiting(pod, message)
        self._left_over(status, pending)

    def _left_over(self, status: GangStatus, pending: list[str]) -> None:
        """A Running gang's pods left pending (an elastic job's extras, a member made
        again) are told why they wait: before, they were told nothing."""
        if status.phase == "Running" and status.left_over:
            message = left_over_message(status)
            for pod in pending:
                self.pods.waiting(pod, message)

    @staticmethod
    def _unschedulable(status: GangStatus) -> bool:
        """Whether a gang's users are told it waits (not when it was not considered)."""
        return status.phase == "Pending" and status.reason not in (None, "Waiting")

    def _finding(self, finding: Finding) -> None:
        namespace, _, name = finding.name.rpartition("/")
        api_version, uid = "v1", ""
        candidates = [r for r in DIALECTS if r.kind == finding.kind]
        candidates += [r for r in (PODS, NODES) if r.kind == finding.kind]
        for resource in candidates:
            obj = self.cache.get(resource, finding.name)
            if obj is not None:
                api_version = resource.api_version
                uid = uid_of(obj)
                break
        ref = ObjectRef(finding.kind, namespace, name, api_version, uid)
        if finding.reason == "InvalidSpec":
            self.events.event(
                ref, "Warning", finding.reason, f"gangsat cannot use it: {finding.message}"
            )
        else:
            self.events.event(ref, "Warning", finding.reason, finding.message)

    # --- Queues -------------------------------------------------------------------------------

    def _queues(
        self,
        statuses: Sequence[GangStatus],
        allocation: Callable[[], dict[str, dict[str, str]]],
    ) -> None:
        for w in queue_writes(self.cache, statuses, allocation):
            memory = f"queue {w.resource.group} {w.name}"
            if self.written.get(memory) == w.sig:
                continue
            self.written.submit(
                memory,
                w.sig,
                f"status queues.{w.resource.group} {w.name}",
                partial(self._patch_status, w.resource, None, w.name, w.body),
            )

    def _patch_status(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        status: dict[str, Any],
        uid: str = "",
    ) -> None:
        # Inline or not as the resource is served when the write goes out (rediscovery).
        inline = resource in self._inline_status
        patch_object_status(self.connections, resource, inline, namespace, name, status, uid)
