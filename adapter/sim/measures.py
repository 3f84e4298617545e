"""A simulator run's figures: utilisation, job times, partial gangs, deadlocks, fairness,
cycle latency and solver gap — what gangsat's claims are measured by.

Samples are piecewise constant: each holds from its time to the next sample's, and the
last to the end of the run. Time averages are integrals over that step function.

Fairness is judged on one resource (GPUs if the cluster has any, else CPU) while a queue
is *backlogged* (has waiting pods): its deserved amount is the weighted water-filling of
the cluster among all queues, each capped by what it holds plus what it waits for and by
its capability (``solver.fairness.water_fill``, as kube-batch's proportion plugin). When
every queue is backlogged and asks for more than its weight's share, that is exactly
``weight / sum(weights)`` of the cluster. A queue's share error is the time average,
over its backlogged time, of (held - deserved) / cluster total; ``max_share_error`` is the
largest absolute one. That is a signed mean: a queue over its share for an hour and under
it for the next scores near 0. ``max_abs_share_error`` is the largest time average of
|held - deserved| / cluster total, and ``max_off_share`` the largest share of a queue's
backlogged time spent more than ``OFF_BY`` (2%) of the cluster off. Jain's index is taken
over queues of held / deserved (time integrals while backlogged): 1.0 is perfectly
proportional.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

import numpy as np
from pydantic import BaseModel, ConfigDict

from adapter.results import CycleResult
from adapter.sim.run import Sample, SimRun
from solver.fairness import deserved_by_queue
from solver.model import Queue

OFF_BY = 0.02  # of the cluster: the fairness bar


class QueueFairness(BaseModel):
    model_config = ConfigDict(frozen=True)

    weight: int
    weight_share: float  # weight / sum(weights)
    backlogged_s: float
    share: float  # mean held / cluster total while backlogged
    deserved: float  # mean deserved / cluster total while backlogged
    error: float  # share - deserved: the signed mean, where over and under cancel
    abs_error: float = 0.0  # mean |held - deserved| / cluster total while backlogged
    off_s: float = 0.0  # backlogged time spent more than OFF_BY of the cluster off


class RunSummary(BaseModel):
    """One run's figures, as JSON-ready numbers."""

    model_config = ConfigDict(frozen=True)

    scenario: str
    scheduler: str
    stopped: str
    nodes: int
    jobs: int
    finished_jobs: int
    end_s: float
    makespan_s: float | None  # first submit to last finish, when every job finished
    utilisation: dict[str, float]  # allocated / capacity, time average over the run
    busy_utilisation: dict[str, float]  # held by running jobs only
    backlogged_utilisation: dict[str, float]  # allocated, averaged while some queue waits
    jct_mean_s: float | None
    jct_p95_s: float | None
    queueing_delay_mean_s: float | None
    queueing_delay_p95_s: float | None
    partial_gangs: int  # distinct gangs ever seen partly bound
    partial_resource_s: dict[str, float]  # resource-seconds held by partial gangs
    deadlocks: int
    deadlock_at_s: list[float]
    fair_resource: str
    backlogged_s: float  # time some queue was backlogged
    all_backlogged_s: float  # time every queue was
    max_share_error: float | None
    max_abs_share_error: float | None = None
    max_off_share: float | None = None  # of a queue's backlogged time
    jain_index: float | None
    queues: dict[str, QueueFairness]
    cycles: int
    cycle_p50_s: float | None
    cycle_p99_s: float | None
    decide_p50_s: float | None
    gap_mean: float | None
    gap_max: float | None
    bind_rate_pods_per_s: float | None  # pods bound per second of cycle wall time
    evicted_pods: int = 0  # evicted for a preempting gang (preemption or reclaim)
    lost_resource_s: dict[str, float] = {}  # work evicted jobs lost (resource-seconds)
    binds: int
    failed_binds: int
    rolled_back_gangs: int
    rejected_gangs: int
    wall_s: float


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def durations(samples: Sequence[Sample], end_s: float) -> list[float]:
    """How long each sample held."""
    times = [s.t for s in samples] + [end_s]
    return [max(0.0, b - a) for a, b in pairwise(times)]


def deserved_at(
    sample: Sample, total: int, queues: Sequence[Queue], resource: str
) -> dict[str, float]:
    """Each queue's deserved amount of ``resource`` at the sample: water-filling by weight,
    capped by what the queue holds plus waits for, and by its capability."""
    wants = {
        q.name: sample.queue_allocated.get(q.name, 0) + sample.queue_pending.get(q.name, 0)
        for q in queues
    }
    return deserved_by_queue(total, queues, wants, resource)


