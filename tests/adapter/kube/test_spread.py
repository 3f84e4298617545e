"""A pending pod's DoNotSchedule topology spread over nodes (``adapter.kube.spread``): a
gang's workers spread at most maxSkew a node, as kube-scheduler's PodTopologySpread
filter would let each of them in turn; nodes already running more of the pods it counts
than the fewest, and nodes without the key, ruled out (over zones: test_zone_spread.py).
A property test replays the filter over every decision on random clusters."""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from adapter.kube.budgets import selects
from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.fields import LEAVING
from benchmarks.fake_apiserver import FakeApiServer
from solver.model import ClusterState
from solver.schedulers import schedule
from solver.validate import check
from tests.adapter.kube.manifests import gang_pods
from tests.adapter.kube.test_anti_affinity import HOSTNAME, bound_in_a_cycle, group, nodes
from tests.adapter.kube.test_convert import node, pod

GROUP = {"scheduling.k8s.io/group-name": "g"}
SPREAD = "node(s) didn't match pod topology spread constraints"


def constraint(
    skew: int = 1, key: str = HOSTNAME, when: str = "DoNotSchedule", **more: Any
) -> dict[str, Any]:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"job": "g"}},
        **more,
    }


def spread(obj: dict[str, Any], *constraints: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["topologySpreadConstraints"] = list(constraints)
    return changed


def workers(
    n: int, *constraints: dict[str, Any], prefix: str = "w", cpu: str = "1"
) -> list[dict[str, Any]]:
    return [
        spread(pod(f"{prefix}{i}", cpu=cpu, labels={"job": "g"}, annotations=GROUP), *constraints)
        for i in range(n)
    ]


def placed(state: ClusterState, scheduler: str = "cpsat") -> dict[str, str]:
    decision = schedule(state, scheduler)
    assert check(state, decision) == []
    return decision.placements


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
@pytest.mark.parametrize(("skew", "hosts"), [(1, 6), (2, 3), (3, 2)])
def test_a_gangs_workers_spread_at_most_max_skew_a_node(
    scheduler: str, skew: int, hosts: int
) -> None:
    # Six 1-cpu workers would fit on one 8-cpu node; maxSkew lets each node take so many.
    conversion = convert([*nodes(8), group(6), *workers(6, constraint(skew))])
    assert conversion.findings == []
    where = placed(conversion.state, scheduler)
    assert len(where) == 6
    assert max(Counter(where.values()).values()) <= skew
    # With fewer nodes than the spread needs, the gang waits in kube-scheduler's words.
    state = convert([*nodes(hosts - 1), group(6), *workers(6, constraint(skew))]).state
    decision = schedule(state, scheduler).explained()
    assert decision.placements == {}
    assert "more nodes than are in service" in decision.unschedulable["team/g"]


def test_a_node_running_more_than_the_fewest_is_ruled_out() -> None:
    # n0 runs a pod the spread counts, n1..n3 none: the fewest is 0, and n0 (1 > 0) is
    # no place for a worker at maxSkew 1.
    running = pod("r", labels={"job": "g"}, node_name="n0")
    state = convert([*nodes(4), running, group(3), *workers(3, constraint())]).state
    assert sorted(placed(state).values()) == ["n1", "n2", "n3"]
    state = convert([*nodes(3), running, group(3), *workers(3, constraint())]).state
    decision = schedule(state, "cpsat").explained()
    assert decision.placements == {}
    assert f"3 {SPREAD}" in decision.unschedulable["team/g"], decision.unschedulable
    # Being deleted or finished, it is no longer counted.
    for gone in ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, {"status": {}}):
        leaving = copy.deepcopy(running)
        leaving["metadata"].update(gone.get("metadata", {}))
        if "status" in gone:
            leaving["status"] = {"phase": "Succeeded"}
        state = convert([*nodes(3), leaving, group(3), *workers(3, constraint())]).state
        assert len(placed(state)) == 3


