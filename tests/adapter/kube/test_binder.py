"""The binder's worker pool: binds go out in order from a few workers, and a bug in one
bind leaves that pod pending without losing the others."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapter.kube.binder import Binder
from adapter.kube.cluster import KubeCluster
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import apply, binds, bound_pods, gang_pods, node, wait_until
from tests.adapter.kube.test_kube_cluster import seen


def test_every_placement_is_bound_by_fewer_workers_than_pods(
    server: FakeApiServer, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(server, [node("n1", cpu="64", memory="64Gi"), *gang_pods("solo", 40, cpu="1")])
    seen(cluster, server)
    placements = [(f"default/solo-{i}", "n1") for i in range(40)]
    original = Binder._bind_one
    threads: set[str] = set()

    def noted(self: Binder, *args: Any) -> Any:
        threads.add(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(Binder, "_bind_one", noted)
    cluster.binder.threads = 2
    assert cluster.bind(placements) == {}
    assert set(bound_pods(server)) == {p for p, _ in placements}
    assert sorted(binds(server)) == sorted(p for p, _ in placements)  # each once
    assert 1 <= len(threads) <= 2


def test_a_bug_in_one_bind_leaves_that_pod_pending_and_binds_the_rest(
    server: FakeApiServer, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(server, [node("n1", cpu="8"), *gang_pods("solo", 3, cpu="1")])
    seen(cluster, server)
    original = Binder._bind_one

    def flaky(self: Binder, pod: str, *args: Any) -> Any:
        if pod == "default/solo-1":
            raise KeyError("a bug")
        return original(self, pod, *args)

    monkeypatch.setattr(Binder, "_bind_one", flaky)
    failures = cluster.bind([(f"default/solo-{i}", "n1") for i in range(3)])
    assert set(failures) == {"default/solo-1"}
    assert not failures["default/solo-1"].uncertain  # nothing was sent: not evicted
    assert set(bound_pods(server)) == {"default/solo-0", "default/solo-2"}
    # Forgotten, not assumed: the next snapshot has it pending again.
    wait_until(lambda: "default/solo-1" not in cluster.cache.assumed())
    pending = {p.name for p in cluster.snapshot().pending_pods()}
    assert "default/solo-1" in pending
