"""``KubeCluster``: the ``Cluster`` protocol on a real Kubernetes API server.

Watches (one ``Reflector`` per resource) fill a ``ClusterCache``; ``snapshot`` converts
the cache into a ``ClusterState`` (``adapter.kube.convert``), ``bind`` and ``evict`` go
through the ``Binder`` (Binding subresource, thread pool, fenced by leadership),
``preempt`` through the ``Evictor`` (Eviction API, PodDisruptionBudgets honoured), and
``report`` hands statuses and Events to the ``Reporter`` (coalesced, rate-limited, off
the loop). Objects gangsat cannot read become findings, reported as Events; they never
fail a cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from kubernetes import client

from adapter.cluster import ClusterError, CycleReport
from adapter.kube.binder import Binder
from adapter.kube.cache import ClusterCache
from adapter.kube.convert import convert
from adapter.kube.disruption import author
from adapter.kube.evictor import Evictor, Marks
from adapter.kube.heap import collections_paused
from adapter.kube.memo import Memo
from adapter.kube.provisioning import select_nodes
from adapter.kube.reading import Finding
from adapter.kube.reflector import Reflector
from adapter.kube.reporter import Reporter
from adapter.kube.resources import DIALECTS, Resource, discover
from adapter.kube.sending import Fence, always, without_retries
from adapter.kube.status import EventRecorder
from adapter.kube.writer import Writer
from solver.model import ClusterState

log = logging.getLogger(__name__)


class KubeCluster:
    def __init__(
        self,
        api: client.ApiClient,
        scheduler_names: Collection[str] = ("gangsat",),
        resources: Sequence[Resource] | None = None,
        fence: Fence = always,
        bind_threads: int = 16,
        writes_per_s: float = 50.0,
        recorder: EventRecorder | None = None,
        converted: Callable[[], None] = lambda: None,
    ) -> None:
        """``converted``: called once a snapshot is converted (``HeapKeeper.converted``)."""
        self.api = api
        self.converted = converted
        self.scheduler_names = tuple(scheduler_names)
        # Discovered resources are discovered again now and then (``rediscover``); given
        # ones (tests, tools) are what is watched.
        self._discovered = resources is None
        # Asked on the loop thread: one attempt per request, within its timeout (the
        # client's own three retries would hold the loop four times as long).
        self._discovery_api = without_retries(api) if self._discovered else api
        self.resources = list(resources) if resources is not None else discover(api)
        # What must have listed before a snapshot: those of the start; a dialect found
        # later is read once it has listed, and a broken one never holds up the others.
        self._required = list(self.resources)
        self.cache = ClusterCache()
        self.reflectors = [Reflector(api, r, self.cache) for r in self.resources]
        self.binder = Binder(api, self.cache, fence=fence, threads=bind_threads)
        self.evictor = Evictor(api, self.cache, fence=fence, author=author(self.scheduler_names))
        self.writer = Writer(rate_per_s=writes_per_s, fence=fence)
        self.reporter = Reporter(api, self.cache, self.writer, recorder, resources=self.resources)
        self.findings: list[Finding] = []
        self.foreign_gangs: frozenset[str] = frozenset()
        # Pending pods -> their claims a placement gives the pod's node (``provisioning``).
        self.selecting: Mapping[str, tuple[str, ...]] = {}
        self.last_state: ClusterState | None = None
        # As the last cycle left the cluster (its snapshot with its binds): what its
        # report and metrics read, as no follow-up cycle re-reads gangsat's own binds.
        self.state_after: ClusterState | None = None
        self._memo = Memo()
        self.seen_uids: dict[str, str] = {}  # pod -> UID, as the last snapshot read it

    def start(
        self, sync_timeout_s: float = 60.0, stop: threading.Event | None = None
    ) -> KubeCluster:
        """Start the watches and wait until each has listed once (or ``stop`` is set)."""
        started = time.monotonic()
        self.writer.start()
        for reflector in self.reflectors:
            reflector.start()
        deadline = time.monotonic() + sync_timeout_s
        while not self.synced():
            if stop is not None and stop.is_set():
                # Stopped from outside (a startup probe that gave up first, a rollout):
                # the reason the start took so long must still be in the log.
                log.warning(
                    "stopped after %.0f s, before the initial list of %s",
                    time.monotonic() - started,
                    ", ".join(self._unlisted()),
                )
                return self
            if time.monotonic() > deadline:
                missing = ", ".join(self._unlisted())
                raise ClusterError("NotSynced", f"no initial list of {missing}")
            time.sleep(0.01)
        log.info(
            "watching %d resources; every one listed in %.0f ms",
            len(self.reflectors),
            (time.monotonic() - started) * 1000,
        )
        return self

    def _unlisted(self) -> list[str]:
        return [str(r.resource) for r in self.reflectors if not self.cache.synced([r.resource])]

    def stop(self) -> None:
        for reflector in self.reflectors:
            reflector.stop()
        if self._discovery_api is not self.api:
            self._discovery_api.rest_client.pool_manager.clear()  # its own connections
        self.writer.stop()
        self.reporter.close()
        self.binder.close()
        self.evictor.close()

    def remembered(self) -> dict[str, int]:
        """The size of every memory kept from one cycle to the next, by name. Each follows
        the live cluster: what is deleted is forgotten (a long-running scheduler's memory
        must not grow with the cluster's history)."""
        return {
            **self.cache.sizes(),
            "conversion memo": len(self._memo),
            **self.reporter.sizes(),
            "queued writes": self.writer.queued(),
        }

    def lapse_doubts(self) -> int:
        """Binds of unknown outcome the watch has not settled in time: pending again."""
        return self.cache.lapse(time.monotonic())

    def writes_to_redo(self) -> bool:
        """Status writes failed since the last report, to be redone by the next."""
        return self.reporter.failed_writes()

    def synced(self) -> bool:
        return self.cache.synced(self._required)

    def rediscover(self) -> tuple[list[Resource], list[Resource]]:
        """Watch the dialects the API server has come to serve since start-up (a CRD
        installed after gangsat: its pods waited for a PodGroup gangsat never read), and
        stop watching those it serves no more (a CRD deleted, a version dropped: their
        objects leave the cache); returns what was added and what was dropped."""
        if not self._discovered:
            return [], []
        served = discover(self._discovery_api)
        added = [r for r in served if r not in self.resources]
        # A dialect that gained or lost its status subresource (a CRD upgraded): its
        # status is written the new way.
        resubresourced = False
        for i, known in enumerate(self.resources):
            now = next((r for r in served if r == known), None)
            if now is not None and now.status_subresource != known.status_subresource:
                self.resources[i] = now
                resubresourced = True
        # Every dialect, custom or built in (the Workload API's scheduling.k8s.io, whose
        # served version moves with the cluster's minor version).
        dropped = [r for r in self.resources if r in DIALECTS and r not in served]
        for resource in dropped:
            for reflector in [x for x in self.reflectors if x.resource == resource]:
                reflector.stop(wait=False)  # what it still delivers, the cache refuses
                self.reflectors.remove(reflector)
            self.resources.remove(resource)
            if resource in self._required:
                self._required.remove(resource)
            self.cache.drop(resource)
        for resource in added:
            self.cache.watch(resource)
            reflector = Reflector(self.api, resource, self.cache)
            self.reflectors.append(reflector)
            self.resources.append(resource)
            reflector.start()
        if added or dropped or resubresourced:
            self.reporter.watching(self.resources)
        return added, dropped

    @property
    def version(self) -> int:
        """Changes when what a snapshot reads changes (``ClusterCache``)."""
        return self.cache.version

    # --- the Cluster protocol ---------------------------------------------------------------

    def snapshot(self, again: bool = False) -> ClusterState:
        if not self.synced():
            raise ClusterError("NotSynced", "the watches have not listed every resource yet")
        # The first conversion of a big cluster builds a model per object: 0.4-0.6 s of
        # its 3 s at 5,000 nodes and 65,000 objects went to collections they triggered.
        uids: dict[str, str] = {}
        with collections_paused():
            conversion = convert(self.cache.objects(uids), self.scheduler_names, self._memo)
        if not again:
            # Not the second chance's: it comes after the decision, whose cyclic garbage
            # a freeze would keep from the settle after the cycle.
            self.converted()
        state = conversion.state.model_copy(update={"now_s": time.time()})
        if again:
            # The second chance binds pods of this view; the cycle's evictions, sent
            # after it, are for the pods of its decision's view, which keeps its UIDs
            # (a victim replaced by a namesake in between is not evicted: 409), its
            # findings, and its state for the report.
            self.seen_uids = {**uids, **self.seen_uids}
            self.selecting = {**conversion.selecting, **self.selecting}
            return state
        # What the decision is about: a pod replaced by a namesake since is not bound or
        # evicted in its place.
        self.seen_uids = uids
        self.findings = conversion.findings
        self.foreign_gangs = conversion.foreign_gangs
        self.selecting = conversion.selecting
        for finding in conversion.findings:
            log.debug("not used: %s", finding)
        # The clock ages running pods (what an eviction loses); convert itself stays a
        # function of the objects.
        self.last_state = state
        self.state_after = None
        return self.last_state

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        """Each pod's claims that wait for their first consumer are given its node first
        (``provisioning``), and its gang is not bound until they are bound (refused with
        ``WAITING_FOR_VOLUMES``); a pod whose claims could not be given it is not bound,
        nor is its gang."""
        with self.writer.holding():  # status and Events after the binds (``Writer``)
            refused: dict[str, ClusterError] = {}
            if self.selecting and any(pod in self.selecting for pod, _ in placements):
                binder = self.binder
                pods = self.last_state.pods_by_name() if self.last_state is not None else {}
                refused = select_nodes(
                    binder.core,
                    self.cache,
                    binder.fence,
                    placements,
                    self.selecting,
                    lambda pod: pods[pod].gang_name() if pod in pods else pod,
                    binder.pool,
                )
                placements = [p for p in placements if p[0] not in refused]
            return refused | self.binder.bind(placements, self.seen_uids)

    def unsettled(self) -> set[str]:
        return self.cache.in_doubt()

    def where_bound(self, pods: Collection[str]) -> dict[str, str]:
        return {key: node for key in pods if (node := self.cache.running_on(key)) is not None}

    def evict(self, pods: Sequence[str], reason: str) -> dict[str, ClusterError]:
        return self.binder.delete(pods, reason)

    def preempt(self, evictions: Mapping[str, str], again: bool = False) -> dict[str, ClusterError]:
        """Evict the victims whose every pod the API server would evict now (a dry run
        first, ``Evictor.check``) and could be marked as a victim first (the record a
        leader after this one reads, ``Evictor.mark``); a victim gang with a refused or
        unmarked pod keeps all of its pods, each reported as not evicted, with why. The
        marks of a victim that kept every pod are withdrawn; not those of one sent
        ``again`` (it lost pods to earlier evictions: its marks are the record)."""
        failures = self._whole(evictions, self.evictor.check(list(evictions), self.seen_uids))
        # Sent again, a pod is marked anew even where its dry run is refused: so its mark
        # does not go stale while the eviction is still wanted (``holds.MARK_STALE_S``).
        marked = {pod: why for pod, why in evictions.items() if again or pod not in failures}
        marks = self.evictor.mark(marked, self.seen_uids) if marked else Marks({}, {})
        failures |= self._whole(marked, marks.failed)
        rest = {pod: why for pod, why in marked.items() if pod not in failures}
        failures |= self.evictor.evict(rest, self.seen_uids)
        if not again and (kept := self._kept_whole(evictions, marks.versions, failures)):
            self.evictor.withdraw(kept, marks.versions)
        return failures

    def _kept_whole(
        self,
        evictions: Mapping[str, str],
        marked: Collection[str],
        failures: Mapping[str, ClusterError],
    ) -> dict[str, str]:
        """Of the pods ``marked`` now, those of victims that kept every pod: pod -> why
        not evicted. A pod whose mark failed (its answer lost, it may have landed) has no
        version to withdraw it at, and lapses."""
        if not marked:
            return {}
        gang_of = self._gangs_of(evictions)
        went = {gang_of[p] for p in evictions if p not in failures or failures[p].uncertain}
        return {
            p: f"not evicted: {failures[p].message}"
            for p in marked
            if p in failures and gang_of[p] not in went
        }

    def _whole(
        self, evictions: Mapping[str, str], refused: Mapping[str, ClusterError]
    ) -> dict[str, ClusterError]:
        """``refused``, and every pod of ``evictions`` of a refused pod's gang with it."""
        if not refused:
            return {}
        gang_of = self._gangs_of([*evictions, *refused])
        blocked: dict[str, tuple[str, ClusterError]] = {}
        for pod, error in refused.items():
            blocked.setdefault(gang_of[pod], (pod, error))
        failures = dict(refused)
        for pod in evictions:
            if pod not in failures and (block := blocked.get(gang_of[pod])):
                first, error = block
                why = f"not evicted: {first}, of the same gang, may not be ({error})"
                failures[pod] = ClusterError(error.reason, why)
        return failures

    def _gangs_of(self, pods: Collection[str]) -> dict[str, str]:
        """Each pod's gang in the decision's snapshot (a pod it lacks: its own name), read
        by name, not by a pass over every pod of the cluster."""
        by_name = self.last_state.pods_by_name() if self.last_state is not None else {}
        return {p: pod.gang_name() if (pod := by_name.get(p)) else p for p in pods}

    def report(self, report: CycleReport) -> None:
        try:
            self.state_after = (
                self.last_state.with_bindings(report.bound) if self.last_state else None
            )
            self.reporter.report(report, self.state_after, self.findings, self.foreign_gangs)
        except Exception as e:  # reporting is best effort; it must never stop scheduling
            log.exception("reporting failed")
            raise ClusterError("ReportFailed", f"{type(e).__name__}: {e}") from e
