"""Host ports as kube-scheduler's NodePorts filter checks them (``adapter.kube.host_ports``):
pending pods asking for one port are placed one a node, off the nodes whose bound pods
hold it; host-network pods' container ports count; a port the API server would refuse
leaves its pod unscheduled. A property test replays the filter over every decision."""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import pytest

from adapter.holds import Holds
from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.kube.host_ports import host_ports
from adapter.loop import LoopSettings, run_cycle
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from solver.schedulers import schedule
from solver.validate import check
from tests.adapter.kube.manifests import apply, bound_pods, gang_pods, wait_until
from tests.adapter.kube.manifests import node as kube_node
from tests.adapter.kube.manifests import podgroup as kube_podgroup
from tests.adapter.kube.test_anti_affinity import GROUP, bound_in_a_cycle, group, nodes, placed
from tests.adapter.kube.test_convert import pod
from tests.builders import queue

PORTS = "node(s) didn't have free ports for the requested pod ports"


def ported(obj: dict[str, Any], *ports: dict[str, Any], host: bool = False) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["containers"][0]["ports"] = list(ports)
    if host:
        changed["spec"]["hostNetwork"] = True
    return changed


def workers(n: int, *ports: dict[str, Any], host: bool = False) -> list[dict[str, Any]]:
    return [ported(pod(f"w{i}", annotations=GROUP), *ports, host=host) for i in range(n)]


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
@pytest.mark.parametrize(
    ("port", "host"),
    [({"containerPort": 80, "hostPort": 8080}, False), ({"containerPort": 29500}, True)],
    ids=["hostPort", "hostNetwork"],
)
def test_a_gangs_pods_asking_for_one_port_get_a_node_each(
    scheduler: str, port: dict[str, Any], host: bool
) -> None:
    # Four 1-cpu workers would fit on one 8-cpu node; one port, a node each.
    conversion = convert([*nodes(5), group(4), *workers(4, port, host=host)])
    assert conversion.findings == []
    where = placed(conversion.state, scheduler)
    assert len(where) == 4 and len(set(where.values())) == 4
    decision = schedule(
        convert([*nodes(3), group(4), *workers(4, port, host=host)]).state, scheduler
    )
    assert decision.explained().placements == {}
    assert "more nodes than are in service" in decision.explained().unschedulable["team/g"]


def test_a_bound_pod_holding_the_port_keeps_the_pod_off_its_node() -> None:
    holder = ported(pod("holder", node_name="n0"), {"containerPort": 80, "hostPort": 8080})
    wanted = {"containerPort": 80, "hostPort": 8080}
    state = convert([*nodes(2), holder, group(1), *workers(1, wanted)]).state
    assert placed(state) == {"team/w0": "n1"}
    decision = schedule(convert([*nodes(1), holder, group(1), *workers(1, wanted)]).state, "cpsat")
    assert decision.placements == {}
    assert f"1 {PORTS}" in decision.explained().unschedulable["team/g"]
    # Full as well, the node is counted for its port: NodePorts runs before the room.
    full = ported(pod("holder", cpu="8", node_name="n0"), {"containerPort": 80, "hostPort": 8080})
    decision = schedule(convert([*nodes(1), full, group(1), *workers(1, wanted)]).state, "cpsat")
    why = decision.explained().unschedulable["team/g"]
    assert f"1 {PORTS}" in why and "Insufficient" not in why, why
    # Finished, it holds nothing.
    done = copy.deepcopy(holder)
    done["status"] = {"phase": "Succeeded"}
    assert placed(convert([*nodes(1), done, group(1), *workers(1, wanted)]).state)


@pytest.mark.parametrize(
    ("held", "asked", "conflict"),
    [
        ({"hostPort": 80}, {"hostPort": 80, "protocol": "UDP"}, False),
        ({"hostPort": 80}, {"hostPort": 81}, False),
        ({"hostPort": 80, "hostIP": "10.0.0.1"}, {"hostPort": 80}, True),
        ({"hostPort": 80}, {"hostPort": 80, "hostIP": "10.0.0.2"}, True),
        ({"hostPort": 80, "hostIP": "10.0.0.1"}, {"hostPort": 80, "hostIP": "10.0.0.2"}, False),
        ({"hostPort": 80, "hostIP": "10.0.0.1"}, {"hostPort": 80, "hostIP": "10.0.0.1"}, True),
    ],
)
def test_a_bound_pods_port_conflicts_as_node_ports_reads_it(
    held: dict[str, Any], asked: dict[str, Any], conflict: bool
) -> None:
    holder = ported(pod("holder", node_name="n0"), {"containerPort": 1, **held})
    state = convert([*nodes(1), holder, group(1), *workers(1, {"containerPort": 1, **asked})]).state
    assert bool(placed(state)) is not conflict


