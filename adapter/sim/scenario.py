"""Simulator scenarios: the documented file format, and its expansion into concrete jobs.

A scenario file (JSON; ``adapter/sim/scenarios/*.json`` ship with gangsat) states a
cluster, its queues and a workload, plus every choice behind the numbers (``choices``),
so that a result can be reproduced and argued with. Quantities are written as in
Kubernetes ("96", "500m", "512Gi"). Format, with defaults:

    {
      "name": "...", "description": "...", "choices": {"why": "..."},
      "settings": {"cycle_s": 10, "bind_latency_s": 0, "deadlock_after_s": 300,
                   "horizon_s": null, "bind_failure_rate": 0, "seed": 0,
                   "termination_grace_s": 30, "checkpoint_fraction": 0,
                   "preemption": false},
      "nodes":  [{"name": "gpu", "count": 4, "allocatable": {"cpu": "96", ...},
                  "labels": {...}, "taints": [...]}],            # named gpu-0 .. gpu-3,
                  # labelled as kubelets label them (hostname, os, arch, zone, region)
      "queues": [{"name": "research", "weight": 3}],
      "jobs":   [{"name": "train", "count": 10, "queue": "research",
                  "submit_s": 0, "submit_every_s": 30, "duration_s": 600,
                  "replicas": 4, "min_member": 4, "requests": {"nvidia.com/gpu": 1},
                  "priority": 0, "node_selector": {}, "tolerations": [],
                  "pod_interval_s": 0, "one_per_node": false}],
      "trace":  {"kind": "philly", ...}   # optional: jobs, nodes, queues from real traces
    }

A job group with ``count`` n > 1 expands to jobs ``<name>-0`` .. ``<name>-(n-1)`` (with
``count`` 1 the job keeps the group's name), the i-th submitted at ``submit_s + i *
submit_every_s``. A job's pods are ``<job>-<k>``, pod k created ``k * pod_interval_s``
after the submit (job controllers create pods one by one), and its gang (PodGroup) is
the job. ``one_per_node``: its pods ask for a node each, as a required pod anti-affinity
on ``kubernetes.io/hostname`` selecting the job's pods does (``solver.apart``). A job
runs only while at least ``min_member`` of its pods are running (bound, and past the
bind latency): its pods wait for each other. It finishes after ``duration_s`` of
running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from adapter.errors import validation_lines
from adapter.quantity import Quantity, QuantityError
from adapter.quantity import resources as parse_resources
from adapter.sim.realistic import kubelet_labels
from solver.fairness import fair_resource
from solver.model import DEFAULT_QUEUE, Gang, Node, Pod, Queue
from solver.scheduling_terms import Taint, Toleration

SCENARIOS_PACKAGE = "adapter.sim"
SCENARIOS_DIR = "scenarios"


class _Frozen(BaseModel):
    # No infinities or NaN anywhere: a run of infinite length never ends.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


# Bounds that keep a scenario a run that ends on this machine: counts and durations far
# past any cluster or trace gangsat replays, and a cycle no shorter than a millisecond.
MAX_COUNT = 100_000
MAX_SECONDS = 10**9


class SimSettings(_Frozen):
    cycle_s: float = Field(
        default=10.0, ge=0.001, le=MAX_SECONDS, description="virtual seconds between cycles"
    )
    bind_latency_s: float = Field(
        default=0.0, ge=0, description="a bound pod starts this long after its bind"
    )
    deadlock_after_s: float = Field(
        default=300.0,
        gt=0,
        description="stuck this long (partial gangs hold resources, no job runs, no change): "
        "deadlock",
    )
    horizon_s: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="stop at this time"
    )
    bind_failure_rate: float = Field(
        default=0.0,
        ge=0,
        le=0.9,
        description="fault injection: share of binds refused (at most 0.9, so gangs still bind)",
    )
    termination_grace_s: float = Field(
        default=30.0,
        ge=0,
        le=MAX_SECONDS,
        description="an evicted pod keeps its node's room this long (Kubernetes' default 30 s)",
    )
    checkpoint_fraction: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="of a preempted job's progress, the share kept (0: it starts over)",
    )
    preemption: bool = Field(
        default=False,
        description=(
            "the gang-aware schedulers run with preemption and reclaim on "
            "(SolverConfig.preemption), as the scenario is about them"
        ),
    )
    seed: int = 0


class NodeGroup(_Frozen):
    name: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=MAX_COUNT)
    allocatable: dict[str, Quantity]
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


class JobGroup(_Frozen):
    name: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=MAX_COUNT)
    queue: str = DEFAULT_QUEUE
    submit_s: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    submit_every_s: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    duration_s: float = Field(gt=0, le=MAX_SECONDS)
    replicas: int = Field(ge=1, le=MAX_COUNT)
    min_member: int | None = Field(default=None, ge=1, description="default: replicas")
    pod_interval_s: float = Field(
        default=0.0, ge=0, description="the job controller creates pod k at submit + k * this"
    )
    requests: dict[str, Quantity] = Field(default_factory=dict)
    priority: int = 0
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    one_per_node: bool = Field(default=False, description="its pods ask for a node each")

    @model_validator(mode="after")
    def _min_member_fits(self) -> JobGroup:
        if self.min_member is not None and self.min_member > self.replicas:
            raise ValueError(
                f"min_member {self.min_member} is larger than the job's {self.replicas} replicas"
            )
        return self


class PhillyTrace(_Frozen):
    """Jobs from the Philly trace, queues from Helios Venus quotas, nodes from Alibaba PAI."""

    kind: Literal["philly"] = "philly"
    first_job: int = Field(default=0, ge=0, description="slice start, jobs by submit time")
    jobs: int = Field(default=200, ge=1, description="slice length")
    arrival_compression: float = Field(
        default=1.0, gt=0, description="inter-arrival times are divided by this"
    )
    runtime_scale: float = Field(default=1.0, gt=0, description="runtimes are multiplied by this")
    nodes: int = Field(default=32, ge=1, description="8-GPU nodes, in PAI's proportions")
    gpus_per_worker: int = Field(default=8, ge=1, description="a job of G GPUs = ceil(G/this)")
    cpu_per_gpu: Quantity = "8"
    memory_per_gpu: Quantity = "40Gi"
    quota_date: str | None = Field(default=None, description="Helios day; default the last")
    seed: int = Field(default=0, description="seeds the draw of each job's queue")


class Scenario(_Frozen):
    name: str = Field(min_length=1)
    description: str = ""
    choices: dict[str, str] = Field(default_factory=dict)
    settings: SimSettings = Field(default_factory=SimSettings)
    nodes: tuple[NodeGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    jobs: tuple[JobGroup, ...] = ()
    trace: PhillyTrace | None = None


@dataclass(frozen=True)
class Job:
    """One concrete job: a gang of pods with a submit time and a running time."""

    name: str
    queue: str
    submit_s: float
    duration_s: float
    min_member: int
    priority: int
    pods: tuple[Pod, ...]

    def gang(self) -> Gang:
        return Gang(
            name=self.name,
            min_member=self.min_member,
            queue=self.queue,
            priority=self.priority,
            created_s=self.submit_s,
        )


@dataclass(frozen=True)
class Workload:
    """A scenario made concrete: what the simulated cluster runs."""

    scenario: Scenario
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    jobs: tuple[Job, ...]

    def fair_resource(self) -> str:
        """The resource fair shares are judged on: GPUs when there are any, else CPU."""
        return fair_resource(self.nodes)


class ScenarioError(ValueError):
    """A scenario that cannot run; the message names the file and the field."""


def job_from(
    name: str,
    queue: str,
    submit_s: float,
    duration_s: float,
    replicas: int,
    min_member: int,
    requests: dict[str, Quantity],
    priority: int = 0,
    node_selector: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    pod_interval_s: float = 0.0,
    one_per_node: bool = False,
) -> Job:
    parsed = parse_resources(requests)
    pods = tuple(
        Pod(
            name=f"{name}-{k}",
            requests=parsed,
            priority=priority,
            gang=name,
            node_selector=node_selector or {},
            tolerations=tolerations,
            created_s=submit_s + k * pod_interval_s,
            apart=(name,) if one_per_node else (),
        )
        for k in range(replicas)
    )
    return Job(name, queue, submit_s, duration_s, min_member, priority, pods)


def materialise(scenario: Scenario) -> Workload:
    """Concrete nodes, queues and jobs; ``ScenarioError`` for anything that cannot run."""
    try:
        nodes = [
            Node(
                name=f"{group.name}-{i}",
                allocatable=parse_resources(group.allocatable),
                labels={**kubelet_labels(f"{group.name}-{i}", i), **group.labels},
                taints=group.taints,
            )
            for group in scenario.nodes
            for i in range(group.count)
        ]
        jobs = [
            job_from(
                f"{group.name}-{i}" if group.count > 1 else group.name,
                group.queue,
                group.submit_s + i * group.submit_every_s,
                group.duration_s,
                group.replicas,
                group.min_member or group.replicas,
                group.requests,
                group.priority,
                group.node_selector,
                group.tolerations,
                group.pod_interval_s,
                group.one_per_node,
            )
            for group in scenario.jobs
            for i in range(group.count)
        ]
    except QuantityError as e:
        raise ScenarioError(f"{scenario.name}: {e}") from None
    queues = list(scenario.queues)
    if scenario.trace is not None:
        from adapter.sim.traces import philly_workload  # the trace files load only when used

        more_nodes, more_queues, more_jobs = philly_workload(scenario.trace)
        nodes += more_nodes
        queues += more_queues
        jobs += more_jobs
    known = {q.name for q in queues}
    if not known:
        queues.append(Queue(name=DEFAULT_QUEUE))
        known.add(DEFAULT_QUEUE)
    unknown = sorted({j.queue for j in jobs} - known)
    if unknown:
        raise ScenarioError(f"{scenario.name}: jobs name unknown queue(s) {', '.join(unknown)}")
    for what, names in (("node", [n.name for n in nodes]), ("job", [j.name for j in jobs])):
        if len(set(names)) != len(names):
            raise ScenarioError(f"{scenario.name}: duplicate {what} names")
    if not nodes:
        raise ScenarioError(f"{scenario.name}: no nodes")
    return Workload(scenario, tuple(nodes), tuple(queues), tuple(sorted(jobs, key=_arrival)))


def _arrival(job: Job) -> tuple[float, str]:
    return (job.submit_s, job.name)


def scenario_names() -> list[str]:
    folder = resources.files(SCENARIOS_PACKAGE).joinpath(SCENARIOS_DIR)
    return sorted(
        e.name.removesuffix(".json") for e in folder.iterdir() if e.name.endswith(".json")
    )


def parse_scenario(text: str, source: str) -> Scenario:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{source}: invalid JSON at line {e.lineno}: {e.msg}") from None
    try:
        return Scenario.model_validate(raw)
    except ValidationError as e:
        raise ScenarioError("\n".join(validation_lines(source, e, raw))) from None


def load_scenario(name_or_path: str) -> Scenario:
    """A packaged scenario by name, else a scenario file by path."""
    if name_or_path in scenario_names():
        entry = resources.files(SCENARIOS_PACKAGE).joinpath(SCENARIOS_DIR, f"{name_or_path}.json")
        return parse_scenario(entry.read_text(encoding="utf-8"), name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise ScenarioError(
            f"{name_or_path}: not a packaged scenario ({', '.join(scenario_names())}) "
            "and no such file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse_scenario(text, str(path))
