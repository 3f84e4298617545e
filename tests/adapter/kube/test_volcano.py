"""A Volcano Job under gangsat: its PodGroup goes Pending -> Inqueue when its
minResources fit (Volcano's job controller creates the pods only then), and Running
once gangsat has bound them. Volcano's CRDs are served as they ship: no status
subresource."""

from __future__ import annotations

from typing import Any

from adapter.kube.cluster import KubeCluster
from adapter.kube.enqueue import to_enqueue
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from solver.model import ClusterState, Node, Resources
from tests.adapter.kube.manifests import (
    apply,
    bound_pods,
    gang_pods,
    node,
    podgroup,
    volcano_queue,
    wait_until,
)
from tests.adapter.kube.test_kube_cluster import podgroup_status, seen

FAST = LoopSettings(scheduler="cpsat", solver=SolverConfig(time_limit_s=2.0, deterministic=True))
VOLCANO = "scheduling.volcano.sh"


def volcano_group(name: str, min_member: int, **min_resources: str) -> dict[str, Any]:
    group = podgroup(name, min_member, group=VOLCANO)
    if min_resources:
        group["spec"]["minResources"] = dict(min_resources)
    return group


def test_a_volcano_podgroup_that_fits_is_enqueued_then_runs(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    apply(server, [node("n1", cpu="8"), volcano_group("job", 2, cpu="2")])
    apply(server, [volcano_group("huge", 2, cpu="100")])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"
    assert podgroup_status(server, "huge", VOLCANO).get("phase") in (None, "Pending")

    # Volcano's job controller now creates the pods; gangsat binds them whole.
    pods = gang_pods("job", 2)
    for p in pods:
        p["metadata"]["annotations"] = {"scheduling.volcano.sh/group-name": "job"}
    apply(server, pods)
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert result.admitted() == ["default/job"]
    assert set(bound_pods(server)) == {"default/job-0", "default/job-1"}
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO)["phase"] == "Running"


