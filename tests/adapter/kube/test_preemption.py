"""Preemption on the Kubernetes backend, against the fake API server over HTTP: victims go
through the Eviction API, a PodDisruptionBudget's 429 is honoured, and the preemptor is
bound once its victims are gone."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.holds import Holds
from adapter.kube.budgets import Budgets
from adapter.kube.cluster import KubeCluster
from adapter.kube.sending import MAX_BIND_WAIT_S, MIN_READ_S
from adapter.loop import LoopSettings, run_cycle
from adapter.results import CycleResult
from benchmarks.fake_apiserver import FakeApiError, FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import (
    apply,
    bound_pods,
    gang_pods,
    node,
    podgroup,
    wait_until,
)

SETTINGS = LoopSettings(solver=SolverConfig(time_limit_s=2.0, preemption=True))


def _objects(pdb: bool = False, never: bool = False, grace: int = 0) -> list[dict[str, Any]]:
    """One 2-cpu node runs gang low (2 x 1 cpu, ``grace`` seconds to terminate); gang high
    (2 x 1 cpu, PriorityClass high) waits."""
    high_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
        **({"preemptionPolicy": "Never"} if never else {}),
    }
    low = gang_pods("low", 2)
    for p in low:
        p["spec"]["nodeName"] = "n1"
        p["status"] = {"phase": "Running"}  # a budget guards running pods only
        p["spec"]["terminationGracePeriodSeconds"] = grace
        p["metadata"]["labels"] = {"app": "low"}
    high = gang_pods("high", 2)
    for p in high:
        p["spec"]["priorityClassName"] = "high"
    high_group = podgroup("high", 2)
    high_group["spec"]["priorityClassName"] = "high"
    objects = [node("n1", cpu="2"), high_class, podgroup("low", 2), *low, high_group, *high]
    if pdb:
        objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "low", "namespace": "default"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "low"}}},
            }
        )
    return objects


def _eviction_requests(server: FakeApiServer) -> list[Any]:
    return [r for r in server.requests if r.verb == "create" and r.subresource == "eviction"]


def _evictions(server: FakeApiServer) -> list[str]:
    """The pods evicted (dry runs left out)."""
    return [
        f"{r.namespace}/{r.name}" for r in _eviction_requests(server) if "dryRun" not in r.query
    ]


def _one_cycle(
    server: FakeApiServer, prepare: Callable[[KubeCluster], None] | None = None
) -> tuple[CycleResult, Holds]:
    """One cycle of a gangsat started on ``server`` (``prepare`` sees its cluster first),
    with the room it holds after."""
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        if prepare is not None:
            prepare(cluster)
        return run_cycle(cluster, SETTINGS, None, holds), holds
    finally:
        cluster.stop()


def test_victims_are_evicted_through_the_eviction_api_and_the_preemptor_bound_after(
    server: FakeApiServer,
) -> None:
    apply(server, _objects())
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        first = run_cycle(cluster, SETTINGS, None, holds)
        assert sorted(first.preempted) == ["default/low-0", "default/low-1"]
        assert sorted(_evictions(server)) == ["default/low-0", "default/low-1"]
        assert not first.bound
        assert cluster.writer.flush()
        assert _nominations(server) == {"high-0": "n1", "high-1": "n1"}
        preempted = {
            e["involvedObject"]["name"]
            for e in server.objects("", "events")
            if e.get("reason") == "Preempted"
        }
        assert preempted == {"low-0", "low-1"}
        # Grace 0: deleted at once, so the next cycle finds them gone, once the watch has
        # told (started at once, the cycle once saw them still bound: a CI run, stop 53).
        wait_until(lambda: not cluster.snapshot().bound_pods(), what="the watch to see it")
        second = run_cycle(cluster, SETTINGS, None, holds)
        assert sorted(second.bound) == ["default/high-0", "default/high-1"]
        assert bound_pods(server) == {"default/high-0": "n1", "default/high-1": "n1"}
    finally:
        cluster.stop()


def test_a_gang_a_disruption_budget_covers_is_no_victim(server: FakeApiServer) -> None:
    # Evicted pod by pod, a gang whose budget let some evictions through and refused the
    # rest would run below minMember: it is not chosen at all.
    apply(server, _objects(pdb=True))
    result, holds = _one_cycle(server)
    assert not result.preempted and not _evictions(server)
    assert not holds.held
    assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}


def test_an_eviction_refused_with_429_keeps_the_victim_and_holds_nothing(
    server: FakeApiServer,
) -> None:
    # A budget made after the snapshot (gangsat did not know it): the API server refuses.
    apply(server, _objects())
    server.fail("POST", r"/pods/low-\d/eviction$", 429, times=2)
    result, holds = _one_cycle(server)
    assert set(result.preempt_failed) == {"default/low-0", "default/low-1"}
    assert all("TooManyRequests" in why for why in result.preempt_failed.values())
    assert not holds.held
    assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}


def _low_1_guarded() -> list[dict[str, Any]]:
    """``_objects()``, low-1 labelled ``guard: yes`` (low-0 not)."""
    objects = _objects()
    for o in objects:
        if o.get("kind") == "Pod" and o["metadata"]["name"] == "low-1":
            o["metadata"]["labels"] = {"app": "low", "guard": "yes"}
    return objects


def _guard(name: str, **spec: Any) -> dict[str, Any]:
    """A PodDisruptionBudget over the pods labelled ``guard: yes``."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {**spec, "selector": {"matchLabels": {"guard": "yes"}}},
    }


