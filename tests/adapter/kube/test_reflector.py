"""A reflector's requests end: a server that accepts the connection and never answers
(dead behind a load balancer, a half-open TCP connection) fails the list in bounded
time, so the reflector retries instead of freezing its resource in the cache."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from adapter.kube import reflector
from adapter.kube.cache import ClusterCache
from adapter.kube.cluster import KubeCluster
from adapter.kube.reflector import Reflector
from adapter.kube.resources import CLAIMS, NODES, PODS
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.conftest import Silent
from tests.adapter.kube.manifests import (
    apply,
    bound_pods,
    gang_pods,
    node,
    podgroup,
    refusing,
    wait_until,
)
from tests.adapter.kube.test_kube_cluster import FAST, seen
from tests.adapter.kube.test_volumes import claim


@pytest.mark.parametrize("relists", [0, 1], ids=["first list", "re-list"])
def test_a_list_the_server_never_answers_fails_in_bounded_time(
    silent_server: Silent, relists: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reflector, "LIST_TIMEOUT_S", (1, 1))
    configuration = client.Configuration()
    configuration.host = silent_server.url
    listing = Reflector(client.ApiClient(configuration), PODS, ClusterCache())
    listing.relists = relists
    started = time.monotonic()
    with pytest.raises(HTTPError):  # timed out, after the client's retries
        listing._list()
    assert time.monotonic() - started < 10


def test_an_optional_input_the_server_refuses_to_list_is_read_as_none(
    server: FakeApiServer,
) -> None:
    # RBAC that predates gangsat's reading claims: their list is refused, and scheduling
    # must not wait for it (start-up would give up, NotSynced, and exit).
    forbidden = refusing(server, "GET", "persistentvolumeclaims", 403, "it is forbidden")
    cluster = KubeCluster(server.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
    try:
        apply(server, [node("n1", cpu="4"), podgroup("g", 2), *gang_pods("g", 2)])
        seen(cluster, server)
        run_cycle(cluster, FAST)
        assert set(bound_pods(server)) == {"default/g-0", "default/g-1"}
        # Allowed again: the claims are read from then on.
        forbidden.clear()
        apply(server, [{**claim("data"), "metadata": {"name": "data", "namespace": "default"}}])
        wait_until(
            lambda: cluster.cache.get(CLAIMS, "default/data") is not None,
            what="the claim listed once allowed",
            timeout_s=60,
        )
    finally:
        cluster.stop()


def test_a_quiet_watch_is_opened_again_at_once_not_waited_on_as_a_failure(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real API server sends a bookmark only once its version has moved past the
    watch's: on a quiet collection, none for minutes. Each silence of READ_TIMEOUT_S ends
    the watch; it is opened again from the same version at once, so a change after many
    silences is seen as soon as one after none (counted as failures, the waits doubled to
    30 s, with no watch open)."""
    monkeypatch.setattr(reflector, "READ_TIMEOUT_S", 0.5)
    server.bookmark_interval_s = 0  # no bookmarks at all
    nodes = Reflector(server.client(), NODES, ClusterCache()).start()
    try:
        wait_until(lambda: nodes.cache.synced([NODES]), what="the nodes listed")
        watches = lambda: sum(  # noqa: E731
            1 for r in list(server.requests) if r.resource == "nodes" and r.verb == "watch"
        )
        wait_until(lambda: watches() >= 6, what="six quiet watches", timeout_s=15)
        # Five silences, none waited on (counted as failures, five). The limit also bounds
        # the wait for a watch's first bytes: one slow answer on a loaded machine may count.
        assert nodes.reconnects <= 1
        created = time.monotonic()
        apply(server, [node("n1", cpu="4")])
        wait_until(lambda: nodes.cache.get(NODES, "n1") is not None, what="the new node")
        assert time.monotonic() - created < 2.0  # after five failures, the wait was 1.6-3.2 s
    finally:
        nodes.stop()
