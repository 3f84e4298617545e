"""Reclaim, on every path: a queue takes from others only while it is below its deserved
share, counting what the same decision already gives it."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.objective import coefficients
from solver.problem import prepare
from solver.schedulers import schedule
from solver.validate import check
from tests.builders import gang, node, pod, queue, state
from tests.solver.test_preemption import PATHS, _decide

RECLAIMED = re.compile(r"reclaimed by queue (\S+) .* for gang (\S+)$")


def _overfull(pending_b: int) -> ClusterState:
    """Queue qa runs a 1-pod gang on each of 8 nodes of 4 cpu; qb (priority 10) waits with
    ``pending_b`` such gangs; qc (weight 2) wants the whole cluster but fits nowhere. The
    water-filling gives qa 8 cpu, qb 8 (two nodes), qc 16: qa is 24 above its share, so its
    floor allows far more than qb may reclaim."""
    running = [pod(f"a{j}-0").req(cpu=4).gang(f"a{j}").on(f"n{j}").started(0) for j in range(8)]
    waiting = [pod(f"b{j}-0").req(cpu=4).gang(f"b{j}") for j in range(pending_b)]
    nowhere = [pod(f"c-{i}").req(cpu=4).gang("c").selector(zone="nowhere") for i in range(8)]
    return state(
        [node(f"n{j}").cap(cpu=4) for j in range(8)],
        [*running, *waiting, *nowhere],
        [
            *[gang(f"a{j}", 1).queue("qa") for j in range(8)],
            *[gang(f"b{j}", 1).queue("qb").priority(10) for j in range(pending_b)],
            gang("c", 8).queue("qc"),
        ],
        [queue("qa", 1), queue("qb", 1), queue("qc", 2)],
        now_s=600,
    )


def below_when_reclaiming(cluster: ClusterState, decision: Decision) -> list[str]:
    """Queues that reclaimed past their deserved share: with every gang the decision gives
    them, less the largest gang it reclaimed for (placed last), they are not below it."""
    problem = prepare(cluster)
    coef = coefficients(problem, SolverConfig().weights)
    of_pod = problem.class_of_pod()
    queue_index = {q.name: q.index for q in problem.queues}
    gains: dict[str, int] = defaultdict(int)  # gang -> share units the decision adds
    for name in (*decision.placements, *decision.nominated):
        cls = problem.classes[of_pod[name]]
        gains[problem.gangs[cls.gang].name] += int(coef.pod_share[of_pod[name]])
    reclaimers: dict[int, set[str]] = defaultdict(set)
    for why in decision.evictions.values():
        if match := RECLAIMED.search(why):
            reclaimers[queue_index[match[1]]].add(match[2])
    gang_queue = {g.name: g.queue for g in problem.gangs}
    out = []
    for q, takers in sorted(reclaimers.items()):
        total = int(coef.held[q]) + sum(v for g, v in gains.items() if gang_queue[g] == q)
        if total - max(gains[g] for g in takers) >= int(coef.deserved[q]):
            out.append(problem.queues[q].name)
    return out


@pytest.mark.parametrize("how", PATHS)
def test_a_queue_reclaims_only_until_it_reaches_its_share(how: str) -> None:
    """qb deserves two nodes: two of its four gangs reclaim, the other two wait although
    qa could lose two more nodes and stay above its own share."""
    cluster = _overfull(pending_b=4)
    decision = _decide(cluster, how)
    assert len(decision.evictions) == 2
    assert len(decision.nominated) == 2
    assert below_when_reclaiming(cluster, decision) == []
    assert check(cluster, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_the_gang_that_reaches_the_share_may_still_reclaim(how: str) -> None:
    """qb below its share by half a node's worth: a whole node is still reclaimed for it,
    as the gang reclaimed for starts below. (The rule is not 'end at the share'.)"""
    cluster = _overfull(pending_b=4)
    cluster = cluster.model_copy(
        update={
            "queues": (
                *(q for q in cluster.queues if q.name != "qc"),
                queue("qc", 5).build(),
            )
        }
    )
    # qa 4.8 cpu, qb 4.8 (one node and a fifth), qc 22.4 of 32.
    decision = _decide(cluster, how)
    assert len(decision.evictions) == 2
    assert below_when_reclaiming(cluster, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_a_placement_that_brings_the_queue_to_its_share_ends_its_reclaim(how: str) -> None:
    """n7 is free and takes one of qb's gangs by placement alone; qb's share is then one
    node short: one more gang reclaims, not three."""
    base = _overfull(pending_b=4)
    cluster = base.model_copy(
        update={
            "pods": tuple(p for p in base.pods if p.name != "a7-0"),
            "gangs": tuple(g for g in base.gangs if g.name != "a7"),
        }
    )
    decision = _decide(cluster, how)
    assert len(decision.placements) + len(decision.nominated) == 2
    assert len(decision.evictions) == 1
    assert below_when_reclaiming(cluster, decision) == []


@st.composite
def _queues_above_their_share(draw: st.DrawFn) -> ClusterState:
    """Nodes full of one queue's gangs, one 1-cpu pod each; a second queue's gangs wait,
    of random sizes; a third wants a random part of the cluster and fits nowhere."""
    n_nodes = draw(st.integers(2, 6))
    nodes = [node(f"n{i}").cap(cpu=2) for i in range(n_nodes)]
    pods = [
        pod(f"a{i}-0").req(cpu=1).gang(f"a{i}").on(f"n{i // 2}").started(0)
        for i in range(2 * n_nodes)
    ]
    gangs = [gang(f"a{i}", 1).queue("qa") for i in range(2 * n_nodes)]
    for k in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 3))
        pods += [pod(f"b{k}-{i}").req(cpu=1).gang(f"b{k}") for i in range(size)]
        gangs.append(gang(f"b{k}", size).queue("qb").priority(draw(st.integers(0, 10))))
    far = draw(st.integers(0, 2 * n_nodes))
    pods += [pod(f"c-{i}").req(cpu=1).gang("c").selector(zone="nowhere") for i in range(far)]
    gangs.append(gang("c", max(far, 1)).queue("qc"))
    weights = draw(st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)))
    queues = [queue(name, w) for name, w in zip(("qa", "qb", "qc"), weights, strict=True)]
    return state(nodes, pods, gangs, queues, now_s=600)


@pytest.mark.parametrize("how", PATHS)
@settings(max_examples=25, deadline=None)
@given(cluster=_queues_above_their_share())
def test_no_queue_reclaims_past_its_share(how: str, cluster: ClusterState) -> None:
    config = SolverConfig(preemption=True, time_limit_s=0.3)
    if how == "gang-greedy":
        decision = schedule(cluster, "gang-greedy", config)
    else:
        decision = solve(cluster, config, joint=how == "joint")
    assert below_when_reclaiming(cluster, decision) == []
    assert check(cluster, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_every_gang_nominated_next_to_a_reclaimed_victim_is_named_for_one(how: str) -> None:
    """The example the property test above drew on a fresh clone: three full nodes of qa's
    1-pod gangs; qb's b0 and b1 (one pod each) and b2 (two) wait. Evicting four victims
    fits all three, b2 beside b0 on one node and beside b1 on the other. Each victim named
    the first gang nominated on its node, so b2, which reclaims as much as the two others
    together, was named by no Event, and qb looked to have reclaimed past its share."""
    nodes = [node(f"n{i}").cap(cpu=2) for i in range(3)]
    pods = [pod(f"a{i}-0").req(cpu=1).gang(f"a{i}").on(f"n{i // 2}").started(0) for i in range(6)]
    gangs = [gang(f"a{i}", 1).queue("qa") for i in range(6)]
    for k, (size, priority) in enumerate([(1, 6), (1, 1), (2, 9)]):
        pods += [pod(f"b{k}-{i}").req(cpu=1).gang(f"b{k}") for i in range(size)]
        gangs.append(gang(f"b{k}", size).queue("qb").priority(priority))
    pods += [pod(f"c-{i}").req(cpu=1).gang("c").selector(zone="nowhere") for i in range(5)]
    gangs.append(gang("c", 5).queue("qc"))
    queues = [queue("qa", 1), queue("qb", 3), queue("qc", 3)]
    cluster = state(nodes, pods, gangs, queues, now_s=600)
    decision = _decide(cluster, how)
    evicted_on = {
        cluster_pod.node_name
        for cluster_pod in cluster.pods
        if cluster_pod.name in decision.evictions
    }
    beside = {
        pod_name.rsplit("-", 1)[0] for pod_name, n in decision.nominated.items() if n in evicted_on
    }
    named = {m[2] for why in decision.evictions.values() if (m := RECLAIMED.search(why))}
    assert beside <= named
    assert below_when_reclaiming(cluster, decision) == []
    assert check(cluster, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_no_queue_reclaims_from_one_marked_not_reclaimable(how: str) -> None:
    """As Volcano's ``spec.reclaimable: false``: qa is far above its share, qb below it,
    and still nothing is taken from qa."""
    cluster = _overfull(pending_b=4)
    closed = tuple(
        q.model_copy(update={"reclaimable": False}) if q.name == "qa" else q for q in cluster.queues
    )
    cluster = cluster.model_copy(update={"queues": closed})
    decision = _decide(cluster, how)
    assert decision.evictions == {} and decision.nominated == {}


def test_the_validator_refuses_a_reclaim_from_a_queue_marked_not_reclaimable() -> None:
    cluster = _overfull(pending_b=1)
    reclaim = Decision(
        scheduler="test",
        status=SolveStatus.GREEDY,
        evictions={"a0-0": "reclaimed"},
        nominated={"b0-0": "n0"},
    )
    assert check(cluster, reclaim) == []
    closed = tuple(
        q.model_copy(update={"reclaimable": False}) if q.name == "qa" else q for q in cluster.queues
    )
    violations = check(cluster.model_copy(update={"queues": closed}), reclaim)
    # No taker for a0, and b0's pod in room it may not take.
    assert [(v.kind, v.subject) for v in violations] == [("eviction", "a0"), ("nomination", "n0")]


@pytest.mark.parametrize("how", PATHS)
def test_a_small_gang_of_the_queue_does_not_cap_what_a_big_one_may_reclaim(how: str) -> None:
    """qb holds nothing and deserves an eighth of the cluster; big (a whole 8-cpu node,
    a quarter) reclaims from zero, as kube-batch lets it. The models bounded the queue by
    its smallest possible reclaimer (small, 1 cpu), so big could never go."""
    running = [pod(f"a{j}-0").req(cpu=8).gang(f"a{j}").on(f"n{j}").started(0) for j in range(4)]
    cluster = state(
        [node(f"n{j}").cap(cpu=8) for j in range(4)],
        [
            *running,
            pod("big-0").req(cpu=8).gang("big"),
            pod("small-0").req(cpu=1).gang("small"),
            *[pod(f"c-{i}").req(cpu=8).gang("c").selector(zone="nowhere") for i in range(4)],
        ],
        [
            *[gang(f"a{j}", 1).queue("qa") for j in range(4)],
            gang("big", 1).queue("qb").priority(10),
            gang("small", 1).queue("qb").priority(10),
            gang("c", 4).queue("qc"),
        ],
        [queue("qa", 1), queue("qb", 1), queue("qc", 6)],
        now_s=600,
    )
    decision = _decide(cluster, how)
    assert sorted(decision.nominated) == ["big-0"]
    assert len(decision.evictions) == 1
    assert below_when_reclaiming(cluster, decision) == []
    assert check(cluster, decision) == []


@pytest.mark.parametrize("how", ["joint", "sequential"])
def test_a_victim_shrunk_on_one_node_names_the_gang_nominated_there(how: str) -> None:
    """Victim v of qa runs a pod on each node; x (qx) is nominated on n1, for w's pod
    there, and y (qy) on n2, for v's pod there. Named from any of its nodes, v's eviction
    named x, of a queue that reclaimed nothing from v, and y went unnamed (fuzzed). The
    CP-SAT paths name victims after deciding; gang-greedy's actions evict each victim for
    the gang that takes its room (here they reclaim nothing for y)."""
    nodes = [node(n).cap(cpu=4).label(host=n) for n in ("n1", "n2")]
    pods = [
        pod("v-0").req(cpu=2).gang("v").on("n1").started(0),
        pod("v-1").req(cpu=2).gang("v").on("n2").started(0),
        pod("z-0").req(cpu=2).gang("z").on("n2").started(0),
        pod("w-0").req(cpu=2).gang("w").on("n1").started(5900),
        pod("x-0").req(cpu=2).gang("x").priority(100).selector(host="n1"),
        pod("y-0").req(cpu=2).gang("y").priority(100).selector(host="n2"),
    ]
    gangs = [
        gang("v").queue("qa"),
        gang("z").queue("qa").not_preemptible(),
        gang("w").queue("qx"),
        gang("x").queue("qx").priority(100),
        gang("y").queue("qy").priority(100),
    ]
    queues = [queue("qa"), queue("qx"), queue("qy")]
    cluster = state(nodes, pods, gangs, queues, now_s=6000)
    decision = _decide(cluster, how)
    assert decision.nominated == {"x-0": "n1", "y-0": "n2"}
    assert decision.evictions["v-1"].endswith(
        "reclaimed by queue qy (below its deserved share) for gang y"
    )
    assert decision.evictions["w-0"] == "preempted by gang x (priority 100 > 0)"
    assert "v-0" not in decision.evictions
    assert check(cluster, decision) == []