def test_sidecars_ports_count_and_a_lone_asker_keeps_no_group() -> None:
    sidecar = {"name": "proxy", "restartPolicy": "Always", "ports": [{"hostPort": 15001}]}
    setup = {"name": "setup", "ports": [{"hostPort": 15001}]}  # runs to completion first
    assert host_ports({"initContainers": [sidecar, setup]}) == {("0.0.0.0", "TCP", 15001)}
    assert host_ports({"initContainers": [setup], "containers": []}) == set()
    # One pod asking for a port: nothing to keep it apart from.
    state = convert([*nodes(1), group(1), *workers(1, {"hostPort": 9})]).state
    assert all(not p.apart for p in state.pods)


@pytest.mark.parametrize(
    "port",
    [
        {"hostPort": "80"},
        {"hostPort": 70000},
        {"hostPort": 80, "protocol": "HTTP"},
        {"hostPort": True},
    ],
)
def test_a_port_the_api_server_would_refuse_leaves_its_pod_unscheduled(
    port: dict[str, Any],
) -> None:
    conversion = convert([*nodes(2), group(1), *workers(1, {"containerPort": 1, **port})])
    assert conversion.state.pods == ()
    (finding,) = conversion.findings
    assert "hostPort" in finding.message and finding.gang == "team/g"


