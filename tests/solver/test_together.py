"""Pods kept together (required pod affinity among pending pods, ``solver.together``) on
clusters small enough to work the answer out by hand: every scheduler places a group in
one domain of its topology key, the one where it fits, and the validator refuses a group
split across domains."""

from __future__ import annotations

import pytest

from solver import together
from solver.apart import TURN_S
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.predicates import POD_AFFINITY_MISMATCH
from solver.schedulers import SCHEDULERS, schedule
from solver.together import settle
from solver.validate import check
from tests.builders import gang, node, pod, state

FAST = SolverConfig(time_limit_s=5.0, deterministic=True)
ZONE = "topology.kubernetes.io/zone"


def zones(**cpus_per_zone: list[int]) -> list[object]:
    """Nodes of the zones named, each of the cpus listed, named <zone>-<i>."""
    return [
        node(f"{zone}-{i}").cap(cpu=cpu, pods=110).label({ZONE: zone})
        for zone, cpus in cpus_per_zone.items()
        for i, cpu in enumerate(cpus)
    ]


def job(name: str, size: int, cpu: float = 1, group: str | None = None) -> list[object]:
    return [
        pod(f"{name}-{i}").req(cpu=cpu).gang(name).together(group or f"{name}@{ZONE}")
        for i in range(size)
    ]


def decided(placements: dict[str, str]) -> Decision:
    return Decision(scheduler="test", status=SolveStatus.GREEDY, placements=placements)


def domains_of(s: ClusterState, placements: dict[str, str], name: str) -> set[str]:
    labels = {n.name: n.labels.get(ZONE) for n in s.nodes}
    return {str(labels[n]) for p, n in placements.items() if p.startswith(f"{name}-")}


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_a_gang_goes_whole_to_the_one_zone_it_fits_in(scheduler: str) -> None:
    # 6 pods of 1 cpu: zone a has 4 cpus in all, zone b 8; only b takes the gang whole.
    s = state(nodes=zones(a=[2, 2], b=[4, 4]), pods=job("job", 6), gangs=[gang("job", 6)])
    d = schedule(s, scheduler, FAST)
    assert check(s, d) == []
    if d.placements:  # (a scheduler that is no gang scheduler may place none)
        assert domains_of(s, d.placements, "job") == {"b"}
    if scheduler in ("cpsat", "gang-greedy"):
        assert len(d.placements) == 6


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_two_gangs_that_fit_one_zone_each_both_run(scheduler: str) -> None:
    # Either gang fits either zone, not both in one: each takes its own.
    s = state(
        nodes=zones(a=[4], b=[4]),
        pods=[*job("x", 4), *job("y", 4)],
        gangs=[gang("x", 4), gang("y", 4)],
    )
    d = schedule(s, scheduler, FAST)
    assert check(s, d) == []
    assert len(d.placements) == 8
    assert len(domains_of(s, d.placements, "x")) == 1
    assert domains_of(s, d.placements, "x") != domains_of(s, d.placements, "y")


def test_the_tightest_zone_is_taken_and_the_roomy_one_kept() -> None:
    # A small gang first (older) fits both zones: it takes the small one, and the big gang
    # after it still finds the big one.
    small = [p.created(0) for p in job("small", 2)]
    big = [p.created(1) for p in job("big", 6)]
    s = state(
        nodes=zones(a=[2], b=[4, 4]),
        pods=[*small, *big],
        gangs=[gang("small", 2).created(0), gang("big", 6).created(1)],
    )
    d = schedule(s, "gang-greedy", FAST)
    assert check(s, d) == []
    assert domains_of(s, d.placements, "small") == {"a"}
    assert domains_of(s, d.placements, "big") == {"b"}


def test_a_group_that_fits_nowhere_waits_with_kube_scheduler_s_reason() -> None:
    s = state(nodes=zones(a=[2], b=[2]), pods=job("job", 3), gangs=[gang("job", 3)])
    d = schedule(s, "cpsat", FAST)
    assert d.placements == {}
    assert "job" in d.unschedulable