def test_a_budget_made_after_the_snapshot_refuses_the_victim_whole(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gangsat's snapshot has no budget (made since); the API server has one over low-1
    # alone. Evicted pod by pod, low-0 would go and low-1 stay: a gang of 2 left with 1.
    apply(server, [*_low_1_guarded(), _guard("guard", minAvailable=1)])
    monkeypatch.setattr(Budgets, "cover", lambda self, pod: False)
    result, holds = _one_cycle(server)
    assert set(result.preempt_failed) == {"default/low-0", "default/low-1"}
    assert "TooManyRequests" in result.preempt_failed["default/low-1"]
    assert "low-1" in result.preempt_failed["default/low-0"]
    assert not result.preempted and not holds.held
    # Only dry runs reached the server: nothing was evicted.
    assert all("dryRun=All" in r.query for r in _eviction_requests(server))
    assert _eviction_requests(server)
    assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}


def test_a_dry_run_left_unanswered_refuses_nothing(server: FakeApiServer) -> None:
    # A 503 to a dry run says nothing of the budgets: the eviction is tried (it meets
    # them itself, and is retried on a 503), rather than the victim kept for a cycle.
    apply(server, _objects())
    server.fail("POST", r"/pods/low-\d/eviction$", 503, times=1)
    result, _ = _one_cycle(server)
    assert sorted(result.preempted) == ["default/low-0", "default/low-1"]
    assert not result.preempt_failed
    assert sorted(_evictions(server)) == ["default/low-0", "default/low-1"]


def test_preemption_policy_never_evicts_nothing(server: FakeApiServer) -> None:
    apply(server, _objects(never=True))
    cluster = KubeCluster(server.client()).start(10)
    try:
        result = run_cycle(cluster, SETTINGS, None, Holds())
        assert not result.preempted and not _evictions(server)
    finally:
        cluster.stop()


def test_victims_keep_their_room_while_they_terminate(server: FakeApiServer) -> None:
    """Evicted pods with a grace period stay, with a deletionTimestamp, holding n1: no
    cycle binds the preemptor before the API server has deleted them."""
    apply(server, _objects(grace=1))
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        first = run_cycle(cluster, SETTINGS, None, holds)
        assert sorted(first.preempted) == ["default/low-0", "default/low-1"]
        terminating = run_cycle(cluster, SETTINGS, None, holds)
        assert not terminating.bound and not terminating.preempted
        assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}
        wait_until(lambda: not bound_pods(server), what="the grace period to end")
        wait_until(lambda: not cluster.snapshot().bound_pods(), what="the watch to see it")
        last = run_cycle(cluster, SETTINGS, None, holds)
        assert sorted(last.bound) == ["default/high-0", "default/high-1"]
    finally:
        cluster.stop()


