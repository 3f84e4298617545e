"""Dialects served after start-up are watched, and ones no longer served are dropped: a
PodGroup CRD installed after gangsat (Volcano added to a running cluster) is read
without a restart; its first list holds up no cycle."""

from __future__ import annotations

import dataclasses

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from adapter.kube import cluster as cluster_module
from adapter.kube import resources
from adapter.kube.cache import ClusterCache
from adapter.kube.cluster import KubeCluster
from adapter.kube.reflector import Reflector
from adapter.kube.resources import DIALECTS, NODES, PODS, Resource, discover, served
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.conftest import Silent
from tests.adapter.kube.manifests import (
    apply,
    bound_pods,
    gang_pods,
    node,
    podgroup,
    ships_inline_status,
    wait_until,
)
from tests.adapter.kube.test_kube_cluster import FAST, seen

VOLCANO = "scheduling.volcano.sh"
SIGS = "scheduling.sigs.dev"


def serve(fake: FakeApiServer, group: str) -> None:
    for r in DIALECTS:
        if r.group == group:
            inline = ships_inline_status(r.group, r.plural)
            fake.add_resource(
                r.group, r.version, r.plural, r.kind, r.namespaced, status_subresource=not inline
            )


def test_a_dialect_installed_after_start_up_is_watched_and_its_gangs_bound() -> None:
    with FakeApiServer() as fake:
        serve(fake, SIGS)
        kube = KubeCluster(fake.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
        try:
            assert {r.group for r in kube.resources if r.custom} == {SIGS}
            assert kube.rediscover() == ([], [])  # nothing new yet
            serve(fake, VOLCANO)  # the CRDs are installed
            added, dropped = kube.rediscover()
            assert {(r.group, r.plural) for r in added} == {
                (VOLCANO, "podgroups"),
                (VOLCANO, "queues"),
            }
            assert dropped == []
            # As shipped, Volcano's PodGroup has no status subresource: learnt again.
            (volcano_groups,) = [r for r in added if r.plural == "podgroups"]
            assert volcano_groups.status_subresource is False
            apply(fake, [node("n1", cpu="4"), podgroup("v", 2, group=VOLCANO)])
            apply(fake, gang_pods("v", 2, dialect=VOLCANO))
            seen(kube, fake)
            wait_until(lambda: bool(kube.cache.of(volcano_groups)), what="the Volcano PodGroup")
            run_cycle(kube, FAST)
            assert set(bound_pods(fake)) == {"default/v-0", "default/v-1"}
        finally:
            kube.stop()


def test_a_dialect_no_longer_served_is_dropped_with_its_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeApiServer() as fake:
        serve(fake, SIGS)
        kube = KubeCluster(fake.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
        try:
            apply(fake, [podgroup("g", 2)])
            (groups,) = [r for r in kube.resources if r.group == SIGS and r.plural == "podgroups"]
            wait_until(lambda: bool(kube.cache.of(groups)), what="the PodGroup in the cache")
            served = discover(kube.api)
            # The CRD is deleted: discovery no longer lists it.
            monkeypatch.setattr(
                cluster_module, "discover", lambda api: [r for r in served if r != groups]
            )
            added, dropped = kube.rediscover()
            assert (added, dropped) == ([], [groups])
            assert kube.cache.of(groups) == [] and groups not in kube.resources
            assert kube.synced()  # the rest still make a snapshot
        finally:
            kube.stop()


def test_resources_given_explicitly_are_not_rediscovered() -> None:
    with FakeApiServer() as fake:
        serve(fake, SIGS)
        given = discover(fake.client())
        kube = KubeCluster(fake.client(), resources=given)
        serve(fake, VOLCANO)
        assert kube.rediscover() == ([], [])


def test_an_upgrade_that_moves_the_workload_apis_version_swaps_the_watched_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # scheduling.k8s.io is a built-in group: its PodGroups move from v1alpha2 (1.36) to
    # v1beta1 (1.37) with the cluster.
    def serving(*versions: str) -> list[Resource]:
        plurals = {("scheduling.k8s.io", v): {"podgroups", "podgroups/status"} for v in versions}
        return [NODES, PODS, *served(DIALECTS, plurals)]

    monkeypatch.setattr(cluster_module, "discover", lambda api: serving("v1alpha2"))
    nowhere = client.Configuration()
    nowhere.host = "http://127.0.0.1:9"  # the reflectors it starts find no server
    kube = KubeCluster(client.ApiClient(nowhere))
    monkeypatch.setattr(cluster_module, "discover", lambda api: serving("v1beta1", "v1alpha3"))
    added, dropped = kube.rediscover()
    try:
        assert [r.version for r in added] == ["v1beta1"]
        assert [r.version for r in dropped] == ["v1alpha2"]
        assert [r.version for r in kube.resources if r.kind == "PodGroup"] == ["v1beta1"]
    finally:
        for reflector in kube.reflectors:
            reflector.stop(wait=False)


def test_a_dropped_resource_takes_nothing_its_reflector_still_delivers() -> None:
    cache = ClusterCache()
    (groups,) = [r for r in DIALECTS if r.group == SIGS and r.plural == "podgroups"]
    group = podgroup("g", 2)
    cache.replace(groups, [group])
    cache.drop(groups)
    cache.replace(groups, [group])  # a list that was in flight
    cache.apply(groups, "ADDED", group)  # an event that was
    assert cache.of(groups) == [] and not cache.synced([groups])
    cache.watch(groups)  # served again
    cache.replace(groups, [group])
    assert len(cache.of(groups)) == 1


def test_discovery_of_a_server_that_never_answers_ends(
    silent_server: Silent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resources, "DISCOVERY_TIMEOUT_S", (1, 1))
    configuration = client.Configuration()
    configuration.host = silent_server.url
    with pytest.raises(HTTPError):  # timed out, after the client's retries
        discover(client.ApiClient(configuration))


def test_rediscovery_asks_each_question_once_within_its_timeout(
    silent_server: Silent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the loop thread: the client's own three retries would hold the loop four times
    # as long as the timeout says.
    monkeypatch.setattr(resources, "DISCOVERY_TIMEOUT_S", (1, 1))
    with FakeApiServer() as fake:
        serve(fake, SIGS)
        kube = KubeCluster(fake.client())
    kube._discovery_api.configuration.host = silent_server.url
    with pytest.raises(HTTPError):
        kube.rediscover()
    assert len(silent_server.accepted) == 1


def test_a_dialect_that_gains_its_status_subresource_is_written_the_new_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeApiServer() as fake:
        serve(fake, VOLCANO)  # as it ships: no status subresource on its PodGroup
        kube = KubeCluster(fake.client())
        (groups,) = [r for r in kube.resources if r.group == VOLCANO and r.plural == "podgroups"]
        assert groups in kube.reporter._inline_status
        upgraded = [dataclasses.replace(r, status_subresource=True) for r in discover(kube.api)]
        monkeypatch.setattr(cluster_module, "discover", lambda api: upgraded)
        assert kube.rediscover() == ([], [])
        (now,) = [r for r in kube.resources if r == groups]
        assert now.status_subresource is True
        assert groups not in kube.reporter._inline_status


def test_a_stopped_reflector_writes_nothing_it_read_into_the_cache() -> None:
    with FakeApiServer() as fake:
        serve(fake, SIGS)
        apply(fake, [podgroup("g", 2)])
        (groups,) = [r for r in DIALECTS if r.group == SIGS and r.plural == "podgroups"]
        cache = ClusterCache()
        reflector = Reflector(fake.client(), groups, cache)
        reflector._stop.set()  # stopped while its list was in flight
        reflector._list()
        assert cache.of(groups) == [] and not cache.synced([groups])
