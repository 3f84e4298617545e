"""Pending pods with a placement rule gangsat does not check are not scheduled; bound ones
hold their room; a bound pod's required anti-affinity keeps the pods it selects off its
topology domain (a pending pod's own: ``test_anti_affinity``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.memo import Memo
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.schedulers import schedule
from tests.adapter.kube.manifests import apply, binds, gang_pods
from tests.adapter.kube.manifests import node as kube_node
from tests.adapter.kube.manifests import podgroup as kube_podgroup
from tests.adapter.kube.test_convert import node, pod, podgroup
from tests.adapter.kube.test_kube_cluster import FAST, seen

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
TERM = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"].update(spec)
    return changed


def with_port(obj: dict[str, Any], **port: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["containers"][0]["ports"] = [port]
    return changed


def _job(labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Job ``team/j`` of one 1-cpu pod for gangsat, its template labelled ``labels``."""
    template: dict[str, Any] = {
        "spec": {
            "schedulerName": "gangsat",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        }
    }
    if labels:
        template["metadata"] = {"labels": labels}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {"parallelism": 1, "template": template},
    }


UNMODELLED: dict[str, tuple[dict[str, Any], str]] = {
    "DRA": (with_spec(pod("p"), resourceClaims=[{"name": "gpu"}]), "resourceClaims"),
    # VolumeRestrictions keeps two pods of one such disk apart: placed together, the
    # second one's attach fails and it never starts.
    "inline EBS disk": (
        with_spec(pod("p"), volumes=[{"name": "d", "awsElasticBlockStore": {"volumeID": "v1"}}]),
        "inline awsElasticBlockStore volume",
    ),
}


@pytest.mark.parametrize("case", sorted(UNMODELLED))
def test_a_pending_pod_with_a_rule_gangsat_does_not_check_waits_and_says_why(case: str) -> None:
    obj, said = UNMODELLED[case]
    conversion = convert([node("n1"), obj])
    assert [p.name for p in conversion.state.pods] == []
    (finding,) = conversion.findings
    assert finding.name == "team/p" and said in finding.message
    assert "not scheduled" in finding.message
    # Bound, the same pod holds its room: it runs wherever it was put.
    bound = copy.deepcopy(obj)
    bound["spec"]["nodeName"] = "n1"
    assert [p.name for p in convert([node("n1"), bound]).state.pods] == ["team/p"]


def test_rules_that_only_prefer_are_placed() -> None:
    preferring = [
        with_spec(
            pod("a"),
            affinity={"podAntiAffinity": {PREFERRED: [{"weight": 1, "podAffinityTerm": TERM}]}},
        ),
        with_spec(
            pod("b"),
            topologySpreadConstraints=[
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
        ),
        with_port(pod("c"), containerPort=80),  # a container port alone asks for no host port
        # An init container that runs to completion before the app containers: its host
        # port is not one kube-scheduler's NodePorts reads.
        with_spec(pod("e"), initContainers=[{"name": "setup", "ports": [{"hostPort": 9}]}]),
        with_spec(pod("d"), volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]),
    ]
    conversion = convert([node("n1"), *preferring])
    assert sorted(p.name for p in conversion.state.pods) == [
        "team/a",
        "team/b",
        "team/c",
        "team/d",
        "team/e",
    ]
    assert conversion.findings == []


