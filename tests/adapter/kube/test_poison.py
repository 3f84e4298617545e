"""One user's object never stops everyone's gangs.

Each case stores, next to a good gang, an object a real API server accepts (CRDs keep
whatever they are given; core objects as the server stores them) that gangsat cannot
use. The cycle must bind the good gang whole, end without an error, leave the
poisonous object unbound, and say why in an Event."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from tests.adapter.kube.manifests import apply, bound_pods, gang_pods, node, podgroup
from tests.adapter.kube.test_kube_cluster import SIGS, seen

FAST = LoopSettings(scheduler="cpsat", solver=SolverConfig(time_limit_s=2.0, deterministic=True))
Obj = dict[str, Any]


def requesting(group: str, n: int, **requests: Any) -> list[Obj]:
    pods = gang_pods(group, n)
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"] = dict(requests)
    return pods


def queue(name: str, spec: Any) -> Obj:
    return {
        "apiVersion": f"{SIGS}/v1alpha2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def with_spec(obj: Obj, **spec: Any) -> Obj:
    changed = copy.deepcopy(obj)
    changed["spec"].update(spec)
    return changed


def gated(pods: list[Obj]) -> list[Obj]:
    pods[-1]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    return pods


POISON: dict[str, list[Obj]] = {
    "cpu 1e30": [podgroup("bad", 1), *requesting("bad", 1, cpu="1e30")],
    "memory int64 max": [podgroup("bad", 1), *requesting("bad", 1, memory="9223372036854775807")],
    "negative request": [podgroup("bad", 1), *requesting("bad", 1, cpu="-1")],
    "unparseable request": [podgroup("bad", 1), *requesting("bad", 1, cpu="lots")],
    "extended resource 1e30": [
        podgroup("bad", 1),
        *requesting("bad", 1, **{"nvidia.com/gpu": "1e30"}),
    ],
    "minMember -1": [podgroup("bad", -1), *gang_pods("bad", 1)],
    "minMember a word": [podgroup("bad", "three"), *gang_pods("bad", 1)],
    "minMember 10^12": [podgroup("bad", 10**12), *gang_pods("bad", 1)],
    "minMember above the group": [podgroup("bad", 5), *gang_pods("bad", 2)],
    "PodGroup spec a string": [{**podgroup("bad", 1), "spec": "hello"}, *gang_pods("bad", 1)],
    "PodGroup queue a number": [with_spec(podgroup("bad", 1), queue=42), *gang_pods("bad", 1)],
    "unknown queue": [podgroup("bad", 1, queue="nowhere"), *gang_pods("bad", 1)],
    "missing PodGroup": gang_pods("orphan", 2),
    "Queue weight -1": [
        queue("q", {"weight": -1}),
        podgroup("bad", 1, queue="q"),
        *gang_pods("bad", 1),
    ],
    "Queue weight 1e30": [
        queue("q", {"weight": 1e30}),
        podgroup("bad", 1, queue="q"),
        *gang_pods("bad", 1),
    ],
    "request memory 1e300000": [podgroup("bad", 1), *requesting("bad", 1, memory="1e300000")],
    "Node allocatable cpu 1e30": [node("huge", cpu="1e30")],
    "Node allocatable cpu 1e999999": [node("huge", cpu="1e999999")],
    "Node allocatable negative": [node("minus", cpu="-4")],
    "Node status a string": [{**node("odd"), "status": "Ready"}],
    "gated member": [podgroup("bad", 2), *gated(gang_pods("bad", 2))],
    # A status written badly (by a user, another controller): stopped every report.
    "PodGroup conditions strings": [
        {**podgroup("bad", 5), "status": {"conditions": ["x"]}},
        *gang_pods("bad", 2),
    ],
    "PodGroup conditions a string": [
        {**podgroup("bad", 5), "status": {"conditions": "abc"}},
        *gang_pods("bad", 2),
    ],
    "Queue status a string": [
        {**queue("q", {"weight": 1}), "status": "broken"},
        podgroup("bad", 5, queue="q"),
        *gang_pods("bad", 2),
    ],
}


@pytest.mark.parametrize("case", sorted(POISON))
def test_a_poisonous_object_leaves_the_good_gang_bound(
    case: str, server: FakeApiServer, cluster: KubeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    apply(server, [node("n1", cpu="8"), node("n2", cpu="8"), podgroup("good", 2)])
    apply(server, gang_pods("good", 2))
    apply(server, copy.deepcopy(POISON[case]))
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert result.error is None, result.error
    bound = bound_pods(server)
    assert {"default/good-0", "default/good-1"} <= set(bound), case
    assert set(bound.values()) <= {"n1", "n2"}  # never a poisonous node
    assert not any(p.startswith(("default/bad-", "default/orphan-")) for p in bound), bound
    assert cluster.writer.flush()
    # And the user hears why: an Event on the object (or on the gang it spoils).
    good = {"good", "good-0", "good-1"}
    reasons = {
        e["reason"] for e in server.objects("", "events") if e["involvedObject"]["name"] not in good
    }
    assert reasons & {"InvalidSpec", "FailedScheduling", "Unschedulable"}, reasons
    # ... and every other object's report went out too.
    assert not [r.getMessage() for r in caplog.records if "could not report" in r.getMessage()]


def test_a_malformed_volcano_min_resources_stops_no_part_of_the_report(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # A Volcano PodGroup (no pods yet, as its job controller makes it) whose minResources
    # a CRD without a schema kept as a list: it ended every report at its enqueue, and no
    # Event of any gang followed, cycle after cycle.
    bad = podgroup("bad", 1, group="scheduling.volcano.sh")
    bad["spec"]["minResources"] = {"cpu": [1]}
    apply(server, [node("n1", cpu="8"), podgroup("good", 2), *gang_pods("good", 2), bad])
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert result.error is None, result.error
    assert sorted(result.bound) == ["default/good-0", "default/good-1"]
    assert cluster.writer.flush()
    scheduled = {
        e["involvedObject"]["name"]
        for e in server.objects("", "events")
        if e["reason"] == "Scheduled"
    }
    assert scheduled == {"good-0", "good-1"}
    stored = server.get("scheduling.volcano.sh", "podgroups", "default", "bad")
    assert ((stored or {}).get("status") or {}).get("phase") != "Inqueue"  # not enqueued