def test_a_group_without_free_room_takes_turns_among_zones_preemption_may_free() -> None:
    # Zones a and b full of lower-priority pods, d of pods of its own priority: the group
    # rotates between a and b, one a turn, never d (no preemption frees it) nor c (small).
    bound = [pod(f"run-{z}").req(cpu=4).on(f"{z}-0") for z in "ab"]
    peer = pod("peer").req(cpu=4).priority(10).on("d-0")
    pending = [p.priority(10) for p in job("job", 3)]
    s = state(
        nodes=zones(a=[4], b=[4], c=[1], d=[4]),
        pods=[*bound, peer, *pending],
        gangs=[gang("job", 3).priority(10)],
    )
    chosen = set()
    for cycle in range(6):  # a quiet cluster's cycles: 30 s, three turns, apart
        t = s.model_copy(update={"now_s": cycle * 3 * TURN_S})
        rules = {r for p in settle(t).pods if p.name == "job-0" for r in p.node_rules}
        (rule,) = rules
        assert rule.reason == POD_AFFINITY_MISMATCH
        (value,) = rule.terms[0].match_expressions[0].values
        chosen.add(value)
    assert chosen == {"a", "b"}  # never c, where 3 cpus never fit


def test_bound_pods_of_the_group_fix_its_zone() -> None:
    # One of the gang runs in a (restarted mates pending): they follow it there, though b
    # has more room.
    running = pod("job-0").req(cpu=1).gang("job").together(f"job@{ZONE}").on("a-0")
    pending = [pod(f"job-{i}").req(cpu=1).gang("job").together(f"job@{ZONE}") for i in (1, 2)]
    s = state(nodes=zones(a=[4], b=[8]), pods=[running, *pending], gangs=[gang("job", 3)])
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert set(d.placements.values()) == {"a-0"}


def test_nodes_without_the_key_are_in_no_domain() -> None:
    s = state(
        nodes=[*zones(a=[2]), node("bare").cap(cpu=8, pods=110)],
        pods=job("job", 4),
        gangs=[gang("job", 4)],
    )
    assert schedule(s, "cpsat", FAST).placements == {}


def test_the_validator_refuses_a_group_split_across_zones() -> None:
    s = state(nodes=zones(a=[4], b=[4]), pods=job("job", 2), gangs=[gang("job", 2)])
    split = decided({"job-0": "a-0", "job-1": "b-0"})
    kinds = [v.kind for v in check(s, split)]
    assert kinds == ["predicate", "predicate"]
    whole = decided({"job-0": "b-0", "job-1": "b-0"})
    assert check(s, whole) == []


def test_the_validator_keeps_new_pods_in_their_bound_mates_zones() -> None:
    running = pod("job-0").req(cpu=1).gang("job").together(f"job@{ZONE}").on("a-0")
    pending = pod("job-1").req(cpu=1).gang("job").together(f"job@{ZONE}")
    s = state(nodes=zones(a=[4], b=[4]), pods=[running, pending], gangs=[gang("job", 2)])
    away = decided({"job-1": "b-0"})
    assert [v.kind for v in check(s, away)] == ["predicate"]
    assert check(s, decided({"job-1": "a-0"})) == []


def test_kept_apart_and_together_one_worker_per_node_in_one_zone() -> None:
    # 3 workers a node each in one zone: a has 2 nodes, b has 3.
    pods = [
        pod(f"job-{i}").req(cpu=1).gang("job").apart("job").together(f"job@{ZONE}")
        for i in range(3)
    ]
    s = state(nodes=zones(a=[8, 8], b=[8, 8, 8]), pods=pods, gangs=[gang("job", 3)])
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert sorted(d.placements.values()) == ["b-0", "b-1", "b-2"]


def test_groups_beyond_the_cap_take_turns_and_wait_theirs_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A cap of 4: the 2 oldest groups are always chosen, the 6 others 2 a turn.
    monkeypatch.setattr(together, "MAX_GROUPS", 4)
    pods = [p.created(i) for i in range(8) for p in job(f"j{i}", 2)]
    s = state(nodes=zones(a=[64], b=[64]), pods=pods, gangs=[gang(f"j{i}", 2) for i in range(8)])
    turns = []
    for cycle in range(3):
        settled = settle(s.model_copy(update={"now_s": cycle * 3 * TURN_S}))
        waiting = {p.gang for p in settled.pods if together.NOT_ITS_TURN in p.node_rules}
        assert len(waiting) == 4 and not waiting & {"j0", "j1"}
        turns.append(frozenset(waiting))
    assert len(set(turns)) == 3  # each turn leaves others waiting
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert {p.rpartition("-")[0] for p in d.placements} == {f"j{i}" for i in range(8)} - turns[0]


