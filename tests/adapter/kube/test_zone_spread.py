"""A pending gang's DoNotSchedule topology spread over zones, read by the kube adapter
(``adapter.kube.spread``) and shared out by the solver (``solver.zone_spread``): what
the filter counts per zone (its selector, the pod's node affinity unless Ignore,
minDomains), which gangs are shared out and which wait, and a property test replaying
kube-scheduler's PodTopologySpread filter over every decision on random clusters."""

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
from adapter.loop import run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.apart import TURN_S
from solver.model import ClusterState
from solver.schedulers import schedule
from solver.scheduling_terms import DomainSpread
from solver.validate import check
from tests.adapter.kube.manifests import apply, bindings, gang_pods
from tests.adapter.kube.manifests import node as kube_node
from tests.adapter.kube.manifests import podgroup as kube_podgroup
from tests.adapter.kube.test_anti_affinity import ZONE, group, nodes
from tests.adapter.kube.test_convert import node, pod
from tests.adapter.kube.test_kube_cluster import FAST, seen
from tests.adapter.kube.test_spread import constraint, placed, running_pods, spread, workers

SPREAD = "node(s) didn't match pod topology spread constraints"


def zone_of(name: str, zones: int = 3) -> str:
    return f"z{int(name.removeprefix('n')) % zones}"


def per_zone(where: Mapping[str, str], zones: int = 3) -> Counter[str]:
    return Counter(zone_of(n, zones) for n in where.values())


def read(state: ClusterState) -> set[DomainSpread]:
    return {s for p in state.pods if p.node_name is None for s in p.spreads}


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_gang_spreads_evenly_over_the_zones(scheduler: str) -> None:
    conversion = convert([*nodes(6, zones=3), group(6), *workers(6, constraint(key=ZONE))])
    assert conversion.findings == []
    [zone] = read(conversion.state)
    assert zone.counted == (("z0", 0), ("z1", 0), ("z2", 0)) and zone.max_skew == 1
    assert per_zone(placed(conversion.state, scheduler)) == {"z0": 2, "z1": 2, "z2": 2}


def test_the_pods_counted_per_zone_steer_the_gang() -> None:
    # z0 runs two pods the spread counts (one finished, not counted; one of another job).
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 3)]
    done = pod("done", labels={"job": "g"}, node_name="n1")
    done["status"] = {"phase": "Succeeded"}
    other = pod("other", labels={"job": "x"}, node_name="n2")
    objects = [*nodes(6, zones=3), *running, done, other, group(4)]
    state = convert([*objects, *workers(4, constraint(key=ZONE))]).state
    assert read(state).pop().counted == (("z0", 2), ("z1", 0), ("z2", 0))
    assert per_zone(placed(state)) == {"z1": 2, "z2": 2}
    # A fewest above 0 lets the gang in, and it does not preempt (victims could lower it).
    more = [pod(f"m{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (1, 2)]
    state = convert([*objects, *more, *workers(3, constraint(key=ZONE))]).state
    assert all(not p.may_preempt for p in state.pods if p.node_name is None)


def test_only_the_zones_the_pods_may_go_to_count_unless_the_policy_ignores_them() -> None:
    # z2 runs nothing, but the workers' affinity keeps them out of it: the fewest is 1.
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 1)]
    away = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z0", "z1"]}]}
    pinned = []
    for w in workers(2, constraint(key=ZONE)):
        w["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [away]}
            }
        }
        pinned.append(w)
    state = convert([*nodes(6, zones=3), *running, group(2), *pinned]).state
    assert read(state).pop().counted == (("z0", 1), ("z1", 1))
    assert per_zone(placed(state)) == {"z0": 1, "z1": 1}
    # Ignored, z2 counts: the fewest is 0, and z0 and z1 (at 1) take none.
    ignoring = [spread(w, constraint(key=ZONE, nodeAffinityPolicy="Ignore")) for w in pinned]
    state = convert([*nodes(6, zones=3), *running, group(2), *ignoring]).state
    decision = schedule(state, "cpsat").explained()
    assert decision.placements == {}
    assert SPREAD in decision.unschedulable["team/g"]


def test_min_domains_reads_the_fewest_as_zero_while_fewer_domains_count() -> None:
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in range(3)]
    objects = [*nodes(6, zones=3), *running, group(3)]
    met = convert([*objects, *workers(3, constraint(key=ZONE, minDomains=3))]).state
    assert not read(met).pop().fewest_zero
    assert per_zone(placed(met)) == {"z0": 1, "z1": 1, "z2": 1}
    strict = workers(3, constraint(key=ZONE, minDomains=4))
    state = convert([*objects, *strict]).state
    assert read(state).pop().fewest_zero
    assert placed(state) == {}


