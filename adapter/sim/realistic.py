"""Production-shaped clusters: nodes as kubelets and a cloud label them, gangs as users write them.

What it models, an EKS cluster in one region with three zones ``<region>a/b/c``:

* Nodes of node pools of real instance types (``INSTANCE_TYPES``, ``CPU_POOLS``,
  ``GPU_POOLS``), split by pool weight (largest remainder), each pool round-robin over the
  zones; named by EC2 private DNS (``ip-10-0-N-N.ec2.internal``, a /18 subnet per zone, so
  at most 16,256 nodes per zone).
* The labels kubelets, the cloud provider, EKS and NVIDIA GPU feature discovery set:
  hostname (= node name, unique), os, arch and instance type (and their ``beta.`` copies),
  zone and region (and the ``failure-domain.beta`` copies), nodegroup, capacity type, and on
  GPU nodes ``nvidia.com/gpu.product``, ``.count`` and ``.present``.
* Allocatable as the EKS AMI's kubelet reports it (``kubelet_allocatable``): cpu minus
  kube-reserved (6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the
  rest: 90m..310m); memory capacity (MemTotal, taken as 97% of the nominal size) minus
  255Mi + 11Mi per pod slot and the 100Mi eviction threshold; pod slots from EKS's ENI table
  (58 or 234; the p4d pool caps its 737 at 110); ephemeral-storage minus 1Gi reserved and
  the 10% eviction threshold.
* Taints: ``nvidia.com/gpu=present:NoSchedule`` on GPU nodes, ``dedicated=data-eng:
  NoSchedule`` on the dedicated pool, ``kubernetes.io/arch=arm64:PreferNoSchedule`` on the
  arm pool; ~1% of nodes cordoned, about half of them also tainted
  ``node.kubernetes.io/unschedulable:NoSchedule``.
* Bound pods: DaemonSets on every node (kube-proxy, aws-node, node-exporter; the NVIDIA
  device plugin on GPU nodes), gangs of one in ``kube-system`` tolerating every taint; and
  running gangs (all pods bound, ``min_member`` = size) on ``busy_fraction`` of the nodes,
  each busy node filled to a uniform 30..100% of its GPUs (GPU nodes) or cores.
* Pending gangs from four teams (namespace = queue, ``TEAMS``): training gangs and
  single-GPU jobs (1/2/4/8 GPUs a pod, cpu and memory a share of the node's), Spark (a
  driver and 2..63 executors of 1..8 cores, memory + 10% overhead, some asking for
  ephemeral-storage), MPI (a launcher and 2..32 workers) and single-pod CPU jobs; 20% of
  multi-pod gangs elastic. Constraints: nodeSelector on instance type, GPU product or the
  dedicated label; required node affinity on zone (In), arch (In), capacity type (NotIn)
  and ``nvidia.com/gpu.present`` (Exists); about half with none. Tolerations for the GPU
  taint, the dedicated taint (data-eng) and, for 3%, everything. Priorities 0/100/1000 by
  team; arrivals exponential (running gangs ~30 s apart, then pending ones ~10 s apart).
* Every pending gang fits in principle: ``size`` pods at once on the schedulable nodes
  that match it, with only DaemonSets bound; a ``batch`` gang also within half the queue's
  capability (running ``batch`` gangs hold at most the other half).

What it does not model: limits, init containers and pod overhead; pod (anti-)affinity,
topology spread, preferred node affinity and Gt/Lt; volumes and their zones; NoExecute
taints, node conditions and pressure; autoscaling and spot interruption; per-node jitter of
capacity (nodes of one type report equal allocatable); ENI prefix delegation; other
DaemonSets (CSI, logging) and static pods; ResourceQuotas; when running gangs finish.

Every random choice is drawn from the ``random.Random`` passed in (``cluster`` and
``perf_gangs`` make one from the seed), so the same arguments give an equal state.
Pydantic objects are shared where equal (``Resources``, taints, tolerations, affinity).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import NamedTuple

from solver.model import (
    CPU,
    DEFAULT_QUEUE,
    EPHEMERAL_STORAGE,
    GPU,
    MEMORY,
    PODS,
    ClusterState,
    Gang,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Queue,
    Resources,
    Taint,
    TaintEffect,
    Toleration,
)

GiB = 2**30
MiB = 2**20
HOSTNAME = "kubernetes.io/hostname"
ARCH = "kubernetes.io/arch"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
NODEGROUP = "eks.amazonaws.com/nodegroup"
CAPACITY_TYPE = "eks.amazonaws.com/capacityType"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_PRESENT = "nvidia.com/gpu.present"
DEDICATED, DEDICATED_TEAM = "dedicated", "data-eng"
LOW, NORMAL, HIGH = 0, 100, 1000
SYSTEM_NODE_CRITICAL = 2_000_001_000
NO_SCHEDULE = TaintEffect.NO_SCHEDULE

GPU_TAINT = Taint(key=GPU, value="present", effect=NO_SCHEDULE)
CORDON_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect=NO_SCHEDULE)
DEDICATED_TAINT = Taint(key=DEDICATED, value=DEDICATED_TEAM, effect=NO_SCHEDULE)
ARM_TAINT = Taint(key=ARCH, value="arm64", effect=TaintEffect.PREFER_NO_SCHEDULE)
TOLERATE_ALL = Toleration(operator="Exists")
TOLERATE_GPU = Toleration(key=GPU, operator="Exists", effect=NO_SCHEDULE)
TOLERATE_DEDICATED = Toleration(key=DEDICATED, value=DEDICATED_TEAM, effect=NO_SCHEDULE)


class InstanceType(NamedTuple):
    """An EC2 instance type; ``max_pods`` from EKS's ENI table, ``disk_gib`` the root volume."""

    name: str
    vcpus: int
    memory_gib: int
    max_pods: int
    disk_gib: int
    arch: str = "amd64"
    gpus: int = 0
    gpu_product: str = ""


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("m5.2xlarge", 8, 32, 58, 128),
        InstanceType("m5.4xlarge", 16, 64, 234, 128),
        InstanceType("c5.9xlarge", 36, 72, 234, 128),
        InstanceType("r5.8xlarge", 32, 256, 234, 128),
        InstanceType("m6g.8xlarge", 32, 128, 234, 128, "arm64"),
        InstanceType("p4d.24xlarge", 96, 1152, 110, 512, "amd64", 8, "NVIDIA-A100-SXM4-40GB"),
        InstanceType("g5.12xlarge", 48, 192, 234, 512, "amd64", 4, "NVIDIA-A10G"),
        InstanceType("p3.8xlarge", 32, 244, 234, 512, "amd64", 4, "Tesla-V100-SXM2-16GB"),
    )
}


