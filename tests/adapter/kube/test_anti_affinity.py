"""A pending pod's required anti-affinity, read both ways as kube-scheduler's
InterPodAffinity filter checks it (``adapter.kube.anti_affinity``): a gang's workers
asking a node each are placed one per node; a term against bound pods keeps the pod off
their domains, whatever the topology key; a term against pending pods that gangsat cannot
check (over a zone, or not selecting its own pod) leaves its pod unscheduled, saying why."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.model import ClusterState
from solver.schedulers import schedule
from solver.validate import check
from tests.adapter.kube.manifests import apply, bindings, gang_pods
from tests.adapter.kube.manifests import node as kube_node
from tests.adapter.kube.manifests import podgroup as kube_podgroup
from tests.adapter.kube.test_convert import _job, node, pod
from tests.adapter.kube.test_kube_cluster import FAST, seen

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
GROUP = {"scheduling.k8s.io/group-name": "g"}


def term(key: str = HOSTNAME, **labels: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels or {"job": "g"}}, "topologyKey": key}


def anti(obj: dict[str, Any], *terms: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: list(terms)}}
    return changed


def workers(n: int, *terms: dict[str, Any], prefix: str = "w") -> list[dict[str, Any]]:
    return [
        anti(pod(f"{prefix}{i}", labels={"job": "g"}, annotations=GROUP), *terms) for i in range(n)
    ]


def nodes(n: int, zones: int = 0, cpu: str = "8") -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        labels = {HOSTNAME: f"n{i}"}
        if zones:
            labels[ZONE] = f"z{i % zones}"
        out.append(node(f"n{i}", cpu=cpu, metadata={"name": f"n{i}", "labels": labels}))
    return out


def group(min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sigs.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "team"},
        "spec": {"minMember": min_member},
    }


def placed(state: ClusterState, scheduler: str = "cpsat") -> dict[str, str]:
    decision = schedule(state, scheduler)
    assert check(state, decision) == []
    return decision.placements


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_gangs_workers_get_a_node_each_and_a_running_one_keeps_its_node(scheduler: str) -> None:
    # Six 1-cpu workers would fit on one 8-cpu node; each asks a node of its own.
    conversion = convert([*nodes(8), group(6), *workers(6, term())])
    assert conversion.findings == []
    where = placed(conversion.state, scheduler)
    assert len(where) == 6 and len(set(where.values())) == 6
    # Two of the gang already run on n0 and n1: the rest go elsewhere.
    running = [
        anti(pod(f"r{i}", labels={"job": "g"}, annotations=GROUP, node_name=f"n{i}"), term())
        for i in range(2)
    ]
    state = convert([*nodes(6), group(6), *running, *workers(4, term())]).state
    where = placed(state, scheduler)
    assert sorted(where.values()) == ["n2", "n3", "n4", "n5"]


def test_too_few_nodes_leave_the_gang_waiting_and_saying_why() -> None:
    state = convert([*nodes(3), group(4), *workers(4, term())]).state
    decision = schedule(state, "cpsat").explained()
    assert decision.placements == {}
    assert "more nodes than are in service" in decision.unschedulable["team/g"]
    # Four nodes, one taken by a running pod the term selects: in kube-scheduler's words.
    running = pod("r", labels={"job": "g"}, node_name="n0")
    state = convert([*nodes(4), group(4), running, *workers(4, term())]).state
    decision = schedule(state, "cpsat").explained()
    assert decision.placements == {}
    assert "didn't match pod anti-affinity rules" in decision.unschedulable["team/g"]


def test_a_pod_the_term_selects_but_that_has_none_is_kept_apart_too() -> None:
    # An MPI launcher labelled as its workers, without their term: kube-scheduler keeps
    # it off the workers' nodes (their terms select it).
    launcher = pod("launcher", labels={"job": "g"}, annotations=GROUP)
    state = convert([*nodes(3), group(3), launcher, *workers(2, term())]).state
    where = placed(state)
    assert len(where) == 3 and len(set(where.values())) == 3


def test_a_term_against_bound_pods_only_holds_on_any_topology_key() -> None:
    # One pending pod whose zone-wide term selects a bound pod in zone z0: it goes to z1.
    bound = pod("db", labels={"app": "db"}, node_name="n0")
    alone = anti(pod("p"), term(ZONE, app="db"))
    conversion = convert([*nodes(4, zones=2), bound, alone])
    assert conversion.findings == []
    where = placed(conversion.state)
    assert where["team/p"] in {"n1", "n3"}
    # Pinned into z0, it is told why in kube-scheduler's words.
    pinned = copy.deepcopy(alone)
    pinned["spec"]["nodeSelector"] = {ZONE: "z0"}
    decision = schedule(convert([*nodes(4, zones=2), bound, pinned]).state, "cpsat").explained()
    assert decision.placements == {}
    why = decision.unschedulable["pod:team/p"]
    assert "2 node(s) didn't match pod anti-affinity rules" in why, why


def anti_job(parallelism: int, **selected: str) -> dict[str, Any]:
    """Job ``team/j``, its pods labelled job=g, each keeping apart from those ``selected``."""
    job = _job({"parallelism": parallelism}, {})
    template = job["spec"]["template"]
    template["metadata"] = {"labels": {"job": "g"}}
    template["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [term(**selected)]}}
    return job


def test_a_job_s_pods_from_its_template_are_kept_apart() -> None:
    job = anti_job(3)
    state = convert([*nodes(4), job]).state
    assert len(state.pods) == 3 and all(p.apart for p in state.pods)
    where = placed(state)
    assert len(where) == 3 and len(set(where.values())) == 3


@pytest.mark.parametrize("case", ["zone-wide among pending pods", "hostnames shared by two nodes"])
def test_a_term_against_pending_pods_gangsat_cannot_check_leaves_its_pod_unscheduled(
    case: str,
) -> None:
    cluster = nodes(4, zones=2)
    if case == "zone-wide among pending pods":
        pending = workers(2, term(ZONE))
    else:
        cluster[1]["metadata"]["labels"][HOSTNAME] = "n0"
        pending = workers(2, term())
    conversion = convert([*cluster, *pending])
    refused = {f.name: f for f in conversion.findings}
    assert "team/w0" in refused and "whose domains span several nodes" in refused["team/w0"].message
    assert refused["team/w0"].reason == "InvalidSpec"
    assert "team/w0" not in {p.name for p in conversion.state.pods}


def test_a_term_that_does_not_select_its_own_pod_keeps_it_from_the_pods_it_selects() -> None:
    # w0 and w0b avoid job=g pods; w1 is one: w1 shares no node with either (and the two,
    # of one such term, are kept apart from each other too, as documented).
    avoiding = [anti(pod(n, labels={"job": "other"}), term()) for n in ("w0", "w0b")]
    conversion = convert([*nodes(3), *avoiding, pod("w1", labels={"job": "g"})])
    assert conversion.findings == []
    where = placed(conversion.state)
    assert len(where) == 3 and len(set(where.values())) == 3


def test_terms_that_select_nothing_pending_or_bound_change_nothing() -> None:
    lone = anti(pod("p", labels={"job": "g"}), term())
    state = convert([*nodes(2), lone]).state
    (p,) = state.pods
    assert p.apart == () and p.node_rules == ()


def test_a_gang_kept_apart_is_bound_one_pod_per_node_end_to_end(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    members = gang_pods("g", 4)
    for m in members:
        m["metadata"]["labels"] = {"job": "g"}
        m["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [term()]}}
    bound = bound_in_a_cycle(server, cluster, members, 5)
    assert len(bound) == 4
    assert max(Counter(bound.values()).values()) == 1, bound


def bound_in_a_cycle(
    server: FakeApiServer, cluster: KubeCluster, members: list[dict[str, Any]], hosts: int
) -> dict[str, str]:
    """Where one cycle binds ``members`` (of PodGroup ``g``) on ``hosts`` 8-cpu nodes."""
    apply(server, [*(kube_node(f"n{i}", "8", "32Gi") for i in range(hosts))])
    apply(server, [kube_podgroup("g", len(members)), *members])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    return {pod: where[0] for pod, where in bindings(server).items()}


def test_a_bound_pod_gangsat_cannot_read_still_keeps_pods_out_of_its_zone() -> None:
    # Its requests are unreadable: its node n0 takes no new pod, and its labels still
    # count for a pending pod's zone-wide term: n2, in its zone, is no place either.
    db = pod("db", labels={"app": "db"}, node_name="n0")
    db["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "not-a-quantity"
    alone = anti(pod("p"), term(ZONE, app="db"))
    assert placed(convert([*nodes(4, zones=2), db, alone]).state)["team/p"] in {"n1", "n3"}
    alone["spec"]["nodeSelector"] = {ZONE: "z0"}
    assert placed(convert([*nodes(4, zones=2), db, alone]).state) == {}
    # ... and its own term keeps the pods it selects out of its zone, as a read one's does.
    guard = anti(pod("guard", node_name="n0"), term(ZONE, app="x"))
    guard["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "not-a-quantity"
    selected = pod("q", labels={"app": "x"})
    selected["spec"]["nodeSelector"] = {ZONE: "z0"}
    assert placed(convert([*nodes(4, zones=2), guard, selected]).state) == {}


def test_a_job_s_term_on_its_controller_uid_keeps_its_pods_apart() -> None:
    job = anti_job(2, **{"batch.kubernetes.io/controller-uid": "u-1"})
    job["metadata"]["uid"] = "u-1"
    state = convert([*nodes(3), job]).state
    assert all(p.apart for p in state.pods)
    where = placed(state)
    assert len(where) == 2 and len(set(where.values())) == 2