def test_a_gang_of_two_groups_whose_spare_member_either_may_take_runs_whole() -> None:
    # 2 pods of role A and 2 of role B, each role in one zone of its own, minMember 3:
    # zones a and b take 1 pod each, c all 4. Each group takes the zone it fits whole.
    nodes = zones(a=[1], b=[1], c=[8])
    pods = [
        *(pod(f"A{i}").req(cpu=1).gang("g").together(f"A@{ZONE}") for i in range(2)),
        *(pod(f"B{i}").req(cpu=1).gang("g").together(f"B@{ZONE}") for i in range(2)),
    ]
    s = state(nodes=nodes, pods=pods, gangs=[gang("g", 3)])
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert len(d.placements) == 4


def test_an_elastic_gang_takes_the_zone_its_whole_group_fits() -> None:
    # minMember 2 of 4: zone a fits 2, b all 4. Placed at its minimum in a, its other
    # pods would be held there by their bound mates.
    s = state(nodes=zones(a=[2], b=[4]), pods=job("g", 4), gangs=[gang("g", 2)])
    d = schedule(s, "cpsat", FAST)
    assert sorted(d.placements.values()) == ["b-0"] * 4


def test_a_pod_of_groups_on_nested_keys_gets_domains_that_meet() -> None:
    # A zone and a rack each (racks nested in zones): the rack is chosen within the zone.
    rack = "rack"
    nodes = [
        node("r1").cap(cpu=10, pods=110).label({ZONE: "a", rack: "r1"}),
        node("r2").cap(cpu=5, pods=110).label({ZONE: "b", rack: "r2"}),
        node("r3").cap(cpu=6, pods=110).label({ZONE: "b", rack: "r3"}),
    ]
    pods = [pod(f"w{i}").req(cpu=1).gang("g").together(f"j@{ZONE}", f"j@{rack}") for i in range(4)]
    s = state(nodes=nodes, pods=pods, gangs=[gang("g", 4)])
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert len(d.placements) == 4


def test_pods_of_two_groups_on_one_key_share_the_first_group_s_domain() -> None:
    # The launcher's group holds it and the workers; the workers' own group holds them:
    # chosen one after the other, the second within the first's zone.
    launcher = pod("launcher").req(cpu=1).gang("g").together(f"all@{ZONE}")
    workers = [
        pod(f"w{i}").req(cpu=1).gang("g").together(f"all@{ZONE}", f"workers@{ZONE}")
        for i in range(4)
    ]
    s = state(nodes=zones(a=[4], b=[8]), pods=[launcher, *workers], gangs=[gang("g", 5)])
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert set(d.placements.values()) == {"b-0"} and len(d.placements) == 5


def test_a_group_of_a_gang_no_room_places_is_not_said_to_wait_its_turn() -> None:
    # 2 pods of a gang of minMember 3: never placed, and told it by the affinity rule.
    s = state(nodes=zones(a=[8]), pods=job("g", 2), gangs=[gang("g", 3)])
    rules = {r for p in settle(s).pods for r in p.node_rules}
    assert together.NOT_ITS_TURN not in rules
    assert [r.reason for r in rules] == [POD_AFFINITY_MISMATCH]


def test_a_hostname_group_on_a_full_cluster_checks_few_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every node would take the pair were its lower-priority pod evicted, none has room:
    # a turn's node is checked by placing the pods, not every node of the cluster.
    host = "kubernetes.io/hostname"
    nodes = [node(f"n{i}").cap(cpu=8, pods=110).label({host: f"n{i}"}) for i in range(50)]
    full = [pod(f"run{i}").req(cpu=8).on(f"n{i}") for i in range(50)]
    pair = [pod(f"p-{i}").req(cpu=2).priority(5).gang("p").together(f"p@{host}") for i in range(2)]
    s = state(nodes=nodes, pods=[*full, *pair], gangs=[gang("p", 2).priority(5)])
    fills = []
    real_fill = together.fill
    monkeypatch.setattr(together, "fill", lambda *a: fills.append(1) or real_fill(*a))
    settle(s)
    assert 1 <= len(fills) <= together.TRIES


def exclusive(name: str, size: int, *others: str) -> list[object]:
    """A job kept in one zone, in none another of ``others`` takes."""
    kept_from = tuple(f"{o}@{ZONE}" for o in others)
    return [
        pod(f"{name}-{i}").req(cpu=1).gang(name).together(f"{name}@{ZONE}").exclusive(*kept_from)
        for i in range(size)
    ]


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_jobs_kept_from_each_other_take_a_zone_each(scheduler: str) -> None:
    # Both fit zone b together (8 cpus); each asks for a zone no other job runs in.
    pods = [*exclusive("x", 2, "y"), *exclusive("y", 2, "x")]
    s = state(nodes=zones(a=[4], b=[8]), pods=pods, gangs=[gang("x", 2), gang("y", 2)])
    d = schedule(s, scheduler, FAST)
    assert check(s, d) == []
    assert len(d.placements) == 4
    assert domains_of(s, d.placements, "x") != domains_of(s, d.placements, "y")