def test_a_volcano_job_in_a_closed_queue_is_not_enqueued_until_the_queue_opens(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """An admin drains a queue by closing it: its Jobs get no pods, as under Volcano."""

    group = volcano_group("job", 2, cpu="2")
    group["spec"]["queue"] = "drained"
    apply(
        server,
        [
            node("n1", cpu="8"),
            volcano_queue("drained", "Closing"),
            group,
            volcano_group("other", 2),
        ],
    )
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") in (None, "Pending")
    assert podgroup_status(server, "other", VOLCANO).get("phase") == "Inqueue"
    apply(server, [volcano_queue("drained", "Open")])
    wait_until(lambda: all(q.admits() for q in cluster.snapshot().queues), what="queue open")
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"


def test_a_podgroup_whose_queue_is_no_name_stops_no_other_from_being_enqueued() -> None:
    """A CRD without a schema keeps a queue that is a list: that PodGroup is refused (a
    finding), and the step that moves the others to Inqueue still runs."""
    bad = volcano_group("bad", 1)
    bad["spec"]["queue"] = ["a"]
    ok = volcano_group("ok", 1)
    state = ClusterState(nodes=(Node(name="n1", allocatable=Resources({"cpu": 8000})),))
    assert to_enqueue([("default/bad", bad), ("default/ok", ok)], state, set()) == ["default/ok"]


def test_a_podgroup_whose_queue_does_not_exist_is_not_enqueued_nor_claims_room() -> None:
    """Volcano's enqueue skips a Job whose queue it cannot find. Moved to Inqueue, its
    controller made pods that waited for the queue, and its minResources were claimed
    from the room of the PodGroups behind it. The queue ``default`` needs no object."""
    lost = volcano_group("lost", 1, cpu="6")
    lost["spec"]["queue"] = "no-such-queue"
    lost["metadata"]["creationTimestamp"] = "2026-12-01T00:00:00Z"  # older: first in line
    later = volcano_group("later", 1, cpu="6")
    later["metadata"]["creationTimestamp"] = "2026-12-01T00:00:01Z"
    state = ClusterState(nodes=(Node(name="n1", allocatable=Resources({"cpu": 8000})),))
    assert to_enqueue([("default/lost", lost), ("default/later", later)], state, set()) == [
        "default/later"
    ]


def test_an_inqueue_meant_for_a_podgroup_made_again_is_not_written_to_the_new_one(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """A training operator deletes a Job's PodGroup and makes it again under its name while
    the Inqueue for the old one is on its way: the new one asks for more than the cluster
    has. The write carries the old one's UID, so the server refuses it (Volcano's
    PodGroup has no status subresource: the object itself is patched); before, the new
    PodGroup read Inqueue, for good."""
    apply(server, [node("n1", cpu="4"), volcano_group("job", 2, cpu="2")])
    seen(cluster, server)
    remade: list[bool] = []

    def remake(method: str, path: str) -> None:
        if method == "PATCH" and path.endswith("/podgroups/job") and not remade:
            remade.append(True)
            server.delete(VOLCANO, "podgroups", "default", "job")
            server.put(volcano_group("job", 2, cpu="100"))

    server.hooks.append(remake)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush() and remade
    assert podgroup_status(server, "job", VOLCANO).get("phase") in (None, "Pending")
    run_cycle(cluster, FAST)  # the new one, read afresh, does not fit: not enqueued
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") in (None, "Pending")


def test_minresources_as_volcanos_job_controller_writes_them_are_read_as_requests(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # Volcano's job controller sums its pods' quota usage: quota names beside resource
    # names. limits.* and count/* are no requests; requests.cpu is cpu. Read as resource
    # names, no node has them and no Volcano Job ever got a pod.
    quota = {
        "count/pods": "2",
        "pods": "2",
        "cpu": "2",
        "requests.cpu": "2",
        "limits.cpu": "4",
        "memory": "2Gi",
        "requests.memory": "2Gi",
        "limits.memory": "2Gi",
    }
    apply(server, [node("n1", cpu="8"), volcano_group("job", 2, **quota)])
    # requests.cpu alone, too large: still read, and refused.
    apply(server, [volcano_group("huge", 2, **{"requests.cpu": "100", "count/pods": "2"})])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"
    assert podgroup_status(server, "huge", VOLCANO).get("phase") in (None, "Pending")


def test_a_volcano_job_short_of_pods_stays_inqueue_and_one_left_pending_is_enqueued(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # Two of four pods exist (the controller is still creating them, or one was
    # deleted): the gang waits. Written Pending, Volcano's job controller would never
    # create the rest; a PodGroup left Pending (as an older gangsat wrote it) is enqueued.
    inqueue = volcano_group("short", 4)
    inqueue["status"] = {"phase": "Inqueue"}
    left = volcano_group("left", 4)
    left["status"] = {"phase": "Pending"}
    pods = [*gang_pods("short", 2), *gang_pods("left", 2)]
    for p in pods:
        group = p["metadata"]["name"].rsplit("-", 1)[0]
        p["metadata"]["annotations"] = {"scheduling.volcano.sh/group-name": group}
    apply(server, [node("n1", cpu="8"), inqueue, left, *pods])
    seen(cluster, server)
    for _ in range(2):
        result = run_cycle(cluster, FAST)
        assert result.admitted() == []
        assert cluster.writer.flush()
        seen(cluster, server)
    for name in ("short", "left"):
        status = podgroup_status(server, name, VOLCANO)
        assert status["phase"] == "Inqueue"
        assert [c["type"] for c in status["conditions"]] == ["Unschedulable"]


def test_enqueued_podgroups_hold_their_room_until_their_pods_come(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # Room for one of two: the older is enqueued; the next cycle, its pods still
    # absent, the younger still waits (the room is claimed).
    apply(server, [node("n1", cpu="8"), volcano_group("first", 1, cpu="6")])
    apply(server, [volcano_group("second", 1, cpu="6")])
    seen(cluster, server)
    for _ in range(2):
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
        seen(cluster, server)
    assert podgroup_status(server, "first", VOLCANO).get("phase") == "Inqueue"
    assert podgroup_status(server, "second", VOLCANO).get("phase") in (None, "Pending")


def test_a_volcano_queue_status_says_what_its_bound_pods_hold(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # Volcano's Queue ships with a status subresource and requires status.allocated in
    # any status written: gangsat writes it there, summed over the queue's bound pods
    # only (another queue's gang and a pod without a PodGroup are not the queue's).
    queue = {
        "apiVersion": f"{VOLCANO}/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {"weight": 1},
    }
    apply(server, [node("n1", cpu="16", memory="64Gi"), queue])
    apply(server, [podgroup("train", 2, queue="research", group=VOLCANO)])
    apply(server, gang_pods("train", 2, cpu="1500m", memory="1Gi", dialect=VOLCANO))
    apply(server, [podgroup("other", 1, group=VOLCANO), *gang_pods("other", 1, dialect=VOLCANO)])
    loner = gang_pods("loner", 1, cpu="3")[0]
    loner["metadata"].pop("annotations")
    loner["spec"]["nodeName"] = "n1"
    apply(server, [loner])
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert sorted(result.admitted()) == ["default/other", "default/train"]
    assert cluster.writer.flush()  # the cycle's own binds count: no follow-up cycle
    stored = server.get(VOLCANO, "queues", None, "research")
    assert stored is not None
    assert stored["status"] == {
        "pending": 0,
        "running": 1,
        "allocated": {"cpu": "3", "memory": str(2 * 2**30)},
    }
    writes = [r for r in server.requests if r.resource == "queues" and r.verb == "patch"]
    assert writes and all(r.subresource == "status" for r in writes)

    # The gang finishes: what the queue no longer holds leaves allocated (a merge patch
    # would keep a key it does not name).
    for i in range(2):
        server.delete("", "pods", "default", f"train-{i}")
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    stored = server.get(VOLCANO, "queues", None, "research")
    assert stored is not None and stored["status"]["allocated"] == {}


def test_room_the_cycle_just_bound_is_not_offered_to_a_podgroup_without_pods(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # 8 CPUs: the gang with pods takes 6 in this cycle, so the 4 another PodGroup's
    # minResources ask for are not there, though the cycle's snapshot had them free.
    apply(server, [node("n1", cpu="8"), podgroup("running", 2), *gang_pods("running", 2, cpu="3")])
    apply(server, [volcano_group("later", 2, cpu="4")])
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert result.admitted() == ["default/running"]
    assert cluster.writer.flush()
    assert podgroup_status(server, "later", VOLCANO).get("phase") in (None, "Pending")


def test_an_inqueue_write_dropped_while_the_lease_lapsed_is_sent_again(
    server: FakeApiServer,
) -> None:
    """The cycle decides Inqueue while leading; by the time its write goes out the lease
    has lapsed, and the writer drops it. Remembered as written, it was never sent again:
    the PodGroup stayed Pending, and Volcano's job controller never made its pods."""
    import threading

    leading = threading.Event()
    leading.set()
    cluster = KubeCluster(
        server.client(), writes_per_s=1000.0, fence=lambda: 5.0 if leading.is_set() else 0.0
    ).start(sync_timeout_s=10)
    try:
        apply(server, [node("n1", cpu="8"), volcano_group("job", 2, cpu="2")])
        seen(cluster, server)
        with cluster.writer.holding():
            run_cycle(cluster, FAST)
            leading.clear()
        assert cluster.writer.flush()
        assert podgroup_status(server, "job", VOLCANO).get("phase") != "Inqueue"
        leading.set()
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
        assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"
    finally:
        cluster.stop()


def _inqueue_then_full_while_the_podgroup_watch_lags(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """gangsat writes Inqueue for Volcano job "job" (3 x 3 cpu, n1 of 8 cpu) while its
    PodGroup watch is down; then the job's pods come and another workload fills n1."""
    apply(server, [node("n1", cpu="8"), volcano_group("job", 3, cpu="3")])
    seen(cluster, server)
    watch = next(
        r
        for r in cluster.reflectors
        if r.resource.group == VOLCANO and r.resource.plural == "podgroups"
    )
    watch.stop()
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"
    web = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": "n1",
            "schedulerName": "default-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "7"}}}],
        },
    }
    pods = gang_pods("job", 3, cpu="3")
    for pod in pods:
        pod["metadata"]["annotations"] = {"scheduling.volcano.sh/group-name": "job"}
    apply(server, [web, *pods])
    seen(cluster, server)


def test_gangsat_never_writes_pending_over_its_own_inqueue_while_the_podgroup_watch_lags(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """gangsat writes Inqueue; its PodGroup watch lags (reconnecting) while Volcano's job
    controller, which saw Inqueue, creates the pods, and another workload fills the node.
    Built on the cache's Pending, the next status wrote Pending over the Inqueue, and
    Volcano stopped re-creating the job's pods."""
    _inqueue_then_full_while_the_podgroup_watch_lags(server, cluster)
    result = run_cycle(cluster, FAST)
    assert result.bound == {}  # no room now: the gang waits, Unschedulable
    assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"


def _podgroup_as_cached(uid: str, phase: str | None) -> dict[str, Any]:
    status = {"phase": phase} if phase else {}
    return {"metadata": {"name": "job", "namespace": "default", "uid": uid}, "status": status}


def test_a_phase_the_server_took_stands_over_the_pending_a_lagging_cache_shows(
    cluster: KubeCluster,
) -> None:
    reporter = cluster.reporter
    reporter.written.landed["podgroup default/job"] = (("Running", 3, ()), "u1")
    assert reporter._as_written("default/job", _podgroup_as_cached("u1", "Pending")) == {
        "phase": "Running"
    }
    assert (
        reporter._as_written("default/job", _podgroup_as_cached("u1", None))["phase"] == "Running"
    )
    # Not over a namesake: an answer for the PodGroup deleted since is not its.
    assert reporter._as_written("default/job", _podgroup_as_cached("u2", "Pending")) == {
        "phase": "Pending"
    }
    # Once the cache shows more than Pending, it stands, and what landed is done with: a
    # Pending someone writes later is not overridden.
    shown = reporter._as_written("default/job", _podgroup_as_cached("u1", "Inqueue"))
    assert shown["phase"] == "Inqueue"
    assert reporter._as_written("default/job", _podgroup_as_cached("u1", "Pending")) == {
        "phase": "Pending"
    }
    reporter.written.landed["podgroup default/job"] = ((None, None, ()), "u1")  # Workload API
    assert reporter._as_written("default/job", _podgroup_as_cached("u1", None)) == {}
    assert "statuses landed" in cluster.remembered()


def test_an_inqueue_stands_after_a_failed_write_while_the_podgroup_watch_lags(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """As above, and the next status write fails once: the remembered comparison was
    built on gangsat's Inqueue, and reused after the failure on the cache's Pending."""
    _inqueue_then_full_while_the_podgroup_watch_lags(server, cluster)
    server.fail("PATCH", r"podgroups/job", 503, times=1)
    for _ in range(2):
        run_cycle(cluster, FAST)
        assert cluster.writer.flush()
    assert podgroup_status(server, "job", VOLCANO).get("phase") == "Inqueue"


def test_what_was_written_of_a_podgroup_made_again_is_not_the_new_ones(
    cluster: KubeCluster,
) -> None:
    written = cluster.reporter.written
    written.sigs["podgroup default/job"] = ("Inqueue",)
    old = {"metadata": {"name": "job", "uid": "u1"}}
    written.forget_recreated({"default/job": (None, old)})
    assert written.get("podgroup default/job") == ("Inqueue",)
    new = {"metadata": {"name": "job", "uid": "u2"}}
    written.forget_recreated({"default/job": (None, new)})
    assert written.get("podgroup default/job") is None
