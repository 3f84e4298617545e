"""Every memory the Kubernetes backend keeps between cycles follows the live cluster.

Rounds of gangs created, scheduled, reported and deleted (one that fits, one that never
does, a malformed PodGroup, a gang rolled back after a 409, a Queue of their own) must
leave each memory (cache, assumed binds and deletions, conversion memo, statuses and
Events written, queued writes) where the remaining objects put it: sizes, not timings."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.resources import NODES
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import apply, gang_pods, node, podgroup, wait_until
from tests.adapter.kube.test_kube_cluster import SIGS, seen

FAST = LoopSettings(scheduler="cpsat", solver=SolverConfig(time_limit_s=2.0, deterministic=True))
ROUNDS = 6


def queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{SIGS}/v1alpha2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 2},
    }


def one_round(server: FakeApiServer, cluster: KubeCluster, i: int) -> None:
    gangs = {f"fit-{i}": ("2", "1"), f"big-{i}": ("2", "64"), f"rb-{i}": ("2", "1")}
    objects: list[dict[str, Any]] = [queue(f"q-{i}"), podgroup(f"bad-{i}", "two")]
    objects += gang_pods(f"bad-{i}", 1)
    for name, (size, cpu) in gangs.items():
        objects += [podgroup(name, int(size), queue=f"q-{i}"), *gang_pods(name, int(size), cpu=cpu)]
    apply(server, objects)
    server.fail("POST", rf"/pods/rb-{i}-1/binding$", 409, times=1)
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert f"default/fit-{i}-0" in result.bound
    assert result.evicted  # the rolled back gang's bound pod was deleted
    seen(cluster, server)
    run_cycle(cluster, FAST)  # binds the rolled back gang again
    assert cluster.writer.flush()
    for pod in server.objects("", "pods"):
        server.delete("", "pods", "default", pod["metadata"]["name"])
    for group in server.objects(SIGS, "podgroups"):
        server.delete(SIGS, "podgroups", "default", group["metadata"]["name"])
    server.delete(SIGS, "queues", None, f"q-{i}")
    seen(cluster, server)
    run_cycle(cluster, FAST)  # the cycle that notices they are gone
    assert cluster.writer.flush()


def test_every_memory_forgets_what_was_deleted(
    server: FakeApiServer, cluster: KubeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    apply(server, [node("n1", cpu="4"), node("n2", cpu="4"), queue("default")])
    sizes = []
    for i in range(ROUNDS):
        one_round(server, cluster, i)
        wait_until(lambda: cluster.cache.in_flight() == {"assumed": 0, "deleting": 0})
        sizes.append(cluster.remembered())
    first, last = sizes[0], sizes[-1]
    assert last == first, f"memory grew over {ROUNDS} rounds: {first} -> {last}"
    # Two nodes, the default Queue, and the two PriorityClasses every API server has.
    assert last["objects"] == 5
    assert last["assumed"] == last["deleting"] == last["queued writes"] == 0
    assert last["conversion memo"] <= 5
    assert last["statuses written"] <= 1  # at most the default Queue's
    assert last["statuses landed"] == 0
    assert last["statuses compared"] == last["pods told they wait"] == 0
    assert last["event topics"] == last["event names"] == 0
    # A status for an object deleted since its cycle is not an error worth a warning:
    # under churn it happens every second.
    assert [r.getMessage() for r in caplog.records if "404" in r.getMessage()] == []


def test_memory_during_a_round_holds_what_is_live(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # The check above would pass if nothing were remembered at all: during a round the
    # memories do hold the live objects (the sizes are measured, not zero by default).
    apply(server, [node("n1", cpu="4"), podgroup("big", 2), *gang_pods("big", 2, cpu="64")])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    live = cluster.remembered()
    assert live["objects"] == 6  # with the two built-in PriorityClasses
    assert live["conversion memo"] >= 3
    assert live["statuses written"] >= 1  # the PodGroup's Pending status
    assert live["statuses compared"] == 1
    assert live["pods told they wait"] == 2
    assert live["event topics"] >= 2 and live["event names"] >= 2  # FailedScheduling


def test_the_cache_keeps_no_managed_fields_or_node_images(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    managed = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    busy = node("n1", cpu="4")
    busy["metadata"]["managedFields"] = managed
    busy["status"]["images"] = [
        {"names": [f"registry/img-{i}:v1"], "sizeBytes": i} for i in range(50)
    ]
    [pod] = gang_pods("solo", 1)
    pod["metadata"]["managedFields"] = managed
    apply(server, [busy, podgroup("solo", 1), pod])
    seen(cluster, server)
    kept_node = cluster.cache.get(NODES, "n1")
    kept_pod = cluster.cache.pod("default/solo-0")
    assert kept_node is not None and kept_pod is not None
    assert "managedFields" not in kept_node["metadata"] and "images" not in kept_node["status"]
    assert "managedFields" not in kept_pod["metadata"]
    assert kept_node["status"]["allocatable"]["cpu"] == "4"  # what gangsat reads stays
    result = run_cycle(cluster, FAST)
    assert result.bound == {"default/solo-0": "n1"}