def test_tainted_nodes_count_only_with_the_taints_policy_honoured() -> None:
    # z2's nodes are tainted and run nothing: read (Ignore, the default) the fewest is 0
    # and z0 and z1, at 1, take none; honoured, z2 does not count and the fewest is 1.
    hosts = nodes(6, zones=3)
    for n in hosts:
        if n["metadata"]["labels"][ZONE] == "z2":
            n["spec"] = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 1)]
    objects = [*hosts, *running, group(2)]
    assert placed(convert([*objects, *workers(2, constraint(key=ZONE))]).state) == {}
    honour = workers(2, constraint(key=ZONE, nodeTaintsPolicy="Honor"))
    state = convert([*objects, *honour]).state
    assert read(state).pop().counted == (("z0", 1), ("z1", 1))
    assert per_zone(placed(state)) == {"z0": 1, "z1": 1}


def test_a_pod_gangsat_deletes_counts_in_its_zone_not_towards_the_fewest() -> None:
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 1, 2)]
    running[0][LEAVING] = True
    state = convert(
        [*nodes(6, zones=3), *running, group(1), *workers(1, constraint(key=ZONE))]
    ).state
    [zone] = read(state)
    assert zone.counted == (("z0", 0), ("z1", 1), ("z2", 1)) and zone.extra == (("z0", 1),)
    # Gone or not, z0 is the one zone it may go to (z1 or z2: 1 + 1 - 0 > 1).
    assert per_zone(placed(state)) == {"z0": 1}