def test_a_gang_whose_pods_are_being_deleted_is_terminating_and_no_victim(
    server: FakeApiServer,
) -> None:
    """low-0 is being evicted (a grace period, so it stays with a deletionTimestamp): it
    holds its room, terminating, no member any more, and low, already losing pods, is
    nobody's victim meanwhile."""
    objects = _objects(grace=30)
    apply(server, objects)
    cluster = KubeCluster(server.client()).start(10)
    try:
        # Evicted by someone else (a node drain): it keeps n1 for its grace period.
        client.CoreV1Api(server.client()).create_namespaced_pod_eviction(
            "low-0",
            "default",
            client.V1Eviction(metadata=client.V1ObjectMeta(name="low-0", namespace="default")),
        )
        wait_until(
            lambda: (
                (cluster.cache.pod("default/low-0") or {})
                .get("metadata", {})
                .get("deletionTimestamp")
            ),
            what="low-0 terminating",
        )
        state = cluster.snapshot()
        low0 = next(p for p in state.pods if p.name == "default/low-0")
        assert low0.terminating and low0.gang == "default/low" and low0.node_name == "n1"
        result = run_cycle(cluster, SETTINGS, None, Holds())
        assert not result.preempted and not result.bound
    finally:
        cluster.stop()


@pytest.mark.parametrize(
    ("raised", "refused"),
    [
        (ApiException(status=0, reason="SSL: certificate verify failed"), False),
        (urllib3.exceptions.ProtocolError("connection reset"), False),
        (ApiException(status=403, reason="Forbidden"), True),
    ],
)
def test_a_dry_run_refuses_on_an_answer_not_on_its_absence(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch, raised: Exception, refused: bool
) -> None:
    apply(server, _objects())
    cluster = KubeCluster(server.client()).start(10)
    try:
        wait_until(lambda: cluster.cache.pod("default/low-0") is not None)

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise raised

        monkeypatch.setattr(cluster.evictor.core, "create_namespaced_pod_eviction", failing)
        assert bool(cluster.evictor.check(["default/low-0"])) is refused
    finally:
        cluster.stop()


def test_a_fault_of_ours_in_a_dry_run_evicts_nothing(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(server, _objects())

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("a bug")

    def break_dry_runs(cluster: KubeCluster) -> None:
        monkeypatch.setattr(cluster.evictor, "_dry_run", broken)

    result, holds = _one_cycle(server, break_dry_runs)
    assert not result.preempted and not _evictions(server) and not holds.held
    assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}


def _nominations(server: FakeApiServer) -> dict[str, str | None]:
    return {
        p["metadata"]["name"]: (p.get("status") or {}).get("nominatedNodeName")
        for p in server.objects("", "pods")
        if p["metadata"]["name"].startswith("high")
    }


def _with_late(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gang late (2 x 1 cpu), of a higher priority that never preempts: it takes n1 as
    soon as n1 is free, unless n1's room is held."""
    top = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "top"},
        "value": 2000,
        "preemptionPolicy": "Never",
    }
    late = gang_pods("late", 2)
    for p in late:
        p["spec"]["priorityClassName"] = "top"
        p["spec"]["preemptionPolicy"] = "Never"
    group = podgroup("late", 2)
    group["spec"]["priorityClassName"] = "top"
    return [*objects, top, group, *late]


def test_a_new_leader_holds_the_room_its_predecessor_nominated(server: FakeApiServer) -> None:
    """A failover while the victims terminate: the new gangsat reads the nominations
    from the API server and keeps n1 for high; late, of higher priority but never
    preempting, does not take it once the victims are gone."""
    apply(server, _with_late(_objects(grace=1)))
    old = KubeCluster(server.client()).start(10)
    try:
        first = run_cycle(old, SETTINGS, None, Holds())
        assert sorted(first.preempted) == ["default/low-0", "default/low-1"]
        assert old.writer.flush()
    finally:
        old.stop()  # the old leader is gone before its victims are
    assert _nominations(server) == {"high-0": "n1", "high-1": "n1"}
    new = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        waiting = run_cycle(new, SETTINGS, None, holds)
        assert not waiting.bound and not waiting.preempted
        assert set(holds.held) == {"default/high"}
        wait_until(lambda: not bound_pods(server), what="the grace period to end")
        wait_until(lambda: not new.snapshot().bound_pods(), what="the watch to see it")
        last = run_cycle(new, SETTINGS, None, holds)
        assert sorted(last.bound) == ["default/high-0", "default/high-1"]
        assert bound_pods(server) == {"default/high-0": "n1", "default/high-1": "n1"}
    finally:
        new.stop()


