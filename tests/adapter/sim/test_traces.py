"""The Philly real-trace workload: slicing, time, gangs, queues and nodes from the shipped data.

Expectations are computed from the raw files read here independently of
``adapter.sim.traces``, so a parsing or ordering mistake there shows up as a mismatch.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from importlib import resources
from typing import Any

import pytest

from adapter.sim.scenario import (
    Job,
    PhillyTrace,
    ScenarioError,
    load_scenario,
    materialise,
)
from adapter.sim.traces import philly_workload
from solver.model import CPU, GPU, MEMORY, Node, Queue

TRACES = resources.files("adapter.sim").joinpath("traces")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
GIB = 2**30


def raw_philly() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = json.loads(
        TRACES.joinpath("philly-multigpu-subset", "jobs.json").read_text(encoding="utf-8")
    )
    return sorted(jobs, key=lambda j: (j["submitted_time"], j["id"]))


def raw_quotas(date: str | None) -> dict[str, int]:
    text = TRACES.joinpath("helios-venus-vc-quota", "cluster_gpu_number.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    row = rows[-1] if date is None else next(r for r in rows if r["date"] == date)
    return {vc.lower(): int(q) for vc, q in row.items() if vc not in ("date", "total") and int(q)}


def first_index(gpus: int) -> int:
    return next(i for i, j in enumerate(raw_philly()) if j["num_gpus"] == gpus)


def workload(**fields: Any) -> tuple[list[Node], list[Queue], list[Job]]:
    return philly_workload(PhillyTrace(**fields))


def gpus(job: Job) -> list[int]:
    return [pod.requests[GPU] for pod in job.pods]


def test_slice_has_its_length_and_follows_the_trace_order() -> None:
    trace = raw_philly()
    _, _, jobs = workload(first_job=100, jobs=50)
    assert len(jobs) == 50
    submits = [j.submit_s for j in jobs]
    assert submits[0] == 0
    assert submits == sorted(submits)
    # Names carry the trace position, so they pin the slice to jobs 100..149 in order.
    assert [int(j.name.split("-")[1]) for j in jobs] == list(range(100, 150))
    assert [j.name.split("-")[2] for j in jobs] == [t["id"].split("_")[-1] for t in trace[100:150]]
    assert all(DNS_LABEL.match(j.name) for j in jobs)
    assert len({j.name for j in jobs}) == 50


def test_runtime_is_minutes_scaled() -> None:
    trace = raw_philly()
    _, _, jobs = workload(first_job=7, jobs=3, runtime_scale=0.5)
    assert [j.duration_s for j in jobs] == pytest.approx(
        [t["runtime"] * 60 * 0.5 for t in trace[7:10]]
    )


def test_double_compression_halves_arrivals() -> None:
    _, _, real = workload(first_job=289, jobs=200)
    _, _, fast = workload(first_job=289, jobs=200, arrival_compression=2.0)
    assert real[-1].submit_s > 0
    assert fast[-1].submit_s == pytest.approx(real[-1].submit_s / 2)
    assert [j.submit_s for j in fast] == pytest.approx([j.submit_s / 2 for j in real])


def test_a_16_gpu_job_is_two_pods_of_eight_gpus() -> None:
    _, _, (job,) = workload(first_job=first_index(16), jobs=1)
    assert gpus(job) == [8, 8]
    assert job.min_member == 2
    pod = job.pods[0]
    assert pod.requests[CPU] == 8 * 8 * 1000
    assert pod.requests[MEMORY] == 8 * 40 * GIB
    assert {p.gang for p in job.pods} == {job.name}


def test_a_4_gpu_job_is_one_pod_of_four_gpus() -> None:
    _, _, (job,) = workload(first_job=first_index(4), jobs=1, cpu_per_gpu="500m")
    assert gpus(job) == [4]
    assert job.min_member == 1
    assert job.pods[0].requests[CPU] == 4 * 500


def test_an_uneven_gang_asks_the_least_uniform_split() -> None:
    _, _, (job,) = workload(first_job=first_index(12), jobs=1)
    assert gpus(job) == [6, 6]
    _, _, (job,) = workload(first_job=first_index(16), jobs=1, gpus_per_worker=4)
    assert gpus(job) == [4, 4, 4, 4]
    assert job.min_member == 4


def test_queue_weights_are_the_helios_quotas_of_the_day() -> None:
    for date in (None, "2020-04-01"):
        _, queues, jobs = workload(jobs=300, quota_date=date)
        assert {q.name: q.weight for q in queues} == raw_quotas(date)
        assert {j.queue for j in jobs} <= set(raw_quotas(date))
    _, queues, _ = workload()
    assert len(queues) == 16
    assert sum(q.weight for q in queues) == 1080


def test_queue_draw_follows_the_quotas() -> None:
    _, queues, jobs = workload(first_job=0, jobs=3000)
    drawn = Counter(j.queue for j in jobs)
    heaviest = max(queues, key=lambda q: q.weight)
    lightest = min(queues, key=lambda q: q.weight)
    assert drawn[heaviest.name] > 10 * drawn[lightest.name]


def test_same_seed_same_queues_other_seed_other_queues() -> None:
    def assignment(seed: int) -> list[str]:
        return [j.queue for j in workload(jobs=200, seed=seed)[2]]

    assert assignment(3) == assignment(3)
    assert assignment(3) != assignment(4)


def test_nodes_are_8_gpu_pai_shapes_in_proportion() -> None:
    nodes, _, _ = workload(nodes=24)
    assert len(nodes) == 24
    assert len({n.name for n in nodes}) == 24
    assert all(n.allocatable[GPU] == 8 for n in nodes)
    # 8-GPU PAI machines: MISC 280, V100M32 135, V100 104 of 519; x24 = 12.9, 6.2, 4.8.
    assert Counter(n.labels["gpu-type"] for n in nodes) == {"MISC": 13, "V100M32": 6, "V100": 5}
    assert all(n.labels["gangsat.io/source"] == "alibaba-pai-v2020" for n in nodes)
    assert {n.allocatable[CPU] for n in nodes} == {96_000}
    assert {n.allocatable[MEMORY] for n in nodes} == {384 * GIB, 512 * GIB}
    assert all(DNS_LABEL.match(n.name) for n in nodes)
    (one,) = workload(nodes=1)[0]
    assert one.labels["gpu-type"] == "MISC"


@pytest.mark.parametrize(
    ("first_job", "jobs"), [(len(raw_philly()), 1), (len(raw_philly()) - 10, 11), (0, 5000)]
)
def test_a_slice_outside_the_trace_is_refused(first_job: int, jobs: int) -> None:
    with pytest.raises(ScenarioError, match="out of range"):
        workload(first_job=first_job, jobs=jobs)


def test_the_last_jobs_of_the_trace_are_a_valid_slice() -> None:
    _, _, jobs = workload(first_job=len(raw_philly()) - 10, jobs=10)
    assert len(jobs) == 10


def test_an_absent_quota_date_is_refused() -> None:
    with pytest.raises(ScenarioError, match="quota_date"):
        workload(quota_date="2021-01-01")


def test_a_pod_no_node_can_hold_is_refused() -> None:
    with pytest.raises(ScenarioError, match="more than any node has"):
        workload(first_job=first_index(16), jobs=1, gpus_per_worker=16)


def test_the_packaged_philly_scenario_materialises() -> None:
    scenario = load_scenario("philly")
    assert scenario.trace is not None
    w = materialise(scenario)
    assert len(w.jobs) == scenario.trace.jobs
    assert len(w.nodes) == scenario.trace.nodes
    assert {j.queue for j in w.jobs} <= {q.name for q in w.queues}
    assert w.fair_resource() == GPU
    # The scenario is meant to be contended: its offered GPU work exceeds capacity over the
    # arrival window by the 1.25x its choices state, and the cluster has the 1,080 GPUs
    # the Helios quotas add up to.
    work = sum(sum(gpus(j)) * j.duration_s for j in w.jobs)
    capacity = sum(n.allocatable[GPU] for n in w.nodes)
    span = max(j.submit_s for j in w.jobs)
    assert capacity == sum(q.weight for q in w.queues) == 1080
    assert work / (capacity * span) == pytest.approx(1.25, abs=0.01)
