"""Volcano's minTaskMember: a gang is placed only with each task's minimum, on every
path (CP-SAT, gang-greedy, the preemption actions), and the validator refuses less."""

from __future__ import annotations

from collections import Counter

import pytest

from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.schedulers import schedule
from solver.validate import check
from tests.builders import gang, node, pod, queue, state
from tests.solver.test_preemption import PATHS, _decide


def _ps_and_workers(room: int = 4, running: tuple[str, ...] = ()) -> ClusterState:
    """Five workers and two parameter servers, minMember 4 with a ps and 3 workers
    required; the node has ``room`` cpus. Filling minMember class by class takes both ps
    and two workers, and the most value takes four workers: neither may run."""
    pods = [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(5)]
    # Half a cpu each: worth less than a worker, so a model blind to tasks takes workers.
    pods += [pod(f"job-ps{i}").req(cpu="500m").gang("job").task("ps") for i in range(2)]
    pods += [pod(name).req(cpu=1).gang(name).on("n0").started(0) for name in running]
    gangs = [gang("job", 4).task_minimums(ps=1, worker=3)]
    gangs += [gang(name, 1) for name in running]
    return state([node("n0").cap(cpu=room)], pods, gangs, [queue()], now_s=600)


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_the_gang_takes_each_tasks_minimum_before_the_rest(scheduler: str) -> None:
    st_ = _ps_and_workers()
    decision = schedule(st_, scheduler, SolverConfig(time_limit_s=1.0))
    tasks = Counter(name.rstrip("0123456789") for name in decision.placements)
    assert tasks["job-ps"] >= 1 and tasks["job-w"] >= 3
    assert check(st_, decision) == []


def test_the_validator_refuses_a_gang_without_a_tasks_minimum() -> None:
    st_ = _ps_and_workers()
    workers = {f"job-w{i}": "n0" for i in range(4)}
    decision = Decision(scheduler="test", status=SolveStatus.GREEDY, placements=workers)
    [violation] = check(st_, decision)
    assert violation.kind == "partial-gang" and "task 'ps' 0 < 1" in violation.message


def test_a_task_without_enough_pods_keeps_the_gang_waiting() -> None:
    st_ = _ps_and_workers()
    short = st_.model_copy(
        update={"gangs": (gang("job", 4).task_minimums(ps=3, worker=1).build(),)}
    )
    decision = schedule(short, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {}
    assert "task 'ps' has 2 pod(s), minTaskMember is 3" in decision.unschedulable["job"]


@pytest.mark.parametrize("how", PATHS)
def test_a_preemptor_takes_its_tasks_minimums(how: str) -> None:
    """Four low-priority pods of 1 cpu on a 5-cpu node; job (priority 10) evicts as many
    as it needs and is nominated with a ps and three workers."""
    st_ = _ps_and_workers(room=5, running=("a", "b", "c", "d"))
    st_ = st_.model_copy(
        update={
            "gangs": (
                gang("job", 4).task_minimums(ps=1, worker=3).priority(10).build(),
                *(g for g in st_.gangs if g.name != "job"),
            )
        }
    )
    decision = _decide(st_, how)
    tasks = Counter(name.rstrip("0123456789") for name in decision.nominated)
    assert tasks["job-ps"] >= 1 and tasks["job-w"] >= 3
    assert check(st_, decision) == []


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_minimums_above_min_member_are_skipped_as_volcano_skips_them(scheduler: str) -> None:
    """An elastic Volcano Job (minAvailable 3, a ps and 8 workers, no per-task
    minAvailable) gets minTaskMember {ps: 1, worker: 8} from its controller; Volcano
    checks no task when minMember is below their sum, and starts it with 3 pods."""
    pods = [pod("job-ps").req(cpu=1).gang("job").task("ps")]
    pods += [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(8)]
    st_ = state(
        [node("n0").cap(cpu=4)],
        pods,
        [gang("job", 3).task_minimums(ps=1, worker=8)],
        [queue()],
    )
    decision = schedule(st_, scheduler, SolverConfig(time_limit_s=1.0))
    assert len(decision.placements) == 4  # minMember 3, and what else fits
    assert check(st_, decision) == []


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_members_of_a_task_that_succeeded_count_towards_its_minimum(scheduler: str) -> None:
    # Two of four workers finished, two were re-created: 2 + 2 meet {worker: 4}.
    pods = [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(2, 4)]
    finished = gang("job", 4).task_minimums(worker=4).build()
    finished = finished.model_copy(update={"succeeded": 2, "succeeded_by_task": {"worker": 2}})
    st_ = state([node("n0").cap(cpu=8)], pods, [], [queue()])
    st_ = st_.model_copy(update={"gangs": (finished,)})
    decision = schedule(st_, scheduler, SolverConfig(time_limit_s=1.0))
    assert sorted(decision.placements) == ["job-w2", "job-w3"]
    assert check(st_, decision) == []


def test_a_task_whose_pods_are_gated_says_so() -> None:
    # Enough workers for minMember; the one ps is gated: the gang waits for the gate,
    # not for a missing pod.
    pods = [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(4)]
    gated = pod("job-ps0").req(cpu=1).gang("job").task("ps").build()
    gated = gated.model_copy(update={"gates": ("kueue.x-k8s.io/admission",)})
    st_ = state([node("n0").cap(cpu=8)], pods, [gang("job", 4).task_minimums(ps=1, worker=3)])
    st_ = st_.model_copy(update={"pods": (*st_.pods, gated)})
    decision = schedule(st_, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {}
    assert decision.unschedulable["job"].startswith("SchedulingGated: 1 pod(s) of task 'ps'")