def test_a_released_hold_clears_its_nominations(server: FakeApiServer) -> None:
    apply(server, _objects(grace=30))
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds(timeout_s=0.0)  # released at the next cycle, victims still there
    try:
        run_cycle(cluster, SETTINGS, None, holds)
        assert cluster.writer.flush()
        wait_until(lambda: _nominations(server) == {"high-0": "n1", "high-1": "n1"})
        wait_until(lambda: all(p.nominated_node for p in cluster.snapshot().pending_pods()))
        released = run_cycle(cluster, SETTINGS, None, holds)
        assert "default/high" in released.released
        assert cluster.writer.flush()
        assert _nominations(server) == {"high-0": None, "high-1": None}
    finally:
        cluster.stop()


def test_a_nomination_made_again_supersedes_its_queued_clear(server: FakeApiServer) -> None:
    """A hold dropped (its clear queued) and the gang nominated again to the same node
    before the clear went out: the pod still shows the old nomination in the cache, yet
    the new one must be written, else the queued clear would leave it none."""
    objects = _objects()
    objects[-1]["status"] = {"nominatedNodeName": "n1"}  # high-1, nominated before
    apply(server, objects)
    cluster = KubeCluster(server.client()).start(10)
    try:
        reporter = cluster.reporter
        with cluster.writer.holding():  # both writes wait in the queue, as behind binds
            reporter.pods.unnominate("default/high-1")
            reporter.pods.nominate("default/high-1", "n1")
        assert cluster.writer.flush()
        assert _nominations(server)["high-1"] == "n1"
        reporter.pods.unnominate("default/high-1")
        assert cluster.writer.flush()
        assert _nominations(server)["high-1"] is None
    finally:
        cluster.stop()


def test_a_pod_two_budgets_select_refuses_its_victim_whole(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kube-apiserver evicts no pod that two PodDisruptionBudgets select, however often
    # asked (a 500): the dry run refuses the victim whole, and nothing is evicted, where
    # retried as any 500 the other pod went and low-1 stayed: a gang of 2 left with 1.
    budgets = [_guard(name, maxUnavailable=2) for name in ("guard", "team")]
    apply(server, [*_low_1_guarded(), *budgets])
    monkeypatch.setattr(Budgets, "cover", lambda self, pod: False)  # made since the snapshot
    result, holds = _one_cycle(server)
    assert set(result.preempt_failed) == {"default/low-0", "default/low-1"}
    assert "more than one PodDisruptionBudget" in result.preempt_failed["default/low-1"]
    assert not result.preempted and not holds.held
    assert _evictions(server) == []  # dry runs only
    assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}


class _Answer:
    """A raw response of the client (``_preload_content=False``) with this body."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


def test_a_failure_status_in_a_created_answer_is_that_failure(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-apiserver's eviction handler answers a pod two budgets select with HTTP 201
    and a Status of failure, code 500, in the body: read as that failure, not retried, not
    taken for an eviction."""
    failure = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction "
        "subresource does not support.",
        "code": 500,
    }
    apply(server, _objects())
    cluster = KubeCluster(server.client()).start(10)
    try:
        wait_until(lambda: cluster.cache.pod("default/low-0") is not None)
        calls: list[Any] = []

        def answered(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs.get("dry_run"))
            return _Answer(failure)

        monkeypatch.setattr(cluster.evictor.core, "create_namespaced_pod_eviction", answered)
        refused = cluster.evictor.check(["default/low-0"])
        assert "more than one PodDisruptionBudget" in str(refused["default/low-0"])
        failed = cluster.evictor.evict({"default/low-0": "for high"})
        assert "more than one PodDisruptionBudget" in str(failed["default/low-0"])
        assert calls == ["All", None]  # the eviction sent once: not retried
        assert cluster.cache.pod("default/low-0") is not None  # not taken for evicted
        success = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        monkeypatch.setattr(
            cluster.evictor.core,
            "create_namespaced_pod_eviction",
            lambda *args, **kwargs: _Answer(success),
        )
        assert cluster.evictor.evict({"default/low-0": "for high"}) == {}
    finally:
        cluster.stop()


