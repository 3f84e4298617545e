"""Leader election on a coordination.k8s.io Lease, with fencing for every bind batch.

Two replicas run; only the one holding the Lease binds. Acquire and renew are updates
carrying the Lease's resourceVersion, so the API server's optimistic concurrency decides
any race: of two replicas writing the same version, one gets 409 and stays a follower.

Fencing: a leader that cannot renew must stop binding *before* another replica may take
over. Followers wait ``lease_duration_s`` after they last saw the Lease change before
taking it; the leader considers itself leader only until ``renew_deadline_s`` (shorter)
after its last successful renew, measured on its own monotonic clock. ``is_leader()`` is
cheap and is asked before every bind. Losing the lease calls ``on_lost`` (the scheduler
exits and its Deployment restarts it as a follower).

Why not ``kubernetes.leaderelection``: its ``run()`` blocks, it never releases the lease
on shutdown, and two candidates may both believe they lead for about a second, with no
way to fence a write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


class LeaseElector:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_lost: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry period < renew deadline < lease duration")
        self.leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_lost = on_lost
        self.clock = clock
        self._renewed_at: float | None = None  # our last successful acquire/renew
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)

    def is_leader(self) -> bool:
        return self.leading_for() > 0

    def leading_for(self) -> float:
        """Seconds this replica may still act as leader (<= 0: it may not)."""
        renewed = self._renewed_at
        if renewed is None:
            return 0.0
        return self.renew_deadline_s - (self.clock() - renewed)

    def holder(self) -> str | None:
        return self._observed[0] if self._observed else None

    def start(self) -> LeaseElector:
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.retry_period_s + 5)
        if release and self.is_leader():
            self._release()

    def _run(self) -> None:
        led = False
        while not self._stop.is_set():
            renewed, started = self._renewed_at, self.clock()
            try:
                self.try_acquire_or_renew()
            except ApiException as e:
                log.warning("%s", self.explain(e))
            except Exception as e:  # the API server may be unreachable for a while
                log.warning("lease %s/%s: %s", self.namespace, self.name, e)
            # A renewal begun after the renew deadline does not mend the lapse: the
            # leadership ended there (binds and writes were refused meanwhile, a gang may
            # be half bound), as client-go's elector ends it. Lost for good. One begun
            # before it that answers late (a slow server) is no lapse.
            lapsed = renewed is not None and started - renewed >= self.renew_deadline_s
            leading = self.is_leader() and not (led and lapsed)
            if led and not leading:
                log.error("lost the lease %s/%s", self.namespace, self.name)
                self._renewed_at = None
                if self.on_lost is not None:
                    self.on_lost()
                return
            led = leading
            self._stop.wait(self.retry_period_s)

    def explain(self, e: ApiException) -> str:
        """What a failed lease call means and what to do, in one line."""
        where = f"lease {self.namespace}/{self.name}"
        if e.status == 404:
            return (
                f"{where}: namespace {self.namespace!r} not found (404): apply deploy/ "
                f"(it creates it), create it (kubectl create namespace {self.namespace}), "
                "pass --lease-namespace, or run one replica with --no-leader-elect"
            )
        if e.status == 403:
            return (
                f"{where}: forbidden (403): this identity may not get/create/update "
                "leases there; apply deploy/'s RBAC or pass --no-leader-elect"
            )
        return f"{where}: {e.status} {e.reason}"

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True if this replica holds the lease afterwards.

        Our own renewal is dated from before the read (the leader stops early, never
        late); another holder's renewal from after it (a read served late must not make
        a renewal look older than it is, or a follower would take over early)."""
        now = self.clock()
        try:
            lease = self.leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout()
            )
        except ApiException as e:
            if e.status != 404:
                raise
            # Deleted (kubectl delete lease): whoever held it may still act for as long
            # as its lease runs; only then is a new one taken.
            seen = self._observed
            others = bool(seen) and seen is not None and seen[0] not in ("", self.identity)
            if others and self.clock() - self._observed_at < self.lease_duration_s:
                return False
            return self._create(now)
        read_at = self.clock()
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        renew = str(spec.renew_time or "")
        if holder != self.identity:
            # Another replica (or none) holds it now: this one leads no more, whatever
            # its last renewal's deadline says.
            self._renewed_at = None
        if self._observed != (holder, renew):
            self._observed = (holder, renew)
            self._observed_at = read_at
        duration = spec.lease_duration_seconds or self.lease_duration_s
        if holder and holder != self.identity and read_at - self._observed_at < duration:
            return False  # someone else holds it, and renews
        transitions = spec.lease_transitions or 0
        if holder != self.identity:
            transitions += 1
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=lease.metadata.resource_version if lease.metadata else None,
            ),
            spec=self._spec(transitions, acquire=holder != self.identity, old=spec),
        )
        try:
            self.leases.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self._timeout()
            )
        except ApiException as e:
            if e.status == 409:
                return False  # another replica wrote first
            raise
        if holder != self.identity:
            log.info("acquired the lease %s/%s as %s", self.namespace, self.name, self.identity)
        self._renewed_at = now
        self._observed = (self.identity, "")
        return True

    def _create(self, now: float) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=self._spec(0, acquire=True, old=None),
        )
        try:
            self.leases.create_namespaced_lease(
                self.namespace, body, _request_timeout=self._timeout()
            )
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        self._renewed_at = now
        self._observed = (self.identity, "")
        return True

    def _timeout(self) -> tuple[float, float]:
        # A renewal answered after the renew deadline is worthless: do not wait longer.
        return (min(5.0, self.retry_period_s), self.renew_deadline_s / 2)

    def _spec(self, transitions: int, acquire: bool, old: Any) -> client.V1LeaseSpec:
        stamp = micro_time(datetime.now(UTC))
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.lease_duration_s),
            acquire_time=stamp if acquire or old is None else _micro_or_none(old.acquire_time),
            renew_time=stamp,
            lease_transitions=transitions,
        )

    def _release(self) -> None:
        """Hand the lease over at once instead of making the next leader wait it out."""
        # Fenced first: once the release is written another replica may lead at once, and
        # a write of this one's still queued must not follow it.
        self._renewed_at = None
        try:
            lease = self.leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout()
            )
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            for field in ("acquire_time", "renew_time"):
                setattr(lease.spec, field, _micro_or_none(getattr(lease.spec, field, None)))
            self.leases.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._timeout()
            )
        except ApiException as e:
            log.warning("could not release the lease: %s %s", e.status, e.reason)
        except Exception as e:  # unreachable: the lease runs out on its own
            log.warning("could not release the lease: %s", e)


def micro_time(stamp: datetime) -> datetime:
    """``stamp`` as the client can send a MicroTime: it writes a datetime with
    ``isoformat()``, which leaves out the fraction at microsecond 0, and kube-apiserver
    parses MicroTime with exactly six fractional digits (RFC3339Micro): such a write is
    a 400. One microsecond later says the same."""
    return stamp.replace(microsecond=1) if stamp.microsecond == 0 else stamp


def _micro_or_none(stamp: object) -> object:
    """``micro_time`` of a time read back (which another writer may have left out)."""
    return micro_time(stamp) if isinstance(stamp, datetime) else stamp
