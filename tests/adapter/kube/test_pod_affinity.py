"""A pending pod's required pod affinity, read as kube-scheduler's InterPodAffinity
filter checks it (``adapter.kube.pod_affinity``): a gang's workers asking for one zone
are placed in one zone, the one they fit in; a term selecting bound pods holds the pod to
their domains; a term selecting no pod leaves it waiting with kube-scheduler's reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from solver.predicates import POD_AFFINITY_MISMATCH
from solver.schedulers import schedule
from solver.validate import check
from tests.adapter.kube.manifests import apply, bindings, gang_pods
from tests.adapter.kube.manifests import node as kube_node
from tests.adapter.kube.manifests import podgroup as kube_podgroup
from tests.adapter.kube.test_anti_affinity import GROUP, HOSTNAME, REQUIRED, ZONE, group, placed
from tests.adapter.kube.test_convert import node, pod
from tests.adapter.kube.test_kube_cluster import FAST, seen
from tests.builders import queue


def term(key: str = ZONE, **labels: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels or {"job": "g"}}, "topologyKey": key}


def near(obj: dict[str, Any], *terms: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["affinity"] = {"podAffinity": {REQUIRED: list(terms)}}
    return changed


def workers(n: int, *terms: dict[str, Any], cpu: str = "1") -> list[dict[str, Any]]:
    return [
        near(pod(f"w{i}", cpu=cpu, labels={"job": "g"}, annotations=GROUP), *terms)
        for i in range(n)
    ]


def zones(**cpus: list[str]) -> list[dict[str, Any]]:
    """Nodes per zone, of the cpus listed, named <zone><i>, labelled as kubelets do."""
    return [
        node(
            f"{zone}{i}",
            cpu=cpu,
            metadata={
                "name": f"{zone}{i}",
                "labels": {ZONE: zone, "kubernetes.io/hostname": f"{zone}{i}"},
            },
        )
        for zone, node_cpus in cpus.items()
        for i, cpu in enumerate(node_cpus)
    ]


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_gang_asking_for_one_zone_goes_whole_to_the_zone_it_fits(scheduler: str) -> None:
    # 6 workers of 1 cpu: zone a has 4 cpus, zone b 8 over two nodes.
    conversion = convert([*zones(a=["2", "2"], b=["4", "4"]), group(6), *workers(6, term())])
    assert conversion.findings == []
    assert all(p.together for p in conversion.state.pods)
    where = placed(conversion.state, scheduler)
    assert len(where) == 6
    assert {n[0] for n in where.values()} == {"b"}


def test_a_term_selecting_bound_pods_holds_the_pod_to_their_zones() -> None:
    # A cache runs in zone b: a pod asking to run beside it goes to b, though a is roomier.
    cache = pod("cache", labels={"app": "cache"}, node_name="b0")
    beside = near(pod("p"), term(app="cache"))
    state = convert([*zones(a=["8"], b=["2"]), cache, beside]).state
    (p,) = [p for p in state.pods if p.node_name is None]
    assert p.together == () and [r.reason for r in p.node_rules] == [POD_AFFINITY_MISMATCH]
    assert placed(state) == {"team/p": "b0"}


def test_a_term_selecting_no_pod_leaves_its_pod_waiting_with_kube_schedulers_reason() -> None:
    lonely = near(pod("p"), term(app="nothing-runs"))
    state = convert([*zones(a=["8"]), lonely]).state
    decision = schedule(state, "cpsat").explained()
    assert decision.placements == {}
    assert POD_AFFINITY_MISMATCH in decision.unschedulable["pod:team/p"]


def test_a_launcher_the_workers_term_selects_goes_with_them() -> None:
    # The launcher carries the job label but no term; kept with the workers all the same,
    # bound with them rather than first.
    launcher = pod("launcher", labels={"job": "g"}, annotations=GROUP)
    state = convert([*zones(a=["2"], b=["4"]), group(4), launcher, *workers(3, term())]).state
    assert all(p.together for p in state.pods)
    assert {n[0] for n in placed(state).values()} == {"b"}


def test_a_running_worker_keeps_its_mates_in_its_zone() -> None:
    running = near(pod("w0", labels={"job": "g"}, annotations=GROUP, node_name="a0"), term())
    rest = workers(3, term())[1:]
    state = convert([*zones(a=["4"], b=["8"]), group(3), running, *rest]).state
    assert {n for n in placed(state).values()} == {"a0"}


def test_pod_affinity_is_no_unmodelled_rule_any_more() -> None:
    conversion = convert([*zones(a=["4"]), group(2), *workers(2, term())])
    assert conversion.findings == []
    assert len(conversion.state.pods) == 2


def test_a_gang_kept_in_one_zone_is_bound_there_end_to_end(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    # Zones a and b: a 4-cpu node each, running a pod of 1 cpu; zone c: two empty 4-cpu
    # nodes. 6 pods of 1 cpu fit whole in c only; packing alone would fill a and b first.
    members = gang_pods("g", 6)
    for m in members:
        m["metadata"]["labels"] = {"job": "g"}
        m["spec"]["affinity"] = {"podAffinity": {REQUIRED: [term()]}}
    zone_of = {"a0": "a", "b0": "b", "c0": "c", "c1": "c"}
    cluster_nodes = []
    for name, zone in zone_of.items():
        n = kube_node(name, "4", "32Gi")
        n["metadata"]["labels"][ZONE] = zone
        cluster_nodes.append(n)
    running = [gang_pods(f"run-{z}", 1)[0] for z in "ab"]
    for r, where in zip(running, ("a0", "b0"), strict=True):
        r["spec"]["nodeName"] = where
        r["status"] = {"phase": "Running"}
    apply(server, [*cluster_nodes, *running, kube_podgroup("g", 6)])
    apply(server, members)
    seen(cluster, server)
    run_cycle(cluster, FAST)
    bound = {pod: where[0] for pod, where in bindings(server).items()}
    assert len(bound) == 6
    assert {zone_of[n] for n in bound.values()} == {"c"}, bound


@pytest.mark.parametrize("case", ["gated", "too big", "of another gang"])
def test_a_pod_whose_term_selects_only_pods_that_may_not_come_waits(case: str) -> None:
    # web asks to run beside app=db and is no db pod itself; the only db pod is pending:
    # kube-scheduler refuses web until one runs, which may be never (gated, too big).
    web = near(pod("web"), term(app="db"))
    db = pod("db", cpu="100" if case == "too big" else "1", labels={"app": "db"})
    if case == "gated":
        db["spec"]["schedulingGates"] = [{"name": "wait"}]
    state = convert([*zones(a=["8"], b=["8"]), web, db]).state
    assert "team/web" not in schedule(state, "cpsat").placements


def test_a_namespace_selector_on_pod_affinity_is_refused_saying_why() -> None:
    # Read as every namespace, a cache in a namespace the selector leaves out would count.
    cache = pod("cache", namespace="scratch", labels={"app": "cache"}, node_name="b0")
    narrowed = term(app="cache")
    narrowed["namespaceSelector"] = {"matchLabels": {"env": "prod"}}
    conversion = convert([*zones(a=["8"], b=["8"]), cache, near(pod("p"), narrowed)])
    assert [p.name for p in conversion.state.pods if p.node_name is None] == []
    (finding,) = conversion.findings
    assert "namespaceSelector" in finding.message
    # An empty one selects every namespace, as kube-scheduler reads it: exact.
    every = term(app="cache")
    every["namespaceSelector"] = {}
    state = convert([*zones(a=["8"], b=["8"]), cache, near(pod("p"), every)]).state
    assert placed(state) == {"team/p": "b0"}


def test_a_term_met_by_bound_pods_and_one_met_by_none_waits_as_kube_scheduler_does() -> None:
    # Its second term (hostname) selects only itself, and its first term has matches:
    # kube-scheduler's first-pod exception does not apply.
    cache = pod("cache", labels={"app": "cache"}, node_name="b0")
    web = near(pod("web", labels={"app": "web"}), term(app="cache"), term(HOSTNAME, app="web"))
    state = convert([*zones(a=["8"], b=["8"]), cache, web]).state
    assert "team/web" not in schedule(state, "cpsat").placements


def test_a_pod_held_beside_running_pods_does_not_evict_them_to_get_there() -> None:
    # p (priority 1000) asks for the zone of a running cache that fills it: evicting the
    # cache would leave p nowhere to go. It waits instead.
    cache = pod("cache", cpu="8", labels={"app": "cache"}, node_name="b0", phase="Running")
    cache["spec"]["priority"] = 0
    p = near(pod("p", cpu="8"), term(app="cache"))
    p["spec"]["priority"] = 1000
    conversion = convert([*zones(a=["8"], b=["8"]), cache, p])
    (pending,) = [q for q in conversion.state.pods if q.node_name is None]
    assert pending.may_preempt is False
    state = conversion.state.model_copy(update={"queues": (queue().build(),), "now_s": 600.0})
    decision = schedule(state, "cpsat", SolverConfig(preemption=True, time_limit_s=3.0))
    assert decision.evictions == {} and decision.placements == {}


POOL = "cloud.google.com/gke-nodepool"
JOB_KEY = "jobset.sigs.k8s.io/job-key"


def jobset_pods(job: str, n: int, cpu: str = "1") -> list[dict[str, Any]]:
    """Pods of one job of a JobSet with exclusive placement on node pools, as its webhook
    writes them: with the job's own pods, in a pool no other job's pod runs in."""
    together = {
        "labelSelector": {
            "matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": [job]}]
        },
        "topologyKey": POOL,
        "namespaceSelector": {},
    }
    apart = {
        "labelSelector": {
            "matchExpressions": [
                {"key": JOB_KEY, "operator": "Exists"},
                {"key": JOB_KEY, "operator": "NotIn", "values": [job]},
            ]
        },
        "topologyKey": POOL,
        "namespaceSelector": {},
    }
    out = []
    for i in range(n):
        obj = pod(f"{job}-{i}", cpu=cpu, labels={JOB_KEY: job}, annotations={**GROUP})
        obj["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = job
        obj["spec"]["affinity"] = {
            "podAffinity": {REQUIRED: [together]},
            "podAntiAffinity": {REQUIRED: [apart]},
        }
        out.append(obj)
    return out


def pools(**cpus: list[str]) -> list[dict[str, Any]]:
    return [
        node(
            f"{p}{i}",
            cpu=cpu,
            metadata={"name": f"{p}{i}", "labels": {POOL: p, "kubernetes.io/hostname": f"{p}{i}"}},
        )
        for p, node_cpus in cpus.items()
        for i, cpu in enumerate(node_cpus)
    ]


def podgroup_of(name: str, n: int) -> dict[str, Any]:
    return {**group(n), "metadata": {"name": name, "namespace": "team"}}


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
@pytest.mark.parametrize("sizes", [(["4"], ["8"]), (["2", "2"], ["4", "4"])], ids=["1", "2"])
def test_jobset_exclusive_placement_runs_a_job_per_node_pool(
    scheduler: str, sizes: tuple[list[str], list[str]]
) -> None:
    # Both jobs would fit pool p2 together; each takes a pool of its own (of a node each,
    # or of two: per-node and zone-wide terms alike).
    objects = [
        *pools(p1=sizes[0], p2=sizes[1]),
        podgroup_of("j1", 3),
        podgroup_of("j2", 3),
        *jobset_pods("j1", 3),
        *jobset_pods("j2", 3),
    ]
    conversion = convert(objects)
    assert conversion.findings == []
    where = placed(conversion.state, scheduler)
    assert len(where) == 6
    pools_of = {j: {n[:2] for p, n in where.items() if f"/{j}-" in p} for j in ("j1", "j2")}
    assert all(len(v) == 1 for v in pools_of.values()) and pools_of["j1"] != pools_of["j2"]


def test_a_third_exclusive_job_waits_and_one_running_keeps_its_pool_to_itself() -> None:
    running = jobset_pods("j0", 1)
    running[0]["spec"]["nodeName"] = "p10"
    objects = [
        *pools(p1=["8"], p2=["8"]),
        podgroup_of("j0", 1),
        podgroup_of("j1", 2),
        podgroup_of("j2", 2),
        *running,
        *jobset_pods("j1", 2),
        *jobset_pods("j2", 2),
    ]
    state = convert(objects).state
    decision = schedule(state, "cpsat")
    assert check(state, decision) == []
    # p1 is j0's: one of j1 and j2 gets p2, the other waits.
    assert {n for n in decision.placements.values()} == {"p20"}
    assert len(decision.placements) == 2


def test_a_zone_wide_anti_affinity_between_jobs_not_kept_together_is_refused() -> None:
    # Without the podAffinity keeping each job in one pool, the term is not checked.
    pods = jobset_pods("j1", 2) + jobset_pods("j2", 2)
    for p in pods:
        del p["spec"]["affinity"]["podAffinity"]
    conversion = convert([*pools(p1=["8", "8"], p2=["8", "8"]), *pods])
    assert {p.name for p in conversion.state.pods} == set()
    assert all("podAntiAffinity against pending pods" in f.message for f in conversion.findings)


def test_exclusive_jobs_are_bound_a_pool_each_end_to_end(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    members = []
    for job in ("j1", "j2"):
        for obj in gang_pods(job, 3):
            obj["metadata"]["labels"] = {JOB_KEY: job}
            spec = jobset_pods(job, 1)[0]["spec"]
            obj["spec"]["affinity"] = spec["affinity"]
            members.append(obj)
    cluster_nodes = []
    for name, (pool, cpu) in {"a0": ("p1", "4"), "b0": ("p2", "8")}.items():
        n = kube_node(name, cpu, "32Gi")
        n["metadata"]["labels"][POOL] = pool
        cluster_nodes.append(n)
    apply(server, [*cluster_nodes, kube_podgroup("j1", 3), kube_podgroup("j2", 3)])
    apply(server, members)
    seen(cluster, server)
    run_cycle(cluster, FAST)
    bound = {pod: where[0] for pod, where in bindings(server).items()}
    assert len(bound) == 6
    nodes_of = [{n for p, n in bound.items() if f"/{j}-" in p} for j in ("j1", "j2")]
    assert all(len(v) == 1 for v in nodes_of) and nodes_of[0] != nodes_of[1], bound


@pytest.mark.parametrize("first", ["made again", "other job"])
def test_a_running_exclusive_job_s_pod_made_again_goes_back_to_its_pool(first: str) -> None:
    # j0 runs in p1 and its second pod is made again (a lost node); j1 waits. Whatever the
    # order the pods come in, j0-1 rejoins p1 and j1 takes p2.
    j0 = jobset_pods("j0", 2)
    j0[0]["spec"]["nodeName"] = "p10"
    j0[0]["status"] = {"phase": "Running"}
    j1 = jobset_pods("j1", 2)
    pending = [j0[1], *j1] if first == "made again" else [*j1, j0[1]]
    objects = [*pools(p1=["8"], p2=["8"]), podgroup_of("j0", 1), podgroup_of("j1", 2), j0[0]]
    conversion = convert([*objects, *pending])
    assert conversion.findings == []
    assert placed(conversion.state) == {"team/j0-1": "p10", "team/j1-0": "p20", "team/j1-1": "p20"}


def test_an_exclusive_job_too_big_for_every_pool_takes_none_from_the_others() -> None:
    # a (older) fits no pool; b fits only p1, which a's choice must not hold from it.
    a, b = jobset_pods("a", 10), jobset_pods("b", 6)
    for obj in a:
        obj["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    for obj in b:
        obj["metadata"]["creationTimestamp"] = "2024-01-01T00:05:00Z"
    objects = [*pools(p1=["8"], p2=["4"]), podgroup_of("a", 10), podgroup_of("b", 6), *a, *b]
    where = placed(convert(objects).state)
    assert set(where.values()) == {"p10"} and len(where) == 6


def test_a_per_node_term_against_pods_not_kept_together_keeps_them_a_node_apart() -> None:
    # x runs beside a cache (hostname affinity) and off every node of the web pods, which
    # ask for nothing: kept apart from them per node, as before exclusive placement.
    cache = pod("cache", labels={"app": "cache"}, node_name="n0")
    avoid = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
    x = near(pod("x"), term(HOSTNAME, app="cache"))
    x["spec"]["affinity"]["podAntiAffinity"] = {REQUIRED: [avoid]}
    webs = [pod(f"web{i}", labels={"app": "web"}) for i in range(2)]
    hosts = [
        node(f"n{i}", cpu="8", metadata={"name": f"n{i}", "labels": {HOSTNAME: f"n{i}"}})
        for i in range(3)
    ]
    conversion = convert([*hosts, cache, x, *webs])
    assert conversion.findings == []
    where = placed(conversion.state)
    assert where["team/x"] == "n0" and "n0" not in {where[f"team/web{i}"] for i in range(2)}
