"""The simulated cluster and the simulation runner: invariants over random small scenarios,
and hand-worked runs whose times follow from the scenario alone."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.cluster import ClusterError
from adapter.loop import LoopSettings
from adapter.results import CycleResult
from adapter.sim.cluster import SimulatedCluster
from adapter.sim.measures import RunSummary, summarise
from adapter.sim.run import SimRun, simulate
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
from solver.model import GPU, Queue

QUICK = SolverConfig(time_limit_s=0.2)
REPRODUCIBLE = SolverConfig(time_limit_s=0.2, deterministic=True)
GANG_AWARE = ["cpsat", "gang-greedy"]
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def simulated_figures(summary: RunSummary) -> dict[str, Any]:
    """The summary without the figures that time the machine (wall time, cycle latency,
    bind rate per wall second): those differ between two runs of one seed."""
    return {
        k: v
        for k, v in summary.model_dump().items()
        if k != "wall_s" and not k.startswith(("cycle_p", "decide_p")) and not k.endswith("_per_s")
    }


def loop(scheduler: str, config: SolverConfig = QUICK) -> LoopSettings:
    return LoopSettings(scheduler=scheduler, solver=config)


def scenario(*jobs: JobGroup, nodes: tuple[NodeGroup, ...], **sim: Any) -> Scenario:
    return Scenario(name="t", settings=SimSettings(**sim), nodes=nodes, jobs=jobs)


def cpu_nodes(count: int, cpu: str, pods: int | None = None) -> tuple[NodeGroup, ...]:
    allocatable: dict[str, str | int] = {"cpu": cpu}
    if pods is not None:
        allocatable["pods"] = pods
    return (NodeGroup(name="n", count=count, allocatable=allocatable),)


def times(run: SimRun) -> dict[str, tuple[float | None, float | None]]:
    return {j.name: (j.started_s, j.finished_s) for j in run.jobs}


# --- random small scenarios ------------------------------------------------------------

CPU_MILLI = {"500m": 500, "1": 1000, "2": 2000}


def _slots(node_groups: list[NodeGroup], cpu: str, gpu: int) -> int:
    """How many pods asking ``cpu`` and ``gpu`` the empty cluster holds."""
    total = 0
    for g in node_groups:
        per_node = int(g.allocatable["cpu"]) * 1000 // CPU_MILLI[cpu]
        if gpu:
            per_node = min(per_node, int(g.allocatable[GPU]) // gpu)
        total += g.count * per_node
    return total


@st.composite
def scenarios(
    draw: st.DrawFn, *, fitting: bool, failure_rate: float = 0.0, pod_interval: bool = True
) -> Scenario:
    """1-3 node groups of 1-3 nodes, 1-2 queues, 1-3 job groups of 1-3 jobs.

    With ``fitting``, every job's replicas fit the empty cluster together: pods of one
    job are identical, so they fit iff the sum over nodes of how many fit each node is at
    least the replica count; replicas are clamped to that.
    """
    node_groups = []
    for i in range(draw(st.integers(1, 3))):
        node_groups.append(
            NodeGroup(
                name=f"n{i}",
                count=draw(st.integers(1, 3)),
                allocatable={
                    "cpu": str(draw(st.sampled_from([2, 4, 8]))),
                    GPU: draw(st.sampled_from([0, 1, 2])),
                },
            )
        )
    queues = tuple(
        Queue(name=f"q{i}", weight=draw(st.integers(1, 3))) for i in range(draw(st.integers(1, 2)))
    )
    jobs = []
    for i in range(draw(st.integers(1, 3))):
        cpu = draw(st.sampled_from(sorted(CPU_MILLI)))
        gpu = draw(st.sampled_from([0, 0, 1]))
        replicas = draw(st.integers(1, 4))
        if fitting:
            if _slots(node_groups, cpu, gpu) == 0:  # only a GPU request can fit no node
                gpu = 0
            replicas = min(replicas, _slots(node_groups, cpu, gpu))
        jobs.append(
            JobGroup(
                name=f"j{i}",
                count=draw(st.integers(1, 3)),
                queue=draw(st.sampled_from([q.name for q in queues])),
                submit_s=draw(st.integers(0, 60)),
                submit_every_s=draw(st.integers(0, 40)),
                duration_s=draw(st.integers(5, 120)),
                replicas=replicas,
                min_member=draw(st.integers(1, replicas)),
                pod_interval_s=draw(st.sampled_from([0, 0, 3])) if pod_interval else 0,
                requests={"cpu": cpu, GPU: gpu},
            )
        )
    return Scenario(
        name="random",
        settings=SimSettings(
            cycle_s=10,
            deadlock_after_s=120,
            bind_failure_rate=failure_rate,
            seed=draw(st.integers(0, 2**16)),
        ),
        nodes=tuple(node_groups),
        queues=queues,
        jobs=tuple(jobs),
    )


def check_capacity(t: float, result: CycleResult, cluster: SimulatedCluster) -> None:
    used: dict[str, dict[str, int]] = {n: defaultdict(int) for n in cluster.nodes}
    for p in cluster.pods.values():
        if p.node_name is not None:
            for r, q in p.demand().items():
                used[p.node_name][r] += q
    for name, n in cluster.nodes.items():
        for r, q in used[name].items():
            assert q <= n.allocatable[r], (t, name, r, q)
        # The cluster's own free-capacity books agree with the pods bound.
        for r, alloc in n.allocatable.items():
            assert cluster.free[name][r] == alloc - used[name][r], (t, name, r)


@PROPERTY
@given(scenarios(fitting=False), st.sampled_from(["cpsat", "gang-greedy", "greedy"]))
def test_no_node_is_ever_above_capacity(s: Scenario, scheduler: str) -> None:
    decisions_checked = 0

    def hook(t: float, result: CycleResult, cluster: SimulatedCluster) -> None:
        nonlocal decisions_checked
        check_capacity(t, result, cluster)
        if scheduler != "greedy" and result.decision is not None:
            # A gang-aware decision breaks no hard rule, so the loop never has to reject one.
            assert result.violations == [], result.violations
            decisions_checked += 1

    run = simulate(materialise(s), loop(scheduler), on_cycle=hook)
    assert run.cycles, "the first arrival always triggers a cycle"
    if scheduler != "greedy":
        assert decisions_checked == len(run.cycles)


def assert_all_finish_whole(run: SimRun) -> RunSummary:
    summary = summarise(run)
    assert run.stopped == "every job finished", run.stopped
    assert summary.finished_jobs == summary.jobs == len(run.workload.jobs)
    assert summary.deadlocks == 0
    assert summary.partial_gangs == 0
    assert all(not s.partial_gangs for s in run.samples)
    assert all(j.started_s is not None and j.started_s >= j.submit_s for j in run.jobs)
    assert summary.makespan_s is not None
    return summary


@PROPERTY
@given(scenarios(fitting=True), st.sampled_from(GANG_AWARE))
def test_gang_schedulers_finish_every_job_that_fits_alone(s: Scenario, scheduler: str) -> None:
    assert_all_finish_whole(simulate(materialise(s), loop(scheduler)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(fitting=True, failure_rate=0.3), st.sampled_from(GANG_AWARE))
def test_same_seed_same_run(s: Scenario, scheduler: str) -> None:
    workload = materialise(s)
    first = simulate(workload, loop(scheduler, REPRODUCIBLE))
    second = simulate(workload, loop(scheduler, REPRODUCIBLE))
    assert simulated_figures(summarise(first)) == simulated_figures(summarise(second))
    assert first.events == second.events
    assert first.samples == second.samples


@PROPERTY
@given(scenarios(fitting=True, failure_rate=0.3), st.sampled_from(GANG_AWARE))
def test_bind_failures_never_leave_a_partial_gang(s: Scenario, scheduler: str) -> None:
    run = simulate(materialise(s), loop(scheduler))
    summary = assert_all_finish_whole(run)
    # Every refusal is either absorbed (the gang still reached minMember) or rolled back;
    # the simulator's evictions of bound pods cannot fail, so nothing is stranded.
    assert all(not c.result.stranded for c in run.cycles)
    assert summary.failed_binds == sum(len(c.result.failed_binds) for c in run.cycles)


# --- the seed talk's deadlock ------------------------------------------------------------


def seed() -> Workload:
    return materialise(load_scenario("seed-deadlock"))


def test_greedy_deadlocks_the_seed_scenario() -> None:
    # 3 nodes x 2 pod slots = 6 slots. Tick 0: only job-a-0 exists (pods every 2 s;
    # job-b from 1 s), fewer than minMember 6: no scheduler considers the gang. Tick 15:
    # every pod exists; greedy binds the 6 oldest: a-0 (0 s), b-0 (1), a-1 (2), b-1 (3),
    # a-2 (4), b-2 (5) -> 3 + 3 of 6, neither runs. No event is left, so the deadlock is
    # declared at the last bind + deadlock_after_s = 15 + 60.
    run = simulate(seed(), loop("greedy"))
    summary = summarise(run)
    assert [(c.t, sorted(c.result.bound)) for c in run.cycles] == [
        (0.0, []),
        (15.0, [f"job-{j}-{k}" for j in "ab" for k in range(3)]),
    ]
    assert summary.deadlocks == 1
    assert summary.deadlock_at_s == [75.0]
    assert summary.finished_jobs == 0
    assert summary.makespan_s is None
    assert run.stopped.startswith("deadlock")
    assert summary.partial_gangs == 2
    last = run.samples[-1]
    assert sorted(last.partial_gangs) == ["job-a", "job-b"]
    assert last.partial == {"cpu": 6000, "pods": 6}


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_gang_schedulers_run_the_seed_scenario_one_job_after_the_other(scheduler: str) -> None:
    # Tick 0: one pod of job-a exists, minMember 6: nothing binds. Next event at 1 s, so
    # the next cycle is tick 15, when all 12 pods exist: one job takes all 6 slots and runs
    # 15..75. At tick 75 the other job binds and runs 75..135. Makespan: first submit (0)
    # to last finish (135) = 135 s, whichever job goes first.
    run = simulate(seed(), loop(scheduler))
    summary = assert_all_finish_whole(run)
    assert summary.makespan_s == 135.0
    assert sorted(start for start, _ in times(run).values()) == [15.0, 75.0]
    assert sorted(end for _, end in times(run).values()) == [75.0, 135.0]


# --- hand-worked single jobs ---------------------------------------------------------------


@pytest.mark.parametrize("scheduler", [*GANG_AWARE, "greedy"])
def test_bind_latency_delays_the_start_by_exactly_the_latency(scheduler: str) -> None:
    # Submitted at 3 s, cycles every 10 s: bound at tick 10. Without latency it runs
    # 10..60; with 7 s of latency its pods start at 17, so it runs 17..67.
    job = JobGroup(name="j", submit_s=3, duration_s=50, replicas=2, requests={"cpu": "1"})
    nodes = cpu_nodes(2, "1")
    plain = simulate(materialise(scenario(job, nodes=nodes)), loop(scheduler))
    late = simulate(materialise(scenario(job, nodes=nodes, bind_latency_s=7)), loop(scheduler))
    assert times(plain) == {"j": (10.0, 60.0)}
    assert times(late) == {"j": (17.0, 67.0)}


def test_nothing_after_the_horizon_happens() -> None:
    # Cycles every 50 s: bound at 50, it would finish at 100, the first tick after the
    # horizon at 55. Events up to that tick used to be processed, and counted.
    job = JobGroup(name="j", submit_s=3, duration_s=50, replicas=2, requests={"cpu": "1"})
    s = scenario(job, nodes=cpu_nodes(2, "1"), horizon_s=55, cycle_s=50)
    run = simulate(materialise(s), loop("gang-greedy"))
    assert times(run) == {"j": (50.0, None)}
    assert run.stopped.startswith("horizon 55")


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_a_job_starts_once_min_member_pods_are_bound(scheduler: str) -> None:
    # 3 replicas, minMember 2, one pod created every 20 s (at 0, 20, 40); cycles every
    # 10 s. At ticks 0 and 10 only one pod exists (< minMember); at tick 20 two do: they
    # bind and the job runs 20..50 without waiting for the third pod (created at 40).
    job = JobGroup(
        name="j",
        duration_s=30,
        replicas=3,
        min_member=2,
        pod_interval_s=20,
        requests={"cpu": "1"},
    )
    run = simulate(materialise(scenario(job, nodes=cpu_nodes(3, "1"))), loop(scheduler))
    assert times(run) == {"j": (20.0, 50.0)}
    started = next(e for e in run.events if e.kind == "started")
    assert started.t == 20.0


def one_pod_cluster(**sim: Any) -> SimulatedCluster:
    job = JobGroup(name="j", duration_s=100, replicas=1, requests={"cpu": "1"})
    cluster = SimulatedCluster(materialise(scenario(job, nodes=cpu_nodes(1, "1"), **sim)))
    cluster.step()  # the arrival at 0
    return cluster


def run_out(cluster: SimulatedCluster) -> None:
    while cluster.next_event_time() is not None:
        cluster.step()


def test_eviction_pauses_a_job_and_keeps_its_remaining_time() -> None:
    # Runs 0..30 (30 of 100 s done), paused 30..50, runs again from 50 with 70 s left:
    # finishes at 120 = 100 + the 20 s it was paused. No grace period: room back at once.
    cluster = one_pod_cluster(termination_grace_s=0)
    cluster.bind_one("j-0", "n-0")
    assert cluster.jobs["j"].running
    cluster.advance(30)
    cluster.evict_one("j-0", "test")
    js = cluster.jobs["j"]
    assert not js.running and js.remaining_s == 70.0
    assert [e.kind for e in cluster.events_log] == ["arrived", "started", "evicted", "paused"]
    assert cluster.partial_jobs() == []  # nothing bound any more
    assert cluster.snapshot().pending_pods()[0].name == "j-0"
    cluster.advance(50)
    cluster.bind_one("j-0", "n-0")
    run_out(cluster)  # the stale finish at 100 is skipped
    assert js.started_s == 0.0
    assert js.finished_s == 120.0
    assert cluster.done()
    assert cluster.free["n-0"]["cpu"] == 1000 and cluster.pods == {}


def test_a_deleted_pod_holds_its_room_for_the_grace_period() -> None:
    # A rollback's delete, as on a real node: terminating for 30 s, then pending again.
    cluster = one_pod_cluster(termination_grace_s=30)
    cluster.bind_one("j-0", "n-0")
    cluster.advance(10)
    cluster.evict_one("j-0", "rolled back")
    assert cluster.free["n-0"]["cpu"] == 0
    assert cluster.snapshot().pending_pods() == []
    assert cluster.partial_jobs() == []  # terminating: no member that runs
    with pytest.raises(ClusterError):
        cluster.evict_one("j-0", "again")  # already going
    while (t := cluster.next_event_time()) is not None and t <= 40:
        cluster.step()
    assert cluster.free["n-0"]["cpu"] == 1000
    assert [p.name for p in cluster.snapshot().pending_pods()] == ["j-0"]


def test_the_simulated_cluster_refuses_what_a_kubelet_would() -> None:
    cluster = one_pod_cluster()
    with pytest.raises(ClusterError) as missing_node:
        cluster.bind_one("j-0", "nowhere")
    assert missing_node.value.reason == "NotFound"
    with pytest.raises(ClusterError) as missing_pod:
        cluster.bind_one("ghost", "n-0")
    assert missing_pod.value.reason == "NotFound"
    with pytest.raises(ClusterError) as unbound:
        cluster.evict_one("j-0", "test")
    assert unbound.value.reason == "NotFound"
    cluster.bind_one("j-0", "n-0")
    with pytest.raises(ClusterError) as twice:
        cluster.bind_one("j-0", "n-0")
    assert twice.value.reason == "Conflict"


def test_a_bind_that_would_overcommit_is_refused() -> None:
    # Two 1-CPU pods on one 1-CPU node: the second bind is refused and changes nothing.
    job = JobGroup(name="j", duration_s=10, replicas=2, requests={"cpu": "1"})
    cluster = SimulatedCluster(materialise(scenario(job, nodes=cpu_nodes(1, "1"))))
    cluster.step()
    cluster.bind_one("j-0", "n-0")
    version = cluster.version
    with pytest.raises(ClusterError) as refused:
        cluster.bind_one("j-1", "n-0")
    assert refused.value.reason == "OutOfResources"
    assert cluster.free["n-0"]["cpu"] == 0
    assert cluster.pods["j-1"].node_name is None
    assert cluster.version == version
    assert cluster.partial_jobs() == ["j"]


@pytest.mark.parametrize("scheduler", [*GANG_AWARE, "greedy"])
def test_a_job_too_big_for_any_node_never_starts_and_the_run_ends(scheduler: str) -> None:
    # 2-CPU nodes; "big" asks 16 CPUs for its one pod. "small" runs 0..40 and finishes;
    # then nothing can change, so the run stops instead of cycling forever.
    big = JobGroup(name="big", duration_s=10, replicas=1, requests={"cpu": "16"})
    small = JobGroup(name="small", duration_s=40, replicas=1, requests={"cpu": "1"})
    run = simulate(materialise(scenario(big, small, nodes=cpu_nodes(2, "2"))), loop(scheduler))
    assert run.stopped == "nothing left that can run"
    assert times(run) == {"big": (None, None), "small": (0.0, 40.0)}
    assert run.end_s == 40.0
    assert len(run.cycles) <= 2  # tick 0, and at most once more when small frees its node
    summary = summarise(run)
    assert summary.finished_jobs == 1 and summary.deadlocks == 0


# --- defects found while writing these tests (see the report) ------------------------------


def test_pods_of_a_finished_job_are_not_created_again() -> None:
    # Job j: 3 replicas, minMember 1, pods created at 0, 100, 200; runs 0..10 on its first
    # pod and finishes. A job controller creates no pods for a finished job, so the
    # snapshot at 150 must hold none of j's pods. The pod-creation event at 100 re-adds
    # every pod of j created by then (j-0 as well: finishing forgot which pods were
    # created), as pending pods of a PodGroup that no longer exists.
    job = JobGroup(
        name="j", duration_s=10, replicas=3, min_member=1, pod_interval_s=100, requests={"cpu": 1}
    )
    later = JobGroup(name="k", submit_s=150, duration_s=10, replicas=1, requests={"cpu": "1"})
    snapshots: dict[float, list[str]] = {}

    def hook(t: float, result: CycleResult, cluster: SimulatedCluster) -> None:
        snapshots[t] = sorted(p.name for p in cluster.snapshot().pods)

    run = simulate(
        materialise(scenario(job, later, nodes=cpu_nodes(1, "4"))),
        loop("gang-greedy"),
        on_cycle=hook,
    )
    assert times(run) == {"j": (0.0, 10.0), "k": (150.0, 160.0)}
    assert snapshots[150.0] == ["k-0"], f"pods of finished job j came back: {snapshots[150.0]}"


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_a_whole_gang_waiting_out_its_bind_latency_is_not_deadlocked(scheduler: str) -> None:
    # One gang of 2 pods, bound whole at 0; its pods start after 400 s of bind latency.
    # The deadlock rule ("nothing can ever change") does not hold: the pods' start at 400
    # is a scheduled event. Expected: runs 400..450, every job finished. The runner counts
    # the fully bound gang as partial, sees no event before 0 + 300 s, and stops at 300.
    job = JobGroup(name="j", duration_s=50, replicas=2, requests={"cpu": "1"})
    s = scenario(job, nodes=cpu_nodes(2, "1"), bind_latency_s=400, deadlock_after_s=300)
    run = simulate(materialise(s), loop(scheduler))
    assert run.deadlocks == [], f"a whole gang in its bind latency was declared: {run.stopped}"
    assert times(run) == {"j": (400.0, 450.0)}


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_bind_latency_does_not_make_a_whole_gang_partial(scheduler: str) -> None:
    # The same gang with 7 s of latency: all of its minMember pods are bound at 0, so it is
    # never "partly bound" (RunSummary.partial_gangs: "distinct gangs ever seen partly
    # bound"); its 7 s of start-up are not resources held by a partial gang. Expected 0 and
    # 0.0; the measures count it (1 gang, 2 CPUs x 7 s = 14,000 millicore-seconds).
    job = JobGroup(name="j", duration_s=50, replicas=2, requests={"cpu": "1"})
    s = scenario(job, nodes=cpu_nodes(2, "1"), bind_latency_s=7)
    run = simulate(materialise(s), loop(scheduler))
    summary = summarise(run)
    assert times(run) == {"j": (7.0, 57.0)}
    seen = sorted({g for sample in run.samples for g in sample.partial_gangs})
    assert seen == [], f"whole gang(s) {seen} counted as partial during their bind latency"
    assert summary.partial_gangs == 0
    assert summary.partial_resource_s["cpu"] == 0.0, summary.partial_resource_s


@pytest.mark.parametrize("seed", range(4))
def test_a_refused_bind_is_retried_not_called_a_deadlock(seed: int) -> None:
    # Greedy binds pod by pod; with half the binds refused, the first cycle leaves the
    # 4-pod job partly bound. A retry is due next tick, so the run must not stop as
    # deadlocked: the job ends up whole and finishes.
    s = Scenario(
        name="flaky",
        settings=SimSettings(bind_failure_rate=0.5, seed=seed, deadlock_after_s=300),
        nodes=(NodeGroup(name="n", count=2, allocatable={"cpu": "4"}),),
        jobs=(JobGroup(name="j", duration_s=60, replicas=4, requests={"cpu": "1"}),),
    )
    run = simulate(materialise(s), LoopSettings(scheduler="greedy"))
    assert run.deadlocks == []
    assert run.stopped == "every job finished"


def test_the_simulated_kubelet_refuses_what_a_real_one_refuses() -> None:
    """A node selector the node does not match, or a NoExecute taint not tolerated:
    a kubelet refuses the pod; the simulator ran it. A cordon or a NoSchedule taint
    keeps schedulers off only, and a kubelet runs a pod bound there."""
    from solver.scheduling_terms import Taint, TaintEffect

    def cluster_of(node: NodeGroup, **job: Any) -> SimulatedCluster:
        group = JobGroup(name="j", duration_s=100, replicas=1, requests={"cpu": "1"}, **job)
        cluster = SimulatedCluster(materialise(scenario(group, nodes=(node,))))
        cluster.step()
        return cluster

    zoned = NodeGroup(name="n", count=1, allocatable={"cpu": "4"}, labels={"zone": "x"})
    with pytest.raises(ClusterError, match="node selector"):
        cluster_of(zoned, node_selector={"zone": "y"}).bind_one("j-0", "n-0")
    cluster_of(zoned, node_selector={"zone": "x"}).bind_one("j-0", "n-0")
    for effect, refused in ((TaintEffect.NO_EXECUTE, True), (TaintEffect.NO_SCHEDULE, False)):
        taint = Taint(key="gpu", value="", effect=effect)
        tainted = NodeGroup(name="n", count=1, allocatable={"cpu": "4"}, taints=(taint,))
        cluster = cluster_of(tainted)
        if refused:
            with pytest.raises(ClusterError, match="NoExecute"):
                cluster.bind_one("j-0", "n-0")
        else:
            cluster.bind_one("j-0", "n-0")
            assert cluster.jobs["j"].running
    # A node selector is refused whatever else the node fails first for schedulers (a
    # NoSchedule taint): their first reason is not the kubelet's.
    taint = Taint(key="gpu", value="", effect=TaintEffect.NO_SCHEDULE)
    other = NodeGroup(
        name="n", count=1, allocatable={"cpu": "4"}, labels={"zone": "x"}, taints=(taint,)
    )
    with pytest.raises(ClusterError, match="node selector"):
        cluster_of(other, node_selector={"zone": "y"}).bind_one("j-0", "n-0")


def test_gangs_that_block_each_other_while_other_jobs_run_are_a_deadlock_at_the_end() -> None:
    """The seed's two half-placed gangs (greedy), beside a side node that runs one small
    job after another until the horizon: no moment is idle, so the idle-cluster check
    never fired, and the run ended at its horizon with 0 deadlocks."""
    import json

    raw = {
        "name": "busy",
        "settings": {"cycle_s": 15, "deadlock_after_s": 60, "seed": 0, "horizon_s": 3000},
        "nodes": [
            {"name": "node", "count": 3, "allocatable": {"cpu": "2", "pods": 2}},
            {
                "name": "side",
                "count": 1,
                "allocatable": {"cpu": "1", "pods": 1},
                "labels": {"side": "yes"},
            },
        ],
        "jobs": [
            {
                "name": "job-a",
                "submit_s": 0,
                "duration_s": 60,
                "replicas": 6,
                "requests": {"cpu": "1"},
                "pod_interval_s": 2,
            },
            {
                "name": "job-b",
                "submit_s": 1,
                "duration_s": 60,
                "replicas": 6,
                "requests": {"cpu": "1"},
                "pod_interval_s": 2,
            },
            {
                "name": "small",
                "count": 60,
                "submit_s": 0,
                "submit_every_s": 0,
                "duration_s": 100,
                "replicas": 1,
                "requests": {"cpu": "1"},
                "node_selector": {"side": "yes"},
            },
        ],
    }
    busy = Scenario.model_validate_json(json.dumps(raw))
    greedy = summarise(simulate(materialise(busy), loop("greedy")))
    assert greedy.partial_gangs == 2 and greedy.deadlocks == 1
    assert "unchanged for 60 s at the end" in greedy.stopped
    gang = summarise(simulate(materialise(busy), loop("gang-greedy")))
    assert gang.partial_gangs == 0 and gang.deadlocks == 0


@pytest.mark.parametrize("scheduler", GANG_AWARE)
def test_jobs_asking_a_node_per_pod_run_one_pod_per_node(scheduler: str) -> None:
    # 3 nodes of 8 cpu; jobs of 3 one-cpu pods would all fit on one node, but each pod
    # asks a node of its own: both jobs run at once, one pod of each per node, and a
    # job of 4 such pods never fits.
    jobs = (
        JobGroup(
            name="a", count=2, duration_s=60, replicas=3, requests={"cpu": "1"}, one_per_node=True
        ),
        JobGroup(name="wide", duration_s=60, replicas=4, requests={"cpu": "1"}, one_per_node=True),
    )
    workload = materialise(scenario(*jobs, nodes=cpu_nodes(3, "8"), horizon_s=300))
    cycles: list[float] = []

    def on_cycle(now: float, result: CycleResult, cluster: SimulatedCluster) -> None:
        cycles.append(now)
        bound = {p.name: p.node_name for p in cluster.snapshot().pods if p.node_name}
        for job in ("a-0", "a-1", "wide"):
            on = [n for p, n in bound.items() if p.rsplit("-", 1)[0] == job]
            assert len(on) == len(set(on)), (now, job, on)

    run = simulate(workload, loop(scheduler), on_cycle=on_cycle)
    assert cycles
    started = {j.name: j.started_s for j in run.jobs}
    assert started["a-0"] == started["a-1"] == 0.0
    assert started["wide"] is None