def test_an_eviction_waits_for_its_answer_no_longer_than_its_budget(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API server that answered an eviction after 10 s held the cycle that long, the
    evictor's budget being 5 s: each request now waits at most what the budget has left
    (at least MIN_READ_S), dry run included."""
    apply(server, _objects())
    cluster = KubeCluster(server.client()).start(10)
    try:
        wait_until(lambda: cluster.cache.pod("default/low-0") is not None)
        waits: list[tuple[str | None, float]] = []

        def unanswered(*args: Any, **kwargs: Any) -> Any:
            _, read = kwargs["_request_timeout"]
            waits.append((kwargs.get("dry_run"), read))
            raise urllib3.exceptions.ReadTimeoutError(None, "", "read timed out")  # type: ignore[arg-type]

        monkeypatch.setattr(cluster.evictor.core, "create_namespaced_pod_eviction", unanswered)
        budget = cluster.evictor.retry_budget_s
        assert budget < MAX_BIND_WAIT_S
        assert cluster.evictor.check(["default/low-0"]) == {}  # unanswered: refuses nothing
        failed = cluster.evictor.evict({"default/low-0": "for high"})
        assert "ReadTimeoutError" in str(failed["default/low-0"])
        assert waits[0] == ("All", budget)
        sent = [read for dry, read in waits[1:] if dry is None]
        assert len(sent) > 1  # retried within the budget
        assert all(MIN_READ_S <= read <= budget for read in sent)
    finally:
        cluster.stop()


def test_an_eviction_of_a_pod_the_cache_no_longer_has_is_done_not_refused(
    server: FakeApiServer,
) -> None:
    """Sent again after the pod left (``evicting``): nothing is left to evict, nor to
    refuse in a dry run, and no request is sent without a UID to hold it to."""
    apply(server, _objects())
    cluster = KubeCluster(server.client()).start(10)
    try:
        assert cluster.evictor.check(["default/ghost"]) == {}
        assert cluster.evictor.evict({"default/ghost": "for high"}) == {}
        assert not _eviction_requests(server)
    finally:
        cluster.stop()


def test_a_victim_remnant_on_a_node_deleted_meanwhile_is_evicted_again(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """low-1's eviction is refused once (429 after its dry run passed), low-0's goes: low
    runs below minMember. Then n2, low-1's node, is deleted (low-1 still bound to it)
    and comes back. The eviction to send again was dropped with the pod gone from the
    snapshot, and low-1 ran alone for good (a chaos probe); it is evicted."""
    objects = _objects()
    objects[0] = node("n1", cpu="1")
    [low_1] = [o for o in objects if o["metadata"]["name"] == "low-1"]
    low_1["spec"]["nodeName"] = "n2"
    apply(server, [node("n2", cpu="1"), *objects])
    evict, refused = server._evict, []

    def budget_made_after_the_dry_run(namespace: str, name: str, *args: Any, **kw: Any) -> None:
        if name == "low-1" and not kw.get("dry_run") and not refused:
            refused.append(name)
            raise FakeApiError(429, "a budget made after the dry run")
        evict(namespace, name, *args, **kw)

    monkeypatch.setattr(server, "_evict", budget_made_after_the_dry_run)
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        first = run_cycle(cluster, SETTINGS, None, holds)
        assert "default/low-1" in first.preempt_failed and "default/low-0" in first.preempted
        server.delete("", "nodes", None, "n2")
        wait_until(lambda: not cluster.cache.node_exists("n2"))
        run_cycle(cluster, SETTINGS, None, holds)
        server.put(node("n2", cpu="1"))
        wait_until(lambda: cluster.cache.node_exists("n2"))
        assert _evictions(server).count("default/low-1") == 2
    finally:
        cluster.stop()
