"""A pending pod's PersistentVolumeClaims: a bound volume's node affinity is where the
pod may go; a claim gangsat cannot place it for makes it (and its gang) wait, and says
why; the wait ends when the claim changes, not when the pod does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.memo import Memo
from adapter.kube.resources import CLAIMS, VOLUMES
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.predicates import NO_VOLUME_ZONE, placement_reason
from solver.schedulers import schedule
from tests.adapter.kube.manifests import apply, binds, bound_pods, gang_pods, wait_until
from tests.adapter.kube.manifests import node as kube_node
from tests.adapter.kube.manifests import podgroup as kube_podgroup
from tests.adapter.kube.test_convert import node, pod, podgroup
from tests.adapter.kube.test_kube_cluster import FAST, seen
from tests.adapter.kube.test_unmodelled import _job

ZONE = "topology.kubernetes.io/zone"


def zoned(name: str, zone: str) -> dict[str, Any]:
    return node(name, metadata={"name": name, "labels": {ZONE: zone}})


def claim(
    name: str,
    volume: str | None = "pv",
    phase: str = "Bound",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **metadata: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": list(modes)}
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "team", **metadata},
        "spec": spec,
        "status": {"phase": phase},
    }


def volume(name: str = "pv", terms: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": "10Gi"}}
    if terms is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }


def in_zones(*zones: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": ZONE, "operator": "In", "values": list(zones)}]}


def mounting(obj: dict[str, Any], *claims: str, ephemeral: str | None = None) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    volumes: list[dict[str, Any]] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    changed["spec"]["volumes"] = volumes
    return changed


NODES = [zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c")]


def placed(objects: list[dict[str, Any]]) -> dict[str, str]:
    return schedule(convert(objects).state, "cpsat").placements


def test_a_pod_goes_where_its_bound_volume_is_reached() -> None:
    objects = [*NODES, claim("data"), volume(terms=[in_zones("b")]), mounting(pod("p"), "data")]
    conversion = convert(objects)
    assert conversion.findings == []
    assert placed(objects) == {"team/p": "b1"}
    # A volume every node reaches (NFS, an object store's driver) adds nothing.
    reachable = [*NODES, claim("data"), volume(), mounting(pod("p"), "data")]
    (read,) = convert(reachable).state.pods
    assert read.affinity == () and read.node_rules == ()
    assert "team/p" in placed(reachable)


def test_a_node_the_volume_does_not_reach_is_named_so_as_kube_scheduler_names_it() -> None:
    """Told before that the pod's own node affinity did not match, though it had none."""
    full = {**zoned("b1", "b"), "status": {"allocatable": {"cpu": "0", "pods": "110"}}}
    # A zonal disk as clouds make them: its zone label and the node affinity of that zone.
    # A node failing both is counted under the first filter kube-scheduler runs of the
    # two (VolumeBinding, then VolumeZone).
    zonal = volume(terms=[in_zones("b")])
    zonal["metadata"]["labels"] = {ZONE: "b"}
    objects = [zoned("a1", "a"), full, claim("data"), zonal]
    decision = schedule(convert([*objects, mounting(pod("p"), "data")]).state, "cpsat")
    why = decision.explained().unschedulable["pod:team/p"]
    assert "1 node(s) had volume node affinity conflict" in why and "1 Insufficient cpu" in why
    assert "node affinity" not in why.replace("volume node affinity", "")
    assert "volume zone" not in why
    # The zone label alone: counted under VolumeZone's words.
    labelled = volume()
    labelled["metadata"]["labels"] = {ZONE: "b"}
    objects = [zoned("a1", "a"), full, claim("data"), labelled]
    decision = schedule(convert([*objects, mounting(pod("p"), "data")]).state, "cpsat")
    assert (
        "1 node(s) had no available volume zone"
        in (decision.explained().unschedulable["pod:team/p"])
    )
    # A node the volume rules out that is also short of room is counted for its room:
    # kube-scheduler's NodeResourcesFit runs before its volume filters.
    small = {**zoned("a2", "a"), "status": {"allocatable": {"cpu": "0", "pods": "110"}}}
    objects = [zoned("a1", "a"), small, full, claim("data"), zonal]
    decision = schedule(convert([*objects, mounting(pod("p"), "data")]).state, "cpsat")
    why = decision.explained().unschedulable["pod:team/p"]
    assert why.endswith(": 2 Insufficient cpu, 1 node(s) had volume node affinity conflict")