def test_the_fewest_above_zero_lets_each_node_take_max_skew_more() -> None:
    # Every node runs one counted pod: the fewest is 1, so each takes one more (and n2,
    # with two, none); the pod does not preempt, whose victims could lower the fewest.
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 1, 2, 2)]
    state = convert([*nodes(3), *running, group(2), *workers(2, constraint())]).state
    assert sorted(placed(state).values()) == ["n0", "n1"]
    assert all(not p.may_preempt for p in state.pods if p.node_name is None)
    # minDomains reads the fewest as 0 while too few domains exist: taken as 0 here.
    anchored = convert([*nodes(3), *running, group(2), *workers(2, constraint(minDomains=2))])
    decision = schedule(anchored.state, "cpsat").explained()
    assert decision.placements == {}


def test_a_node_without_the_key_is_ruled_out_as_the_filter_rules_it_out() -> None:
    unlabelled = node("bare", cpu="8", metadata={"name": "bare", "labels": {}})
    state = convert([*nodes(1), unlabelled, group(2), *workers(2, constraint())]).state
    decision = schedule(state, "cpsat").explained()
    assert decision.placements == {}
    assert f"1 {SPREAD} (missing required label)" in decision.unschedulable["team/g"]


def test_match_label_keys_keeps_each_job_in_its_own_count() -> None:
    # Two jobs' pods share the label app=x; matchLabelKeys on the job's name counts each
    # job apart: 3 nodes take both, one of each a node.
    by_job = {
        "maxSkew": 1,
        "topologyKey": HOSTNAME,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "x"}},
        "matchLabelKeys": ["job-name"],
    }
    jobs = []
    for job in ("a", "b"):
        for i in range(3):
            labels = {"app": "x", "job-name": job}
            mine = {"scheduling.k8s.io/group-name": job}
            jobs.append(spread(pod(f"{job}{i}", labels=labels, annotations=mine), by_job))
    groups = []
    for job in ("a", "b"):
        g = group(3)
        g["metadata"]["name"] = job
        groups.append(g)
    state = convert([*nodes(3), *groups, *jobs]).state
    where = placed(state)
    assert len(where) == 6
    assert all(n == 2 for n in Counter(where.values()).values())
    # Without it, the six pods are counted together: at most one a node, one job waits.
    shared = [spread(j, {k: v for k, v in by_job.items() if k != "matchLabelKeys"}) for j in jobs]
    where = placed(convert([*nodes(3), *groups, *shared]).state)
    assert len(where) == 3 and len(set(where.values())) == 3


def test_a_key_the_api_server_merged_already_is_not_merged_again() -> None:
    # Stored since 1.34 with job In [a] merged, the pod relabelled job=b since: it still
    # counts job a's pods (merged again, it counted none and went onto n0).
    running = pod("r", labels={"job": "a"}, node_name="n0")
    merged = constraint(
        labelSelector={
            "matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "job", "operator": "In", "values": ["a"]}],
        },
        matchLabelKeys=["job"],
    )
    running["metadata"]["labels"]["app"] = "x"
    relabelled = spread(pod("w0", labels={"app": "x", "job": "b"}, annotations=GROUP), merged)
    state = convert([*nodes(2), running, group(1), relabelled]).state
    assert placed(state) == {"team/w0": "n1"}


def test_schedule_anyway_is_ignored() -> None:
    anyway = workers(4, constraint(when="ScheduleAnyway"))
    conversion = convert([*nodes(1), group(4), *anyway])
    assert conversion.findings == [] and len(placed(conversion.state)) == 4


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"maxSkew": 0}, "maxSkew"),
        ({"maxSkew": "1"}, "maxSkew"),
        ({"maxSkew": None}, "maxSkew"),
        ({"maxSkew": True}, "maxSkew"),
        ({"topologyKey": None}, "topologyKey"),
        ({"labelSelector": ["job"]}, "labelSelector"),
        ({"labelSelector": {"matchLabels": ["job"]}}, "matchLabels"),
        ({"labelSelector": {"matchExpressions": {"key": "job"}}}, "matchExpressions"),
        ({"labelSelector": {"matchExpressions": [{"key": "job", "operator": "In"}]}}, "In"),
        ({"labelSelector": {"matchExpressions": [{"key": "j", "operator": "Is"}]}}, "Is"),
        ({"matchLabelKeys": "job"}, "matchLabelKeys"),
        ({"matchLabelKeys": [1]}, "matchLabelKeys"),
        ({"labelSelector": None, "matchLabelKeys": ["job"]}, "without a labelSelector"),
        ({"minDomains": 0}, "minDomains"),
        ({"minDomains": "2"}, "minDomains"),
    ],
)
def test_a_constraint_the_api_server_would_refuse_is_refused(
    change: dict[str, Any], said: str
) -> None:
    # Read as selecting nothing, it would count fewer pods than kube-scheduler does.
    conversion = convert([*nodes(2), group(1), *workers(1, {**constraint(), **change})])
    assert conversion.state.pods == ()
    (finding,) = conversion.findings
    assert said in finding.message and finding.gang == "team/g", finding.message


