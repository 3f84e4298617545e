"""A real-trace workload: jobs from Microsoft Philly, queues from SenseTime Helios, nodes from
Alibaba PAI (the data and its licences are in ``adapter/sim/traces/``, see its README).

``philly_workload(trace)`` turns a scenario's ``"trace": {"kind": "philly", ...}`` into
concrete nodes, queues and jobs. Every mapping below is fixed here so a scenario file need
only state its parameters (``adapter.sim.scenario.PhillyTrace``) to be reproducible.

Jobs (Philly, 3,034 multi-GPU jobs that passed and ran at least 10 minutes):
  - The trace is ordered by (``submitted_time``, ``id``); the slice is
    ``[first_job, first_job + jobs)`` of that order.
  - A job arrives at (its submission - the slice's first submission) in seconds, divided by
    ``arrival_compression``; the slice's first job arrives at 0.
  - It runs for ``runtime`` (minutes) x 60 x ``runtime_scale`` seconds. Philly's
    ``runtime`` runs from the first attempt's start to the last attempt's end, so for a
    retried job it includes the gaps between attempts.
  - A job of G GPUs is a gang of W = ceil(G / ``gpus_per_worker``) identical worker pods of
    ceil(G / W) GPUs each, with min_member = replicas = W: with the default 8 that is one
    pod per 8-GPU server, min(G, 8) GPUs each, and exactly G GPUs whenever G is a multiple
    of 8 or at most 8. For the few other sizes (12, 20 GPUs) the gang asks for the least
    uniform split that covers G (2 x 6, 3 x 7), as a gang's pods are identical here.
  - Each pod requests ``cpu_per_gpu`` x its GPUs of cpu and ``memory_per_gpu`` x its GPUs
    of memory; priority 0.
  - A job is named ``philly-<i>-<seq>``: i is its position in the whole ordered trace (so a
    name means the same trace job whatever the slice), seq the last part of its YARN
    application id (``application_<cluster start>_<seq>``; at most six characters, DNS-1123).

Queues (Helios Venus virtual-cluster GPU quotas, one row per day, 2020-04-01..2020-09-28):
  - The row of ``quota_date`` (default: the last day) gives one queue per virtual cluster
    with a quota above zero, named by the VC's id lowercased (DNS-1123) and weighted by its
    quota in GPUs.
  - The Philly subset records no virtual cluster, so each job of the slice, in slice order, draws
    its queue from ``random.Random(seed)`` with probability proportional to the quota.

Nodes (Alibaba PAI 2020 machine specs):
  - Only 8-GPU machines (``cap_gpu`` == 8): the shapes (gpu type, cores, memory) in the
    order they first appear in the CSV. ``nodes`` nodes are split among those shapes in
    proportion to their machine counts by the largest-remainder method (ties: the larger
    shape, then CSV order).
  - A node is named ``<gpu type lowercased>-<i>``, numbered per gpu type, and has
    ``cap_cpu`` cores, ``cap_mem`` GiB of memory (PAI states GB; read as GiB, i.e. 2^30
    bytes), 8 GPUs and 110 pod slots, labelled ``gpu-type`` and ``gangsat.io/source``.

``ScenarioError`` for a slice outside the trace, a ``quota_date`` the table lacks, or a pod
that none of the generated nodes could hold (it would wait forever).
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from adapter.quantity import QuantityError, parse
from adapter.sim.realistic import kubelet_labels
from adapter.sim.scenario import Job, PhillyTrace, ScenarioError, job_from
from solver.model import CPU, DEFAULT_MAX_PODS, GPU, MEMORY, PODS, Node, Queue, Resources
from solver.predicates import insufficient

PACKAGE = "adapter.sim"
TRACES_DIR = "traces"
PHILLY = "philly-multigpu-subset"
HELIOS = "helios-venus-vc-quota"
PAI = "alibaba-pai-v2020-machine-spec"

NODE_GPUS = 8
GPU_TYPE_LABEL = "gpu-type"
SOURCE_LABEL = "gangsat.io/source"
PAI_SOURCE = "alibaba-pai-v2020"
GIB = 2**30
DNS_LABEL_MAX = 63


@dataclass(frozen=True)
class PhillyJob:
    id: str
    gpus: int
    runtime_min: float
    submitted: datetime


@dataclass(frozen=True)
class MachineShape:
    gpu_type: str
    cpu: str  # cores, as written in the CSV
    memory_gb: str
    count: int


QuotaDay = tuple[str, tuple[tuple[str, int], ...]]


def trace_file(dataset: str, name: str) -> Traversable:
    return resources.files(PACKAGE).joinpath(TRACES_DIR, dataset, name)


@cache
def philly_jobs() -> tuple[PhillyJob, ...]:
    """The Philly jobs in trace order: by submission time, ties by id."""
    raw = json.loads(trace_file(PHILLY, "jobs.json").read_text(encoding="utf-8"))
    jobs = [
        PhillyJob(
            id=str(entry["id"]),
            gpus=int(entry["num_gpus"]),
            runtime_min=float(entry["runtime"]),
            submitted=datetime.fromisoformat(entry["submitted_time"]),
        )
        for entry in raw
    ]
    return tuple(sorted(jobs, key=lambda j: (j.submitted, j.id)))


@cache
def helios_quota_days() -> tuple[QuotaDay, ...]:
    """Each day of the Venus quota table: (date, ((vc, GPUs), ...)), in file order."""
    text = trace_file(HELIOS, "cluster_gpu_number.csv").read_text(encoding="utf-8-sig")
    rows = list(csv.reader(text.splitlines()))
    header, body = rows[0], [r for r in rows[1:] if r]
    # The last column is the day's total, not a virtual cluster.
    vcs = [name for name in header[1:] if name != "total"]
    return tuple((row[0], tuple((vc, int(row[1 + k])) for k, vc in enumerate(vcs))) for row in body)


@cache
def pai_gpu_shapes() -> tuple[MachineShape, ...]:
    """PAI's 8-GPU machine shapes with their machine counts, in order of first appearance."""
    fields = trace_file(PAI, "pai_machine_spec.header").read_text(encoding="utf-8").strip()
    text = trace_file(PAI, "pai_machine_spec.csv").read_text(encoding="utf-8")
    counts: dict[tuple[str, str, str], int] = {}
    for row in csv.DictReader(text.splitlines(), fieldnames=fields.split(",")):
        if float(row["cap_gpu"]) != NODE_GPUS:
            continue
        key = (row["gpu_type"], row["cap_cpu"], row["cap_mem"])
        counts[key] = counts.get(key, 0) + 1
    return tuple(MachineShape(t, cpu, mem, n) for (t, cpu, mem), n in counts.items())


