"""The benchmark instance generators: reproducible, the sizes they promise, within capacity.

Pre-use tolerance: the generator aims at exactly ``round(0.35 * total GPUs)``; the test
accepts 35% +- 1 percentage point so a later change to the rounding does not break it,
while a real drift (e.g. a wrong target) still fails.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from benchmarks import instances
from solver.model import CPU, GPU, MEMORY, PODS, ClusterState
from solver.problem import prepare

PRE_USE_TOLERANCE = 0.01


@pytest.fixture(scope="module")
def ref() -> ClusterState:
    return instances.reference(0)


@pytest.fixture(scope="module")
def big() -> ClusterState:
    return instances.large(0)


def _members(state: ClusterState) -> dict[str, list[str]]:
    members: dict[str, list[str]] = defaultdict(list)
    for pod in state.pods:
        members[pod.gang_name()].append(pod.name)
    return members


def _pending_gangs(state: ClusterState) -> set[str]:
    return {p.gang_name() for p in state.pending_pods()}


def test_same_seed_same_state() -> None:
    assert instances.reference(0) == instances.reference(0)
    assert instances.reference(7) == instances.reference(7)
    assert instances.large(3, nodes=300, pods=800) == instances.large(3, nodes=300, pods=800)
    assert instances.scheduler_perf(50, 10, ((2, 7),)) == instances.scheduler_perf(
        50, 10, ((2, 7),)
    )
    assert instances.seed_deadlock() == instances.seed_deadlock()


def test_different_seed_different_state() -> None:
    assert instances.reference(0) != instances.reference(1)
    assert instances.large(0, nodes=300, pods=800) != instances.large(1, nodes=300, pods=800)


def test_generators_leave_global_random_alone() -> None:
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    instances.reference(5)
    assert random.random() == expected


@pytest.mark.parametrize("which", ["ref", "big"])
def test_gpu_nodes(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    assert len(state.nodes) == (200 if which == "ref" else 1000)
    types = Counter(n.labels["gpu-type"] for n in state.nodes)
    assert set(types) == {"a100", "v100", "t4"}
    assert max(types.values()) - min(types.values()) <= 1
    for node in state.nodes:
        assert node.allocatable[CPU] == 32_000
        assert node.allocatable[MEMORY] == 128 * 2**30
        assert node.allocatable[GPU] == 8
        assert node.allocatable[PODS] == 110
    assert [(q.name, q.weight) for q in state.queues] == [
        ("q1", 1),
        ("q2", 2),
        ("q3", 3),
        ("q4", 4),
    ]


@pytest.mark.parametrize("which", ["ref", "big"])
def test_pre_use_about_35_percent_and_within_capacity(
    which: str, request: pytest.FixtureRequest
) -> None:
    state: ClusterState = request.getfixturevalue(which)
    total_gpus = sum(n.allocatable[GPU] for n in state.nodes)
    bound = state.bound_pods()
    used = sum(p.requests[GPU] for p in bound)
    assert abs(used / total_gpus - 0.35) <= PRE_USE_TOLERANCE
    nodes = {n.name: n for n in state.nodes}
    load: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in bound:
        assert pod.node_name in nodes
        load[pod.node_name].update(pod.demand())
    for name, demand in load.items():
        for resource, quantity in demand.items():
            assert quantity <= nodes[name].allocatable[resource], (name, resource)
    # cpu and memory are proportional to GPUs
    assert sum(p.requests[CPU] for p in bound) == 4_000 * used
    assert sum(p.requests[MEMORY] for p in bound) == 16 * 2**30 * used


@pytest.mark.parametrize("which", ["ref", "big"])
def test_bound_pods_respect_their_selector(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    nodes = {n.name: n for n in state.nodes}
    for pod in state.bound_pods():
        assert pod.node_name is not None
        for key, value in pod.node_selector.items():
            assert nodes[pod.node_name].labels[key] == value


@pytest.mark.parametrize("which", ["ref", "big"])
def test_running_gangs_are_running(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    members = _members(state)
    pods = {p.name: p for p in state.pods}
    running = {p.gang_name() for p in state.bound_pods()}
    assert running.isdisjoint(_pending_gangs(state))
    for gang in state.gangs:
        if gang.name in running:
            assert gang.min_member == len(members[gang.name])
            assert all(pods[m].node_name is not None for m in members[gang.name])
    assert {g.queue for g in state.gangs if g.name in running} <= {"q1", "q2", "q3", "q4"}


def test_reference_pending_gangs(ref: ClusterState) -> None:
    pending = _pending_gangs(ref)
    assert len(pending) == 150
    members = _members(ref)
    pods = {p.name: p for p in ref.pods}
    gangs = [g for g in ref.gangs if g.name in pending]
    sizes = Counter(len(members[g.name]) for g in gangs)
    assert set(sizes) <= {1, 2, 4, 8, 16, 32}
    assert sizes[1] > sizes[2] > sizes[4] >= sizes[32]  # skewed towards small
    selected = 0
    for gang in gangs:
        spec = {pods[m].requests for m in members[gang.name]}
        assert len(spec) == 1  # all pods of a gang are alike
        (requests,) = spec
        gpus = requests[GPU]
        assert gpus in (1, 2, 4, 8)
        assert requests[CPU] == 4_000 * gpus
        assert requests[MEMORY] == 16 * 2**30 * gpus
        assert 1 <= gang.min_member <= len(members[gang.name])
        selected += bool(pods[members[gang.name][0]].node_selector)
    assert 0.35 <= selected / len(gangs) <= 0.65  # about half
    elastic = [g for g in gangs if g.min_member < len(members[g.name])]
    assert 0 < len(elastic) < len(gangs) / 2  # some, not most
    priorities = Counter(g.priority for g in gangs)
    assert set(priorities) == {0, 10}
    assert priorities[0] > priorities[10]
    created = [g.created_s for g in ref.gangs]
    assert created == sorted(created) and len(set(created)) == len(created)


def test_large_sizes(big: ClusterState) -> None:
    assert len(big.pending_pods()) == 5000
    members = _members(big)
    assert all(1 <= len(members[g]) <= 32 for g in _pending_gangs(big))
    for gang in big.gangs:
        assert gang.min_member <= len(members[gang.name])


def test_scheduler_perf_shapes() -> None:
    full = instances.scheduler_perf()
    assert len(full.nodes) == 5000
    assert len(full.pods) == 3000 and len(full.gangs) == 1000
    assert not full.bound_pods()
    assert [q.name for q in full.queues] == ["default"]
    node = full.nodes[0]
    assert (node.allocatable[CPU], node.allocatable[MEMORY], node.allocatable[PODS]) == (
        4_000,
        32 * 2**30,
        110,
    )
    pod = full.pods[0]
    assert (pod.requests[CPU], pod.requests[MEMORY]) == (100, 100 * 2**20)

    small = instances.scheduler_perf(500, 300, ((3, 100),))
    assert len(small.nodes) == 500
    members = _members(small)
    assert Counter(len(m) for m in members.values()) == {3: 300, 100: 3}
    for gang in small.gangs:
        assert gang.min_member == len(members[gang.name])
        assert gang.queue == "default"


def test_seed_deadlock() -> None:
    state = instances.seed_deadlock()
    slots = sum(min(n.allocatable[PODS], n.allocatable[CPU] // 1_000) for n in state.nodes)
    assert len(state.nodes) == 3 and slots == 6
    members = _members(state)
    assert sorted(members) == ["job-a", "job-b"]
    assert {g.name: g.min_member for g in state.gangs} == {"job-a": 6, "job-b": 6}
    assert all(len(m) == 6 for m in members.values())
    assert all(p.requests[CPU] == 1_000 and p.node_name is None for p in state.pods)
    assert [q.name for q in state.queues] == ["default"]


@pytest.mark.parametrize(
    "build",
    [
        lambda: instances.reference(0),
        lambda: instances.large(0, nodes=300, pods=800),
        lambda: instances.scheduler_perf(50, 10, ((2, 7),)),
        instances.seed_deadlock,
    ],
)
def test_prepare_accepts_every_gang(build: Callable[[], ClusterState]) -> None:
    problem = prepare(build())
    assert problem.invalid == {}
    assert problem.waiting_pods == {}
