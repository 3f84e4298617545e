"""An Event whose create failed is created again: best effort, but not lost for good
while its message stays the same (the recorder counts repeats as updates of it)."""

from __future__ import annotations

from adapter.kube.cluster import KubeCluster
from adapter.kube.status import EventRecorder
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import apply, gang_pods, node, podgroup, refusing
from tests.adapter.kube.test_kube_cluster import FAST, seen


def test_an_event_whose_create_failed_is_created_by_a_later_cycle(
    server: FakeApiServer,
) -> None:
    failing = refusing(server, "POST", "/events", 500, "events are down")
    recorder = EventRecorder(refresh_s=0.0)  # a repeat is written at once
    cluster = KubeCluster(server.client(), writes_per_s=1000.0, recorder=recorder)
    cluster.start(sync_timeout_s=10)
    try:
        apply(server, [node("n1", cpu="2"), podgroup("big", 3)])
        apply(server, gang_pods("big", 3, cpu="1"))  # 3 cpu asked, 2 exist: it waits
        seen(cluster, server)
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
        assert server.objects("", "events") == []
        failing.clear()
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
        reasons = {(e["involvedObject"]["name"], e["reason"]) for e in server.objects("", "events")}
        assert ("big", "Unschedulable") in reasons
    finally:
        cluster.stop()


def test_an_event_the_server_expired_is_created_again_by_the_next_repeat(
    server: FakeApiServer,
) -> None:
    recorder = EventRecorder(refresh_s=0.0)  # a repeat is written at once
    cluster = KubeCluster(server.client(), writes_per_s=1000.0, recorder=recorder)
    cluster.start(sync_timeout_s=10)
    try:
        apply(server, [node("n1", cpu="2"), podgroup("big", 3)])
        apply(server, gang_pods("big", 3, cpu="1"))
        seen(cluster, server)
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
        waiting = [e for e in server.objects("", "events") if e["reason"] == "Unschedulable"]
        (event,) = waiting
        # The API server's event TTL (an hour by default) ran out.
        server.delete("", "events", event["metadata"]["namespace"], event["metadata"]["name"])
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
        again = [e for e in server.objects("", "events") if e["reason"] == "Unschedulable"]
        assert [e["involvedObject"]["name"] for e in again] == ["big"]
    finally:
        cluster.stop()