def fairness(run: SimRun) -> tuple[dict[str, QueueFairness], float, float]:
    """Per-queue fairness, time some queue was backlogged, time all were."""
    weights = {q.name: q.weight for q in run.workload.queues}
    total = run.capacity.get(run.fair_resource, 0)
    weight_sum = sum(weights.values())
    backlog_s: dict[str, float] = defaultdict(float)
    held_s: dict[str, float] = defaultdict(float)
    deserved_s: dict[str, float] = defaultdict(float)
    abs_s: dict[str, float] = defaultdict(float)  # |held - deserved| * dt
    off_s: dict[str, float] = defaultdict(float)  # time more than OFF_BY off
    any_s = all_s = 0.0
    for sample, dt in zip(run.samples, durations(run.samples, run.end_s), strict=True):
        backlogged = sample.backlogged()
        if not backlogged or dt <= 0 or total <= 0:
            continue
        any_s += dt
        if backlogged >= set(weights):
            all_s += dt
        deserved = deserved_at(sample, total, run.workload.queues, run.fair_resource)
        for q in backlogged:
            backlog_s[q] += dt
            held = sample.queue_allocated.get(q, 0)
            held_s[q] += held * dt
            deserved_s[q] += deserved[q] * dt
            abs_s[q] += abs(held - deserved[q]) * dt
            if abs(held - deserved[q]) > OFF_BY * total:
                off_s[q] += dt
    queues = {}
    for q, w in weights.items():
        span = backlog_s[q]
        share = held_s[q] / (span * total) if span and total else 0.0
        fair = deserved_s[q] / (span * total) if span and total else 0.0
        queues[q] = QueueFairness(
            weight=w,
            weight_share=w / weight_sum if weight_sum else 0.0,
            backlogged_s=span,
            share=share,
            deserved=fair,
            error=share - fair,
            abs_error=abs_s[q] / (span * total) if span and total else 0.0,
            off_s=off_s[q],
        )
    return queues, any_s, all_s


def _rate(results: Sequence[CycleResult]) -> float | None:
    busy = sum(r.total_s for r in results if r.bound)
    pods = sum(len(r.bound) for r in results)
    return pods / busy if busy > 0 else None


def jain(values: Sequence[float]) -> float | None:
    if not values or not any(values):
        return None
    arr = np.asarray(values, dtype=float)
    return float(arr.sum() ** 2 / (len(arr) * (arr**2).sum()))


def summarise(run: SimRun) -> RunSummary:
    spans = durations(run.samples, run.end_s)
    resources = [r for r, cap in sorted(run.capacity.items()) if cap > 0 and r != "pods"]

    def average(attr: str, backlogged_only: bool = False) -> dict[str, float]:
        held = [
            (s, dt)
            for s, dt in zip(run.samples, spans, strict=True)
            if not backlogged_only or s.backlogged()
        ]
        span = sum(dt for _, dt in held)
        if not span:
            return {}  # never so (nothing waited): no figure, not 0%
        return {
            r: sum(getattr(s, attr).get(r, 0) * dt for s, dt in held) / (run.capacity[r] * span)
            for r in resources
        }

    partial_area = {
        r: sum(s.partial.get(r, 0) * dt for s, dt in zip(run.samples, spans, strict=True))
        for r in resources
    }
    finished = [j for j in run.jobs if j.finished_s is not None]
    started = [j for j in run.jobs if j.started_s is not None]
    jct = [j.finished_s - j.submit_s for j in finished if j.finished_s is not None]
    delay = [j.started_s - j.submit_s for j in started if j.started_s is not None]
    makespan = None
    if run.jobs and len(finished) == len(run.jobs):
        makespan = max(j.finished_s or 0.0 for j in finished) - min(j.submit_s for j in run.jobs)
    partial_names = {g for s in run.samples for g in s.partial_gangs}
    queues, any_s, all_s = fairness(run)
    judged = [q for q in queues.values() if q.backlogged_s > 0]
    ratios = [q.share / q.deserved for q in judged if q.deserved > 0]
    results = [c.result for c in run.cycles]
    gaps = [r.decision.gap for r in results if r.decision and r.decision.gap is not None]
    return RunSummary(
        scenario=run.workload.scenario.name,
        scheduler=run.settings.scheduler,
        stopped=run.stopped,
        nodes=len(run.workload.nodes),
        jobs=len(run.jobs),
        finished_jobs=len(finished),
        end_s=run.end_s,
        makespan_s=makespan,
        utilisation=average("allocated"),
        busy_utilisation=average("busy"),
        backlogged_utilisation=average("allocated", backlogged_only=True),
        jct_mean_s=_mean(jct),
        jct_p95_s=_pct(jct, 95),
        queueing_delay_mean_s=_mean(delay),
        queueing_delay_p95_s=_pct(delay, 95),
        partial_gangs=len(partial_names),
        partial_resource_s=partial_area,
        deadlocks=len(run.deadlocks),
        deadlock_at_s=list(run.deadlocks),
        fair_resource=run.fair_resource,
        backlogged_s=any_s,
        all_backlogged_s=all_s,
        # Shares between queues need two queues; alone, a queue's "error" is only its
        # wait for the next cycle.
        max_share_error=max((abs(q.error) for q in judged), default=None)
        if len(judged) > 1
        else None,
        max_abs_share_error=max((q.abs_error for q in judged), default=None)
        if len(judged) > 1
        else None,
        max_off_share=max((q.off_s / q.backlogged_s for q in judged), default=None)
        if len(judged) > 1
        else None,
        jain_index=jain(ratios) if len(judged) > 1 else None,
        queues=queues,
        cycles=len(results),
        cycle_p50_s=_pct([r.total_s for r in results], 50),
        cycle_p99_s=_pct([r.total_s for r in results], 99),
        decide_p50_s=_pct([r.decide_s for r in results], 50),
        gap_mean=_mean(gaps),
        gap_max=max(gaps, default=None),
        bind_rate_pods_per_s=_rate(results),
        binds=sum(len(r.bound) for r in results),
        failed_binds=sum(len(r.failed_binds) for r in results),
        rolled_back_gangs=sum(len(r.rolled_back) for r in results),
        rejected_gangs=sum(len(r.rejected) for r in results),
        evicted_pods=sum(len(r.preempted) for r in results),
        lost_resource_s={r: run.lost_resource_s.get(r, 0.0) for r in resources},
        wall_s=run.wall_s,
    )
