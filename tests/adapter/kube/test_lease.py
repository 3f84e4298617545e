"""Leader election on a Lease, against the fake API server's optimistic concurrency."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from adapter.kube.lease import LeaseElector, micro_time
from benchmarks.fake_apiserver import FakeApiServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(server: FakeApiServer, identity: str, clock: Clock, **kw: float) -> LeaseElector:
    return LeaseElector(
        server.client(),
        "gangsat-system",
        "gangsat",
        identity,
        lease_duration_s=15,
        renew_deadline_s=10,
        retry_period_s=2,
        clock=clock,
        **kw,
    )


def holder(server: FakeApiServer) -> str | None:
    lease = server.get("coordination.k8s.io", "leases", "gangsat-system", "gangsat")
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_one_of_two_candidates_leads_and_the_other_waits(server: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew() and not b.is_leader()
    assert holder(server) == "a" and b.holder() == "a"
    # a renews; b keeps seeing the record change and keeps waiting, however long.
    for _ in range(10):
        clock.now += 5
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert a.is_leader() and not b.is_leader()


def test_a_leader_that_stops_renewing_is_fenced_before_it_can_be_replaced(
    server: FakeApiServer,
) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b first sees a's record now
    # a stops renewing (say, partitioned). At the renew deadline it stops binding...
    clock.now += 10
    assert not a.is_leader()
    # ...while b still waits, until the lease duration passes without a change.
    assert not b.try_acquire_or_renew()
    clock.now += 5
    assert b.try_acquire_or_renew() and b.is_leader()
    assert holder(server) == "b"
    lease = server.get("coordination.k8s.io", "leases", "gangsat-system", "gangsat")
    assert lease is not None and lease["spec"]["leaseTransitions"] == 1


def test_a_stale_write_loses_to_the_api_servers_concurrency_check(server: FakeApiServer) -> None:
    # Both candidates read the same expired lease; both try to take it with the same
    # resourceVersion. The server accepts exactly one.
    clock = Clock()
    first = elector(server, "first", clock)
    assert first.try_acquire_or_renew()
    clock.now += 100
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    a.try_acquire_or_renew(), b.try_acquire_or_renew()  # both observe the record
    clock.now += 16
    original = server.hooks[:]
    raced: list[bool] = []

    def b_writes_first(method: str, path: str) -> None:
        if method == "PUT" and path.endswith("/leases/gangsat") and not raced:
            raced.append(True)
            server.hooks[:] = original
            raced.append(b.try_acquire_or_renew())

    server.hooks.append(b_writes_first)
    won = a.try_acquire_or_renew()
    assert raced == [True, True]
    assert not won and not a.is_leader()
    assert b.is_leader() and holder(server) == "b"


def test_release_on_shutdown_hands_over_at_once(server: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.stop(release=True)
    assert not a.is_leader()
    assert b.try_acquire_or_renew(), "a released lease is free without waiting it out"


def test_a_replica_stops_acting_before_its_release_is_written(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once the release is written another replica may lead at once: a write this one
    # still has queued (a status, a bind) must be fenced by then, not after.
    a = elector(server, "a", Clock())
    assert a.try_acquire_or_renew()
    leading_when_written: list[float] = []
    replace = a.leases.replace_namespaced_lease

    def recorded(*args: object, **kwargs: object) -> object:
        leading_when_written.append(a.leading_for())
        return replace(*args, **kwargs)

    monkeypatch.setattr(a.leases, "replace_namespaced_lease", recorded)
    a.stop(release=True)
    assert leading_when_written == [0.0]


def test_nonsense_timings_are_refused(server: FakeApiServer) -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        LeaseElector(server.client(), "ns", "l", "me", lease_duration_s=5, renew_deadline_s=10)


@pytest.mark.parametrize(
    ("status", "fragments"),
    [
        (404, ("namespace 'gangsat-system' not found", "--lease-namespace", "--no-leader-elect")),
        (403, ("forbidden", "RBAC")),
        (500, ("500",)),
    ],
)
def test_a_failed_lease_call_says_why_and_what_to_do(
    server: FakeApiServer, status: int, fragments: tuple[str, ...]
) -> None:
    message = elector(server, "a", Clock()).explain(ApiException(status=status, reason="x"))
    assert message.startswith("lease gangsat-system/gangsat: ")
    for fragment in fragments:
        assert fragment in message


def test_a_leader_that_reads_another_holder_stops_at_once(server: FakeApiServer) -> None:
    # The Lease was taken over (here written by hand, as after a deletion); a reads it on
    # its next renewal and must stop, not lead out its last renewal's deadline.
    clock = Clock()
    a = elector(server, "a", clock)
    assert a.try_acquire_or_renew()
    lease = server.get("coordination.k8s.io", "leases", "gangsat-system", "gangsat")
    assert lease is not None
    lease["spec"]["holderIdentity"] = "b"
    server.put(lease)
    clock.now += 2
    assert not a.try_acquire_or_renew()
    assert not a.is_leader() and a.holder() == "b"


def test_a_deleted_lease_is_not_taken_while_its_holder_may_still_lead(
    server: FakeApiServer,
) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    server.delete("coordination.k8s.io", "leases", "gangsat-system", "gangsat")
    clock.now += 1
    assert not b.try_acquire_or_renew()  # a may lead for 9 s more
    assert a.try_acquire_or_renew()  # a re-creates it and goes on
    assert not b.try_acquire_or_renew() and a.is_leader() and not b.is_leader()
    # A holder that stopped renewing: after the lease duration, b creates it.
    server.delete("coordination.k8s.io", "leases", "gangsat-system", "gangsat")
    clock.now += 16
    assert not a.is_leader()
    assert b.try_acquire_or_renew() and b.is_leader()


def test_a_followers_slow_read_does_not_date_a_renewal_too_early(server: FakeApiServer) -> None:
    """b's read is sent at t=1002 and answered at 1009, after a renewed at 1008.5: the
    renewal is dated when b saw it, so b waits until 1024, past a's deadline (1018.5)."""
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.now = 1002.0
    read = b.leases.read_namespaced_lease

    def slow(*args: object, **kw: object) -> object:
        clock.now = 1008.5
        assert a.try_acquire_or_renew()
        clock.now = 1009.0
        return read(*args, **kw)

    b.leases.read_namespaced_lease = slow  # type: ignore[method-assign]
    assert not b.try_acquire_or_renew()
    b.leases.read_namespaced_lease = read  # type: ignore[method-assign]
    clock.now = 1017.0  # a, cut off, leads until 1018.5
    assert a.is_leader()
    assert not b.try_acquire_or_renew()
    clock.now = 1024.5
    assert not a.is_leader() and b.try_acquire_or_renew()


