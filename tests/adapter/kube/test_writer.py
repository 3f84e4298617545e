"""The status and Event writer: coalesced by key, rate-limited, and held while binds run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence

import pytest
from kubernetes import client

from adapter.cluster import ClusterError
from adapter.kube import events, status_patches
from adapter.kube.cluster import KubeCluster
from adapter.kube.writer import Writer
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import apply, gang_pods, node, podgroup, wait_until


@pytest.fixture
def writer() -> Iterator[Writer]:
    w = Writer(rate_per_s=1000.0, burst=1000, max_hold_s=30.0).start()
    try:
        yield w
    finally:
        w.stop()


def test_a_newer_write_for_the_same_key_replaces_the_queued_one(writer: Writer) -> None:
    sent: list[str] = []
    with writer.holding():  # nothing goes out while both are queued
        writer.submit("status g", lambda: sent.append("old"))
        writer.submit("status g", lambda: sent.append("new"))
        writer.submit("status h", lambda: sent.append("h"))
    assert writer.flush(5)
    assert sent == ["new", "h"]


def test_a_status_goes_out_before_events_queued_before_it(writer: Writer) -> None:
    sent: list[str] = []
    with writer.holding():
        for i in range(5):
            writer.submit(f"event {i}", lambda i=i: sent.append(f"event {i}"), later=True)
        writer.submit("status g", lambda: sent.append("status g"))
        writer.submit("event 0", lambda: sent.append("event 0 again"), later=True)
        assert writer.queued() == 6
    assert writer.flush(5)
    assert sent == ["status g", "event 0 again", "event 1", "event 2", "event 3", "event 4"]


def test_statuses_that_keep_coming_let_every_tenth_write_be_an_event(writer: Writer) -> None:
    sent: list[str] = []
    with writer.holding():
        for i in range(3):
            writer.submit(f"event {i}", lambda i=i: sent.append(f"event {i}"), later=True)
        for i in range(20):
            writer.submit(f"status {i}", lambda i=i: sent.append(f"status {i}"))
    assert writer.flush(5)
    assert [i + 1 for i, what in enumerate(sent) if what.startswith("event")] == [10, 20, 23]
    assert [w for w in sent if w.startswith("status")] == [f"status {i}" for i in range(20)]


def test_statuses_sent_while_no_event_waited_do_not_let_the_next_event_ahead(
    writer: Writer,
) -> None:
    sent: list[str] = []
    for i in range(12):
        writer.submit(f"status a{i}", lambda: None)
    assert writer.flush(5)
    with writer.holding():
        for i in range(3):
            writer.submit(f"status b{i}", lambda i=i: sent.append(f"status b{i}"))
        writer.submit("event e", lambda: sent.append("event e"), later=True)
    assert writer.flush(5)
    assert sent == ["status b0", "status b1", "status b2", "event e"]


def test_a_key_submitted_to_both_queues_is_written_once_the_newer_way(writer: Writer) -> None:
    sent: list[str] = []
    with writer.holding():
        writer.submit("k", lambda: sent.append("older, later"), later=True)
        writer.submit("k", lambda: sent.append("newer"))
        writer.submit("j", lambda: sent.append("older"))
        writer.submit("j", lambda: sent.append("newer, later"), later=True)
        assert writer.queued() == 2
    assert writer.flush(5)
    assert sent == ["newer", "newer, later"]


def test_writes_wait_while_binds_are_in_flight(writer: Writer) -> None:
    sent = threading.Event()
    with writer.holding():
        writer.submit("status g", sent.set)
        with writer.holding():  # overlapping holds: the writes wait for the last
            pass
        assert not sent.wait(0.3)
        assert writer.queued() == 1
    assert sent.wait(5)


def test_a_hold_that_lasts_lets_writes_through_after_max_hold_s() -> None:
    """Binds that never stop (steady arrivals) must not starve statuses."""
    writer = Writer(rate_per_s=1000.0, max_hold_s=0.2).start()
    try:
        sent = threading.Event()
        with writer.holding():
            started = time.monotonic()
            writer.submit("status g", sent.set)
            assert sent.wait(5)
            assert time.monotonic() - started >= 0.15
    finally:
        writer.stop()


def test_a_failing_write_does_not_stop_the_writer(writer: Writer) -> None:
    def fail() -> None:
        raise RuntimeError("the API server said no")

    sent = threading.Event()
    writer.submit("status bad", fail)
    writer.submit("status good", sent.set)
    assert sent.wait(5)


def test_the_cluster_holds_its_writes_while_it_binds() -> None:
    cluster = KubeCluster(client.ApiClient(), ("gangsat",), resources=[])
    cluster.writer.start()
    sent = threading.Event()

    def bind(
        placements: Sequence[tuple[str, str]], seen_uids: Mapping[str, str] | None = None
    ) -> dict[str, ClusterError]:
        cluster.writer.submit("status g", sent.set)
        assert not sent.wait(0.3)  # a status written now would compete with the binds
        return {}

    try:
        cluster.binder.bind = bind  # type: ignore[method-assign]
        assert cluster.bind([("default/p", "n1")]) == {}
        assert sent.wait(5)
    finally:
        cluster.writer.stop()


def test_a_writer_whose_replica_lost_the_lease_drops_its_writes() -> None:
    leading = threading.Event()
    leading.set()
    writer = Writer(rate_per_s=1000.0, fence=lambda: 1.0 if leading.is_set() else 0.0).start()
    try:
        sent: list[str] = []
        writer.submit("status g", lambda: sent.append("g"))
        assert writer.flush(5) and sent == ["g"]
        leading.clear()
        dropped: list[str] = []
        writer.submit("status h", lambda: sent.append("h"), dropped=lambda: dropped.append("h"))
        assert writer.flush(5) and writer.queued() == 0
        assert sent == ["g"] and dropped == ["h"]  # the submitter hears it was not sent
    finally:
        writer.stop()


def test_a_write_left_unanswered_times_out_and_the_rest_go_out(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One writer thread: a PodGroup status PATCH the server never answers (a half-open
    # connection) held every later status and Event, of every gang, with no end.
    for module in (status_patches, events):  # status writes, and the Events behind them
        monkeypatch.setattr(module, "WRITE_TIMEOUT", (1.0, 0.5))
    release = threading.Event()

    def hang(method: str, path: str) -> None:
        if method == "PATCH" and path.endswith("/podgroups/a/status"):
            release.wait(30)

    server.hooks.append(hang)
    gangs = [podgroup("a", 1), *gang_pods("a", 1), podgroup("b", 1), *gang_pods("b", 1)]
    apply(server, [node("n1", cpu="8"), *gangs])
    cluster = KubeCluster(server.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
    try:
        wait_until(lambda: cluster.cache.pod("default/b-0") is not None)
        result = run_cycle(cluster, LoopSettings(solver=SolverConfig(time_limit_s=2.0)))
        assert sorted(result.bound) == ["default/a-0", "default/b-0"]
        assert cluster.writer.flush(timeout_s=8)
        status = (server.get("scheduling.sigs.dev", "podgroups", "default", "b") or {}).get(
            "status"
        )
        assert status and status.get("phase")
        scheduled = {
            e["involvedObject"]["name"]
            for e in server.objects("", "events")
            if e.get("reason") == "Scheduled"
        }
        assert "b-0" in scheduled
    finally:
        release.set()
        server.hooks.remove(hang)
        cluster.stop()