def dns_label(text: str) -> str:
    """``text`` as a DNS-1123 label: lowercase alphanumerics and inner hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:DNS_LABEL_MAX].strip("-")


def philly_queues(quota_date: str | None) -> list[Queue]:
    days = helios_quota_days()
    if quota_date is None:
        quotas = days[-1][1]
    else:
        by_date = dict(days)
        if quota_date not in by_date:
            raise ScenarioError(
                f"trace.quota_date: {quota_date!r} is not a day of the Helios Venus quota "
                f"table ({days[0][0]} .. {days[-1][0]}, YYYY-MM-DD)"
            )
        quotas = by_date[quota_date]
    queues = [Queue(name=dns_label(vc), weight=gpus) for vc, gpus in quotas if gpus > 0]
    names = [q.name for q in queues]
    # VC ids are case-sensitive; lowercasing could merge two of them.
    if len(set(names)) != len(names) or not all(names):
        raise ScenarioError(f"trace: Helios VC ids do not map to distinct queue names: {names}")
    if not queues:
        raise ScenarioError(f"trace.quota_date: no virtual cluster has a quota on {quota_date}")
    return queues


def philly_nodes(count: int) -> list[Node]:
    shapes = pai_gpu_shapes()
    total = sum(s.count for s in shapes)
    # Integer largest remainder: exact, so the split never depends on float rounding.
    share = [count * s.count // total for s in shapes]
    remainder = [count * s.count % total for s in shapes]
    by_remainder = sorted(range(len(shapes)), key=lambda k: (-remainder[k], -shapes[k].count, k))
    for k in by_remainder[: count - sum(share)]:
        share[k] += 1
    nodes: list[Node] = []
    numbered: dict[str, int] = {}
    for shape, n in zip(shapes, share, strict=True):
        allocatable = Resources(
            {
                CPU: parse(CPU, shape.cpu),
                MEMORY: parse(MEMORY, f"{shape.memory_gb}Gi"),
                GPU: NODE_GPUS,
                PODS: DEFAULT_MAX_PODS,
            }
        )
        prefix = dns_label(shape.gpu_type)
        for _ in range(n):
            i = numbered.get(prefix, 0)
            numbered[prefix] = i + 1
            nodes.append(
                Node(
                    name=f"{prefix}-{i}",
                    allocatable=allocatable,
                    labels={
                        **kubelet_labels(f"{prefix}-{i}", i),
                        GPU_TYPE_LABEL: shape.gpu_type,
                        SOURCE_LABEL: PAI_SOURCE,
                    },
                )
            )
    return nodes


def philly_workload(trace: PhillyTrace) -> tuple[list[Node], list[Queue], list[Job]]:
    """Nodes, queues and jobs of a Philly trace scenario (semantics: the module docstring)."""
    trace_jobs = philly_jobs()
    start, end = trace.first_job, trace.first_job + trace.jobs
    if end > len(trace_jobs):
        raise ScenarioError(
            f"trace.first_job/jobs: the slice [{start}, {end}) is out of range; the Philly "
            f"trace has {len(trace_jobs)} jobs, so first_job + jobs must be at most "
            f"{len(trace_jobs)}"
        )
    picked = trace_jobs[start:end]
    queues = philly_queues(trace.quota_date)
    nodes = philly_nodes(trace.nodes)
    try:
        cpu_milli = parse(CPU, trace.cpu_per_gpu)
        memory_bytes = parse(MEMORY, trace.memory_per_gpu)
    except QuantityError as e:
        raise ScenarioError(f"trace: {e}") from None

    rng = random.Random(trace.seed)
    drawn = rng.choices([q.name for q in queues], weights=[q.weight for q in queues], k=len(picked))
    first = picked[0].submitted
    jobs: list[Job] = []
    for i, (job, queue) in enumerate(zip(picked, drawn, strict=True), start=start):
        workers = math.ceil(job.gpus / trace.gpus_per_worker)
        gpus = math.ceil(job.gpus / workers)
        seq = dns_label(job.id.rsplit("_", 1)[-1])[-6:].strip("-")
        name = f"philly-{i}-{seq}" if seq else f"philly-{i}"
        requests = {CPU: cpu_milli * gpus, MEMORY: memory_bytes * gpus, GPU: gpus}
        if all(insufficient(requests, node.allocatable.root) for node in nodes):
            raise ScenarioError(
                f"trace: a pod of {name} ({job.gpus} GPUs in {workers} pods) asks for "
                f"{requests}, more than any node has; lower gpus_per_worker, cpu_per_gpu or "
                f"memory_per_gpu"
            )
        jobs.append(
            job_from(
                name=name,
                queue=queue,
                submit_s=(job.submitted - first).total_seconds() / trace.arrival_compression,
                duration_s=job.runtime_min * 60 * trace.runtime_scale,
                replicas=workers,
                min_member=workers,
                # cpu as a millicore string: job_from reads a bare number as cores.
                requests={CPU: f"{requests[CPU]}m", MEMORY: requests[MEMORY], GPU: gpus},
                priority=0,
            )
        )
    return nodes, queues, jobs
