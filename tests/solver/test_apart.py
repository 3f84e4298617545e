"""Pods kept apart (required pod anti-affinity per node, ``solver.apart``) on clusters
small enough to work the answer out by hand: every scheduler keeps a group at most one
pod per node, counting the group's bound pods, and the column costs no share."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from solver.apart import MAX_GROUPS
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
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
    s = cluster(2, ("job", 3, 3, ("job",)))
    d = schedule(s, "gang-greedy", FAST)
    reasons = " ".join(d.unschedulable.values())
    assert "didn't match pod anti-affinity rules" in reasons, d.unschedulable


def test_groups_beyond_the_cycle_s_limit_wait_and_the_first_go() -> None:
    # MAX_GROUPS + 2 gangs of 2 kept apart, oldest first: the two youngest wait a cycle.
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
    assert sorted(problem.invalid) == jobs[-2:]
    assert "other such groups go first" in problem.invalid[jobs[-1]]
    d = schedule(s, "cpsat", FAST)
    assert check(s, d) == []
    assert {p.rsplit("-", 1)[0] for p in d.placements} == set(jobs[:-2])
    for job in jobs[:-2]:
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
