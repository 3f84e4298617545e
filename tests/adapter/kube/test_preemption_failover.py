"""A preemption's victims are marked before they are evicted (the ``DisruptionTarget``
condition, as kube-scheduler marks them), and a leader after the one that evicted them
reads the marks: a victim left below minMember by an eviction that failed is evicted
again, against the fake API server over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.holds import Holds
from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.disruption import PREEMPTION_REASON, marked_victim
from adapter.kube.fields import stamped
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiError, FakeApiServer
from solver.model import VictimMark
from tests.adapter.kube.manifests import apply, bound_pods, gang_pods, node, podgroup, wait_until
from tests.adapter.kube.test_preemption import SETTINGS, _evictions, _objects, _one_cycle


def _split_victim() -> list[dict[str, Any]]:
    """Gang low (2 x 1 cpu) runs low-0 on n1 and low-1 on n2; gang high (2 x 1 cpu,
    PriorityClass high) waits."""
    objects = _objects()
    objects[0] = node("n1", cpu="1")
    [low_1] = [o for o in objects if o["metadata"]["name"] == "low-1"]
    low_1["spec"]["nodeName"] = "n2"
    return [node("n2", cpu="1"), *objects]


def _refuse_evicting(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch, names: set[str], times: int
) -> None:
    """The first ``times`` evictions of each pod of ``names`` get a 429 after their dry
    run passed (a budget made in between)."""
    evict, refused = server._evict, {n: 0 for n in names}

    def budget_made_after_the_dry_run(namespace: str, name: str, *args: Any, **kw: Any) -> None:
        if name in refused and not kw.get("dry_run") and refused[name] < times:
            refused[name] += 1
            raise FakeApiError(429, "a budget made after the dry run")
        evict(namespace, name, *args, **kw)

    monkeypatch.setattr(server, "_evict", budget_made_after_the_dry_run)


def _mark(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    pod = server.get("", "pods", "default", name)
    assert pod is not None
    marks = [
        c
        for c in (pod.get("status") or {}).get("conditions") or []
        if c["type"] == "DisruptionTarget"
    ]
    return marks[0] if marks else None


def test_each_victim_is_marked_before_it_is_evicted(server: FakeApiServer) -> None:
    apply(server, _objects(grace=30))  # kept, terminating, to be read
    result, _ = _one_cycle(server)
    assert sorted(result.preempted) == ["default/low-0", "default/low-1"]
    for name in ("low-0", "low-1"):
        asked = [
            (r.verb, r.subresource, "dryRun" in r.query)
            for r in server.requests
            if r.name == name and r.verb != "get"
        ]
        assert asked.index(("patch", "status", False)) < asked.index(("create", "eviction", False))
        mark = _mark(server, name)
        assert mark is not None and mark["reason"] == PREEMPTION_REASON
        # Saying which deployment (its scheduler names) marked it.
        assert mark["message"] == f"gangsat[gangsat]: {result.preempted[f'default/{name}']}"


def test_a_victim_whose_mark_is_refused_keeps_every_pod(server: FakeApiServer) -> None:
    """Evicted without its mark, a victim left below minMember by a failed eviction
    could not be told apart by a leader after this one: none of its pods is evicted."""
    apply(server, _objects())
    server.fail("PATCH", r"/pods/low-1/status$", 403, times=100)
    result, holds = _one_cycle(server)
    assert not _evictions(server) and not result.preempted
    assert set(result.preempt_failed) == {"default/low-0", "default/low-1"}
    assert not holds.held
    assert bound_pods(server) == {"default/low-0": "n1", "default/low-1": "n1"}


def test_a_new_leader_evicts_again_the_victim_its_predecessor_left_below_minimum(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """low-0 went, low-1's eviction was refused, and the leader that would have sent it
    again is gone (a chaos probe: low-1 then ran alone for good, high waited for ever).
    The new leader reads low-1's mark, evicts it again, and binds high once it is gone."""
    apply(server, _split_victim())
    _refuse_evicting(server, monkeypatch, {"low-1"}, times=1)
    old = KubeCluster(server.client()).start(10)
    try:
        first = run_cycle(old, SETTINGS, None, Holds())
        assert "default/low-0" in first.preempted and "default/low-1" in first.preempt_failed
        assert old.writer.flush()
    finally:
        old.stop()
    new = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        wait_until(lambda: "default/low-0" not in bound_pods(server))
        again = run_cycle(new, SETTINGS, None, holds)
        assert list(again.preempted) == ["default/low-1"]
        assert _evictions(server).count("default/low-1") == 2
        wait_until(lambda: not new.snapshot().bound_pods(), what="the watch to see it")
        last = run_cycle(new, SETTINGS, None, holds)
        assert sorted(last.bound) == ["default/high-0", "default/high-1"]
    finally:
        new.stop()


