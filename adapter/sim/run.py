"""Run a scenario on the simulated cluster through the real scheduling loop.

The runner owns virtual time: it steps the cluster's events, calls
``adapter.loop.run_cycle`` every ``cycle_s`` while something is waiting, and records a
``Sample`` of the cluster after every change, from which ``adapter.sim.measures``
computes the run's figures. A cycle whose snapshot could not differ from the last one
(nothing arrived, finished, bound or failed since) is skipped: it would face the same
choice again (the baselines decide the same; cpsat, time-limited, may differ only among
near-equal answers), and skipping keeps month-long traces fast.

Deadlock: partial gangs hold resources, no job runs, and nothing has changed for
``deadlock_after_s``. Nothing can then ever change (preemption only evicts whole running
gangs or their pods above minMember, never a partial gang), so the run is reported as
deadlocked and ends there. A run that ends otherwise (its horizon, nothing left to run)
with partial gangs unchanged for ``deadlock_after_s`` is deadlocked too: while other jobs
ran, the check above could not see them. Partial gangs that block each other while other
jobs keep running are otherwise seen only in the partial-gang count, not as a deadlock.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from adapter.holds import Holds
from adapter.loop import LoopSettings, run_cycle
from adapter.metrics import LoopMetrics
from adapter.results import CycleResult
from adapter.rollbacks import Stranded
from adapter.sim.cluster import SimEvent, SimulatedCluster
from adapter.sim.scenario import Workload


@dataclass(frozen=True)
class Sample:
    """The cluster right after a change; it holds until the next sample."""

    t: float
    allocated: dict[str, int]  # held by bound pods
    busy: dict[str, int]  # held by running jobs: useful work
    partial: dict[str, int]  # held by gangs bound below minMember: wasted
    partial_gangs: tuple[str, ...]
    queue_allocated: dict[str, int]  # fair resource held, per queue
    queue_pending: dict[str, int]  # fair resource asked for by waiting pods, per queue
    running_jobs: int
    waiting_jobs: int

    def backlogged(self) -> set[str]:
        return {q for q, want in self.queue_pending.items() if want > 0}


@dataclass(frozen=True)
class CycleRecord:
    t: float
    result: CycleResult


@dataclass(frozen=True)
class JobRecord:
    name: str
    queue: str
    pods: int
    min_member: int
    submit_s: float
    started_s: float | None
    finished_s: float | None


@dataclass
class SimRun:
    """Everything a run produced; ``adapter.sim.measures.summarise`` turns it into figures."""

    workload: Workload
    settings: LoopSettings
    capacity: dict[str, int]
    fair_resource: str
    samples: list[Sample] = field(default_factory=list)
    cycles: list[CycleRecord] = field(default_factory=list)
    jobs: list[JobRecord] = field(default_factory=list)
    events: list[SimEvent] = field(default_factory=list)
    deadlocks: list[float] = field(default_factory=list)
    end_s: float = 0.0
    wall_s: float = 0.0
    stopped: str = ""  # why the run ended
    lost_resource_s: dict[str, float] = field(default_factory=dict)  # preempted work lost


CycleHook = Callable[[float, CycleResult, SimulatedCluster], None]
EventHook = Callable[[SimEvent], None]


def _sample(cluster: SimulatedCluster, fair: str) -> Sample:
    allocated: dict[str, int] = defaultdict(int)
    busy: dict[str, int] = defaultdict(int)
    partial: dict[str, int] = defaultdict(int)
    queue_allocated: dict[str, int] = {q.name: 0 for q in cluster.workload.queues}
    queue_pending: dict[str, int] = dict(queue_allocated)
    partial_gangs = []
    running = waiting = 0
    for name, js in cluster.jobs.items():
        if not js.arrived or js.finished_s is not None:
            continue
        held: dict[str, int] = defaultdict(int)
        bound = 0
        for pod in js.job.pods:
            current = cluster.pods.get(pod.name)
            if current is None:
                continue  # not created yet
            if current.node_name is None:
                if js.waiting:
                    queue_pending[js.job.queue] += current.requests[fair]
                continue
            if current.terminating:  # evicted: holds room, is no member of its gang
                for r, q in current.demand().items():
                    allocated[r] += q
                continue
            bound += 1
            for r, q in current.demand().items():
                held[r] += q
        queue_allocated[js.job.queue] += held[fair]
        for r, q in held.items():
            allocated[r] += q
        if js.running:
            running += 1
            for r, q in held.items():
                busy[r] += q
            continue
        waiting += 1
        # Bound whole but still inside the bind latency is starting, not partial.
        if 0 < bound < js.job.min_member:
            partial_gangs.append(name)
            for r, q in held.items():
                partial[r] += q
    return Sample(
        cluster.now,
        dict(allocated),
        dict(busy),
        dict(partial),
        tuple(partial_gangs),
        queue_allocated,
        queue_pending,
        running,
        waiting,
    )


def simulate(
    workload: Workload,
    settings: LoopSettings,
    metrics: LoopMetrics | None = None,
    on_cycle: CycleHook | None = None,
    on_event: EventHook | None = None,
) -> SimRun:
    sim = workload.scenario.settings
    if sim.preemption and settings.atomic() and not settings.solver.preemption:
        settings = settings.model_copy(
            update={"solver": settings.solver.model_copy(update={"preemption": True})}
        )
    cluster = SimulatedCluster(workload)
    capacity: dict[str, int] = defaultdict(int)
    for node in workload.nodes:
        for r, q in node.allocatable.items():
            capacity[r] += q
    run = SimRun(workload, settings, dict(capacity), workload.fair_resource())
    started = time.perf_counter()
    logged = 0

    def record() -> None:
        nonlocal logged
        run.samples.append(_sample(cluster, run.fair_resource))
        if on_event:
            for event in cluster.events_log[logged:]:
                on_event(event)
        logged = len(cluster.events_log)

    record()
    holds = Holds()
    stranded = Stranded()
    tick = 0.0
    decided_at_version = -1
    last_bind_s = 0.0  # when a cycle last bound or evicted anything
    while True:
        # Nothing past the horizon happens: a tick may jump beyond it.
        until = tick if sim.horizon_s is None else min(tick, sim.horizon_s)
        while (t := cluster.next_event_time()) is not None and t <= until:
            cluster.step()
            if cluster.next_event_time() != cluster.now:
                record()  # once per instant: a thousand arrivals at t=0 are one change
        cluster.advance(until)
        if sim.horizon_s is not None and tick > sim.horizon_s:
            run.stopped = f"horizon {sim.horizon_s:g} s reached"
            _stuck_at_the_end(cluster, run, sim.deadlock_after_s)
            break
        if cluster.done():
            run.stopped = "every job finished"
            break
        if cluster.has_waiting() and cluster.version != decided_at_version:
            result = run_cycle(cluster, settings, metrics, holds, stranded)
            run.cycles.append(CycleRecord(tick, result))
            if result.bound or result.evicted or result.preempted:
                last_bind_s = tick
            # Failed binds are retried next tick: a refusal may not repeat.
            decided_at_version = -1 if result.failed_binds else cluster.version
            if on_cycle:
                on_cycle(tick, result, cluster)
            record()
        # A cycle still due (a refused bind to retry, a change to react to) may unblock.
        stuck = (
            cluster.version == decided_at_version
            and not cluster.any_running()
            and bool(cluster.partial_jobs())
        )
        nxt = cluster.next_event_time()
        if stuck:
            deadline = max(cluster.last_progress_s, last_bind_s) + sim.deadlock_after_s
            if nxt is None or nxt > deadline:
                # Nothing that could unblock the partial gangs is due before the deadline.
                run.deadlocks.append(deadline)
                run.stopped = (
                    f"deadlock: {len(cluster.partial_jobs())} partly bound gang(s) hold "
                    f"resources, no job runs, nothing changed for {sim.deadlock_after_s:g} s"
                )
                cluster.advance(deadline)
                record()
                break
        if cluster.version != decided_at_version and cluster.has_waiting():
            tick += sim.cycle_s
        elif nxt is None:
            run.stopped = (
                "nothing left that can run" if cluster.has_waiting() else "every job finished"
            )
            _stuck_at_the_end(cluster, run, sim.deadlock_after_s)
            break
        else:
            tick = max(tick + sim.cycle_s, math.ceil(nxt / sim.cycle_s) * sim.cycle_s)
    run.end_s = cluster.now
    run.lost_resource_s = dict(cluster.preempted_pod_s)
    run.events = list(cluster.events_log)
    run.jobs = [
        JobRecord(
            js.job.name,
            js.job.queue,
            len(js.job.pods),
            js.job.min_member,
            js.job.submit_s,
            js.started_s,
            js.finished_s,
        )
        for js in cluster.jobs.values()
    ]
    run.wall_s = time.perf_counter() - started
    return run


def _stuck_at_the_end(cluster: SimulatedCluster, run: SimRun, for_s: float) -> None:
    """A run that ends (its horizon, nothing left to run) with partial gangs whose bound
    pods have not moved for ``for_s`` ends deadlocked: the check above needs every job
    idle, so gangs that blocked each other while other jobs kept running went unreported
    when the run ended first."""
    stuck = cluster.stuck_partial_jobs(for_s)
    if stuck and not run.deadlocks:
        run.deadlocks.append(cluster.now)
        run.stopped += (
            f"; deadlock: {len(stuck)} partly bound gang(s) unchanged for {for_s:g} s at the end"
        )