def test_the_pods_own_affinity_and_each_volumes_all_hold() -> None:
    own = mounting(pod("p"), "one", "two")
    own["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [in_zones("a", "b", "c")]
            }
        }
    }
    objects = [
        *NODES,
        claim("one", "pv1"),
        claim("two", "pv2"),
        volume("pv1", [in_zones("a"), in_zones("b")]),  # either term
        volume("pv2", [in_zones("b", "c")]),
        own,
    ]
    assert placed(objects) == {"team/p": "b1"}


@pytest.mark.parametrize(
    ("objects", "said"),
    [
        ([], "'data': not found"),
        ([claim("data", volume=None, phase="Pending"), volume()], "to be bound"),
        ([claim("data", deletionTimestamp="2026-01-01T00:00:00Z"), volume()], "being deleted"),
        ([claim("data")], "PersistentVolume 'pv' of PersistentVolumeClaim 'data': not found"),
        ([claim("data"), volume(terms=[])], "allows no node"),
    ],
    ids=["missing", "unbound", "deleting", "volume missing", "no node"],
)
def test_a_claim_that_keeps_a_pod_from_every_node_makes_it_wait_and_says_why(
    objects: list[dict[str, Any]], said: str
) -> None:
    conversion = convert([*NODES, *objects, mounting(pod("p"), "data")])
    assert conversion.state.pods == ()
    (finding,) = conversion.findings
    assert finding.name == "team/p" and said in finding.message
    assert finding.reason == "FailedScheduling"  # waits, as kube-scheduler would say


def test_the_wait_ends_when_the_claim_is_bound_though_the_pod_did_not_change() -> None:
    memo = Memo()
    waiting = mounting(pod("p"), "data")
    unbound = claim("data", volume=None, phase="Pending")
    first = convert([*NODES, unbound, waiting], memo=memo)
    assert first.state.pods == ()
    # The same pod object, read through the memo: the claim decides afresh.
    bound = [*NODES, claim("data"), volume(terms=[in_zones("c")]), waiting]
    second = convert(bound, memo=memo)
    assert [p.name for p in second.state.pods] == ["team/p"]
    assert schedule(second.state, "cpsat").placements == {"team/p": "c1"}


def test_a_gang_with_a_member_waiting_for_its_claim_is_not_placed_in_part() -> None:
    group = podgroup("scheduling.sigs.dev/v1alpha2", "g", {"minMember": 2})
    members = [pod(f"g-{i}", annotations={"scheduling.k8s.io/group-name": "g"}) for i in range(2)]
    members[1] = mounting(members[1], "missing")
    conversion = convert([*NODES, group, *members])
    assert [p.name for p in conversion.state.pods] == ["team/g-0"]
    assert schedule(conversion.state, "cpsat").placements == {}


def test_an_ephemeral_volumes_claim_counts_only_if_made_for_this_pod() -> None:
    owner = {"kind": "Pod", "name": "p", "uid": "u-1", "controller": True, "apiVersion": "v1"}
    p = mounting(pod("p"), ephemeral="scratch")
    p["metadata"]["uid"] = "u-1"
    made = claim("p-scratch", ownerReferences=[owner])
    objects = [*NODES, made, volume(terms=[in_zones("a")]), p]
    assert placed(objects) == {"team/p": "a1"}
    stranger = claim("p-scratch", ownerReferences=[{**owner, "uid": "u-0"}])
    conversion = convert([*NODES, stranger, volume(), p])
    (finding,) = conversion.findings
    assert "not made for this pod" in finding.message