def test_a_victim_that_kept_every_pod_has_its_marks_withdrawn(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every eviction of low refused after its mark: low runs whole. Marked still, once
    it lost low-0 of its own (high gone meanwhile), a new leader took it for a victim
    left below minMember and evicted low-1 (a chaos probe)."""
    apply(server, _split_victim())
    _refuse_evicting(server, monkeypatch, {"low-0", "low-1"}, times=1)
    old = KubeCluster(server.client()).start(10)
    try:
        first = run_cycle(old, SETTINGS, None, Holds())
        assert set(first.preempt_failed) == {"default/low-0", "default/low-1"}
    finally:
        old.stop()
    for name in ("low-0", "low-1"):
        mark = _mark(server, name)
        assert mark is not None and mark["status"] == "False"
    for name in ("high-0", "high-1", "low-0"):
        server.delete("", "pods", "default", name)
    new = KubeCluster(server.client()).start(10)
    try:
        again = run_cycle(new, SETTINGS, None, Holds())
    finally:
        new.stop()
    assert not again.preempted and sorted(_evictions(server)) == ["default/low-0", "default/low-1"]
    assert bound_pods(server) == {"default/low-1": "n2"}


def test_an_eviction_sent_again_and_refused_keeps_its_mark(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """low-1, left when low-0 went, is refused again: its gang lost a pod, and its mark is
    the record a new leader reads. Judged by whether the snapshot showed the mark yet (a
    watch behind), it was taken for a victim kept whole and withdrawn."""
    apply(server, _split_victim())
    _refuse_evicting(server, monkeypatch, {"low-1"}, times=2)
    cluster = KubeCluster(server.client()).start(10)
    try:
        cluster.snapshot()
        failed = cluster.preempt({"default/low-1": "preempted by gang default/high"}, again=True)
        assert set(failed) == {"default/low-1"}
        mark = _mark(server, "low-1")
        assert mark is not None and mark["status"] == "True"
        cluster.preempt({"default/low-1": "preempted by gang default/high"})  # a new victim
        mark = _mark(server, "low-1")
        assert mark is not None and mark["status"] == "False"
    finally:
        cluster.stop()


def test_an_eviction_sent_again_is_marked_anew_though_its_dry_run_is_refused(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget refuses low-1's evictions, dry runs too: its mark, written when its
    eviction was first sent, went stale after two minutes, and a new leader then left
    low-1 running alone. Marked anew each time it is sent again, it does not; a victim
    chosen afresh is not marked where its dry run is refused."""
    apply(server, _split_victim())
    evict = server._evict

    def budget(namespace: str, name: str, *args: Any, **kw: Any) -> None:
        if name == "low-1":
            raise FakeApiError(429, "a budget")
        evict(namespace, name, *args, **kw)

    monkeypatch.setattr(server, "_evict", budget)
    cluster = KubeCluster(server.client()).start(10)
    try:
        cluster.snapshot()
        why = "preempted by gang default/high"
        assert set(cluster.preempt({"default/low-1": why})) == {"default/low-1"}
        assert _mark(server, "low-1") is None
        assert set(cluster.preempt({"default/low-1": why}, again=True)) == {"default/low-1"}
        mark = _mark(server, "low-1")
        assert mark is not None and mark["status"] == "True"
        assert not _evictions(server)
    finally:
        cluster.stop()


def test_a_victim_whose_eviction_answers_were_lost_counts_as_one_that_lost_a_pod(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """low-0's eviction goes through, every answer to it lost (504); low-1's is refused.
    Read as a victim that kept every pod, low-1 was not sent again and its mark was
    withdrawn: low ran it alone (a chaos probe). It may have lost low-0: low-1 is sent
    again, marked."""
    apply(server, _objects(grace=30))
    evict = server._evict

    def answers_lost(namespace: str, name: str, *args: Any, **kw: Any) -> None:
        if name == "low-1" and not kw.get("dry_run"):
            raise FakeApiError(429, "a budget made after the dry run")
        evict(namespace, name, *args, **kw)
        if name == "low-0" and not kw.get("dry_run"):
            raise FakeApiError(504, "the answer lost")

    monkeypatch.setattr(server, "_evict", answers_lost)
    result, holds = _one_cycle(server)
    assert {"default/low-0", "default/low-1"} <= set(result.preempt_failed)
    low_0 = server.get("", "pods", "default", "low-0")
    assert low_0 is not None and low_0["metadata"].get("deletionTimestamp")
    marks = {name: (_mark(server, name) or {}).get("status") for name in ("low-0", "low-1")}
    assert marks == {"low-0": "True", "low-1": "True"}
    assert "default/low-1" in holds.held["default/high"].resend


def test_a_mark_is_withdrawn_only_from_a_pod_as_the_mark_left_it(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both evictions of low refused; low-0 written to meanwhile (a kubelet's status, or
    the Eviction API's own mark where an eviction went): its withdrawal, held to the
    resourceVersion its mark left, is refused, and the mark lapses instead."""
    apply(server, _objects(grace=30))
    _refuse_evicting(server, monkeypatch, {"low-0", "low-1"}, times=1)

    def written_meanwhile(cluster: KubeCluster) -> None:
        evict = cluster.evictor.evict

        def then_a_kubelet_writes(*args: Any) -> dict[str, Any]:
            failures = evict(*args)
            pod: Any = server.get("", "pods", "default", "low-0")
            server.put({**pod, "status": {**pod["status"], "podIP": "10.0.0.9"}})
            return failures

        monkeypatch.setattr(cluster.evictor, "evict", then_a_kubelet_writes)

    result, _ = _one_cycle(server, written_meanwhile)
    assert {"default/low-0", "default/low-1"} <= set(result.preempt_failed)
    marks = {name: (_mark(server, name) or {}).get("status") for name in ("low-0", "low-1")}
    assert marks == {"low-0": "True", "low-1": "False"}


def _bound(status: dict[str, Any]) -> dict[str, Any]:
    [pod] = gang_pods("g", 1)
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = status
    return pod


def test_convert_reads_gangsats_own_preemption_mark_of_a_bound_pod_only() -> None:
    at = "2026-12-07T10:00:00Z"

    def mark(reason: str, message: str, status: str = "True") -> dict[str, Any]:
        condition = {"type": "DisruptionTarget", "status": status, "reason": reason}
        condition |= {"message": message, "lastTransitionTime": at}
        return {"phase": "Running", "conditions": [condition]}

    ours = mark(PREEMPTION_REASON, "gangsat: preempted by gang x")
    expected = VictimMark(why="preempted by gang x", at_s=stamped(at).timestamp())
    assert marked_victim(ours) == expected
    assert marked_victim(mark(PREEMPTION_REASON, "kube-scheduler: preempting")) is None
    assert marked_victim(mark("EvictionByEvictionAPI", "gangsat: x")) is None
    assert marked_victim(mark(PREEMPTION_REASON, "gangsat: x", status="False")) is None
    assert marked_victim({"conditions": "garbled"}) is None and marked_victim(None) is None
    undated = mark(PREEMPTION_REASON, "gangsat: x")
    del undated["conditions"][0]["lastTransitionTime"]
    assert marked_victim(undated) == VictimMark(why="x", at_s=0.0)  # as old as can be
    # A deployment's mark says who marked it; a scheduler named gangsat-something's own
    # message is not one of gangsat's.
    named = marked_victim(mark(PREEMPTION_REASON, "gangsat[a,b]: preempted by gang x"))
    assert named == expected.model_copy(update={"by": "a,b"})
    assert marked_victim(mark(PREEMPTION_REASON, "gangsat-gpu: preempting")) is None

    def read(pod: dict[str, Any]) -> VictimMark | None:
        (p,) = convert([node("n1", cpu="2"), podgroup("g", 1), pod]).state.pods
        return p.marked_victim

    assert read(_bound(ours)) == expected
    pending = _bound(ours)
    del pending["spec"]["nodeName"]
    assert read(pending) is None


def test_a_mark_refused_for_a_while_is_sent_again(server: FakeApiServer) -> None:
    """The API server's flow control (429), a 503 and a conflict (409: no precondition of
    a mark's says the pod is gone) are retried within the eviction's budget; the victim
    is then evicted."""
    apply(server, _objects())
    server.fail("PATCH", r"/pods/low-0/status$", 503)
    server.fail("PATCH", r"/pods/low-0/status$", 409)
    server.fail("PATCH", r"/pods/low-1/status$", 429)
    result, _ = _one_cycle(server)
    assert sorted(result.preempted) == ["default/low-0", "default/low-1"]
    marks = [
        r.name
        for r in server.requests
        if r.verb == "patch" and r.resource == "pods" and r.subresource == "status"
    ]
    assert sorted(n for n in marks if n.startswith("low-")) == [
        "low-0",
        "low-0",
        "low-0",
        "low-1",
        "low-1",
    ]