def test_a_release_with_the_api_server_gone_neither_raises_nor_waits_long(
    server: FakeApiServer,
) -> None:
    clock = Clock()
    a = elector(server, "a", clock)
    assert a.try_acquire_or_renew()
    server.stop()  # as on SIGTERM while the API server is unreachable
    a.stop(release=True)  # urllib3's MaxRetryError used to escape and end the process
    assert not a.is_leader()


@pytest.mark.parametrize("microsecond", [0, 1, 999_999])
def test_lease_times_go_out_with_six_fractional_digits(microsecond: int) -> None:
    """kube-apiserver reads a MicroTime with exactly six fractional digits; the client
    writes a datetime with ``isoformat()``, which drops them at microsecond 0."""
    stamp = datetime(2026, 1, 1, 12, 0, 0, microsecond, tzinfo=UTC)
    sent = ApiClient().sanitize_for_serialization(micro_time(stamp))
    assert re.fullmatch(r"2026-01-01T12:00:00\.\d{6}\+00:00", sent), sent


def test_a_leadership_that_lapsed_is_lost_though_a_later_renewal_succeeds(
    server: FakeApiServer,
) -> None:
    """The API server answers 503 past the renew deadline, then a renewal goes through:
    the replica stopped binding and writing in between (a gang may be half bound, its
    writes dropped), so it leads no more, as client-go's elector ends it, and says so."""
    clock = Clock()
    lost: list[bool] = []
    a = elector(server, "a", clock, on_lost=lambda: lost.append(True))  # type: ignore[arg-type]
    real = a.try_acquire_or_renew
    attempts = 0
    lapsed_at: list[float] = []

    def attempt() -> bool:
        nonlocal attempts
        attempts += 1
        if 2 <= attempts <= 5:  # about 10 s of 503s
            clock.now += 0.3
            raise ApiException(status=503, reason="Service Unavailable")
        return real()

    def wait(seconds: float) -> bool:
        clock.now += seconds
        if not a.is_leader():
            lapsed_at.append(clock.now)
        if attempts >= 8:
            a._stop.set()
        return a._stop.is_set()

    a.try_acquire_or_renew = attempt  # type: ignore[method-assign]
    a._stop.wait = wait  # type: ignore[method-assign]
    a._run()
    assert lapsed_at, "the scenario must let the renew deadline pass"
    assert lost == [True] and not a.is_leader()
    assert attempts == 6  # the renewal after the lapse was the last attempt


def test_slow_renewals_that_each_begin_in_time_keep_the_lease(server: FakeApiServer) -> None:
    """Each renewal takes 4.1 s (within its timeouts) and begins before the deadline:
    no lapse, whatever the sum of their latencies and waits."""
    clock = Clock()
    lost: list[float] = []
    a = elector(server, "a", clock, on_lost=lambda: lost.append(clock.now))  # type: ignore[arg-type]
    real = a.try_acquire_or_renew
    answers: list[bool] = []

    def slow() -> bool:
        renewed = real()  # dated at its start, as the real one is
        clock.now += 4.1
        answers.append(renewed)
        return renewed

    def wait(seconds: float) -> bool:
        clock.now += seconds
        if len(answers) >= 6:
            a._stop.set()
        return a._stop.is_set()

    a.try_acquire_or_renew = slow  # type: ignore[method-assign]
    a._stop.wait = wait  # type: ignore[method-assign]
    a._run()
    assert answers == [True] * 6 and lost == [] and a.is_leader()