def test_a_bound_pods_required_anti_affinity_keeps_the_pods_it_selects_off_its_domain() -> None:
    guard = with_spec(
        pod("guard", node_name="n1"), affinity={"podAntiAffinity": {REQUIRED: [TERM]}}
    )
    objects = [
        node("n1", metadata={"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}),
        node("n2", metadata={"name": "n2", "labels": {"kubernetes.io/hostname": "n2"}}),
        guard,
        pod("selected", labels={"app": "x"}),
        pod("elsewhere", labels={"app": "x"}, namespace="other"),  # the term reads team only
        pod("other", labels={"app": "y"}),
    ]
    conversion = convert(objects)
    assert conversion.findings == []
    placed = schedule(conversion.state, "cpsat").placements
    assert placed["team/selected"] == "n2"  # never n1, though n1 has room
    by_name = {p.name: p for p in conversion.state.pods}
    assert by_name["team/other"].node_rules == () and by_name["other/elsewhere"].node_rules == ()
    # A namespaceSelector reads any namespace: never too few.
    wide = copy.deepcopy(guard)
    wide["spec"]["affinity"]["podAntiAffinity"][REQUIRED][0]["namespaceSelector"] = {}
    state = convert([*objects[:2], wide, *objects[3:]]).state
    assert {p.name for p in state.pods if p.node_rules} == {"team/selected", "other/elsewhere"}
    # A zone-wide term keeps the pod off every node of the bound pod's zone, and a node
    # without the zone label is in no domain.
    zonal = copy.deepcopy(guard)
    zonal["spec"]["affinity"]["podAntiAffinity"][REQUIRED][0]["topologyKey"] = "zone"
    zoned = [
        node("n1", metadata={"name": "n1", "labels": {"zone": "a"}}),
        node("n2", metadata={"name": "n2", "labels": {"zone": "a"}}),
        node("n3", metadata={"name": "n3", "labels": {}}),
    ]
    state = convert([*zoned, zonal, pod("selected", labels={"app": "x"})]).state
    assert schedule(state, "cpsat").placements == {"team/selected": "n3"}


def test_a_jobs_pods_are_kept_off_a_bound_pods_domain_too() -> None:
    guard = with_spec(
        pod("guard", node_name="n1"), affinity={"podAntiAffinity": {REQUIRED: [TERM]}}
    )
    job = _job(labels={"app": "x"})
    nodes = [
        node(n, metadata={"name": n, "labels": {"kubernetes.io/hostname": n}}) for n in ("n1", "n2")
    ]
    state = convert([*nodes, guard, job]).state
    placed = schedule(state, "cpsat").placements
    assert placed and set(placed.values()) == {"n2"}


def test_a_remembered_pod_is_refused_again_and_accepted_once_bound() -> None:
    # Converted from the memo on later cycles, the finding comes back with the pod.
    memo = Memo()
    ported, _ = UNMODELLED["DRA"]
    ported = copy.deepcopy(ported)
    ported["metadata"].update(
        uid="u1", resourceVersion="1", creationTimestamp="2026-12-01T00:00:00Z"
    )
    for _ in range(2):
        conversion = convert([node("n1"), ported], memo=memo)
        assert conversion.state.pods == () and len(conversion.findings) == 1


def test_a_gang_of_anti_affine_pods_is_never_packed_onto_one_node() -> None:
    # The reviewer's case: four pods that must each have a node of their own, four
    # nodes of 8 cpu. Placed without the rule, cpsat put all four on one node.
    members = [
        with_spec(
            pod(f"w{i}", labels={"app": "x"}, annotations={"scheduling.k8s.io/group-name": "g"}),
            affinity={"podAntiAffinity": {REQUIRED: [TERM]}},
        )
        for i in range(4)
    ]
    group = {
        "apiVersion": "scheduling.sigs.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "team"},
        "spec": {"minMember": 4},
    }
    nodes = [
        node(f"n{i}", cpu="8", metadata={"name": f"n{i}", "labels": {TERM["topologyKey"]: f"n{i}"}})
        for i in range(4)
    ]
    state = convert([*nodes, group, *members]).state
    for scheduler in ("cpsat", "gang-greedy"):
        placed = schedule(state, scheduler).placements
        assert sorted(placed.values()) == ["n0", "n1", "n2", "n3"], (scheduler, placed)
        # Three nodes for four: none of them.
        fewer = convert([*nodes[:3], group, *members]).state
        assert schedule(fewer, scheduler).placements == {}


def test_an_empty_node_affinity_term_still_matches_no_node_beside_a_bound_guard() -> None:
    guard = with_spec(
        pod("guard", node_name="n1"), affinity={"podAntiAffinity": {REQUIRED: [TERM]}}
    )
    never = with_spec(
        pod("p", labels={"app": "x"}),
        affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}]}}},
    )
    nodes = [
        node(n, metadata={"name": n, "labels": {"kubernetes.io/hostname": n}}) for n in ("n1", "n2")
    ]
    assert schedule(convert([*nodes, never]).state, "cpsat").placements == {}
    assert schedule(convert([*nodes, guard, never]).state, "cpsat").placements == {}


def test_a_guard_on_a_jobs_name_keeps_the_jobs_pods_off_its_node() -> None:
    guard = with_spec(
        pod("guard", node_name="n1"),
        affinity={
            "podAntiAffinity": {
                REQUIRED: [
                    {
                        "labelSelector": {"matchLabels": {"job-name": "j"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    )
    job = _job()
    nodes = [
        node(n, metadata={"name": n, "labels": {"kubernetes.io/hostname": n}}) for n in ("n1", "n2")
    ]
    placed = schedule(convert([*nodes, guard, job]).state, "cpsat").placements
    assert placed and set(placed.values()) == {"n2"}


def test_a_refused_member_is_named_with_its_gang_so_the_gang_says_it_exists(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """A gang of two, one member with a resource claim: nothing is bound, and the PodGroup
    says a second pod exists that gangsat cannot schedule (it said "1 pod(s) exist", as
    if the Job controller had failed to make the other)."""
    members = gang_pods("g", 2)
    members[1]["spec"]["resourceClaims"] = [{"name": "gpu"}]
    apply(server, [kube_node("n1", "8"), kube_podgroup("g", 2), *members])
    seen(cluster, server)
    joined = {"pod-group.scheduling.sigs.k8s.io": "g"}
    conversion = convert(
        [
            node("n1"),
            podgroup("scheduling.sigs.k8s.io/v1alpha1", "g", {"minMember": 2}),
            pod("g-0", labels=joined),
            with_spec(pod("g-1", labels=joined), resourceClaims=[{"name": "gpu"}]),
        ]
    )
    (finding,) = conversion.findings
    assert finding.reason == "InvalidSpec" and finding.gang == "team/g"

    run_cycle(cluster, FAST)
    assert binds(server) == []
    assert cluster.writer.flush()
    made = server.get("scheduling.sigs.dev", "podgroups", "default", "g") or {}
    (condition,) = (made.get("status") or {}).get("conditions") or []
    assert condition["reason"] == "InvalidSpec"
    assert condition["message"].startswith(
        "2/2 tasks in gang unschedulable: 1 pod(s) of it exist that gangsat cannot schedule "
        "(default/g-1: asks for resourceClaims"
    )


def test_a_pod_a_bound_pods_anti_affinity_keeps_off_is_told_so_in_kube_schedulers_words() -> None:
    """Told before that its own node affinity did not match, though it had none."""
    guard = with_spec(
        pod("guard", node_name="n1"), affinity={"podAntiAffinity": {REQUIRED: [TERM]}}
    )
    pinned = with_spec(pod("p", labels={"app": "x"}), nodeSelector={"kubernetes.io/hostname": "n1"})
    nodes = [
        node(n, metadata={"name": n, "labels": {"kubernetes.io/hostname": n}}) for n in ("n1", "n2")
    ]
    decision = schedule(convert([*nodes, guard, pinned]).state, "cpsat").explained()
    assert decision.placements == {}
    why = decision.unschedulable["pod:team/p"]
    assert "1 node(s) didn't satisfy existing pods anti-affinity rules" in why
    assert "1 node(s) didn't match node selector" in why
    assert "node affinity" not in why
