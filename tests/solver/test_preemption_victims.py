"""What evicting a victim gives, on every path: a running gang this decision grows is not
evicted whole (the validator refuses a decision that does it), and on a node holding more
than its allocatable an eviction first repays that."""

from __future__ import annotations

import pytest

from solver.model import ClusterState, Decision, SolveStatus
from solver.validate import check
from tests.builders import gang, node, pod, queue, state
from tests.solver.test_preemption import PATHS, _decide


def _elastic_victim() -> ClusterState:
    """v (minMember 2) runs 2 x 2 cpu on n0 and has a third pod pending (1 cpu), which
    fits on n1; hi (priority 10) needs all of n0. Evicting v whole for hi while placing
    v-2 on n1 would leave v running one pod, below its minMember."""
    return state(
        [node("n0").cap(cpu=4), node("n1").cap(cpu=2)],
        [
            pod("v-0").req(cpu=2).gang("v").on("n0").started(0),
            pod("v-1").req(cpu=2).gang("v").on("n0").started(0),
            pod("v-2").req(cpu=1).gang("v"),
            pod("hi-0").req(cpu=4).gang("hi"),
        ],
        [gang("v", 2), gang("hi", 1).priority(10)],
        [queue()],
        now_s=600,
    )


def _pods_left(st_: ClusterState, decision: Decision, gang_name: str) -> int:
    members = {p.name for p in st_.pods if p.gang == gang_name}
    running = {p.name for p in st_.bound_pods() if p.name in members}
    given = (set(decision.placements) | set(decision.nominated)) & members
    return len(running - set(decision.evictions)) + len(given)


@pytest.mark.parametrize("how", PATHS)
def test_a_victim_evicted_whole_is_not_given_its_pending_pod(how: str) -> None:
    st_ = _elastic_victim()
    decision = _decide(st_, how)
    left = _pods_left(st_, decision, "v")
    assert left == 0 or left >= 2
    assert check(st_, decision) == []
    # Either hi preempts v whole (and v-2 waits), or v grows and hi waits: whole gangs
    # both ways. The joint model does the first; placement first grows v, and a gang
    # growing this cycle is no victim after it.
    assert ("hi-0" in decision.nominated) == ("v-2" not in decision.placements)


def test_the_validator_refuses_a_victim_left_below_minmember_by_its_own_growth() -> None:
    st_ = _elastic_victim()
    decision = Decision(
        scheduler="test",
        status=SolveStatus.GREEDY,
        placements={"v-2": "n1"},
        evictions={"v-0": "preempted", "v-1": "preempted"},
        nominated={"hi-0": "n0"},
    )
    violations = check(st_, decision)
    assert any(v.subject == "v" and "below minMember" in v.message for v in violations)


def _overcommitted(gpu: bool) -> ClusterState:
    """Node n's allocatable shrank below what runs there: 2 cpu, 3 bound. ``gpu``: d (no
    gang) holds the cpu and v a GPU, which h wants; else v holds the 3 cpu and h wants
    them, which n no longer has."""
    if gpu:
        pods = [
            pod("d").req(cpu=3).on("n"),
            pod("v").req(gpu=1).gang("v").on("n").started(0),
            pod("h").req(gpu=1).gang("h"),
        ]
        nodes = [node("n").cap(cpu=2, gpu=1)]
    else:
        pods = [pod("v").req(cpu=3).gang("v").on("n").started(0), pod("h").req(cpu=3).gang("h")]
        nodes = [node("n").cap(cpu=2)]
    return state(nodes, pods, [gang("v", 1), gang("h", 1).priority(10)], [queue()], now_s=600)


@pytest.mark.parametrize("how", PATHS)
def test_an_eviction_on_an_overcommitted_node_first_repays_it(how: str) -> None:
    # Evicting v leaves 2 cpu: h (3 cpu) would not fit, so nothing is evicted for it.
    st_ = _overcommitted(gpu=False)
    decision = _decide(st_, how)
    assert decision.evictions == {} and decision.nominated == {}
    assert check(st_, decision) == []


@pytest.mark.parametrize("how", PATHS)
def test_a_node_over_in_one_resource_still_serves_another(how: str) -> None:
    # n is over in cpu, which h does not ask for: v's GPU is h's once v is gone.
    st_ = _overcommitted(gpu=True)
    decision = _decide(st_, how)
    assert set(decision.evictions) == {"v"} and decision.nominated == {"h": "n"}
    assert check(st_, decision) == []