class Pool(NamedTuple):
    """A node group: instance type, relative size, taints, extra labels, capacity type."""

    name: str
    instance: str
    weight: int
    taints: tuple[Taint, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    capacity_type: str = "ON_DEMAND"


CPU_POOLS: tuple[Pool, ...] = (
    Pool("system", "m5.2xlarge", 1),
    Pool("general", "m5.4xlarge", 4),
    Pool("compute-spot", "c5.9xlarge", 3, capacity_type="SPOT"),
    Pool("highmem", "r5.8xlarge", 2),
    Pool("arm", "m6g.8xlarge", 1, (ARM_TAINT,)),
    Pool("data-eng", "r5.8xlarge", 1, (DEDICATED_TAINT,), ((DEDICATED, DEDICATED_TEAM),)),
)
GPU_POOLS: tuple[Pool, ...] = (
    Pool("gpu-a100", "p4d.24xlarge", 1, (GPU_TAINT,)),
    Pool("gpu-a10g", "g5.12xlarge", 3, (GPU_TAINT,)),
    Pool("gpu-v100", "p3.8xlarge", 2, (GPU_TAINT,)),
)


class Team(NamedTuple):
    """A namespace and its queue (``weight``): its share of the jobs, their kinds, priorities."""

    queue: str
    weight: int
    share: int
    kinds: tuple[tuple[str, int], ...]
    priorities: tuple[tuple[int, int], ...]


TEAMS: tuple[Team, ...] = (
    Team("ml-research", 3, 35, (("train", 4), ("gpu-single", 4), ("mpi", 1), ("cpu-single", 1)),
         ((NORMAL, 9), (HIGH, 1))),
    Team("ml-prod", 4, 15, (("train", 3), ("gpu-single", 4), ("spark", 2)), ((HIGH, 1),)),
    Team("data-eng", 2, 30, (("spark", 8), ("cpu-single", 2)), ((NORMAL, 1), (LOW, 1))),
    Team("batch", 1, 20, (("mpi", 5), ("cpu-single", 5)), ((LOW, 1),)),
)
CAPPED_QUEUE = "batch"
GPU_KINDS = frozenset({"train", "gpu-single"})
JOB_PREFIX = {"train": "train", "gpu-single": "eval", "spark": "spark", "mpi": "mpi",
              "cpu-single": "job"}
SPILL = 15  # a running gang spills onto at most this many other busy nodes of its class
# name, cpu millicores, memory bytes, priority, GPU nodes only
DAEMONSETS: tuple[tuple[str, int, int, int, bool], ...] = (
    ("kube-proxy", 100, 0, SYSTEM_NODE_CRITICAL, False),
    ("aws-node", 25, 0, SYSTEM_NODE_CRITICAL, False),
    ("node-exporter", 100, 50 * MiB, 0, False),
    ("nvidia-device-plugin", 50, 100 * MiB, SYSTEM_NODE_CRITICAL, True),
)
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generated-name suffixes


@cache
def _res(cpu: int, memory: int, gpu: int = 0, disk: int = 0, pods: int = 0) -> Resources:
    values = {CPU: cpu, MEMORY: memory, GPU: gpu, EPHEMERAL_STORAGE: disk, PODS: pods}
    return Resources({name: q for name, q in values.items() if q})


@cache
def _term(*reqs: tuple[str, str, tuple[str, ...]]) -> tuple[NodeSelectorTerm, ...]:
    exprs = (NodeSelectorRequirement(key=k, operator=op, values=v) for k, op, v in reqs)
    return (NodeSelectorTerm(match_expressions=tuple(exprs)),)


def kubelet_allocatable(instance: InstanceType) -> Resources:
    """What the EKS AMI's kubelet reports as allocatable on ``instance`` (module docstring)."""
    v = instance.vcpus
    cpu_reserved = 60 + 10 * (v > 1) + 5 * min(max(v - 2, 0), 2) + max(v - 4, 0) * 25 // 10
    mem_capacity = instance.memory_gib * GiB * 97 // 100 // 1024 * 1024
    mem_reserved = (255 + 11 * instance.max_pods + 100) * MiB
    disk = instance.disk_gib * GiB
    return _res(v * 1000 - cpu_reserved, mem_capacity - mem_reserved, instance.gpus,
                disk - GiB - disk // 10, instance.max_pods)


def _split(total: int, pools: Sequence[Pool]) -> list[int]:
    """``total`` by pool weight, largest remainder first (ties: table order)."""
    weight = sum(p.weight for p in pools)
    counts = [total * p.weight // weight for p in pools]
    order = sorted(range(len(pools)), key=lambda i: (-(total * pools[i].weight % weight), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _labels(t: InstanceType, pool: Pool, zone: str, region: str) -> dict[str, str]:
    labels = {
        "kubernetes.io/os": "linux", ARCH: t.arch, INSTANCE_TYPE: t.name,
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": t.arch,
        "beta.kubernetes.io/instance-type": t.name, ZONE: zone, REGION: region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": region,
        NODEGROUP: pool.name, CAPACITY_TYPE: pool.capacity_type, **dict(pool.labels),
    }
    if t.gpus:
        labels |= {GPU_PRODUCT: t.gpu_product, "nvidia.com/gpu.count": str(t.gpus),
                   GPU_PRESENT: "true"}
    return labels


def cloud_nodes(rng: random.Random, count: int, *, gpu_fraction: float = 0.4,
                cordon_fraction: float = 0.01, region: str = "us-east-1") -> list[Node]:
    """``count`` nodes, ``round(gpu_fraction * count)`` of them from ``GPU_POOLS``.

    ``round(cordon_fraction * count)`` nodes (at least one of 10 or more) are cordoned.
    """
    if count < 0 or not 0 <= gpu_fraction <= 1 or not 0 <= cordon_fraction <= 1:
        raise ValueError("cloud_nodes() needs count >= 0 and fractions in [0, 1]")
    gpu_count = round(gpu_fraction * count)
    zones = [f"{region}{s}" for s in "abc"]
    domain = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
    plan: list[tuple[Pool, int]] = []  # (pool, zone index) per node
    for pools, total in ((CPU_POOLS, count - gpu_count), (GPU_POOLS, gpu_count)):
        for p, (pool, n) in enumerate(zip(pools, _split(total, pools), strict=True)):
            plan.extend((pool, (j + p) % len(zones)) for j in range(n))
    addresses = []
    for z in range(len(zones)):
        in_zone = sum(1 for _, zi in plan if zi == z)
        if in_zone > 64 * 254:
            raise ValueError(f"more than {64 * 254} nodes in zone {zones[z]}")
        addresses.append(rng.sample(range(64 * 254), in_zone))
    cordoned = round(cordon_fraction * count) or int(count >= 10 and cordon_fraction > 0)
    cordon = set(rng.sample(range(count), cordoned))
    pool_labels: dict[tuple[str, int], dict[str, str]] = {}
    nodes = []
    for i, (pool, z) in enumerate(plan):
        t = INSTANCE_TYPES[pool.instance]
        if (pool.name, z) not in pool_labels:
            pool_labels[pool.name, z] = _labels(t, pool, zones[z], region)
        a = addresses[z].pop()
        name = f"ip-10-0-{z * 64 + a // 254}-{1 + a % 254}.{domain}"
        tainted = i in cordon and rng.random() < 0.5
        nodes.append(Node(name=name, allocatable=kubelet_allocatable(t),
                          labels={**pool_labels[pool.name, z], HOSTNAME: name},
                          taints=(*pool.taints, CORDON_TAINT) if tainted else pool.taints,
                          unschedulable=i in cordon))
    return nodes


@cache
def _suffixes(length: int) -> list[str]:
    return [a + b for a in _suffixes(length - 1) for b in NAME_ALPHABET] if length else [""]


def daemonset_pods(rng: random.Random, nodes: Sequence[Node]) -> list[Pod]:
    """The ``DAEMONSETS`` pods of every node: bound, in ``kube-system``, tolerating all."""
    pods: list[Pod] = []
    taken: set[str] = set()
    head, tail = _suffixes(3), _suffixes(2)
    for node in nodes:
        for ds, cpu, memory, priority, gpu_only in DAEMONSETS:
            if gpu_only and not node.allocatable[GPU]:
                continue
            name = ""
            while not name or name in taken:
                x = rng.randrange(len(head) * len(tail))
                name = f"kube-system/{ds}-{head[x // len(tail)]}{tail[x % len(tail)]}"
            taken.add(name)
            pods.append(Pod(name=name, namespace="kube-system", requests=_res(cpu, memory),
                            priority=priority, tolerations=(TOLERATE_ALL,), node_name=node.name))
    return pods


def team_queues(nodes: Sequence[Node]) -> list[Queue]:
    """One queue per team; ``batch`` capped at a tenth of the cluster's cores (at least 64)."""
    cores = max(64, sum(n.allocatable[CPU] for n in nodes) // 10_000)
    return [Queue(name=t.queue, weight=t.weight,
                  capability=_res(cores * 1000, 0) if t.queue == CAPPED_QUEUE else None)
            for t in TEAMS]


class _Constraints(NamedTuple):
    """What a gang's pods say about the nodes they may use."""

    selector: tuple[tuple[str, str], ...]
    affinity: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]


@dataclass
class _Class:
    """Nodes equal but for their hostname and what was bound after the fleet was made."""

    node: Node
    base: dict[str, int]  # allocatable minus the pods bound when the fleet was made
    members: list[int] = field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return self.node.allocatable[GPU] > 0


class _Fleet:
    """Free capacity per node, and the nodes grouped into classes for the predicates."""

    def __init__(self, nodes: Sequence[Node], bound: Sequence[Pod]) -> None:
        index = {n.name: i for i, n in enumerate(nodes)}
        self.free = [dict(n.allocatable.root) for n in nodes]
        for pod in bound:
            if pod.node_name in index:
                free = self.free[index[pod.node_name]]
                _take(free, pod.requests.root)
                if not pod.requests[PODS]:  # as Pod.demand(): every pod takes a slot
                    free[PODS] = free.get(PODS, 0) - 1
        self.classes: dict[tuple[object, ...], _Class] = {}
        self.class_of: list[_Class] = []
        for i, n in enumerate(nodes):
            labels = dict(n.labels)
            labels.pop(HOSTNAME, None)  # unsorted: another label order only splits a class
            key = (tuple(labels.items()), n.taints, n.unschedulable, tuple(self.free[i].items()))
            cls = self.classes.setdefault(key, _Class(n, dict(self.free[i])))
            cls.members.append(i)
            self.class_of.append(cls)
        self._matching: dict[_Constraints, list[_Class]] = {}
        self._values: dict[tuple[str, bool], list[str]] = {}

    def matching(self, c: _Constraints) -> list[_Class]:
        """Schedulable classes whose nodes admit ``c`` (as ``solver.predicates`` would)."""
        if c not in self._matching:
            self._matching[c] = [k for k in self.classes.values()
                                 if not k.node.unschedulable and _admits(c, k.node)]
        return self._matching[c]

    def values(self, key: str, gpu: bool) -> list[str]:
        """The values of label ``key`` on GPU (or on CPU) nodes."""
        if (key, gpu) not in self._values:
            self._values[key, gpu] = sorted({k.node.labels[key] for k in self.classes.values()
                                             if key in k.node.labels and k.gpu == gpu})
        return self._values[key, gpu]


def _take(free: dict[str, int], demand: Mapping[str, int]) -> None:
    for name, q in demand.items():
        free[name] = free.get(name, 0) - q


def _fits(free: Mapping[str, int], demand: Mapping[str, int]) -> bool:
    return all(free.get(name, 0) >= q for name, q in demand.items())


def _admits(c: _Constraints, node: Node) -> bool:
    """Kubernetes' predicates for the operators written here (In, NotIn, Exists); no cordon."""
    labels = node.labels
    if any(labels.get(k) != v for k, v in c.selector):
        return False
    for r in (r for term in c.affinity for r in term.match_expressions):
        value = labels.get(r.key)
        if ((r.operator == "In" and value not in r.values)
                or (r.operator == "NotIn" and value in r.values)
                or (r.operator == "Exists" and value is None)):
            return False
    return all(
        t.effect == TaintEffect.PREFER_NO_SCHEDULE
        or any(tol.effect in ("", t.effect) and (not tol.key or (tol.key == t.key and (
            tol.operator == "Exists" or tol.value == t.value))) for tol in c.tolerations)
        for t in node.taints)


def _constraints(rng: random.Random, team: Team, gpu: bool,
                 pick: Callable[[str], str | None]) -> _Constraints:
    """Selector, affinity and tolerations as ``team`` writes them; ``pick`` gives label values."""
    selector: list[tuple[str, str]] = []
    reqs: list[tuple[str, str, tuple[str, ...]]] = []
    tolerations = [TOLERATE_GPU] if gpu else []
    if team.queue == DEDICATED_TEAM:
        tolerations.append(TOLERATE_DEDICATED)
        if rng.random() < 0.5 and (dedicated := pick(DEDICATED)):
            selector.append((DEDICATED, dedicated))
    u = rng.random()
    if gpu and u < 0.45 and (product := pick(GPU_PRODUCT)):
        selector.append((GPU_PRODUCT, product))
    elif gpu and u < 0.6:
        reqs.append((GPU_PRESENT, "Exists", ()))
    elif not gpu and not selector and u < 0.15 and (instance := pick(INSTANCE_TYPE)):
        selector.append((INSTANCE_TYPE, instance))
    elif not gpu and u < 0.45 and pick(ARCH) == "amd64":
        reqs.append((ARCH, "In", ("amd64",)))
        if u < 0.25:
            reqs.append((CAPACITY_TYPE, "NotIn", ("SPOT",)))
    if rng.random() < 0.15 and (zone := pick(ZONE)):
        reqs.append((ZONE, "In", (zone,)))
    if rng.random() < 0.03:
        tolerations = [TOLERATE_ALL]
    return _Constraints(tuple(selector), _term(*reqs) if reqs else (), tuple(tolerations))


Roles = list[tuple[str, int, Resources]]  # role (pod name part), pod count, requests


def _roles(rng: random.Random, kind: str, budget: Mapping[str, int]) -> Roles:
    """A job's pods by role, each fitting a node with ``budget`` free."""
    cpu, mem, node_gpus = budget.get(CPU, 0), budget.get(MEMORY, 0), budget.get(GPU, 0)
    if kind in GPU_KINDS:
        train = kind == "train"
        gpus = min(rng.choices((1, 2, 4, 8), (3, 2, 1, 1) if train else (3, 1, 0, 0))[0],
                   node_gpus)
        share = rng.choice((0.5, 0.75, 0.9) if train else (0.25, 0.5)) * gpus / node_gpus
        pod = _res(max(1000, int(share * cpu) // 1000 * 1000),
                   max(GiB, int(share * mem) // GiB * GiB), gpus)
        if not train:
            return [("worker", 1, pod)]
        return [("master", 1, pod),
                ("worker", rng.choices((1, 2, 4, 8, 16), (4, 4, 2, 1, 0.5))[0] - 1, pod)]
    roles: list[tuple[str, int, int, int, int]]  # role, count, cpu, memory, disk
    if kind == "spark":
        cores = rng.choices((1, 2, 4, 8), (2, 4, 3, 1))[0]
        heap = cores * rng.choice((2, 4, 8)) * GiB
        disk = rng.choice((0, 0, 8 * GiB, 20 * GiB))
        driver = rng.choice((1, 2))
        roles = [("driver", 1, driver * 1000, driver * 4 * GiB, 0),
                 ("exec", int(2 ** rng.uniform(1, 6)), cores * 1000,
                  heap + max(heap // 10, 384 * MiB), disk)]
    elif kind == "mpi":
        cores = rng.choice((4, 8, 16))
        workers = rng.choices((2, 4, 8, 16, 32), (3, 3, 2, 1, 1))[0]
        roles = [("launcher", 1, 500, GiB, 0),
                 ("worker", workers, cores * 1000, cores * 2 * GiB, 0)]
    else:
        cores = rng.choice((1, 2, 4))
        roles = [("pod", 1, cores * 1000, cores * rng.choice((2, 4)) * GiB, 0)]
    out = []
    for role, n, c, m, d in roles:
        while c > cpu or m > mem:  # halve until it fits the node it was sized for
            c, m = max(c // 2, 100), m // 2
        out.append((role, n, _res(c, m, disk=d if d <= budget.get(EPHEMERAL_STORAGE, 0) else 0)))
    return out


def _pod_name(role: str, n: int, k: int) -> str:
    """``driver``, ``exec-0``, ...: replicas are numbered, a role of one pod is not."""
    return f"{role}-{k}" if n > 1 or role in ("master", "worker") else role


def _allowance(queues: Sequence[Queue]) -> dict[str, dict[str, int]]:
    """Half of each capability: what running gangs may hold, and the most one gang asks."""
    return {q.name: {k: v // 2 for k, v in q.capability.items()}
            for q in queues if q.capability is not None}


def _gang(rng: random.Random, team: Team, kind: str, index: int, created: float,
          min_member: int, members: Sequence[tuple[str, Resources, str | None]],
          c: _Constraints) -> tuple[Gang, list[Pod]]:
    job = f"{team.queue}/{JOB_PREFIX[kind]}-{index:05d}"
    priority = rng.choices(*zip(*team.priorities, strict=True))[0]
    selector = dict(c.selector)
    gang = Gang(name=job, min_member=min_member, queue=team.queue, priority=priority,
                created_s=created)
    return gang, [Pod(name=f"{job}-{name}", namespace=team.queue, requests=req,
                      priority=priority, gang=job, node_selector=selector, affinity=c.affinity,
                      tolerations=c.tolerations, node_name=node, created_s=created)
                  for name, req, node in members]


def _draw_kind(rng: random.Random, team: Team, gpu: bool | None) -> str | None:
    """One of ``team``'s job kinds: GPU ones, CPU ones, or either (``gpu=None``)."""
    kinds = [(k, w) for k, w in team.kinds if gpu is None or (k in GPU_KINDS) == gpu]
    return rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0] if kinds else None


def running_gangs(rng: random.Random, nodes: Sequence[Node], bound: Sequence[Pod] = (), *,
                  busy_fraction: float = 0.33, queues: Sequence[Queue] = (),
                  start_s: float = 0.0, first_index: int = 0) -> tuple[list[Gang], list[Pod]]:
    """Gangs already running on ``round(busy_fraction * len(nodes))`` random nodes.

    Each busy node is filled towards a uniform 30..100% of its GPUs (or cores) by jobs
    drawn as the teams write them, sized for that node and spilling onto up to ``SPILL``
    busy nodes of its class; a gang is the prefix of its pods that fit (``min_member`` =
    that size). ``bound`` pods (DaemonSets) hold their share first; cordoned nodes may be
    busy (cordoned since). A capped queue's gangs hold at most half its capability.
    """
    fleet = _Fleet(nodes, bound)
    allowance = _allowance(queues)  # decremented as capped gangs are placed
    busy = rng.sample(range(len(nodes)), round(busy_fraction * len(nodes)))
    peers: dict[int, list[int]] = {}
    for i in busy:
        peers.setdefault(id(fleet.class_of[i]), []).append(i)
    gangs: list[Gang] = []
    pods: list[Pod] = []
    clock = start_s
    for i in busy:
        node, free, cls = nodes[i], fleet.free[i], fleet.class_of[i]
        primary = GPU if cls.gpu else CPU
        floor = (1 - rng.uniform(0.3, 1.0)) * node.allocatable[primary]
        teams = [t for t in TEAMS if (t.queue == DEDICATED_TEAM) >= (DEDICATED in node.labels)
                 and any((k in GPU_KINDS) == cls.gpu for k, _ in t.kinds)]
        others = [j for j in peers[id(cls)] if j != i]
        for _attempt in range(12):
            if free.get(primary, 0) <= floor or not teams:
                break
            team = rng.choices(teams, [t.share for t in teams])[0]
            kind = _draw_kind(rng, team, cls.gpu)
            c = _constraints(rng, team, cls.gpu, node.labels.get)
            if kind is None or not _admits(c, node):
                continue
            room = allowance.get(team.queue)
            at = rng.randrange(len(others)) if others else 0
            order = [i, *(others[at:] + others[:at])[:SPILL]]
            placed: list[tuple[str, Resources, str | None]] = []
            for role, n, req in _roles(rng, kind, cls.base):
                demand, at = {**req.root, PODS: 1}, 0
                for k in range(n):
                    while at < len(order) and not _fits(fleet.free[order[at]], demand):
                        at += 1  # free only shrinks: a node this role missed stays missed
                    if at == len(order) or (room is not None and not _fits(room, {
                            q: req[q] for q in room})):
                        break
                    _take(fleet.free[order[at]], demand)
                    if room is not None:
                        _take(room, {q: req[q] for q in room})
                    placed.append((_pod_name(role, n, k), req, nodes[order[at]].name))
                else:
                    continue
                break  # a role cut short: the gang is what was placed so far
            if placed:
                clock += round(rng.expovariate(1 / 30), 3)
                g, p = _gang(rng, team, kind, first_index + len(gangs), clock, len(placed),
                             placed, c)
                gangs.append(g)
                pods.extend(p)
    return gangs, pods


def pending_gangs(rng: random.Random, nodes: Sequence[Node], count: int,
                  daemonsets: Sequence[Pod] = (), *, queues: Sequence[Queue] = (),
                  start_s: float = 0.0, first_index: int = 0) -> tuple[list[Gang], list[Pod]]:
    """``count`` pending gangs as the ``TEAMS`` write them, each fitting in principle.

    A job's pods are sized for a node class drawn (weighted by node count) among the
    schedulable classes its constraints match; then its last role (workers, executors) is
    cut until the gang fits those classes with only ``daemonsets`` bound, and a capped
    queue's gang until it asks for at most half the capability. 20% of gangs of 2 or more
    pods are elastic: ``min_member`` leaves out half of the last role.
    """
    fleet = _Fleet(nodes, daemonsets)
    if count and not any(not k.node.unschedulable for k in fleet.classes.values()):
        raise ValueError("pending_gangs() needs a schedulable node")
    allowance = _allowance(queues)
    has_gpu = any(k.gpu for k in fleet.matching(_Constraints((), (), (TOLERATE_ALL,))))
    gangs: list[Gang] = []
    pods: list[Pod] = []
    clock = start_s

    def pick(key: str, gpu: bool) -> str | None:
        values = fleet.values(key, gpu)
        return rng.choice(values) if values else None

    while len(gangs) < count:
        team = rng.choices(TEAMS, [t.share for t in TEAMS])[0]
        kind = _draw_kind(rng, team, None if has_gpu else False)
        if kind is None:
            continue
        gpu = kind in GPU_KINDS
        c = _constraints(rng, team, gpu, partial(pick, gpu=gpu))
        matching = [k for k in fleet.matching(c) if k.gpu or not gpu]
        if not matching:
            continue
        roles = _roles(rng, kind, rng.choices(matching, [len(k.members) for k in matching])[0].base)
        envelope = {PODS: 1}  # the largest request of any role, per resource
        for _, _, req in roles:
            for q, v in req.items():
                envelope[q] = max(envelope.get(q, 0), v)
        room = sum(len(k.members) * min(k.base.get(q, 0) // v for q, v in envelope.items())
                   for k in matching)
        cap = allowance.get(team.queue, {})
        while roles[-1][1] and (sum(n for _, n, _ in roles) > room or any(
                sum(n * req[q] for _, n, req in roles) > v for q, v in cap.items())):
            roles[-1] = (roles[-1][0], roles[-1][1] - 1, roles[-1][2])
        size = sum(n for _, n, _ in roles)
        if not 0 < size <= room or any(sum(n * r[q] for _, n, r in roles) > v
                                       for q, v in cap.items()):
            continue
        elastic = size >= 2 and rng.random() < 0.2
        clock += round(rng.expovariate(1 / 10), 3)
        members = [(_pod_name(r, n, k), req, None) for r, n, req in roles for k in range(n)]
        g, p = _gang(rng, team, kind, first_index + len(gangs), clock,
                     size - roles[-1][1] // 2 if elastic else size, members, c)
        gangs.append(g)
        pods.extend(p)
    return gangs, pods


_pending_gangs = pending_gangs  # cluster()'s parameter of that name hides the function


def cluster(seed: int = 0, nodes: int = 200, pending_gangs: int = 300, *,
            gpu_fraction: float = 0.4, busy_fraction: float = 0.33,
            cordon_fraction: float = 0.01) -> ClusterState:
    """A production-shaped snapshot: nodes, DaemonSets, running gangs, a pending backlog.

    Draws from ``random.Random(seed)`` in this order: ``cloud_nodes``, ``daemonset_pods``,
    ``running_gangs``, ``pending_gangs``; queues from ``team_queues``. With the defaults
    the pending gangs ask for about 1.3-2x the free GPUs and cores.
    """
    rng = random.Random(seed)
    node_list = cloud_nodes(rng, nodes, gpu_fraction=gpu_fraction,
                            cordon_fraction=cordon_fraction)
    queues = team_queues(node_list)
    system = daemonset_pods(rng, node_list)
    running, running_pods = running_gangs(rng, node_list, system,
                                          busy_fraction=busy_fraction, queues=queues)
    pending, pending_pods = _pending_gangs(
        rng, node_list, pending_gangs, system, queues=queues,
        start_s=max((g.created_s for g in running), default=0.0), first_index=len(running))
    return ClusterState(nodes=tuple(node_list), pods=(*system, *running_pods, *pending_pods),
                        gangs=(*running, *pending), queues=tuple(queues))


def perf_gangs(seed: int = 0, nodes: int = 5000, gangs_of_3: int = 1000,
               gangs_of_size: Sequence[tuple[int, int]] = ()) -> ClusterState:
    """scheduler_perf's ``GangScheduling`` workload on real-shaped CPU nodes.

    ``cloud_nodes`` without GPU pools (cordons included) and their DaemonSets, nothing else
    running; ``gangs_of_3`` gangs of 3 pods, then ``count`` gangs of ``size`` for each
    ``(count, size)`` of ``gangs_of_size``. Pods ask for 100m and 100Mi (upstream's
    template) with no constraints or tolerations; ``min_member`` = size, priority 0, queue
    ``default``; gangs ``default/gang-NNNNN`` and pods ``default/test-gang-scheduling-N``
    in creation order, ``created_s`` the gang's index.
    """
    shapes = [(gangs_of_3, 3), *gangs_of_size]
    if any(n < 0 or size < 1 for n, size in shapes):
        raise ValueError("perf_gangs() needs non-negative counts and sizes >= 1")
    rng = random.Random(seed)
    node_list = cloud_nodes(rng, nodes, gpu_fraction=0.0)
    request = _res(100, 100 * MiB)
    gangs: list[Gang] = []
    pods: list[Pod] = []
    for n, size in shapes:
        for _ in range(n):
            name, first, created = f"default/gang-{len(gangs):05d}", len(pods), float(len(gangs))
            pods.extend(Pod(name=f"default/test-gang-scheduling-{first + j}", requests=request,
                            gang=name, created_s=created) for j in range(size))
            gangs.append(Gang(name=name, min_member=size, created_s=created))
    return ClusterState(nodes=tuple(node_list), pods=(*daemonset_pods(rng, node_list), *pods),
                        gangs=tuple(gangs), queues=(Queue(name=DEFAULT_QUEUE, weight=1),))