def test_a_higher_priority_gang_preempts_the_holders_of_its_port() -> None:
    # A low-priority gang holds port 80 on both nodes (room to spare besides); a
    # high-priority gang of two asking for port 80 evicts it whole and is nominated there.
    low = []
    for i in range(2):
        holder = pod(f"lo{i}", node_name=f"n{i}", phase="Running")
        holder["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "lo"}
        holder["spec"]["priority"] = 0
        low.append(ported(holder, {"containerPort": 80, "hostPort": 80}))
    high = workers(2, {"containerPort": 80, "hostPort": 80})
    high_group = group(2)
    for obj in (*high, high_group):
        obj["spec"]["priorityClassName"] = "high"
    lo_group = group(2)
    lo_group["metadata"]["name"] = "lo"
    high_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    state = convert([*nodes(2), high_class, lo_group, *low, high_group, *high]).state
    state = state.model_copy(update={"queues": (queue().build(),), "now_s": 600.0})
    decision = schedule(state, "cpsat", SolverConfig(preemption=True, time_limit_s=3.0))
    assert check(state, decision) == []
    assert sorted(decision.evictions) == ["team/lo0", "team/lo1"]
    assert sorted(decision.nominated.values()) == ["n0", "n1"]
    # Without preemption it waits, told why in kube-scheduler's words.
    waits = schedule(state, "cpsat", SolverConfig(time_limit_s=3.0)).explained()
    assert waits.placements == {} and PORTS in waits.unschedulable["team/g"]


def test_a_holder_only_some_askers_conflict_with_is_no_victim_of_the_others() -> None:
    # lo holds 10.0.0.1:80 on n0; w0 asks 10.0.0.2:80 (no conflict), x 10.0.0.1:80 (one,
    # too big for any node). In one group with lo, w0 evicted lo for nothing: w0 is
    # placed beside it, and x held off n0 by a rule.
    holder = pod("lo", node_name="n0", phase="Running")
    holder = ported(holder, {"containerPort": 1, "hostPort": 80, "hostIP": "10.0.0.1"})
    w0 = workers(1, {"containerPort": 1, "hostPort": 80, "hostIP": "10.0.0.2"})
    x = ported(pod("x", cpu="100"), {"containerPort": 1, "hostPort": 80, "hostIP": "10.0.0.1"})
    state = convert([*nodes(1), holder, group(1), *w0, x]).state
    state = state.model_copy(update={"queues": (queue().build(),), "now_s": 600.0})
    decision = schedule(state, "cpsat", SolverConfig(preemption=True, time_limit_s=3.0))
    assert decision.evictions == {} and decision.placements == {"team/w0": "n0"}
    (held,) = [p for p in state.pods if p.name == "team/x"]
    assert [r.reason for r in held.node_rules] == [PORTS]


def test_a_pod_of_many_ports_keeps_one_group_and_is_placed() -> None:
    # Host-network pods of 40 container ports each: one group for their 40 ports (a
    # group each, 40 > the 32 a cycle models, and the gang waited for ever).
    many = [{"containerPort": 20000 + i} for i in range(40)]
    state = convert([*nodes(2), group(2), *workers(2, *many, host=True)]).state
    assert {p.apart for p in state.pods} == {("port:TCP/20000+39",)}
    where = placed(state)
    assert sorted(where.values()) == ["n0", "n1"]


def test_a_bound_pods_unreadable_port_leaves_its_readable_ones_held() -> None:
    # Its second port's protocol is one the API server would refuse; it runs, and its
    # first port is held.
    holder = ported(
        pod("holder", node_name="n0"),
        {"containerPort": 1, "hostPort": 8080},
        {"containerPort": 2, "hostPort": 8081, "protocol": "tcp"},
    )
    state = convert([*nodes(2), holder, group(1), *workers(1, {"hostPort": 8080})]).state
    assert placed(state) == {"team/w0": "n1"}


def _free(spec: dict[str, Any], others: list[dict[str, Any]]) -> bool:
    """kube-scheduler's NodePorts: no port of ``spec`` taken by the pods ``others``."""
    used = {p for o in others for p in host_ports(o)}
    return not any(
        proto == p2 and port == q2 and (ip == "0.0.0.0" or ip2 == "0.0.0.0" or ip == ip2)
        for ip, proto, port in host_ports(spec)
        for ip2, p2, q2 in used
    )


@pytest.mark.parametrize("seed", range(10))
def test_no_node_gets_two_pods_holding_one_port(seed: int) -> None:
    rng = random.Random(seed)
    hosts = rng.randint(2, 6)
    choices = [
        {"hostPort": 80},
        {"hostPort": 80, "protocol": "UDP"},
        {"hostPort": 81},
        {"hostPort": 80, "hostIP": "10.0.0.1"},
        {"containerPort": 29500},
    ]
    objects: list[dict[str, Any]] = [*nodes(hosts)]
    on: dict[str, list[dict[str, Any]]] = {f"n{i}": [] for i in range(hosts)}
    for i in range(rng.randint(0, hosts)):
        at = f"n{rng.randrange(hosts)}"
        bound = ported(pod(f"r{i}", node_name=at), {"containerPort": 1, **rng.choice(choices)})
        objects.append(bound)
        on[at].append(bound["spec"])
    pending = {}
    for job in ("g", "h"):
        size = rng.randint(1, 4)
        g = group(rng.randint(1, size))
        g["metadata"]["name"] = job
        objects.append(g)
        host = rng.random() < 0.3
        for i in range(size):
            member = pod(f"{job}{i}", annotations={"scheduling.k8s.io/group-name": job})
            member = ported(member, {"containerPort": 1, **rng.choice(choices)}, host=host)
            objects.append(member)
            pending[f"team/{job}{i}"] = member["spec"]
    state = convert(objects).state
    for scheduler in ("cpsat", "gang-greedy"):
        now = {n: list(specs) for n, specs in on.items()}
        for name, at in sorted(placed(state, scheduler).items()):
            assert _free(pending[name], now[at]), (scheduler, name, at)
            now[at].append(pending[name])


def test_a_host_network_gang_is_bound_a_node_each_end_to_end(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    members = gang_pods("g", 3)
    for m in members:
        m["spec"]["hostNetwork"] = True
        m["spec"]["containers"][0]["ports"] = [{"containerPort": 29500}]
    bound = bound_in_a_cycle(server, cluster, members, 4)
    assert len(bound) == 3
    assert max(Counter(bound.values()).values()) == 1, bound


def test_port_holders_are_evicted_and_the_preemptor_bound_on_their_nodes_end_to_end(
    server: FakeApiServer,
) -> None:
    """Gang low holds port 80 on both nodes (room to spare besides); gang high (priority
    1000) asks for it on two: low is evicted, high bound where it ran."""
    low = gang_pods("low", 2)
    for i, p in enumerate(low):
        p["spec"]["nodeName"] = f"n{i}"
        p["spec"]["terminationGracePeriodSeconds"] = 0
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
        p["status"] = {"phase": "Running"}
    high = gang_pods("high", 2)
    high_group = kube_podgroup("high", 2)
    for obj in (*high, high_group):
        obj["spec"]["priorityClassName"] = "high"
    for p in high:
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    high_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    nodes_ = [kube_node(f"n{i}", "8", "32Gi") for i in range(2)]
    apply(server, [*nodes_, high_class, kube_podgroup("low", 2), *low, high_group, *high])
    settings = LoopSettings(solver=SolverConfig(time_limit_s=2.0, preemption=True))
    cluster = KubeCluster(server.client()).start(10)
    holds = Holds()
    try:
        first = run_cycle(cluster, settings, None, holds)
        assert sorted(first.preempted) == ["default/low-0", "default/low-1"]
        assert not first.bound
        wait_until(lambda: not cluster.snapshot().bound_pods(), what="the watch to see it")
        second = run_cycle(cluster, settings, None, holds)
        assert sorted(second.bound) == ["default/high-0", "default/high-1"]
        assert sorted(bound_pods(server).values()) == ["n0", "n1"]
    finally:
        cluster.stop()
