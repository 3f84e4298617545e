"""Every pending pod gangsat cannot place is told why, as kube-scheduler tells each pod it
cannot place: a pod of no PodGroup, and a Running gang's pods left pending."""

from __future__ import annotations

from typing import Any

from adapter.kube.cluster import KubeCluster
from adapter.loop import run_cycle
from adapter.metrics import LoopMetrics
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import apply, gang_pods, node, podgroup
from tests.adapter.kube.test_kube_cluster import (
    FAST,
    events,
    podgroup_status,
    scheduled_condition,
    seen,
)


def plain(name: str, cpu: str = "1") -> dict[str, Any]:
    """A pod of no PodGroup, for gangsat."""
    obj = gang_pods(name, 1, cpu=cpu)[0]
    obj["metadata"] = {"name": name, "namespace": "default"}
    return obj


def told(server: FakeApiServer, pod: str) -> list[str]:
    return [
        e["message"]
        for e in events(server, "FailedScheduling")
        if e["involvedObject"]["name"] == pod
    ]


def test_a_pod_of_no_podgroup_that_does_not_fit_is_told_why(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    apply(server, [node("n1", cpu="1"), plain("a"), plain("b")])
    seen(cluster, server)
    metrics = LoopMetrics()
    result = run_cycle(cluster, FAST, metrics=metrics)
    assert len(result.bound) == 1
    [waiting] = {"default/a", "default/b"} - set(result.bound)
    name = waiting.partition("/")[2]
    assert cluster.writer.flush()
    condition = scheduled_condition(server, name)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in condition["message"]
    assert told(server, name) == [condition["message"]]
    # No PodGroup waits: the gauge of gangs counts PodGroups only.
    labels = {"state": "Pending", "reason": "NotEnoughResources", "queue": "default"}
    assert metrics.registry.get_sample_value("gangsat_gangs", labels) is None


def test_a_running_gangs_pods_left_pending_are_told_why_and_its_status_stays_running(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """minMember 2 of 3 pods, room for 2: the gang runs; its third pod (an elastic job's
    extra, or a member made again) waits, and is told so."""
    apply(server, [node("n1", cpu="2"), podgroup("g", 2), *gang_pods("g", 3)])
    seen(cluster, server)
    assert len(run_cycle(cluster, FAST).bound) == 2
    assert cluster.writer.flush()
    assert podgroup_status(server, "g")["phase"] == "Running"
    waiting = [
        p["metadata"]["name"] for p in server.objects("", "pods") if not p["spec"].get("nodeName")
    ]
    [name] = waiting
    condition = scheduled_condition(server, name)
    assert condition["status"] == "False"
    assert condition["message"].startswith("gang runs with 2/2 pods bound; this pod waits: ")
    assert "Insufficient cpu" in condition["message"]
    assert told(server, name) == [condition["message"]]


def test_a_gang_short_with_no_pod_to_place_says_not_enough_tasks(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """Two of a running gang's three members fail (the kubelet refused them: OutOfcpu) and
    none is made again yet: its PodGroup said "not considered this cycle"."""
    apply(server, [node("n1", cpu="4"), podgroup("g", 3), *gang_pods("g", 3)])
    seen(cluster, server)
    assert len(run_cycle(cluster, FAST).bound) == 3
    for name in ("g-1", "g-2"):
        failed = server.get("", "pods", "default", name)
        assert failed is not None
        server.put({**failed, "status": {"phase": "Failed", "reason": "OutOfcpu"}})
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    status = podgroup_status(server, "g")
    assert (status["phase"], status["running"]) == ("Pending", 1)
    [condition] = status["conditions"]
    assert condition["reason"] == "NotEnoughTasks"
    assert "1 of minMember 3 pod(s) bound and no other pod of it to place" in condition["message"]
