"""A run's figures (``adapter.sim.measures``) on runs small enough to work out by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from adapter.loop import LoopSettings
from adapter.sim.measures import durations, fairness, jain, summarise
from adapter.sim.run import JobRecord, Sample, SimRun, simulate
from adapter.sim.scenario import (
    JobGroup,
    NodeGroup,
    Scenario,
    SimSettings,
    Workload,
    load_scenario,
    materialise,
)
from solver.config import SolverConfig
from solver.model import GPU, Queue, Resources

QUICK = SolverConfig(time_limit_s=0.5)
GANG_AWARE = ["cpsat", "gang-greedy"]


def loop(scheduler: str) -> LoopSettings:
    return LoopSettings(scheduler=scheduler, solver=QUICK)


def sample(
    t: float,
    held: dict[str, int] | None = None,
    pending: dict[str, int] | None = None,
    allocated: dict[str, int] | None = None,
    busy: dict[str, int] | None = None,
    partial: dict[str, int] | None = None,
) -> Sample:
    return Sample(
        t=t,
        allocated=allocated or {},
        busy=busy or {},
        partial=partial or {},
        partial_gangs=(),
        queue_allocated=held or {},
        queue_pending=pending or {},
        running_jobs=0,
        waiting_jobs=0,
    )


def hand_run(
    workload: Workload,
    samples: Sequence[Sample],
    end_s: float,
    jobs: Sequence[JobRecord] = (),
) -> SimRun:
    capacity: dict[str, int] = {}
    for n in workload.nodes:
        for r, q in n.allocatable.items():
            capacity[r] = capacity.get(r, 0) + q
    return SimRun(
        workload=workload,
        settings=LoopSettings(scheduler="gang-greedy"),
        capacity=capacity,
        fair_resource=workload.fair_resource(),
        samples=list(samples),
        jobs=list(jobs),
        end_s=end_s,
    )


def workload(*nodes: NodeGroup, queues: tuple[Queue, ...] = (), **sim: float) -> Workload:
    return materialise(
        Scenario(name="hand", settings=SimSettings(**sim), nodes=nodes, queues=queues)
    )


# --- utilisation and job times ------------------------------------------------------------


def test_utilisation_is_a_time_average_over_the_run() -> None:
    # One 4-CPU node; a job holds 2 CPUs from 0 to 100 s of a 200 s run:
    # 2000 m x 100 s / (4000 m x 200 s) = 0.25. Pod slots are not a utilisation.
    w = workload(NodeGroup(name="n", allocatable={"cpu": "4"}))
    half = {"cpu": 2000, "pods": 1}
    run = hand_run(w, [sample(0, allocated=half, busy=half), sample(100)], end_s=200)
    summary = summarise(run)
    assert summary.utilisation == {"cpu": pytest.approx(0.25)}
    assert summary.busy_utilisation == {"cpu": pytest.approx(0.25)}
    assert summary.partial_resource_s == {"cpu": 0.0}
    assert summary.fair_resource == "cpu"


def test_a_run_that_never_waited_has_no_backlogged_utilisation_rather_than_zero() -> None:
    w = workload(NodeGroup(name="n", allocatable={"cpu": "4"}))
    half = {"cpu": 2000, "pods": 1}
    never = summarise(hand_run(w, [sample(0, allocated=half), sample(100)], end_s=200))
    assert never.backlogged_utilisation == {}
    waited = [sample(0, allocated=half, pending={"default": 1000}), sample(100)]
    assert summarise(hand_run(w, waited, end_s=200)).backlogged_utilisation == {
        "cpu": pytest.approx(0.5)
    }


def test_durations_hold_each_sample_until_the_next_and_the_last_until_the_end() -> None:
    samples = [sample(0), sample(0), sample(30), sample(45)]
    assert durations(samples, 100) == [0.0, 30.0, 15.0, 55.0]


def test_job_times_from_the_job_records() -> None:
    # JCT = finish - submit: 100 and 180 -> mean 140. Queueing delay = start - submit:
    # 0, 30 and (started, unfinished) 5 -> mean 35/3; p95 of [0, 5, 30] interpolates
    # between 5 (50th pct) and 30 (100th): 5 + 0.9 x 25 = 27.5. A job left unfinished
    # means no makespan.
    w = workload(NodeGroup(name="n", allocatable={"cpu": "4"}))
    jobs = [
        JobRecord("a", "default", 1, 1, submit_s=0, started_s=0, finished_s=100),
        JobRecord("b", "default", 1, 1, submit_s=20, started_s=50, finished_s=200),
        JobRecord("c", "default", 1, 1, submit_s=150, started_s=155, finished_s=None),
        JobRecord("d", "default", 1, 1, submit_s=190, started_s=None, finished_s=None),
    ]
    summary = summarise(hand_run(w, [sample(0)], end_s=200, jobs=jobs))
    assert summary.jobs == 4 and summary.finished_jobs == 2
    assert summary.jct_mean_s == pytest.approx(140.0)
    assert summary.queueing_delay_mean_s == pytest.approx(35 / 3)
    assert summary.queueing_delay_p95_s == pytest.approx(27.5)
    assert summary.makespan_s is None
    finished = summarise(hand_run(w, [sample(0)], end_s=200, jobs=jobs[:2]))
    assert finished.makespan_s == 200.0  # first submit 0 to last finish 200


def test_a_simulated_run_measures_what_its_jobs_did() -> None:
    # One 4-CPU node, cycles every 10 s. a (2 CPUs, 100 s) is bound at tick 0 and runs
    # 0..100. b (4 CPUs, 50 s) arrives at 145, is bound at tick 150 and runs 150..200.
    # CPU: 2000 m x 100 s + 4000 m x 50 s = 400,000 m.s of 4000 m x 200 s -> 0.5.
    # JCT: a 100, b 200 - 145 = 55 -> mean 77.5. Delay: 0 and 5 -> mean 2.5.
    s = Scenario(
        name="two",
        settings=SimSettings(cycle_s=10),
        nodes=(NodeGroup(name="n", allocatable={"cpu": "4"}),),
        jobs=(
            JobGroup(name="a", duration_s=100, replicas=1, requests={"cpu": "2"}),
            JobGroup(name="b", submit_s=145, duration_s=50, replicas=1, requests={"cpu": "4"}),
        ),
    )
    for scheduler in ("gang-greedy", "greedy"):
        summary = summarise(simulate(materialise(s), loop(scheduler)))
        assert summary.end_s == 200.0
        assert summary.makespan_s == 200.0
        assert summary.utilisation == {"cpu": pytest.approx(0.5)}
        assert summary.busy_utilisation == {"cpu": pytest.approx(0.5)}
        assert summary.jct_mean_s == pytest.approx(77.5)
        assert summary.queueing_delay_mean_s == pytest.approx(2.5)
        assert summary.binds == 2 and summary.partial_gangs == 0


# --- the seed deadlock ----------------------------------------------------------------------


def test_partial_gang_resource_seconds_of_greedy_on_the_seed_deadlock() -> None:
    # Tick 0: only job-a-0 exists, fewer pods than minMember 6, so no scheduler considers
    # the gang (NotEnoughTasks). Tick 15: greedy binds the 6 oldest pods, 3 of each job;
    # the deadlock is declared at 15 + 60 = 75, where the run ends. Partial: 6 CPUs for
    # 15..75 = 6000 x 60 = 360,000 millicore-seconds; utilisation 360,000 / (6000 x 75)
    # = 0.8, none of it busy.
    run = simulate(materialise(load_scenario("seed-deadlock")), loop("greedy"))
    summary = summarise(run)
    assert summary.end_s == 75.0
    assert summary.partial_resource_s == {"cpu": pytest.approx(360_000.0)}
    assert summary.utilisation == {"cpu": pytest.approx(0.8)}
    assert summary.busy_utilisation == {"cpu": 0.0}
    assert summary.binds == 6
    assert summary.jct_mean_s is None and summary.queueing_delay_mean_s is None


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_gang_schedulers_on_the_seed_deadlock_waste_nothing(scheduler: str) -> None:
    # One job runs 15..75 on all 6 CPUs, the other 75..135; the run ends at 135.
    # Utilisation 6000 x 120 / (6000 x 135) = 8/9, all of it busy. Whichever job goes
    # first: JCTs 75 and 134 (a first: a 75 - 0, b 135 - 1) or 74 and 135 -> mean 104.5;
    # delays 15 and 74 (or 14 and 75) -> mean 44.5.
    summary = summarise(simulate(materialise(load_scenario("seed-deadlock")), loop(scheduler)))
    assert summary.end_s == 135.0
    assert summary.partial_resource_s == {"cpu": 0.0}
    assert summary.utilisation == {"cpu": pytest.approx(8 / 9)}
    assert summary.busy_utilisation == {"cpu": pytest.approx(8 / 9)}
    assert summary.jct_mean_s == pytest.approx(104.5)
    assert summary.queueing_delay_mean_s == pytest.approx(44.5)


# --- fairness -----------------------------------------------------------------------------


def contention() -> Scenario:
    """4 nodes of 1 GPU; queues a (weight 1) and b (weight 3), 20 one-GPU jobs each, all
    submitted at 0, 100 s long. Rounds run 0..100, 100..200, ...; the horizon (350 s) stops
    the run at 350, in the 4th round, when at most 16 of a queue's 20 jobs have run, so
    both queues are backlogged throughout. Deserved: 4 GPUs by weight 1:3 = 1 and 3 GPUs."""
    return Scenario(
        name="contention",
        settings=SimSettings(cycle_s=10, horizon_s=350),
        nodes=(NodeGroup(name="gpu", count=4, allocatable={"cpu": "8", GPU: 1}),),
        queues=(Queue(name="a", weight=1), Queue(name="b", weight=3)),
        jobs=tuple(
            JobGroup(
                name=q, count=20, queue=q, duration_s=100, replicas=1, requests={"cpu": "1", GPU: 1}
            )
            for q in ("a", "b")
        ),
    )


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_weighted_shares_under_contention(scheduler: str) -> None:
    run = simulate(materialise(contention()), loop(scheduler))
    summary = summarise(run)
    assert run.stopped.startswith("horizon")
    assert summary.end_s == 350.0  # nothing past the horizon is counted
    assert summary.fair_resource == GPU
    assert summary.backlogged_s == 350.0 and summary.all_backlogged_s == 350.0
    a, b = summary.queues["a"], summary.queues["b"]
    assert (a.weight_share, b.weight_share) == (0.25, 0.75)
    assert (a.backlogged_s, b.backlogged_s) == (350.0, 350.0)
    assert a.deserved == pytest.approx(0.25) and b.deserved == pytest.approx(0.75)
    # Both gang schedulers give a 1 GPU and b 3 in every round: exactly the deserved share.
    assert a.share == pytest.approx(0.25) and b.share == pytest.approx(0.75)
    assert summary.max_share_error is not None and summary.max_share_error < 1e-9
    assert summary.jain_index == pytest.approx(1.0)
    assert summary.finished_jobs == 12  # 3 rounds of 4 GPUs done; the 4th runs at 350


def test_greedy_ignores_queue_weights_under_contention() -> None:
    # Pod by pod, oldest first, names breaking ties: a's pods sort first and take all 4
    # GPUs every round. Shares 1 and 0 against 0.25 and 0.75: errors +0.75 and -0.75.
    # Jain over held/deserved = [4, 0]: 4^2 / (2 x 16) = 0.5.
    summary = summarise(simulate(materialise(contention()), loop("greedy")))
    a, b = summary.queues["a"], summary.queues["b"]
    assert a.share == pytest.approx(1.0) and b.share == 0.0
    assert a.error == pytest.approx(0.75) and b.error == pytest.approx(-0.75)
    assert summary.max_share_error == pytest.approx(0.75)
    assert summary.jain_index == pytest.approx(0.5)


def test_fairness_water_fills_among_backlogged_queues_with_caps() -> None:
    # 12 GPUs; queues a (1), b (1), c (2). Each sample's deserved amounts, by weighted
    # water-filling with caps = held + pending:
    # A, 0..10: held a2 b4 c6, pending a0 b10 c10 -> caps 2, 14, 16. Level 3 would give a
    #   3 > 2: a stops at 2 (b 2, c 4), the 4 left go 1:2 -> b 10/3, c 20/3.
    #   Backlogged: b, c.
    # B, 10..30: held a0 b6 c6, pending a3 -> caps 3, 6, 6. Level 3: a 3 (cap), b 3, c 6
    #   (cap), then b takes the rest to 6. Backlogged: a (deserves 3, holds 0).
    # C, 30..40: held a1 b5 c6, pending 1 each -> caps 2, 6, 7: as A, a 2, b 10/3, c 20/3.
    #   Backlogged: all three.
    # D, 40..50: nothing pending, not judged.
    w = workload(
        NodeGroup(name="g", count=12, allocatable={GPU: 1}),
        queues=(Queue(name="a", weight=1), Queue(name="b", weight=1), Queue(name="c", weight=2)),
    )
    samples = [
        sample(0, held={"a": 2, "b": 4, "c": 6}, pending={"a": 0, "b": 10, "c": 10}),
        sample(10, held={"a": 0, "b": 6, "c": 6}, pending={"a": 3, "b": 0, "c": 0}),
        sample(30, held={"a": 1, "b": 5, "c": 6}, pending={"a": 1, "b": 1, "c": 1}),
        sample(40, held={"a": 1, "b": 5, "c": 6}, pending={"a": 0, "b": 0, "c": 0}),
    ]
    run = hand_run(w, samples, end_s=50)
    queues, any_s, all_s = fairness(run)
    assert any_s == 40.0  # A + B + C
    assert all_s == 10.0  # C
    # a: B (20 s, holds 0, deserves 3) + C (10 s, holds 1, deserves 2) over 30 s x 12:
    #   share 10/360 = 1/36, deserved 80/360 = 2/9.
    # b: A (10 s, 4, 10/3) + C (10 s, 5, 10/3) over 20 s x 12: 90/240 = 3/8, (200/3)/240 = 5/18.
    # c: A (6, 20/3) + C (6, 20/3): 120/240 = 1/2, (400/3)/240 = 5/9.
    expected = {
        "a": (30.0, 1 / 36, 2 / 9, 0.25),
        "b": (20.0, 3 / 8, 5 / 18, 0.25),
        "c": (20.0, 1 / 2, 5 / 9, 0.5),
    }
    for name, (span, share, deserved, weight_share) in expected.items():
        q = queues[name]
        assert q.backlogged_s == span, name
        assert q.share == pytest.approx(share), name
        assert q.deserved == pytest.approx(deserved), name
        assert q.error == pytest.approx(share - deserved), name
        assert q.weight_share == weight_share, name

    summary = summarise(run)
    # |errors|: a 7/36, b 7/72, c 1/18 -> max 7/36.
    assert summary.max_share_error == pytest.approx(7 / 36)
    # held/deserved: a 1/8, b 27/20, c 9/10 -> Jain = (sum)^2 / (3 x sum of squares).
    ratios = [1 / 8, 27 / 20, 9 / 10]
    assert summary.jain_index == pytest.approx(sum(ratios) ** 2 / (3 * sum(r * r for r in ratios)))
    assert summary.jain_index == pytest.approx(0.71002, abs=1e-5)


def test_a_queue_capability_caps_its_deserved_share() -> None:
    # 8 GPUs, queues a and b of equal weight, both backlogged (each holds 2, waits for 10).
    # Uncapped each deserves 4; with a capped at 3 GPUs, a deserves 3 and b the other 5.
    w = workload(
        NodeGroup(name="g", count=8, allocatable={GPU: 1}),
        queues=(
            Queue(name="a", weight=1, capability=Resources({GPU: 3})),
            Queue(name="b", weight=1),
        ),
    )
    run = hand_run(w, [sample(0, held={"a": 2, "b": 2}, pending={"a": 10, "b": 10})], end_s=10)
    queues, _, _ = fairness(run)
    assert queues["a"].deserved == pytest.approx(3 / 8)
    assert queues["b"].deserved == pytest.approx(5 / 8)


def test_a_queue_never_backlogged_is_not_judged() -> None:
    w = workload(
        NodeGroup(name="g", count=4, allocatable={GPU: 1}),
        queues=(Queue(name="a", weight=1), Queue(name="b", weight=1)),
    )
    run = hand_run(w, [sample(0, held={"a": 4, "b": 0}, pending={"a": 2, "b": 0})], end_s=10)
    queues, any_s, all_s = fairness(run)
    assert (any_s, all_s) == (10.0, 0.0)
    assert queues["b"].backlogged_s == 0.0 and queues["b"].share == 0.0
    # a alone asks for 6: it deserves all 4 GPUs (b's cap of 0 leaves them to a).
    assert queues["a"].share == 1.0 and queues["a"].deserved == 1.0 and queues["a"].error == 0


def test_jain_index() -> None:
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([2.0, 2.0]) == pytest.approx(1.0)  # equal ratios, whatever their level
    assert jain([4.0, 0.0]) == pytest.approx(0.5)  # one of two gets everything: 1/n
    assert jain([1.0, 3.0]) == pytest.approx(16 / 20)
    assert jain([]) is None
    assert jain([0.0, 0.0]) is None


def test_a_queue_over_then_under_its_share_is_off_though_its_signed_error_is_nought() -> None:
    # 10 GPUs, queues a and b of equal weight, both backlogged: a holds 9 for an hour,
    # then 1 for an hour (deserving 5 throughout). Signed, the hours cancel: 0 error.
    w = workload(
        NodeGroup(name="g", count=10, allocatable={GPU: 1}),
        queues=(Queue(name="a", weight=1), Queue(name="b", weight=1)),
    )
    samples = [
        sample(0, held={"a": 9, "b": 1}, pending={"a": 10, "b": 10}),
        sample(3600, held={"a": 1, "b": 9}, pending={"a": 10, "b": 10}),
    ]
    run = hand_run(w, samples, end_s=7200)
    queues, _, _ = fairness(run)
    assert queues["a"].error == pytest.approx(0.0)
    assert queues["a"].abs_error == pytest.approx(0.4)  # 4 of 10 GPUs off, all the time
    assert queues["a"].off_s == pytest.approx(7200)
    summary = summarise(run)
    assert summary.max_share_error == pytest.approx(0.0)
    assert summary.max_abs_share_error == pytest.approx(0.4)
    assert summary.max_off_share == pytest.approx(1.0)
