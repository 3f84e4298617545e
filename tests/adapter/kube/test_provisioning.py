"""Claims whose StorageClass waits for the first consumer (``WaitForFirstConsumer``, the
default class of most clouds' clusters): the pod goes where the class may make its
volume, the decision gives the claim the pod's node
(``volume.kubernetes.io/selected-node``), and the gang is bound once its claims are,
as kube-scheduler's VolumeBinding does. Before, such a claim stayed unbound under
gangsat, and its pod pending for good."""

from __future__ import annotations

import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from adapter.holds import Holds
from adapter.kube.cache import ClusterCache
from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.provisioning import select_nodes
from adapter.kube.resources import CLAIMS
from adapter.kube.resources import NODES as NODE_RESOURCE
from adapter.kube.sending import always
from adapter.kube.volumes import SELECTED_NODE
from adapter.loop import LoopSettings, run_cycle
from adapter.results import CycleResult
from benchmarks.fake_apiserver import FakeApiServer
from solver.schedulers import schedule
from tests.adapter.kube.manifests import apply, bound_pods, gang_pods, node, podgroup, wait_until
from tests.adapter.kube.test_convert import pod
from tests.adapter.kube.test_kube_cluster import FAST, after_first_snapshot, seen
from tests.adapter.kube.test_preemption import SETTINGS as PREEMPTING
from tests.adapter.kube.test_preemption import _evictions as preemption_evictions
from tests.adapter.kube.test_preemption import _objects as preemption_objects
from tests.adapter.kube.test_volumes import NODES, ZONE, in_zones, mounting, volume

PROVISIONER = "ebs.csi.aws.com"


def storage_class(
    name: str = "gp3",
    mode: str = "WaitForFirstConsumer",
    provisioner: str = PROVISIONER,
    zones: tuple[str, ...] = (),
) -> dict[str, Any]:
    sc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if zones:
        sc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": list(zones)}]}
        ]
    return sc


def unbound(name: str, namespace: str = "team", sc: str = "gp3", node: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if node:
        metadata["annotations"] = {SELECTED_NODE: node}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": {"storageClassName": sc, "accessModes": ["ReadWriteOnce"]},
        "status": {"phase": "Pending"},
    }


def test_a_pod_goes_where_its_class_may_make_the_volume_and_its_claim_is_to_name_the_node() -> None:
    objects = [*NODES, storage_class(zones=("b",)), unbound("data"), mounting(pod("p"), "data")]
    conversion = convert(objects)
    assert conversion.findings == []
    assert conversion.selecting == {"team/p": ("team/data",)}
    assert schedule(conversion.state, "cpsat").placements == {"team/p": "b1"}
    # Without allowedTopologies: any node.
    anywhere = convert([*NODES, storage_class(), unbound("data"), mounting(pod("p"), "data")])
    assert anywhere.findings == [] and len(anywhere.state.pods) == 1
    assert anywhere.state.pods[0].node_rules == ()


def test_a_claim_given_its_node_gates_its_pod_there_until_it_is_bound() -> None:
    """As kube-scheduler's PreBind waits for it: its provisioner is making the volume
    on c1; once the claim is bound, the volume made says where the pod goes."""
    objects = [*NODES, storage_class(), unbound("data", node="c1"), mounting(pod("p"), "data")]
    conversion = convert(objects)
    assert conversion.findings == [] and conversion.selecting == {}
    (p,) = conversion.state.pods
    assert p.gates and "PersistentVolumeClaim data" in p.gates[0]
    assert schedule(conversion.state, "cpsat").placements == {}
    # Made in zone c and bound: the pod goes where the volume is reached, named by no one.
    made = unbound("data", node="c1")
    made["spec"]["volumeName"] = "pv"
    made["status"]["phase"] = "Bound"
    done = convert([*NODES, storage_class(), made, volume(terms=[in_zones("c")]), objects[-1]])
    assert done.findings == [] and done.selecting == {} and done.state.pods[0].gates == ()
    assert schedule(done.state, "cpsat").placements == {"team/p": "c1"}


