"""What gangsat tells pods after each cycle, as users read them with `kubectl describe`.

- A pod that waits: ``PodScheduled=False, reason=Unschedulable`` with why, and a
  ``FailedScheduling`` Event (deduplicated and rate-limited by ``EventRecorder``).
- A pod bound: a ``Scheduled`` Event; a pod evicted for a preemptor: ``Preempted``.
- A preemptor waiting for its victims: ``status.nominatedNodeName``, cleared when the
  nomination lapses.

The PodGroups' and Queues' statuses are ``adapter.kube.reporter``'s, which owns one of
these and shares its ``Written`` memory, so both prune by the same objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

from adapter.cluster import CycleReport
from adapter.kube.cache import ClusterCache, Obj, split_key
from adapter.kube.connections import Connections
from adapter.kube.events import Events
from adapter.kube.fields import stored_status, uid_of
from adapter.kube.recount import Said, alike_reasons, last_told, recount_s, waiting_condition
from adapter.kube.resources import PODS
from adapter.kube.status import ObjectRef, pod_unschedulable
from adapter.kube.status_patches import pod_status_write
from adapter.kube.written import Written


class PodReports:
    """The pods' part of a report; ``Reporter`` owns it and calls it for each cycle."""

    def __init__(
        self,
        cache: ClusterCache,
        connections: Connections,
        events: Events,
        written: Written,
        now: Callable[[], datetime],
    ) -> None:
        self.cache = cache
        self.connections = connections
        self.events = events
        self.written = written
        self.now = now
        # pod -> (its cached object, its Event's object reference, what its PodScheduled
        # condition says it waits with and when: ``waiting_condition``), as the last
        # report and this one saw them: a pending pod whose object is unchanged needs
        # neither read again, whatever it is told now (55,000 pods of a backlog, every
        # cycle, most told new counts whenever a decision moves them).
        self._waited: dict[str, tuple[Obj | None, ObjectRef, Said | None]] = {}
        self._waited_before: dict[str, tuple[Obj | None, ObjectRef, Said | None]] = {}
        # Conditions stamped before this instant were written before this replica
        # started: the Events that went with them are not its to remember. Stamps are
        # whole seconds: one in the second it started may be its own.
        self.started = math.floor(now().timestamp()) - 1.0

    def new_report(self) -> None:
        """A report begins: pods told nothing in it are forgotten at the next."""
        self._waited_before, self._waited = self._waited, {}

    def told_waiting(self) -> int:
        return len(self._waited)

    def cycle_news(self, report: CycleReport) -> None:
        """What the cycle did to pods (bound, evicted, nominated) and the pods with a
        reason of their own to wait."""
        for pod, node in report.bound.items():
            self.events.event(
                self.ref(pod), "Normal", "Scheduled", f"Successfully assigned {pod} to {node}"
            )
        for pod, why in report.preempted.items():
            self.events.event(self.ref(pod), "Warning", "Preempted", f"Evicted by gangsat: {why}")
        for pod, why in report.waiting_pods.items():
            self.waiting(pod, why)
        for pod, node in report.nominated.items():
            self.nominate(pod, node)
        for pod in report.unnominated:
            self.unnominate(pod)

    def ref(self, pod: str, current: Obj | None = None) -> ObjectRef:
        """``current``: the pod's cached object, where the caller read it already."""
        namespace, name = split_key(pod)
        current = current or self.cache.get(PODS, pod) or {}
        return ObjectRef("Pod", namespace, name, uid=uid_of(current))

    def waiting(self, pod: str, message: str) -> None:
        current = self.cache.get(PODS, pod)
        seen = self._waited.get(pod) or self._waited_before.get(pod)
        if seen is not None and seen[0] is current:
            _, ref, said = seen
        else:
            ref = self.ref(pod, current)
            said = waiting_condition(current) if current is not None else None
        self._waited[pod] = (current, ref, said)
        shown = said is not None and said[0] == message
        before = last_told(said, ref.uid, self.started)
        told_alike = before is not None and alike_reasons(before[1], message)
        # A pod whose condition, written before this replica started, already says why
        # it waits, but for counts, is taken to have had its Event from the leader before
        # (whether its rate let it out is not known): after a start, its first Event is
        # no news, and leaves the rate to what is. A condition this replica wrote is no
        # sign of an Event: the rate may have dropped it.
        self.events.event(ref, "Warning", "FailedScheduling", message, news=not told_alike)
        if current is None or shown:
            return
        # Of this pod (one deleted and made again under its name, a job's retry, is told
        # again, though its predecessor was told the same), and when.
        memory = f"pod {pod}"
        told = self.written.get(memory)
        if told is None and (told := last_told(said, ref.uid, self.now().timestamp())) is not None:
            self.written.remember(memory, told)
        if (
            told is not None
            and told[0] == "PodScheduled"
            and told[2] == ref.uid
            and (
                told[1] == message
                or (
                    alike_reasons(told[1], message)
                    and self.now().timestamp() - told[3] < recount_s(ref.uid)
                )
            )
        ):
            return
        now = self.now()
        sig = ("PodScheduled", message, ref.uid, now.timestamp())
        condition = pod_unschedulable(message, now)
        write = pod_status_write(self.connections, pod, {"conditions": [condition]})

        def unless_placed() -> None:
            # Queued behind other writes, it may come due after a later cycle bound the
            # pod: its Binding set PodScheduled True, which this would turn back. Not
            # written, not remembered as written: should the bind fail, the pod waits
            # again, and is told so.
            if self.cache.placed(pod):
                self.written.failed(memory, sig)
            else:
                write()

        self.written.submit(memory, sig, f"condition {pod}", unless_placed)

    def nominate(self, pod: str, node: str) -> None:
        """status.nominatedNodeName, as kube-scheduler sets it for a preemptor: where the
        pod will run once its victims are gone."""
        memory = f"nominated {pod}"
        written = self.written.get(memory)
        if written == (node,):
            return
        current = self.cache.get(PODS, pod)
        if current is None:
            return
        # The cache is trusted only where nothing was written: a clear still queued
        # would otherwise undo a nomination the pod shows.
        if written is None and stored_status(current).get("nominatedNodeName") == node:
            return
        self.written.submit(
            memory,
            (node,),
            f"nominated {pod}",
            pod_status_write(self.connections, pod, {"nominatedNodeName": node}),
        )

    def unnominate(self, pod: str) -> None:
        """A lapsed nomination cleared, as kube-scheduler clears one: else the next leader
        would hold room for it (``Holds.recover``)."""
        memory = f"nominated {pod}"
        written = self.written.get(memory)
        current = self.cache.get(PODS, pod)
        shown = stored_status(current).get("nominatedNodeName") if current is not None else None
        # Sent already (a failure forgets it, and the hold asks again), or nothing to clear.
        if current is None or written == (None,) or (not shown and written is None):
            return
        # Under the nomination's key: a nomination still queued is superseded, not undone.
        patch = pod_status_write(self.connections, pod, {"nominatedNodeName": None})
        self.written.submit(memory, (None,), f"nominated {pod}", patch)
