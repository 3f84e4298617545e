"""gangsat as a cluster's scheduler: watch, decide on a timer, bind, report, lead.

``KubeScheduler.run`` is what ``gangsat run --kubeconfig PATH`` (or in a pod, with the
service account) runs until stopped:

- every ``cycleSeconds`` (from the settings file) one ``run_cycle`` on the
  ``KubeCluster`` — skipped while nothing a snapshot reads changed since the last
  cycle, except every ``resync_s`` so statuses are re-asserted, and every
  ``write_retry_s`` while status writes that failed wait to be redone;
- every ``rediscover_s`` the served PodGroup/Queue dialects are discovered again: a CRD
  installed after start-up is watched, one deleted no longer;
- the settings file is re-read when it changes (a ConfigMap update); a bad file is
  logged and the previous settings stay;
- with leader election, only the Lease holder runs cycles; followers keep their caches
  warm so a take-over is immediate; losing the lease ends ``run`` with exit status 1
  (the Deployment restarts the pod, which comes back as a follower);
- ``/metrics``, ``/healthz``, ``/readyz`` (ready once every watch has listed).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from kubernetes import client, config
from pydantic import ValidationError

from adapter.errors import message
from adapter.holds import Holds
from adapter.kube.cluster import KubeCluster
from adapter.kube.disruption import author
from adapter.kube.heap import HeapKeeper
from adapter.kube.lease import LeaseElector
from adapter.loop import LoopSettings, run_cycle
from adapter.metrics import LoopMetrics
from adapter.results import CycleResult
from adapter.rollbacks import Stranded
from adapter.serve import Endpoint
from adapter.settings import Settings, SettingsError
from solver.fairness import fair_resource, queue_shares
from solver.model import ClusterState

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXIT_LOST_LEASE = 1
EXIT_NO_ENDPOINT = 2  # the metrics port cannot be served (in use): the user must fix it


def in_cluster() -> bool:
    """True inside a pod with a service account (the in-cluster client config works)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").exists()


