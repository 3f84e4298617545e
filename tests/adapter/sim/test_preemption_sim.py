"""Preemption in the simulator: the shipped scenario, termination grace and lost work."""

from __future__ import annotations

import pytest

from adapter.loop import LoopSettings
from adapter.sim.measures import summarise
from adapter.sim.run import SimRun, simulate
from adapter.sim.scenario import Scenario, load_scenario, materialise
from solver.config import SolverConfig

CONFIG = SolverConfig(time_limit_s=0.5, deterministic=True)


def _run(scheduler: str = "cpsat", **settings: object) -> SimRun:
    base = load_scenario("preemption")
    s = Scenario.model_validate(
        {
            **base.model_dump(),
            "settings": {**base.settings.model_dump(), **settings},
        }
    )
    return simulate(materialise(s), LoopSettings(scheduler=scheduler, solver=CONFIG))


def _started(run: SimRun) -> dict[str, float | None]:
    return {j.name: j.started_s for j in run.jobs}


def test_the_urgent_gang_preempts_and_the_second_queue_reclaims_whole_gangs() -> None:
    run = _run()
    summary = summarise(run)
    started = _started(run)
    assert summary.partial_gangs == 0 and summary.deadlocks == 0
    assert summary.finished_jobs == summary.jobs
    # Evicted at its arrival (600 s), bound once the 30 s grace has passed.
    assert started["urgent"] == 630
    # prod takes back its deserved 32 GPUs at once: its four gangs start together.
    assert all(started[f"serve-{i}"] == 1830 for i in range(4))
    assert summary.evicted_pods == 4 + 16  # two 2-pod gangs, then eight
    assert summary.lost_resource_s["nvidia.com/gpu"] > 0
    victims = {e.job for e in run.events if e.kind == "preempted"}
    evicted_pods: dict[str, int] = {}
    for e in run.events:
        if e.kind == "preempted":
            evicted_pods[e.job] = evicted_pods.get(e.job, 0) + 1
    assert all(count == 2 for count in evicted_pods.values())  # whole gangs, never half
    assert len(victims) == 10


def test_without_preemption_the_urgent_gang_waits_for_the_batch_jobs() -> None:
    run = _run(preemption=False)
    started = _started(run)
    assert started["urgent"] is not None and started["urgent"] >= 14_400
    assert summarise(run).evicted_pods == 0


@pytest.mark.parametrize("grace", [0, 120])
def test_the_preemptor_starts_once_the_grace_period_has_passed(grace: int) -> None:
    # Evicted in the cycle at 600 s; bound by the first cycle (every 10 s) after the
    # victims are gone, and never in the cycle that evicted them.
    assert _started(_run(termination_grace_s=grace))["urgent"] == max(600 + grace, 610)


def test_a_second_preemption_keeps_what_the_first_checkpointed() -> None:
    """Half kept: preempted after 400 s (200 kept), bound again and preempted after 100 s
    more (50 kept): 750 s left, 250 core-seconds lost, not 850 and 350."""
    from adapter.sim.cluster import SimulatedCluster
    from adapter.sim.scenario import materialise

    scenario = Scenario.model_validate(
        {
            "name": "ck",
            "settings": {"checkpoint_fraction": 0.5, "termination_grace_s": 0},
            "nodes": [{"name": "n", "count": 1, "allocatable": {"cpu": "4"}}],
            "jobs": [{"name": "j", "duration_s": 1000, "replicas": 1, "requests": {"cpu": "1"}}],
        }
    )
    cluster = SimulatedCluster(materialise(scenario))

    def until(t: float) -> None:
        while (at := cluster.next_event_time()) is not None and at <= t:
            cluster.step()
        cluster.advance(t)

    until(0)
    cluster.bind_one("j-0", "n-0")
    until(400)
    cluster.preempt({"j-0": "test"})
    assert cluster.jobs["j"].remaining_s == 800
    until(400)
    cluster.bind_one("j-0", "n-0")
    until(500)
    cluster.preempt({"j-0": "test"})
    assert cluster.jobs["j"].remaining_s == 750
    assert cluster.preempted_pod_s["cpu"] == 250 * 1000


def test_a_checkpoint_keeps_part_of_the_evicted_work() -> None:
    lost = summarise(_run()).lost_resource_s["nvidia.com/gpu"]
    kept_half = summarise(_run(checkpoint_fraction=0.5)).lost_resource_s["nvidia.com/gpu"]
    assert kept_half == pytest.approx(lost / 2)


def test_an_elastic_job_loses_the_work_of_the_pods_that_ran_only() -> None:
    """A (6 pods of 1 cpu, minMember 4) runs 4 pods on a-0 (its other 2 never find room)
    until B (priority 100, bound to a-0 by its selector) evicts it at 600 s: 4 pods x
    1,000 millicores x 600 s of work lost, not 6 pods' worth."""
    scenario = Scenario.model_validate(
        {
            "name": "elastic",
            "settings": {
                "cycle_s": 10,
                "termination_grace_s": 30,
                "preemption": True,
                "horizon_s": 700,
            },
            "nodes": [{"name": "a", "count": 1, "allocatable": {"cpu": "4"}}],
            "jobs": [
                {
                    "name": "A",
                    "replicas": 6,
                    "min_member": 4,
                    "requests": {"cpu": "1"},
                    "duration_s": 100000,
                },
                {
                    "name": "B",
                    "replicas": 4,
                    "requests": {"cpu": "1"},
                    "duration_s": 100000,
                    "priority": 100,
                    "submit_s": 600,
                },
            ],
        }
    )
    run = simulate(materialise(scenario), LoopSettings(scheduler="cpsat", solver=CONFIG))
    assert _started(run)["A"] == 0
    assert summarise(run).lost_resource_s["cpu"] == pytest.approx(4 * 1000 * 600)
