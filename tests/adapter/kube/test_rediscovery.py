"""Dialects served after start-up are watched, and ones no longer served are dropped: a
PodGroup CRD installed after gangsat (Volcano added to a running cluster) is read
without a restart; its first list holds up no cycle."""

from __future__ import annotations

import pytest

from adapter.kube import cluster as cluster_module
from adapter.kube.cluster import KubeCluster
from adapter.kube.resources import DIALECTS, discover
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
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