@pytest.mark.parametrize(
    ("classes", "said"),
    [
        ([storage_class(mode="Immediate")], "binds it at once"),
        ([storage_class(provisioner="kubernetes.io/no-provisioner")], "has no provisioner"),
        ([], "StorageClass 'gp3' is not known"),
        ([storage_class(zones=("x",))], None),
    ],
    ids=["immediate", "local volumes", "unknown class", "no node of the class's zones"],
)
def test_a_claim_no_bind_makes_keeps_its_pod_waiting(
    classes: list[dict[str, Any]], said: str | None
) -> None:
    conversion = convert([*NODES, *classes, unbound("data"), mounting(pod("p"), "data")])
    if said is None:  # placed nowhere: the pod is there, every node ruled out
        assert schedule(conversion.state, "cpsat").placements == {}
        return
    assert conversion.state.pods == () and conversion.selecting == {}
    (finding,) = conversion.findings
    assert finding.reason == "FailedScheduling" and said in finding.message


def _claim_of(server: FakeApiServer, name: str) -> dict[str, Any]:
    found = server.get("", "persistentvolumeclaims", "default", name)
    assert found is not None
    return found


def _gang_with_claims(server: FakeApiServer, *claims: dict[str, Any]) -> None:
    """Gang g (2 pods of 3 cpu, one per 4-cpu node), each mounting its claim."""
    pods = gang_pods("g", 2, cpu="3")
    for i, p in enumerate(pods):
        p["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": f"d{i}"}}]
    apply(
        server,
        [node("n1", "4"), node("n2", "4"), storage_class(), *claims, podgroup("g", 2), *pods],
    )


def _provision(server: FakeApiServer, name: str) -> str:
    """What a provisioner and the PV controller do for a claim given a node: a volume
    reached from that node's zone-less hostname only (a node-local volume), the claim
    bound to it. Returns the node."""
    claim = copy.deepcopy(_claim_of(server, name))
    chosen = claim["metadata"]["annotations"][SELECTED_NODE]
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": [chosen]}
    pv = volume(f"pv-{name}", terms=[{"matchExpressions": [host]}])
    server.put(pv)
    claim["spec"]["volumeName"] = f"pv-{name}"
    claim["status"] = {"phase": "Bound"}
    server.put(claim)
    return str(chosen)


def _settled(cluster: KubeCluster, server: FakeApiServer) -> None:
    """``seen``, and the claims' watch caught up too."""
    seen(cluster, server)

    def version(claim: dict[str, Any] | None) -> Any:
        return ((claim or {}).get("metadata") or {}).get("resourceVersion")

    for claim in server.objects("", "persistentvolumeclaims"):
        key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        wanted = version(claim)
        wait_until(
            partial(lambda k, v: version(cluster.cache.get(CLAIMS, k)) == v, key, wanted),
            what=f"claim {key} seen",
        )


def _made(
    cluster: KubeCluster,
    server: FakeApiServer,
    holds: Holds,
    *claims: str,
    settings: LoopSettings = FAST,
) -> CycleResult:
    """The provisioner makes ``claims``' volumes; then the next cycle, the cache caught up."""
    for claim in claims:
        _provision(server, claim)
    _settled(cluster, server)
    return run_cycle(cluster, settings, None, holds)