def api_client(
    kubeconfig: Path | None, pool_size: int = 48, in_cluster: bool = False
) -> client.ApiClient:
    """A client from a kubeconfig file; or from the pod's service account (``in_cluster``);
    or else as kubectl finds one (``KUBECONFIG``, merged, then ``~/.kube/config``).

    The pool holds a connection per watch, per bind thread and per writer; the client's
    default (5 per CPU) would open and drop a connection for most binds."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = pool_size
    # The client's config loaders carry no annotations; their contract is to fill in
    # ``client_configuration``.
    if kubeconfig is not None:
        load = cast(Callable[..., None], config.load_kube_config)
        load(config_file=str(kubeconfig), client_configuration=configuration)
    elif in_cluster:
        load = cast(Callable[..., None], config.load_incluster_config)
        load(client_configuration=configuration)
    else:
        # Read now: the client reads the variable once, when it is imported. It merges
        # a list of files as kubectl does.
        load = cast(Callable[..., None], config.load_kube_config)
        load(
            config_file=os.environ.get("KUBECONFIG") or "~/.kube/config",
            client_configuration=configuration,
        )
    return client.ApiClient(configuration)


def pod_namespace(default: str = "gangsat-system") -> str:
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text(encoding="utf-8").strip() or default
    except OSError:
        return os.environ.get("POD_NAMESPACE", default)


# Settings fields the command line overrides, by the flag that does it.
OVERRIDE_FLAGS = {
    "scheduler_names": "--scheduler-name",
    "scheduler": "--scheduler",
    "solver": "--time-limit",
}


@dataclass
class KubeOptions:
    settings_path: Path | None = None
    metrics_host: str = ""  # every address, IPv6 and IPv4 (``adapter.serve.listening``)
    metrics_port: int = 8080
    leader_elect: bool = True
    lease_namespace: str = "gangsat-system"
    lease_name: str = "gangsat"
    identity: str = ""
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    resync_s: float = 30.0
    # Status writes that failed are redone by a cycle's report; while some wait, a cycle
    # runs this often even if nothing changed (no watch event announces a failed write).
    write_retry_s: float = 2.0
    # How often the API server is asked again which dialects it serves (a CRD installed
    # or deleted since start-up); every follower too, so a take-over reads them all.
    rediscover_s: float = 60.0
    max_cycles: int | None = None  # stop after this many cycles (demos, tests)
    bind_threads: int = 16
    # From start until every watched resource has listed once; past it the process exits
    # (EXIT_NO_CLUSTER). A 50,000-pod first list on a slow API server may need more.
    sync_timeout_s: float = 60.0
    # Command-line flags win over the settings file, on every reload too.
    scheduler: str | None = None
    time_limit_s: float | None = None
    scheduler_names: tuple[str, ...] | None = None

    def applied(self, settings: Settings) -> Settings:
        """``settings`` with the flags' overrides, validated as the file is: a bad flag is
        a ``SettingsError`` naming the flag, never a value the loop trips over later."""
        update: dict[str, object] = {}
        if self.scheduler_names:
            update["scheduler_names"] = self.scheduler_names
        if self.scheduler is not None:
            update["scheduler"] = self.scheduler
        if self.time_limit_s is not None:
            update["solver"] = {**settings.solver.model_dump(), "time_limit_s": self.time_limit_s}
        if not update:
            return settings
        try:
            return Settings.model_validate({**settings.model_dump(), **update})
        except ValidationError as e:
            raise SettingsError(
                "\n".join(
                    f"{OVERRIDE_FLAGS.get(str(err['loc'][0]), err['loc'][0])}: {message(err)}"
                    for err in e.errors(include_url=False)
                )
            ) from None

    def __post_init__(self) -> None:
        if not self.identity:
            self.identity = f"{socket.gethostname()}_{os.getpid()}"


class KubeScheduler:
    def __init__(self, api: client.ApiClient, options: KubeOptions, settings: Settings) -> None:
        self.api = api
        self.options = options
        self.settings = options.applied(settings)
        self._settings_mtime = self._mtime()
        self.metrics = LoopMetrics()
        self.stop_event = threading.Event()
        self.lost_lease = False
        self.cycles = 0
        self.last: CycleResult | None = None
        self.elector: LeaseElector | None = None
        if options.leader_elect:
            self.elector = LeaseElector(
                api,
                options.lease_namespace,
                options.lease_name,
                options.identity,
                lease_duration_s=options.lease_duration_s,
                renew_deadline_s=options.renew_deadline_s,
                retry_period_s=options.retry_period_s,
                on_lost=self._lost,
            )
        self.heap = HeapKeeper()
        self.cluster = KubeCluster(
            api,
            self.settings.scheduler_names,
            fence=self.leading_for,
            bind_threads=options.bind_threads,
            converted=self.heap.converted,
        )
        self.endpoint: Endpoint | None = None
        self._beat: float | None = None  # monotonic time the loop last went round
        self._waited: set[str] = set()  # live gangs whose admission wait was observed
        # Room held for preempting gangs. A new leader (a process of its own: one that
        # loses the lease exits) rebuilds it at its first cycle from the pods'
        # status.nominatedNodeName (``Holds.recover``).
        self.holds = Holds(author=author(self.settings.scheduler_names))
        self.stranded = Stranded()  # pods rollbacks could not delete (``rollbacks``)

    def leading(self) -> bool:
        return self.leading_for() > 0

    def leading_for(self) -> float:
        """Seconds this replica may still bind (unbounded without leader election)."""
        return math.inf if self.elector is None else self.elector.leading_for()

    def ready(self) -> tuple[bool, str]:
        if not self.cluster.synced():
            return False, "waiting for the initial list of every watched resource"
        if self.elector is None:
            return True, "scheduling (no leader election)"
        if self.elector.is_leader():
            return True, "scheduling (leader)"
        return True, f"standing by (leader: {self.elector.holder() or 'none'})"

    def stall_s(self) -> float:
        """How long the loop may go without a round before it counts as wedged: a cycle
        may take its time limit and then bind for a while."""
        return max(120.0, 4 * (self.settings.solver.time_limit_s + self.settings.cycle_s))

    def alive(self) -> tuple[bool, str]:
        """The liveness probe: failing until every watch has listed (the startup probe
        waits for that), and again when the loop has not gone round for ``stall_s``."""
        if self._beat is None:
            return False, "starting: waiting for the initial list of every watched resource"
        quiet = time.monotonic() - self._beat
        if quiet > self.stall_s():
            return False, f"wedged: the scheduling loop has not gone round for {quiet:.0f} s"
        return True, "ok"

    def _lost(self) -> None:
        self.lost_lease = True
        self.stop_event.set()

    def _mtime(self) -> float | None:
        path = self.options.settings_path
        try:
            return path.stat().st_mtime if path is not None else None
        except OSError:
            return None

    def reload_settings(self) -> bool:
        """Re-read the settings file if it changed; keep the old settings if it is bad."""
        mtime = self._mtime()
        if mtime == self._settings_mtime or self.options.settings_path is None:
            return False
        self._settings_mtime = mtime
        try:
            self.settings = self.options.applied(Settings.load(self.options.settings_path))
        except SettingsError as e:  # the file, or the flags merged into it
            log.error("settings not reloaded, keeping the previous ones: %s", e)
            return False
        self.cluster.scheduler_names = self.settings.scheduler_names
        log.info("settings reloaded from %s", self.options.settings_path)
        return True

    def run(self) -> int:
        """Schedule until stopped; the process's exit status."""
        try:
            self.endpoint = Endpoint(
                self.metrics.registry,
                self.ready,
                self.options.metrics_host,
                self.options.metrics_port,
                alive=self.alive,
            ).start()
        except OSError as e:  # the port is in use, or not ours to bind
            where = f"{self.options.metrics_host or '[::]'}:{self.options.metrics_port}"
            log.error("cannot serve /metrics, /healthz and /readyz on %s: %s", where, e)
            return EXIT_NO_ENDPOINT
        try:
            with self.heap.loading():  # and frozen as loaded
                self.cluster.start(self.options.sync_timeout_s, stop=self.stop_event)
            if self.elector is not None:
                self.elector.start()
            self._loop()
        finally:
            # Each step whatever the one before it raised: a lease that cannot be
            # released (the API server is gone) must not leave the watches running.
            steps: list[Callable[[], None]] = [self.cluster.stop, self.endpoint.stop]
            if self.elector is not None:
                elector = self.elector
                steps.insert(0, lambda: elector.stop(release=not self.lost_lease))
            for step in steps:
                try:
                    step()
                except Exception:
                    log.exception("stopping failed")
            self.heap.release()
        if self.lost_lease:
            log.error("exiting: the leader lease was lost")
            return EXIT_LOST_LEASE
        return 0

    def _loop(self) -> None:
        seen_version = -1
        last_cycle = 0.0
        last_discovery = time.monotonic()
        retry_s = self.options.write_retry_s
        while not self.stop_event.is_set():
            started = self._beat = time.monotonic()
            changed = self.reload_settings()
            if started - last_discovery >= self.options.rediscover_s:
                last_discovery = started
                self._rediscover()
            self.metrics.leader.set(1 if self.leading() else 0)
            due = started - last_cycle >= self.options.resync_s
            # Doubled while writes keep failing (a 403 or 422 does not heal in seconds),
            # up to the resync; back to the start once none waits.
            waiting = self.cluster.writes_to_redo()
            retry = waiting and started - last_cycle >= retry_s
            if not waiting:
                retry_s = self.options.write_retry_s
            elif retry:
                retry_s = min(2 * retry_s, self.options.resync_s)
            self.cluster.lapse_doubts()  # moves the version when one lapses
            moved = self.cluster.version != seen_version
            if self.leading() and (changed or due or retry or moved):
                quiet = not moved and not retry  # a retry is no quiet moment to collect
                seen_version = self.cluster.version
                last_cycle = started
                with self.heap.cycling(quiet):  # and what it left collected
                    try:
                        self.cycle()
                    except Exception:  # a bug must not stop scheduling; it is logged loudly
                        log.exception("cycle %d failed", self.cycles)
                if self.options.max_cycles is not None and self.cycles >= self.options.max_cycles:
                    return
            wait = self.settings.cycle_s - (time.monotonic() - started)
            self.stop_event.wait(max(0.0, wait))

    def _rediscover(self) -> None:
        try:
            added, dropped = self.cluster.rediscover()
        except Exception as e:  # an API server that cannot answer now: the next time
            log.warning("could not discover the served dialects again: %s", e)
            return
        for resource in added:
            log.info("now watching %s (served since start-up)", resource)
        for resource in dropped:
            log.warning("no longer watching %s: the API server serves it no more", resource)

    def _observe_waits(self, state: ClusterState, result: CycleResult) -> None:
        """Creation-to-admission time of each gang admitted for the first time (a
        running gang that grows is not admitted again)."""
        gangs = {g.name: g for g in state.gangs}
        now = time.time()
        for name in result.admitted():
            gang = gangs.get(name)
            if gang is None or name in self._waited or gang.created_s <= 0:
                continue
            self._waited.add(name)
            self.metrics.gang_wait.labels(gang.queue).observe(max(0.0, now - gang.created_s))
        self._waited &= gangs.keys()  # a memory of live gangs only

    def cycle(self) -> CycleResult:
        settings = LoopSettings(scheduler=self.settings.scheduler, solver=self.settings.solver)
        result = run_cycle(self.cluster, settings, self.metrics, self.holds, self.stranded)
        self.cycles += 1
        self.last = result
        # The loop's memories too: pods rollbacks left to finish, gangs kept for binds of
        # unknown outcome (``rollbacks``), evictions no hold waits on (``holds``).
        memories = {
            **self.cluster.remembered(),
            "pods left to roll back": len(self.stranded.pods),
            "gangs kept for binds in doubt": len(self.stranded.doubts),
            "evictions to send again": len(self.holds.resend),
        }
        for memory, size in memories.items():
            self.metrics.remembered.labels(memory).set(size)
        state = self.cluster.last_state
        if state is not None:
            self._observe_waits(state, result)
            resource = fair_resource(state.nodes)
            # As the cycle left the cluster: its binds cause no follow-up cycle.
            after = self.cluster.state_after or state.with_bindings(result.bound)
            self.metrics.observe_queues(queue_shares(after, resource), resource)
        if result.error:
            log.error("cycle %d: %s", self.cycles, result.error)
        elif result.bound or result.failed_binds or result.rolled_back:
            log.info(
                "cycle %d: %d pending, bound %d pod(s) of %d gang(s), %d bind(s) failed, "
                "%d gang(s) rolled back; snapshot %.0f ms, decide %.0f ms, bind %.0f ms, "
                "report %.0f ms, cycle %.0f ms",
                self.cycles,
                result.pending_pods,
                len(result.bound),
                len(result.admitted()),
                len(result.failed_binds),
                len(result.rolled_back),
                result.snapshot_s * 1000,
                result.decide_s * 1000,
                result.bind_s * 1000,
                result.report_s * 1000,
                result.total_s * 1000,
            )
        return result