def test_a_third_exclusive_job_waits_for_a_zone_of_its_own() -> None:
    pods = [
        *exclusive("x", 2, "y", "z"),
        *exclusive("y", 2, "x", "z"),
        *exclusive("z", 2, "x", "y"),
    ]
    s = state(
        nodes=zones(a=[8], b=[8]),
        pods=pods,
        gangs=[gang(j, 2).created(i) for i, j in enumerate("xyz")],
    )
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert len(d.placements) == 4 and "z" in d.unschedulable


def test_the_validator_refuses_exclusive_jobs_in_one_zone() -> None:
    pods = [*exclusive("x", 1, "y"), *exclusive("y", 1, "x")]
    s = state(nodes=zones(a=[8], b=[8]), pods=pods, gangs=[gang("x", 1), gang("y", 1)])
    shared = decided({"x-0": "a-0", "y-0": "a-0"})
    assert [v.kind for v in check(s, shared)] == ["predicate", "predicate"]
    assert check(s, decided({"x-0": "a-0", "y-0": "b-0"})) == []


def test_a_job_preemption_cannot_make_room_for_holds_no_domain_from_the_others() -> None:
    # Zone a: a pod of equal priority (no victim) leaves 6 cpus; b: job x runs. old (4 x
    # 2 cpus) would fit a only were that pod gone, which no preemption does: new (1 cpu)
    # takes a now.
    blocker = pod("blocker").req(cpu=2).on("a-0")
    running = pod("x-0").req(cpu=1).gang("x").together(f"x@{ZONE}").on("b-0")
    old = [p.created(0) for p in exclusive("old", 4, "x", "new")]
    old = [p.req(cpu=2) for p in old]
    new = [p.created(1) for p in exclusive("new", 1, "x", "old")]
    s = state(
        nodes=zones(a=[8], b=[8]),
        pods=[blocker, running, *old, *new],
        gangs=[gang("x", 1), gang("old", 4).created(0), gang("new", 1).created(1)],
    )
    for now in (0.0, 30.0, 600.0):
        d = schedule(s.model_copy(update={"now_s": now}), "cpsat", FAST)
        assert d.placements == {"new-0": "a-0"}


def test_a_held_job_s_domain_is_kept_from_the_jobs_it_excludes() -> None:
    # high's pods show bound in a (a hold, its victims leaving): small, kept from it, goes
    # to b, though a's room left (2 cpus) is the tighter fit.
    held = [
        pod(f"high-{i}").req(cpu=1).gang("high").together(f"high@{ZONE}").on("a-0")
        for i in range(2)
    ]
    small = exclusive("small", 1, "high")
    s = state(
        nodes=zones(a=[4], b=[8]), pods=[*held, *small], gangs=[gang("high", 2), gang("small", 1)]
    )
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == [] and d.placements == {"small-0": "b-0"}


def test_the_snapshot_s_node_order_does_not_change_the_domains_chosen() -> None:
    # A watch's arrival order, or a new leader's, lists the same nodes otherwise. x (1 cpu,
    # 10 GiB) and y (4 cpus, 1 GiB) fit zone a only with y on a0 and x on a1: the bigger by
    # share (y) placed first, in node-name order, whatever order the nodes come in.
    pods = [
        pod("x").req(cpu=1, memory="10Gi").gang("g").together(f"g@{ZONE}"),
        pod("y").req(cpu=4, memory="1Gi").gang("g").together(f"g@{ZONE}"),
    ]
    nodes = {
        "a0": node("a0").cap(cpu=4, memory="64Gi", pods=110).label({ZONE: "a"}),
        "a1": node("a1").cap(cpu=1, memory="64Gi", pods=110).label({ZONE: "a"}),
        "b0": node("b0").cap(cpu=8, memory="64Gi", pods=110).label({ZONE: "b"}),
    }
    chosen = []
    for order in (["a0", "a1", "b0"], ["a1", "a0", "b0"]):
        s = state(nodes=[nodes[n] for n in order], pods=pods, gangs=[gang("g", 2)])
        chosen.append({p.name: p.node_rules for p in settle(s).pods})
    assert chosen[0] == chosen[1]