@pytest.mark.parametrize("field", [{"maxSkew": 1}, "spread", [["spread"]]])
def test_a_constraints_field_of_another_shape_is_refused(field: Any) -> None:
    # Skipped, a gang of such pods went onto one node.
    shaped = []
    for w in workers(2):
        w["spec"]["topologySpreadConstraints"] = field
        shaped.append(w)
    conversion = convert([*nodes(2), group(2), *shaped])
    assert conversion.state.pods == ()
    assert all("topologySpreadConstraint" in f.message for f in conversion.findings)


def test_the_fewest_is_over_the_nodes_the_pods_node_selector_lets_it_onto() -> None:
    # n0 and n1 (pool gpu) run one counted pod each, n2 (another pool) none: over the
    # eligible nodes the fewest is 1, so a worker held to the gpu pool goes on n0 or n1.
    labelled = [
        node(f"n{i}", cpu="8", metadata={"name": f"n{i}", "labels": {HOSTNAME: f"n{i}", "pool": p}})
        for i, p in enumerate(("gpu", "gpu", "cpu"))
    ]
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in range(2)]
    pinned = []
    for w in workers(2, constraint()):
        w["spec"]["nodeSelector"] = {"pool": "gpu"}
        pinned.append(w)
    where = placed(convert([*labelled, *running, group(2), *pinned]).state)
    assert sorted(where.values()) == ["n0", "n1"]
    # With nodeAffinityPolicy Ignore, n2 counts: the fewest is 0, and the pool is full.
    ignoring = [spread(w, constraint(nodeAffinityPolicy="Ignore")) for w in pinned]
    assert placed(convert([*labelled, *running, group(2), *ignoring]).state) == {}
    # A node gangsat cannot read (no labels known) may be one with none: the fewest is 0.
    unread = node("x", cpu="lots", metadata={"name": "x", "labels": {HOSTNAME: "x"}})
    assert placed(convert([*labelled, unread, *running, group(2), *pinned]).state) == {}


def test_a_pod_gangsat_deletes_counts_only_where_it_makes_the_spread_stricter() -> None:
    # n0 runs a counted pod whose delete gangsat sent, unanswered: it may stay, so n0 is
    # ruled out; it may go, so the fewest over n0 and n1 (one each otherwise) is 0.
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 1)]
    running[0][LEAVING] = True
    state = convert([*nodes(3), *running, group(1), *workers(1, constraint())]).state
    assert set(placed(state).values()) == {"n2"}
    state = convert([*nodes(2), *running, group(1), *workers(1, constraint())]).state
    assert placed(state) == {}


def test_a_selector_that_selects_nothing_counts_nothing() -> None:
    # Bound pods on every node; an empty selector counts none of them (kube-scheduler's
    # count is 0 for it), nor the gang's own: four workers on one node.
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in range(2)]
    for selector in ({}, None):
        empty = workers(4, constraint(labelSelector=selector))
        where = placed(convert([*nodes(2), *running, group(4), *empty]).state)
        assert len(where) == 4
        assert all(not p.apart for p in convert([*nodes(2), group(4), *empty]).state.pods)


