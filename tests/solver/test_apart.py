"""Pods kept apart (required pod anti-affinity per node, ``solver.apart``) on clusters
small enough to work the answer out by hand: every scheduler keeps a group at most one
pod per node, counting the group's bound pods, and the column costs no share."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from benchmarks import instances
from solver.apart import MAX_GROUPS, TURN_S
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import APART_EACH, ClusterState, apart_room
from solver.objective import score
from solver.problem import prepare
from solver.schedulers import SCHEDULERS, schedule
from solver.validate import check
from tests.builders import gang, node, pod, state

FAST = SolverConfig(time_limit_s=5.0, deterministic=True)
NODE_LEVEL_OFF = SolverConfig(time_limit_s=5.0, deterministic=True, max_node_level_pairs=0)


def workers(job: str, count: int, cpu: float = 1, *groups: str) -> list[object]:
    return [pod(f"{job}-{i}").req(cpu=cpu).gang(job).apart(*groups) for i in range(count)]


def cluster(nodes: int, *gangs_pods: tuple[str, int, int, tuple[str, ...]]) -> ClusterState:
    pods = [p for job, n, size, groups in gangs_pods for p in workers(job, size, 1, *groups)]
    return state(
        nodes=[node(f"n{i}").cap(cpu=8, memory="16Gi", pods=110) for i in range(nodes)],
        pods=pods,
        gangs=[gang(job, n) for job, n, _, _ in gangs_pods],
    )


def per_node(s: ClusterState, placements: dict[str, str], job: str) -> Counter[str]:
    return Counter(node for p, node in placements.items() if p.startswith(f"{job}-"))


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize("config", [FAST, NODE_LEVEL_OFF], ids=["node-level", "classes"])
def test_a_gang_kept_apart_gets_one_pod_per_node(scheduler: str, config: SolverConfig) -> None:
    # 4 workers of 1 cpu would fit on one 8-cpu node; kept apart they take 4 nodes.
    s = cluster(5, ("job", 4, 4, ("job",)))
    d = schedule(s, scheduler, config)
    assert check(s, d) == []
    assert len(d.placements) == 4
    assert max(per_node(s, d.placements, "job").values()) == 1


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_gang_kept_apart_waits_where_too_few_nodes_remain(scheduler: str) -> None:
    # 4 workers, 3 nodes: a gang-aware scheduler places none of them.
    s = cluster(3, ("job", 4, 4, ("job",)))
    d = schedule(s, scheduler, FAST)
    assert d.placements == {}
    assert check(s, d) == []


def test_the_gang_s_bound_pods_take_their_nodes() -> None:
    # Two of the group run on n0 and n1: of 4 nodes, 2 are left for the 2 pending.
    bound = [pod(f"job-{i}").req(cpu=1).gang("job").apart("job").on(f"n{i}") for i in range(2)]
    pending = [pod(f"job-{i}").req(cpu=1).gang("job").apart("job") for i in range(2, 5)]
    s = state(
        nodes=[node(f"n{i}").cap(cpu=8, pods=110) for i in range(4)],
        pods=[*bound, *pending],
        gangs=[gang("job", 4)],
    )
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert len(d.placements) == 2
    assert set(d.placements.values()) == {"n2", "n3"}


def test_groups_apart_from_their_own_only() -> None:
    # Two gangs of 3 kept apart each on 3 nodes: each node runs one pod of each.
    s = cluster(3, ("a", 3, 3, ("a",)), ("b", 3, 3, ("b",)))
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert len(d.placements) == 6
    assert Counter(d.placements.values()) == {"n0": 2, "n1": 2, "n2": 2}


def test_the_validator_refuses_two_of_a_group_on_a_node() -> None:
    s = cluster(2, ("job", 2, 2, ("job",)))
    bad = Decision(
        scheduler="test", placements={"job-0": "n0", "job-1": "n0"}, status=SolveStatus.GREEDY
    )
    kinds = [(v.kind, v.subject) for v in check(s, bad)]
    assert kinds == [("capacity", "n0")]
    ok = bad.model_copy(update={"placements": {"job-0": "n0", "job-1": "n1"}})
    assert check(s, ok) == []


def test_the_column_is_worth_no_share() -> None:
    # The same gang with and without the group: the same value per pod, the same queue
    # dominant resource (cpu), so the objective prices both alike.
    plain = prepare(cluster(4, ("job", 2, 2, ())))
    kept = prepare(cluster(4, ("job", 2, 2, ("job",))))
    assert [c.value for c in kept.classes] == [c.value for c in plain.classes]
    dominant = kept.resources[kept.queues[0].dominant]
    assert dominant == plain.resources[plain.queues[0].dominant] == "cpu"
    assert "apart:job" in kept.resources and "apart:job" not in plain.resources


def test_a_node_short_of_the_group_is_told_in_kube_scheduler_s_words() -> None:
    # A pod of the group runs on n0: three workers, three nodes, one of them taken.
    taken = pod("other").req(cpu=1).apart("job").on("n0")
    s = state(
        nodes=[node(f"n{i}").cap(cpu=8, pods=110) for i in range(3)],
        pods=[taken, *workers("job", 3, 1, "job")],
        gangs=[gang("job", 3)],
    )
    d = schedule(s, "gang-greedy", FAST).explained()
    assert d.placements == {}
    why = d.unschedulable["job"]
    assert "2/3 pods fit" in why and "node(s) didn't match pod anti-affinity rules" in why


def test_a_gang_needing_more_nodes_than_there_are_takes_no_slot_and_says_why() -> None:
    # MAX_GROUPS older gangs that can never be placed (gated; more workers than nodes)
    # leave the slots to the young one that fits.
    pods = [p for p in workers("young", 2, 1, "young")]
    gangs = [gang("young", 2).created(1000)]
    for i in range(MAX_GROUPS):
        gated = workers(f"gated{i}", 2, 1, f"gated{i}")
        pods += [
            p.build().model_copy(update={"gates": ("kueue.x-k8s.io/admission",)}) for p in gated
        ]
        pods += workers(f"wide{i}", 5, 1, f"wide{i}")
        gangs += [gang(f"gated{i}", 2).created(i), gang(f"wide{i}", 5).created(i)]
    s = state(nodes=[node(f"n{i}").cap(cpu=8, pods=110) for i in range(4)], pods=pods, gangs=gangs)
    problem = prepare(s)
    assert "young" not in problem.invalid
    assert "more nodes than are in service" in problem.invalid["wide0"]
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == [] and sorted(d.placements) == ["young-0", "young-1"]


def test_groups_beyond_the_cycle_s_limit_wait_and_the_first_go() -> None:
    # MAX_GROUPS + 2 gangs of 2 kept apart: two wait a cycle, never of the oldest half.
    jobs = [f"j{i:02d}" for i in range(MAX_GROUPS + 2)]
    pods = [
        pod(f"{job}-{k}").req(cpu="100m").gang(job).apart(job).created(i)
        for i, job in enumerate(jobs)
        for k in range(2)
    ]
    s = state(
        nodes=[node(f"n{i}").cap(cpu=64, pods=110) for i in range(4)],
        pods=pods,
        gangs=[gang(job, 2).created(i) for i, job in enumerate(jobs)],
    )
    problem = prepare(s)
    waiting = sorted(problem.invalid)
    assert len(waiting) == 2 and not set(waiting) & set(jobs[: MAX_GROUPS // 2])
    assert "other such groups go first" in problem.invalid[waiting[0]]
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    going = [job for job in jobs if job not in waiting]
    assert {p.rsplit("-", 1)[0] for p in d.placements} == set(going)
    for job in going:
        assert max(per_node(s, d.placements, job).values()) == 1


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_keeps_groups_apart_and_never_trails_gang_greedy(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [
        node(f"n{i}").cap(cpu=rng.choice([4, 8, 16]), memory="64Gi", pods=110) for i in range(8)
    ]
    pods, gangs = [], []
    for g in range(rng.randint(3, 7)):
        size = rng.randint(2, 6)
        groups = (f"g{g}",) if rng.random() < 0.6 else ()
        cpu = rng.choice([1, 2, 3])
        pods += [pod(f"g{g}-{k}").req(cpu=cpu).gang(f"g{g}").apart(*groups) for k in range(size)]
        gangs.append(gang(f"g{g}", rng.randint(1, size)).created(g))
    s = state(nodes=nodes, pods=pods, gangs=gangs)
    weights = FAST.weights
    cpsat, greedy = schedule(s, "cpsat", FAST), schedule(s, "gang-greedy", FAST)
    for d in (cpsat, greedy):
        assert check(s, d) == []
        by_node = Counter(
            (node, g) for p, node in d.placements.items() for g in s.pods_by_name()[p].apart
        )
        assert all(n == 1 for n in by_node.values())
    assert sum(score(s, cpsat, weights).values()) >= sum(score(s, greedy, weights).values())


def test_groups_take_turns_so_first_ones_no_room_takes_starve_no_one() -> None:
    # The first MAX_GROUPS gangs ask for a node label no node has: they never place, yet
    # every later gang gets a column within a few cycles, even a quiet cluster's, which
    # come three turns of the snapshot clock apart.
    nowhere = [
        p.selector(pool="none")
        for i in range(MAX_GROUPS)
        for p in workers(f"a{i:02d}", 2, 1, f"a{i:02d}")
    ]
    later = [p for i in range(MAX_GROUPS) for p in workers(f"b{i:02d}", 2, 1, f"b{i:02d}")]
    gangs = [gang(f"a{i:02d}", 2).created(i) for i in range(MAX_GROUPS)]
    gangs += [gang(f"b{i:02d}", 2).created(100 + i) for i in range(MAX_GROUPS)]
    for p in later:
        p.created(100)
    s = state(
        nodes=[node(f"n{i}").cap(cpu=8, pods=110) for i in range(4)],
        pods=[*nowhere, *later],
        gangs=gangs,
    )
    modelled: set[str] = set()
    for cycle in range(12):
        problem = prepare(s.model_copy(update={"now_s": cycle * 3 * TURN_S}))
        modelled |= {g.name for g in problem.gangs}
    assert {f"b{i:02d}" for i in range(MAX_GROUPS)} <= modelled


def test_the_validator_reads_nominations_and_leaves_pairs_already_bound_alone() -> None:
    # Two pods of group G nominated onto n0 once its victim goes: voids the preemption.
    s = state(
        nodes=[node("n0").cap(cpu=4, pods=110), node("n1").cap(cpu=4, pods=110)],
        pods=[
            pod("lo-0").req(cpu=4).gang("lo").on("n0").started(0),
            pod("h-0").req(cpu=1).gang("h").apart("G"),
            pod("h-1").req(cpu=1).gang("h").apart("G"),
            # Two of group B already share n1 (bound before the rule was read).
            pod("r-0").req(cpu=1).gang("r").apart("B").on("n1"),
            pod("r-1").req(cpu=1).gang("r").apart("B").on("n1"),
            pod("b-0").req(cpu=1).gang("b").apart("C"),
        ],
        gangs=[gang("lo", 1), gang("h", 2).priority(10), gang("r", 2), gang("b", 1)],
    )
    nominated = Decision(
        scheduler="test",
        status=SolveStatus.GREEDY,
        evictions={"lo-0": "preempted by gang h"},
        nominated={"h-0": "n0", "h-1": "n0"},
    )
    assert [(v.kind, v.subject) for v in check(s, nominated)] == [("nomination", "n0")]
    # A pod of another group placed beside the bound pair: no finding of this decision's.
    beside = Decision(scheduler="test", status=SolveStatus.GREEDY, placements={"b-0": "n1"})
    assert check(s, beside) == []


@pytest.mark.parametrize(
    ("make", "most"), [(instances.realistic_apart, 1), (instances.realistic_spread, 2)]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_on_a_real_shaped_cluster_groups_take_at_most_their_room_a_node(
    seed: int, make: Callable[[int, int, int], ClusterState], most: int
) -> None:
    s = make(seed, 40, 60)
    kept = {p.gang for p in s.pods if p.apart}
    assert kept and all(
        len(p.apart) == 1 and apart_room(p.apart[0]) == most
        for p in s.pods
        if p.gang in kept and not p.node_name
    )
    config = SolverConfig(time_limit_s=2.0, seed=seed)
    decisions = {name: schedule(s, name, config) for name in ("cpsat", "gang-greedy")}
    pods = s.pods_by_name()
    for d in decisions.values():
        assert check(s, d) == []
        apart = Counter((node, pods[p].gang) for p, node in d.placements.items() if pods[p].apart)
        assert apart and max(apart.values()) <= most
    weights = config.weights
    assert sum(score(s, decisions["cpsat"], weights).values()) >= sum(
        score(s, decisions["gang-greedy"], weights).values()
    )


# A topology spread's group: at most two of it a node (``APART_EACH``).
EACH_2 = f"job{APART_EACH}2"


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize("config", [FAST, NODE_LEVEL_OFF], ids=["node-level", "classes"])
def test_a_group_with_a_room_of_two_takes_at_most_two_a_node(
    scheduler: str, config: SolverConfig
) -> None:
    # 6 workers of 1 cpu would fit on one 8-cpu node; at most two a node, they need 3.
    s = cluster(4, ("job", 6, 6, (EACH_2,)))
    d = schedule(s, scheduler, config)
    assert check(s, d) == []
    assert len(d.placements) == 6
    assert max(per_node(s, d.placements, "job").values()) == 2
    # On 2 nodes (room for 4) the gang waits, told it needs more nodes.
    s = cluster(2, ("job", 6, 6, (EACH_2,)))
    d = schedule(s, scheduler, config).explained()
    assert d.placements == {}
    if scheduler in ("cpsat", "gang-greedy"):
        assert "more nodes than are in service" in d.unschedulable["job"]


def room_of_two(size: int) -> ClusterState:
    """A gang of ``size`` workers of the group on 3 nodes, where n0 runs one of the group
    and n1 two: room for one more on n0, none on n1, two on n2."""
    bound = [
        pod(f"run-{i}").req(cpu=1).apart(EACH_2).on(n) for i, n in enumerate(("n0", "n1", "n1"))
    ]
    return state(
        nodes=[node(f"n{i}").cap(cpu=8, pods=110) for i in range(3)],
        pods=[*bound, *workers("job", size, 1, EACH_2)],
        gangs=[gang("job", size)],
    )


def test_a_room_of_two_counts_the_bound_pods_and_the_validator_reads_it() -> None:
    s = room_of_two(3)
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert sorted(d.placements.values()) == ["n0", "n2", "n2"]
    third = Decision(
        scheduler="test",
        status=SolveStatus.GREEDY,
        placements={"job-0": "n0", "job-1": "n0", "job-2": "n2"},
    )
    assert [(v.kind, v.subject) for v in check(s, third)] == [("capacity", "n0")]
    # A fourth worker finds no room: the gang waits, in kube-scheduler's words.
    d = schedule(room_of_two(4), "gang-greedy", FAST).explained()
    assert d.placements == {}
    assert "didn't match pod topology spread constraints" in d.unschedulable["job"]