def test_on_an_api_server_claims_are_given_their_nodes_and_the_gang_bound_once_made(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """First cycle: each claim given its pod's node, every write before any bind, and no
    pod bound (bound at once, one whose volume was then never made waited on its node for
    good, its gang short). The room stays held for the gang while the volumes are made:
    a gang arriving meanwhile does not take it. Once they are made, the gang is bound
    whole there."""
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    _settled(cluster, server)
    holds = Holds()
    result = run_cycle(cluster, FAST, holds=holds)
    assert bound_pods(server) == {} and result.failed_binds == {} and result.evicted == []
    assert set(result.deferred) == {"default/g-0", "default/g-1"}
    assert "provisioned" in result.deferred["default/g-0"]
    assert result.admitted() == []
    assert {s.gang: s.reason for s in result.statuses}["default/g"] == "WaitingForVolumes"
    chosen = {
        i: _claim_of(server, f"d{i}")["metadata"]["annotations"][SELECTED_NODE] for i in range(2)
    }
    assert set(chosen.values()) == {"n1", "n2"}
    # Writes, then nothing bound; the room nominated.
    writes = [(r.verb, r.resource, r.subresource) for r in server.requests if r.verb != "get"]
    assert ("patch", "persistentvolumeclaims", None) in writes
    assert ("create", "pods", "binding") not in writes
    # Meanwhile gang h, which fits only where g goes: nothing bound, nothing written again.
    apply(server, [podgroup("h", 2), *gang_pods("h", 2, cpu="3")])
    _settled(cluster, server)
    patches = len([r for r in server.requests if r.resource == "persistentvolumeclaims"])
    result = run_cycle(cluster, FAST, holds=holds)
    assert bound_pods(server) == {} and result.bound == {}
    assert len([r for r in server.requests if r.resource == "persistentvolumeclaims"]) == patches
    reasons = {s.gang: s.reason for s in result.statuses}
    assert reasons["default/g"] == "WaitingForVolumes"
    assert "volumes being made" in {s.gang: s.message for s in result.statuses}["default/g"]
    _made(cluster, server, holds, "d0", "d1")
    assert bound_pods(server) == {f"default/g-{i}": chosen[i] for i in range(2)}


def test_a_provisioner_that_gives_a_node_back_has_the_claim_named_again(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    _settled(cluster, server)
    holds = Holds()
    run_cycle(cluster, FAST, holds=holds)
    for i in range(2):  # it could not make the volume there: it takes the node back
        claim = copy.deepcopy(_claim_of(server, f"d{i}"))
        claim["metadata"]["annotations"] = {}
        server.put(claim)
    _settled(cluster, server)
    result = run_cycle(cluster, FAST, holds=holds)
    assert set(result.deferred) == {"default/g-0", "default/g-1"}
    assert all(
        SELECTED_NODE in _claim_of(server, f"d{i}")["metadata"]["annotations"] for i in range(2)
    )
    assert bound_pods(server) == {} and "default/g" in holds.held


def test_a_watch_that_has_not_shown_this_scheduler_s_own_write_is_no_failure(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """The next cycle reads the claims as they were before the write: written again, the
    server answers 409 (changed since), and the claim already names the node: still a
    wait for the volumes, not a failed bind."""
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    _settled(cluster, server)
    before = {i: copy.deepcopy(cluster.cache.get(CLAIMS, f"default/d{i}")) for i in range(2)}
    holds = Holds()
    run_cycle(cluster, FAST, holds=holds)
    _settled(cluster, server)
    for i in range(2):  # as a lagging watch would still show them
        cluster.cache.apply(CLAIMS, "MODIFIED", before[i] or {})
    result = run_cycle(cluster, FAST, holds=holds)
    assert result.failed_binds == {} and result.rolled_back == {}
    assert set(result.deferred) == {"default/g-0", "default/g-1"}


def test_a_claim_that_cannot_be_given_its_node_keeps_the_whole_gang_unbound(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """d1's write is refused: g-1 is not bound (bound, it waited on its node for a
    volume no provisioner makes), nor is g-0: bound, it was deleted again as g fell
    short (a pod no controller makes again, lost)."""
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    seen(cluster, server)
    server.fail("PATCH", r"/persistentvolumeclaims/d1$", 403, times=100)
    result = run_cycle(cluster, FAST)
    assert "default/g-1" in result.failed_binds and "d1" in result.failed_binds["default/g-1"]
    assert "gang-mate default/g-1" in result.failed_binds["default/g-0"]
    assert bound_pods(server) == {} and result.evicted == []
    # d0, written for g-0 before d1 failed, is taken back: left naming n1, it held g-0
    # to n1 for good (with a node-local volume made there for no pod).
    for claim in ("d0", "d1"):
        assert SELECTED_NODE not in (_claim_of(server, claim)["metadata"].get("annotations") or {})


def test_a_claim_given_another_node_since_the_snapshot_is_not_overwritten(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    seen(cluster, server)
    original = cluster.snapshot

    def then_taken() -> Any:
        state = original()
        taken = copy.deepcopy(_claim_of(server, "d1"))
        taken["metadata"]["annotations"] = {SELECTED_NODE: "elsewhere"}
        server.put(taken)  # another scheduler's, say, between the snapshot and the binds
        return state

    cluster.snapshot = then_taken  # type: ignore[method-assign]
    result = run_cycle(cluster, FAST)
    assert "default/g-1" in result.failed_binds and bound_pods(server) == {}
    assert _claim_of(server, "d1")["metadata"]["annotations"][SELECTED_NODE] == "elsewhere"
    assert SELECTED_NODE not in (_claim_of(server, "d0")["metadata"].get("annotations") or {})


def test_a_claims_class_named_by_the_beta_annotation_is_read_first() -> None:
    """A claim made with the annotation alone keeps no storageClassName; kube-scheduler
    and the provisioners read the annotation first."""
    beta = unbound("data", sc="")
    del beta["spec"]["storageClassName"]
    beta["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "gp3"}
    conversion = convert([*NODES, storage_class(zones=("c",)), beta, mounting(pod("p"), "data")])
    assert conversion.selecting == {"team/p": ("team/data",)}
    assert schedule(conversion.state, "cpsat").placements == {"team/p": "c1"}


def test_a_write_on_a_claim_changed_since_the_cache_read_it_is_refused_not_forced(
    server: FakeApiServer,
) -> None:
    """The write is preconditioned on the claim as the cache holds it: one the server has
    changed since (another writer's node, say) answers 409, and the pod is not bound."""
    apply(server, [storage_class(), unbound("d0", "default")])
    cache = ClusterCache()
    stale = _claim_of(server, "d0")
    cache.apply(CLAIMS, "ADDED", stale)
    newer = copy.deepcopy(stale)
    newer["metadata"]["annotations"] = {SELECTED_NODE: "elsewhere"}
    server.put(newer)
    cache.apply(NODE_RESOURCE, "ADDED", node("n1", "4"))
    core = client.CoreV1Api(server.client())
    with ThreadPoolExecutor(2) as pool:
        refused = select_nodes(
            core, cache, always, [("default/p", "n1")], {"default/p": ("default/d0",)}, str, pool
        )
    assert "not given node n1" in refused["default/p"].message
    assert _claim_of(server, "d0")["metadata"]["annotations"][SELECTED_NODE] == "elsewhere"


def test_a_gangs_claims_are_written_together_not_one_answer_after_another(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """One after another, a gang of 64 pods with a claim each waited 64 answers before
    its first bind."""
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    seen(cluster, server)
    in_flight, most = [0], [0]
    lock = threading.Lock()

    def slow_claim_writes(method: str, path: str) -> None:
        if method == "PATCH" and "/persistentvolumeclaims/" in path:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            time.sleep(0.3)
            with lock:
                in_flight[0] -= 1

    server.hooks.append(slow_claim_writes)
    result = run_cycle(cluster, FAST)
    assert set(result.deferred) == {"default/g-0", "default/g-1"}
    assert most[0] == 2


def test_a_bound_pod_whose_claim_names_no_node_any_more_is_told_why_it_waits(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """Its provisioner could not make the volume on the pod's node and took the node back
    (removed the annotation): the pod, bound, waits for it for good, where kube-scheduler,
    which binds once the claim is bound, places it again. An Event on the pod says so."""
    bound = mounting(pod("p"), "data")
    bound["spec"]["nodeName"] = "a1"
    objects = [*NODES, storage_class(), unbound("data"), bound]
    (finding,) = convert(objects).findings
    assert finding.name == "team/p" and finding.reason == "VolumeNotProvisioned"
    assert "delete the pod" in finding.message and "node a1" in finding.message
    assert [q.node_name for q in convert(objects).state.pods] == ["a1"]  # still bound there
    # Named (being made) or bound: no word.
    assert convert([*NODES, storage_class(), unbound("data", node="a1"), bound]).findings == []
    made = {**unbound("data"), "spec": {"volumeName": "pv", "storageClassName": "gp3"}}
    assert convert([*NODES, storage_class(), made, volume(), bound]).findings == []
    (p,) = gang_pods("g", 1, cpu="1")
    p["spec"].update(
        nodeName="n1", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "d0"}}]
    )
    apply(server, [node("n1", "4"), storage_class(), unbound("d0", "default"), podgroup("g", 1), p])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    assert cluster.writer.flush()
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in server.objects("", "events")}
    assert ("g-0", "VolumeNotProvisioned") in reasons


def test_a_malformed_class_does_not_stop_the_snapshot_of_its_bound_pods() -> None:
    """Its allowedTopologies were parsed to tell whether a bound pod's claim is made where
    its pod goes, and an expression without a key raised out of the whole conversion: no
    cycle ran. The bound pod is read; a pending one is refused with why."""
    broken = storage_class()
    broken["allowedTopologies"] = [{"matchLabelExpressions": [{"values": ["a"]}]}]
    bound = mounting(pod("p"), "data")
    bound["spec"]["nodeName"] = "a1"
    conversion = convert([*NODES, broken, unbound("data"), bound])
    assert [p.name for p in conversion.state.pods] == ["team/p"]
    (finding,) = conversion.findings
    assert finding.reason == "VolumeNotProvisioned"
    pending = convert([*NODES, broken, unbound("data"), mounting(pod("q"), "data")])
    assert pending.state.pods == () and pending.findings[0].reason == "InvalidSpec"


def test_a_preemptor_keeps_the_room_it_evicted_for_while_its_volumes_are_made(
    server: FakeApiServer,
) -> None:
    """Its victims gone, its claims are given their nodes and its binds wait: the hold
    stays (dropped, the room went to a gang arriving meanwhile, and the preemptor, once
    its node-local volumes were made, evicted that one too)."""
    objects = preemption_objects()
    for o in objects:
        if o.get("kind") == "Pod" and o["metadata"]["name"].startswith("high-"):
            claim = f"hd{o['metadata']['name'][-1]}"
            o["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]
    apply(server, [storage_class(), unbound("hd0", "default"), unbound("hd1", "default"), *objects])
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        first = run_cycle(cluster, PREEMPTING, None, holds)
        assert sorted(first.preempted) == ["default/low-0", "default/low-1"]
        wait_until(lambda: not cluster.snapshot().bound_pods(), what="victims gone")
        second = run_cycle(cluster, PREEMPTING, None, holds)
        assert set(second.deferred) == {"default/high-0", "default/high-1"}
        assert list(holds.held) == ["default/high"]
        apply(server, [podgroup("other", 2), *gang_pods("other", 2)])
        _settled(cluster, server)
        assert run_cycle(cluster, PREEMPTING, None, holds).bound == {}
        last = _made(cluster, server, holds, "hd0", "hd1", settings=PREEMPTING)
        assert set(last.bound) == {"default/high-0", "default/high-1"}
        assert sorted(preemption_evictions(server)) == ["default/low-0", "default/low-1"]
    finally:
        cluster.stop()


def test_a_hold_whose_node_the_provisioner_keeps_giving_back_ends_on_time(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """Given back before each snapshot, the pods are never seen gated: the hold, made
    again each cycle, keeps its start and ends past its timeout."""
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    _settled(cluster, server)
    holds = Holds(timeout_s=0.0)  # every hold late at its next cycle
    assert set(run_cycle(cluster, FAST, holds=holds).deferred) == {"default/g-0", "default/g-1"}
    for i in range(2):
        claim = copy.deepcopy(_claim_of(server, f"d{i}"))
        claim["metadata"]["annotations"] = {}
        server.put(claim)
    _settled(cluster, server)
    result = run_cycle(cluster, FAST, holds=holds)
    assert "default/g" in result.released and "default/g" not in holds.held


def test_a_second_chance_does_not_take_the_room_of_a_gang_whose_volumes_are_being_made(
    server: FakeApiServer,
) -> None:
    """g (a claim, pinned to n1) waits for its volume on n1; k, placed on n2, finds n2
    gone at its bind: its second chance may not take g's room on n1."""
    (g0,) = gang_pods("g", 1, cpu="3")
    g0["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "d0"}}]
    g0["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    (k0,) = gang_pods("k", 1, cpu="3")
    nodes = [node("n1", "4"), node("n2", "4")]
    apply(server, [*nodes, storage_class(), unbound("d0", "default"), podgroup("g", 1)])
    apply(server, [podgroup("k", 1), g0, k0])

    def n2_gone(c: KubeCluster) -> None:
        server.delete("", "nodes", None, "n2")
        wait_until(lambda: not c.cache.node_exists("n2"), what="n2 gone")

    kube = after_first_snapshot(n2_gone)(server.client(), writes_per_s=1000.0).start(10)
    try:
        seen(kube, server)
        first = run_cycle(kube, FAST, holds=Holds())
        assert first.decision is not None and first.decision.placements["default/k-0"] == "n2"
        assert set(first.deferred) == {"default/g-0"} and first.repaired == {}
        assert "default/k-0" not in bound_pods(server)
    finally:
        kube.stop()


def test_a_new_leader_binds_a_recovered_gang_only_with_every_mate_s_volume_made(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """g-1 was made again (no nomination) before a leader change: the new leader holds
    g-0 alone, and bound once g-0's volume was made, the gang was short (refused by the
    validator as a solver's bug, its room released to another gang)."""
    _gang_with_claims(server, unbound("d0", "default"), unbound("d1", "default"))
    _settled(cluster, server)
    run_cycle(cluster, FAST, holds=Holds())
    assert cluster.writer.flush()
    g1 = server.get("", "pods", "default", "g-1") or {}
    server.delete("", "pods", "default", "g-1")
    kept = ("name", "namespace", "labels", "annotations")
    meta = {k: v for k, v in g1["metadata"].items() if k in kept}
    server.put({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": g1["spec"]})
    leader = KubeCluster(server.client(), writes_per_s=1000.0).start(10)
    try:
        holds = Holds()
        first = _made(leader, server, holds, "d0")
        assert first.bound == {} and first.rejected == {} and "default/g" in holds.held
        _made(leader, server, holds, "d1")
        assert set(bound_pods(server)) == {"default/g-0", "default/g-1"}
    finally:
        leader.stop()


def test_a_held_pod_whose_term_selects_a_newcomer_keeps_its_hold_and_node(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """a-0 waits for its volume on n1 and keeps pods labelled app=b off its node; b-0
    (app=b) may only go to n1. Refused as unmodelled, a-0 lost its hold and b-0 took n1."""
    (a0,) = gang_pods("a", 1, cpu="1")
    a0["metadata"]["labels"] = {"app": "a"}
    a0["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "d0"}}]
    a0["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    term = {"labelSelector": {"matchLabels": {"app": "b"}}, "topologyKey": "kubernetes.io/hostname"}
    a0["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    objects = [node("n1", "4"), node("n2", "4"), storage_class(), unbound("d0", "default")]
    apply(server, [*objects, podgroup("a", 1), a0])
    _settled(cluster, server)
    holds = Holds()
    run_cycle(cluster, FAST, holds=holds)
    (b0,) = gang_pods("b", 1, cpu="1")
    b0["metadata"]["labels"] = {"app": "b"}
    b0["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    apply(server, [podgroup("b", 1), b0])
    _settled(cluster, server)
    result = run_cycle(cluster, FAST, holds=holds)
    assert result.bound == {} and result.released == {} and "default/a" in holds.held
    _made(cluster, server, holds, "d0")
    assert bound_pods(server) == {"default/a-0": "n1"}