def test_a_read_write_once_pod_claim_another_pod_uses_makes_the_pod_wait() -> None:
    exclusive = claim("solo", modes=("ReadWriteOncePod",))
    running = mounting(pod("r", node_name="a1"), "solo")
    conversion = convert([*NODES, exclusive, volume(), running, mounting(pod("p"), "solo")])
    assert [p.name for p in conversion.state.pods] == ["team/r"]
    (finding,) = conversion.findings
    assert "ReadWriteOncePod" in finding.message
    # Pending pods sharing it: one goes (the first by name), the others wait for it.
    sharing = [mounting(pod(n), "solo") for n in ("q", "p", "s")]
    shared = convert([*NODES, exclusive, volume(), *sharing])
    assert [p.name for p in shared.state.pods] == ["team/p"]
    assert sorted(f.name for f in shared.findings) == ["team/q", "team/s"]
    assert "team/p" in placed([*NODES, exclusive, volume(), *sharing])
    # The first by name among those that could go: one waiting for another claim too
    # holds no one up.
    stuck = mounting(pod("a"), "solo", "missing")
    others = convert([*NODES, exclusive, volume(), stuck, mounting(pod("b"), "solo")])
    assert [p.name for p in others.state.pods] == ["team/b"]
    # Nor a gated pod (a controller holds it back): its claims are not even read, so it
    # gets no FailedScheduling, only its gate (kube-scheduler does not look at it).
    gated_missing = mounting(pod("g"), "missing")
    gated_missing["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    assert convert([*NODES, gated_missing]).findings == []
    gated = mounting(pod("a"), "solo")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    both = convert([*NODES, exclusive, volume(), gated, mounting(pod("b"), "solo")])
    assert "team/b" in placed([*NODES, exclusive, volume(), gated, mounting(pod("b"), "solo")])
    assert both.findings == []


def labelled(name: str, **labels: str) -> dict[str, Any]:
    return node(name, metadata={"name": name, "labels": labels})


def test_a_volumes_zone_labels_keep_its_pods_in_its_zones_as_volume_zone_reads_them() -> None:
    beta = "failure-domain.beta.kubernetes.io/zone"
    nodes = [
        labelled("ga-a", **{ZONE: "a"}),
        labelled("beta-b", **{beta: "b"}),
        labelled("ga-c", **{ZONE: "c"}),
        labelled("both", **{beta: "c", ZONE: "b"}),  # its beta label is read first
        labelled("bare"),  # no zone or region label: any volume's zone passes
    ]
    pv = volume()
    pv["metadata"]["labels"] = {beta: "a__b"}  # an in-tree volume: two zones, beta key
    state = convert([*nodes, claim("data"), pv, mounting(pod("p"), "data")]).state
    (read,) = state.pods
    allowed = {n.name for n in state.nodes if placement_reason(read, n) is None}
    assert allowed == {"ga-a", "beta-b", "bare"}


def test_a_volumes_match_fields_are_skipped_as_kube_scheduler_skips_them() -> None:
    # kube-scheduler matches a volume's terms against a node of labels alone, and skips
    # matchFields against its empty fields: a term of them alone matches every node (it
    # read as none, and the pod waited for good); one with expressions is them alone.
    for op in ("In", "NotIn"):
        fields = [{"key": "metadata.name", "operator": op, "values": ["b1"]}]
        objects = [*NODES, claim("data"), volume(terms=[{"matchFields": fields}])]
        state = convert([*objects, mounting(pod("p"), "data")]).state
        (read,) = state.pods
        assert all(placement_reason(read, n) is None for n in state.nodes), op
    zone_a = {"key": ZONE, "operator": "In", "values": ["a"]}
    fields = [{"key": "metadata.name", "operator": "In", "values": ["b1"]}]
    terms = [{"matchExpressions": [zone_a], "matchFields": fields}]
    objects = [*NODES, claim("data"), volume(terms=terms), mounting(pod("p"), "data")]
    state = convert(objects).state
    (read,) = state.pods
    allowed = {n.name for n in state.nodes if placement_reason(read, n) is None}
    assert allowed == {n.name for n in state.nodes if n.labels.get(ZONE) == "a"} != set()


def test_volumes_of_one_zone_ask_it_once() -> None:
    # Three in-tree volumes (beta zone and region labels, five ways each to hold): the
    # same alternatives ANDed three times would be 125 terms.
    beta = {
        "failure-domain.beta.kubernetes.io/zone": "a",
        "failure-domain.beta.kubernetes.io/region": "r",
    }
    region = "topology.kubernetes.io/region"
    objects: list[dict[str, Any]] = [
        node(n, metadata={"name": n, "labels": {ZONE: z, region: "r"}})
        for n, z in (("a1", "a"), ("b1", "b"))
    ]
    for i in range(3):
        pv = volume(f"pv{i}")
        pv["metadata"]["labels"] = beta
        objects += [claim(f"d{i}", f"pv{i}"), pv]
    objects.append(mounting(pod("p"), "d0", "d1", "d2"))
    conversion = convert(objects)
    assert conversion.findings == []
    (read,) = conversion.state.pods
    ((rule,),) = {read.node_rules}  # one rule, of five alternatives
    assert (len(rule.terms), rule.reason) == (5, NO_VOLUME_ZONE)
    assert placed(objects) == {"team/p": "a1"}


MALFORMED: dict[str, list[dict[str, Any]]] = {
    "access modes": [{**claim("data"), "spec": {"accessModes": 5, "volumeName": "pv"}}, volume()],
    "node affinity": [claim("data"), {**volume(), "spec": {"nodeAffinity": "x"}}],
    "keyless": [claim("data"), volume(terms=[{"matchExpressions": [{"operator": "In"}]}])],
    "operator": [
        claim("data"),
        volume(terms=[{"matchExpressions": [{"key": "k", "operator": "Foo"}]}]),
    ],
    "owners": [claim("p-scratch", ownerReferences=5), volume()],
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_claim_or_volume_is_a_finding_never_a_failed_conversion(case: str) -> None:
    p = mounting(
        pod("p", labels={"pod-group.scheduling.sigs.k8s.io": "g"}), "data", ephemeral="scratch"
    )
    other = pod("other")
    other["spec"]["volumes"] = 5  # not a list: no claims read
    conversion = convert([*NODES, *MALFORMED[case], p, other])
    assert [q.name for q in conversion.state.pods] == ["team/other"]
    # Its gang's status says a member of it waits, or is refused, and why.
    assert [(f.name, f.gang) for f in conversion.findings] == [("team/p", "team/g")]


def test_the_last_object_of_a_name_is_the_one_its_claims_are_read_for() -> None:
    first = mounting(pod("p"), "data")
    second = pod("p")  # kept (last wins), and asks for no claim
    conversion = convert([*NODES, claim("data"), volume(terms=[in_zones("b")]), first, second])
    (read,) = conversion.state.pods
    assert read.affinity == ()
    assert convert([*NODES, first, mounting(pod("p"), "missing")]).state.pods == ()


def test_a_claim_without_a_namespace_in_a_manifest_is_the_default_namespaces() -> None:
    made = claim("data")
    del made["metadata"]["namespace"]
    p = mounting(pod("p"), "data")
    del p["metadata"]["namespace"]
    conversion = convert([*NODES, made, volume(), p])
    assert [q.name for q in conversion.state.pods] == ["default/p"]


def test_a_jobs_pods_read_the_claims_of_its_template() -> None:
    job = _job()  # team/j, one 1-cpu pod for gangsat
    job["spec"]["parallelism"] = 2
    job["spec"]["template"]["spec"]["volumes"] = [
        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}
    ]
    objects = [*NODES, claim("data"), volume(terms=[in_zones("a")]), job]
    assert set(placed(objects).values()) == {"a1"}
    assert convert([*NODES, job]).state.pods == ()  # no such claim: both wait


def test_on_an_api_server_a_gang_waits_for_its_claim_then_binds_where_its_volume_is(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    pods = gang_pods("g", 2)
    pods[1]["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    apply(server, [kube_node("n1", "4"), kube_node("n2", "4"), kube_podgroup("g", 2), *pods])
    seen(cluster, server)

    run_cycle(cluster, FAST)
    assert binds(server) == []  # not one member without the other
    assert cluster.writer.flush()
    waits = [e for e in server.objects("", "events") if e.get("reason") == "FailedScheduling"]
    assert any(
        e["involvedObject"]["name"] == "g-1" and "'data': not found" in e["message"] for e in waits
    )
    waiting = server.get("", "pods", "default", "g-1")
    assert waiting is not None
    (scheduled,) = [c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["status"] == "False" and "'data': not found" in scheduled["message"]
    # Its PodGroup says the gang waits for a volume, not for room.
    (unschedulable,) = _podgroup_conditions(server, "g")
    assert unschedulable["reason"] == "WaitingForVolumes"
    assert "1 pod(s) wait for their volumes (default/g-1" in unschedulable["message"]
    assert "'data': not found" in unschedulable["message"]

    made = claim("data")
    made["metadata"]["namespace"] = "default"
    pinned = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]
    }
    apply(server, [made, volume(terms=[pinned])])
    wait_until(
        lambda: (
            cluster.cache.get(VOLUMES, "pv") is not None
            and cluster.cache.get(CLAIMS, "default/data") is not None
        ),
        what="the claim and its volume in the cache",
    )
    run_cycle(cluster, FAST)
    assert set(bound_pods(server)) == {"default/g-0", "default/g-1"}
    bound = server.get("", "pods", "default", "g-1")
    assert bound is not None and bound["spec"]["nodeName"] == "n2"


def _podgroup_conditions(server: FakeApiServer, name: str) -> list[dict[str, Any]]:
    podgroup = server.get("scheduling.sigs.dev", "podgroups", "default", name) or {}
    conditions: list[dict[str, Any]] = (podgroup.get("status") or {}).get("conditions") or []
    return conditions


def _unschedulable_after_a_cycle(
    server: FakeApiServer, cluster: KubeCluster, group: str, size: int, pods: list[dict[str, Any]]
) -> dict[str, Any]:
    """The PodGroup's one condition after a cycle over one 4-cpu node that bound nothing."""
    apply(server, [kube_node("n1", "4"), kube_podgroup(group, size), *pods])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert binds(server) == []
    assert cluster.writer.flush()
    (unschedulable,) = _podgroup_conditions(server, group)
    assert unschedulable["type"] == "Unschedulable" and unschedulable["status"] == "True"
    return unschedulable


def test_a_gang_whose_every_pod_waits_for_its_volumes_says_so_on_its_podgroup(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """Its pods are in no snapshot (each waits for its claim), so the gang has no live
    pod there: before, its PodGroup got no status at all."""
    pods = gang_pods("w", 2)
    for p in pods:
        p["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "gone"}}]
    unschedulable = _unschedulable_after_a_cycle(server, cluster, "w", 2, pods)
    assert unschedulable["reason"] == "WaitingForVolumes"
    message = unschedulable["message"]
    assert message.startswith("2/2 tasks in gang unschedulable: 2 pod(s) wait for their volumes")
    assert "default/w-0: " in message and "'gone': not found" in message


def test_where_the_room_keeps_a_gang_waiting_its_reason_stays_and_the_volumes_are_a_note(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """minMember 2 of 3 pods, the third waiting for a claim: the other two could reach
    minMember, but only one fits. The room is why it waits, not the volume."""
    pods = gang_pods("s", 3, cpu="3")
    pods[2]["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "gone"}}]
    unschedulable = _unschedulable_after_a_cycle(server, cluster, "s", 2, pods)
    assert unschedulable["reason"] == "NotEnoughResources"
    message = unschedulable["message"]
    assert "Insufficient cpu" in message
    assert "; 1 pod(s) wait for their volumes (default/s-2: " in message
    assert "'gone': not found" in message


def test_a_zone_label_volume_zone_cannot_read_is_ignored_as_it_ignores_it() -> None:
    # An empty value or an empty piece ("a__"): VolumeZone ignores the label; read, it
    # kept the pod off every zoned node for good. Pieces are read trimmed.
    for value, allowed in (
        ("", {"a1", "b1", "c1"}),
        ("a__", {"a1", "b1", "c1"}),
        ("a__ b", {"a1", "b1"}),
    ):
        pv = volume()
        pv["metadata"]["labels"] = {ZONE: value}
        state = convert([*NODES, claim("data"), pv, mounting(pod("p"), "data")]).state
        (read,) = state.pods
        assert {n.name for n in state.nodes if placement_reason(read, n) is None} == allowed, value