def test_an_elastic_gang_goes_in_part_and_a_lone_pod_goes() -> None:
    # minMember 2 of 4: one a zone goes now (no subset of them breaks the spread).
    conversion = convert([*nodes(6, zones=3), group(2), *workers(4, constraint(key=ZONE))])
    assert per_zone(placed(conversion.state)) == {"z0": 1, "z1": 1, "z2": 1}
    # One pod pending (a member made again) cannot be placed in part: it goes.
    running = [pod(f"r{i}", labels={"job": "g"}, node_name=f"n{i}") for i in (0, 1)]
    for r in running:
        r["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "g"}
    made_again = workers(1, constraint(key=ZONE), prefix="w9")
    state = convert([*nodes(6, zones=3), *running, group(2), *made_again]).state
    assert per_zone(placed(state)) == {"z2": 1}


def _gangs_over_turns(state: ClusterState, turns: int = 20) -> list[set[str]]:
    """The gangs (first letter of their pods' names) placed at each of ``turns`` turns of
    the snapshot clock, each decision checked."""
    out = []
    for t in range(turns):
        turn = state.model_copy(update={"now_s": t * TURN_S})
        decision = schedule(turn, "cpsat")
        assert check(turn, decision) == []
        out.append({name.split("/")[1][0] for name in decision.placements})
    return out


def _job(name: str, size: int, selector: dict[str, Any], **labels: str) -> list[dict[str, Any]]:
    """PodGroup ``name`` and its ``size`` pods, each carrying a zone spread of ``selector``."""
    g = copy.deepcopy(group(size))
    g["metadata"]["name"] = name
    annotations = {"scheduling.k8s.io/group-name": name}
    pods = [
        spread(
            pod(f"{name}{i}", labels={"job": name, **labels}, annotations=annotations),
            constraint(key=ZONE, labelSelector=selector),
        )
        for i in range(size)
    ]
    return [g, *pods]


def test_a_spread_counting_pods_that_carry_none_goes_beside_them() -> None:
    # h's spread counts g's pending workers, which carry no spread: h's carriers are
    # scheduled first, g's after (the filter does not check them), both in one cycle.
    both = {"matchExpressions": [{"key": "job", "operator": "In", "values": ["g", "h"]}]}
    state = convert([*nodes(6, zones=3), group(2), *workers(2), *_job("h", 2, both)]).state
    decision = schedule(state, "cpsat")
    assert check(state, decision) == []
    assert sorted(decision.placements) == ["team/h0", "team/h1", "team/w0", "team/w1"]


@pytest.mark.parametrize("shared", [True, False])
def test_gangs_whose_spreads_count_each_other_take_turns(shared: bool) -> None:
    # A label both jobs share (a chart's app: trainer), or each job's selector naming
    # both: one goes a cycle, the other's pods wait it (placed beside it, each one's order
    # would need the other's first), and within a few turns each goes.
    if shared:
        selector: dict[str, Any] = {"matchLabels": {"app": "trainer"}}
    else:
        selector = {"matchExpressions": [{"key": "job", "operator": "In", "values": ["a", "b"]}]}
    jobs = [*_job("a", 3, selector, app="trainer"), *_job("b", 3, selector, app="trainer")]
    state = convert([*nodes(6, zones=3), *jobs]).state
    went = _gangs_over_turns(state)
    assert all(len(gangs) == 1 for gangs in went)
    assert set().union(*went) == {"a", "b"}


def test_a_launcher_counted_elsewhere_goes_with_its_workers() -> None:
    # Workers on the gpu pool spread by job=g; the launcher (job=g, cpu pool) carries no
    # constraint: it counts where it lands, never towards the fewest.
    pool = []
    for i in range(9):
        labels = {ZONE: zone_of(f"n{i}"), "pool": "gpu" if i < 6 else "cpu"}
        pool.append(node(f"n{i}", cpu="8", metadata={"name": f"n{i}", "labels": labels}))
    pinned = []
    for w in workers(3, constraint(key=ZONE)):
        w["spec"]["nodeSelector"] = {"pool": "gpu"}
        pinned.append(w)
    annotations = {"scheduling.k8s.io/group-name": "g"}
    launcher = pod("launcher", labels={"job": "g"}, annotations=annotations)
    launcher["spec"]["nodeSelector"] = {"pool": "cpu"}
    where = placed(convert([*pool, group(4), *pinned, launcher]).state)
    assert len(where) == 4
    workers_at = {p: n for p, n in where.items() if "launcher" not in p}
    assert per_zone(workers_at) == {"z0": 1, "z1": 1, "z2": 1}


def test_a_selector_that_does_not_select_the_pod_itself_is_refused() -> None:
    others = workers(2, constraint(key=ZONE, labelSelector={"matchLabels": {"app": "db"}}))
    conversion = convert([*nodes(6, zones=3), group(2), *others])
    assert [p.name for p in conversion.state.pods] == []
    assert all("does not select the pod itself" in f.message for f in conversion.findings)


def _zone_filter_passes(
    pending: Mapping[str, Any], node_name: str, running: list[tuple[Any, str]], zones: int
) -> bool:
    """kube-scheduler's PodTopologySpread filter for a pod object on a node over zones,
    against the pods ``running`` (object, node); every zone eligible (no affinity)."""
    labels = pending["metadata"]["labels"]
    for c in pending["spec"].get("topologySpreadConstraints", []):
        sel = c["labelSelector"]
        counts = Counter(
            zone_of(n, zones) for o, n in running if selects(sel, o["metadata"]["labels"])
        )
        fewest = min(counts.get(f"z{z}", 0) for z in range(zones))
        own = counts[zone_of(node_name, zones)] + int(selects(sel, labels))
        if own - fewest > c["maxSkew"]:
            return False
    return True


def _some_order_passes(
    placements: Mapping[str, str],
    pending: Mapping[str, Any],
    running: list[tuple[Any, str]],
    zones: int,
) -> bool:
    """Whether the pods placed pass the filter one at a time in some order: each time, of
    those that pass, one in the zone with the fewest of them so far (a stricter test
    than any order: it may refuse where another order passes, never the reverse)."""
    done, left = list(running), dict(placements)
    while left:
        ready = [
            p for p, at in sorted(left.items()) if _zone_filter_passes(pending[p], at, done, zones)
        ]
        if not ready:
            return False
        held = Counter(zone_of(n, zones) for _, n in done)
        first = min(ready, key=lambda p: (held[zone_of(left[p], zones)], p))
        done.append((pending[first], left.pop(first)))
    return True


@pytest.mark.parametrize("seed", range(16))
def test_every_decision_passes_the_filter_in_some_order(seed: int) -> None:
    rng = random.Random(seed)
    zones, hosts = rng.randint(2, 4), rng.randint(3, 9)
    objects: list[dict[str, Any]] = [*nodes(hosts, zones=zones, cpu=str(rng.choice([2, 4, 8])))]
    running = running_pods(rng, hosts, rng.randint(0, 2 * hosts))
    objects += [o for o, _ in running]
    pending: dict[str, dict[str, Any]] = {}
    for job in ("g", "h", "k"):
        size = rng.randint(1, 7)
        g = group(size if rng.random() < 0.8 else rng.randint(1, size))
        g["metadata"]["name"] = job
        objects.append(g)
        skew = rng.randint(1, 3)
        values = ["g", job] if job == "k" else [job]  # k counts g's pods and its own
        selector = {"matchExpressions": [{"key": "job", "operator": "In", "values": values}]}
        for i in range(size):
            o = pod(
                f"{job}{i}", labels={"job": job}, annotations={"scheduling.k8s.io/group-name": job}
            )
            o = spread(o, constraint(skew, key=ZONE, labelSelector=selector))
            objects.append(o)
            pending[f"team/{job}{i}"] = o
    state = convert(objects).state  # at a turn of the seed's (of the gangs k counts)
    state = state.model_copy(update={"now_s": seed * TURN_S})
    for scheduler in ("cpsat", "gang-greedy"):
        where = placed(state, scheduler)
        assert _some_order_passes(where, pending, running, zones), (scheduler, where)


def test_a_gang_spread_over_zones_is_bound_so_end_to_end(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    hosts = []
    for i in range(6):
        n = kube_node(f"n{i}", "8", "32Gi")
        n["metadata"]["labels"][ZONE] = zone_of(f"n{i}")
        hosts.append(n)
    members = gang_pods("g", 6)
    for m in members:
        m["metadata"]["labels"] = {"job": "g"}
        m["spec"]["topologySpreadConstraints"] = [constraint(key=ZONE)]
    apply(server, [*hosts, kube_podgroup("g", 6), *members])
    seen(cluster, server)
    run_cycle(cluster, FAST)
    bound = {pod: where[0] for pod, where in bindings(server).items()}
    assert len(bound) == 6
    assert per_zone(bound) == {"z0": 2, "z1": 2, "z2": 2}