def test_a_per_pod_match_label_key_keeps_no_group_and_every_pod_is_placed() -> None:
    # matchLabelKeys on a label each pod has its own value of (a completion index): each
    # counts only itself, limiting nothing; 100 such pods took 100 of the 32 groups.
    indexed = []
    for i, w in enumerate(workers(100, constraint(matchLabelKeys=["index"]))):
        w["metadata"]["labels"]["index"] = str(i)
        indexed.append(w)
    state = convert([*nodes(4, cpu="32"), group(100), *indexed]).state
    assert all(not p.apart for p in state.pods)
    assert len(placed(state)) == 100


def test_a_max_skew_past_any_gang_limits_nothing_and_crashes_nothing() -> None:
    state = convert([*nodes(2), group(4), *workers(4, constraint(2**63))]).state
    assert len(placed(state)) == 4 and len(placed(state, "gang-greedy")) == 4


def _filter_passes(
    pending: Mapping[str, Any], node_name: str, running: list[tuple[Any, str]], hosts: set[str]
) -> bool:
    """kube-scheduler's PodTopologySpread filter for a pod object on a node, against the
    pods ``running`` (object, node), every node with the hostname an eligible domain."""
    labels = pending["metadata"]["labels"]
    for c in pending["spec"].get("topologySpreadConstraints", []):
        selector = copy.deepcopy(c["labelSelector"])
        for k in c.get("matchLabelKeys", []):
            if k in labels:
                selector.setdefault("matchExpressions", []).append(
                    {"key": k, "operator": "In", "values": [labels[k]]}
                )
        counts = Counter(n for o, n in running if selects(selector, o["metadata"]["labels"]))
        fewest = min(counts.get(h, 0) for h in hosts)
        if counts[node_name] + int(selects(selector, labels)) - fewest > c["maxSkew"]:
            return False
    return True


def running_pods(rng: random.Random, hosts: int, count: int) -> list[tuple[Any, str]]:
    """``count`` bound pods of job g or h, each on a node of ``hosts`` drawn: (object, node)."""
    out = []
    for i in range(count):
        at = f"n{rng.randrange(hosts)}"
        out.append((pod(f"r{i}", labels={"job": rng.choice("gh")}, node_name=at), at))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_every_pod_placed_passes_the_filter_in_the_order_bound(seed: int) -> None:
    rng = random.Random(seed)
    hosts = rng.randint(3, 7)
    objects: list[dict[str, Any]] = [*nodes(hosts, cpu=str(rng.choice([2, 4, 8])))]
    running = running_pods(rng, hosts, rng.randint(0, hosts))
    objects += [o for o, _ in running]
    pending: dict[str, dict[str, Any]] = {}
    for job in ("g", "h", "k"):
        size = rng.randint(1, 6)
        members = {"scheduling.k8s.io/group-name": job}
        g = group(rng.randint(1, size))
        g["metadata"]["name"] = job
        objects.append(g)
        skew = rng.randint(1, 3)
        # Job k counts g's pods and its own: a selector over two jobs.
        selector = {"matchExpressions": [{"key": "job", "operator": "In", "values": ["g", job]}]}
        for i in range(size):
            o = pod(f"{job}{i}", labels={"job": job}, annotations=members)
            if rng.random() < 0.8:
                o = spread(o, constraint(skew, labelSelector=selector))
            objects.append(o)
            pending[f"team/{job}{i}"] = o
    state = convert(objects).state
    for scheduler in ("cpsat", "gang-greedy"):
        done = list(running)
        for name, at in sorted(placed(state, scheduler).items()):
            assert _filter_passes(pending[name], at, done, {f"n{i}" for i in range(hosts)}), (
                scheduler,
                name,
                at,
            )
            done.append((pending[name], at))


def test_a_spread_gang_is_bound_within_max_skew_end_to_end(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    members = gang_pods("g", 6)
    for m in members:
        m["metadata"]["labels"] = {"job": "g"}
        m["spec"]["topologySpreadConstraints"] = [constraint(2)]
    bound = bound_in_a_cycle(server, cluster, members, 4)
    assert len(bound) == 6
    assert max(Counter(bound.values()).values()) <= 2, bound
