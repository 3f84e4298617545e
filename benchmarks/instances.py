"""Reproducible benchmark instances: each generator returns one ``ClusterState``.

Every random choice is drawn from a private ``random.Random(seed)``; nothing reads or
changes global state, so the same arguments always give an equal state and generators
may run concurrently. The draws happen in a fixed order (nodes, then running gangs,
then pending gangs), so changing one generator's parameters never changes how another
generator's instance looks.

Shared choices, stated once:

* Quantities use the units of ``solver.model``: cpu in millicores, memory in bytes.
  ``GiB``/``MiB`` are binary (2**30, 2**20), as Kubernetes' ``Gi``/``Mi`` suffixes.
* Names are plain and zero-padded so they sort in creation order: nodes ``node-0000``,
  pending gangs ``job-0000`` with pods ``job-0000-00``, running gangs ``run-0000`` with
  pods ``run-0000-00``. All pods are in namespace ``default``.
* ``created_s`` is a gang's position in the arrival sequence, in seconds (0, 1, 2, ...):
  running gangs arrived before every pending gang. A pod has its gang's ``created_s``.
* Speed: pydantic objects are built once per distinct value and shared (``Resources``
  per pod shape, label and selector dicts per GPU type), so the 5,000-node,
  15,000-pod ``scheduler_perf`` instance builds in a fraction of a second.

Generators:

* :func:`reference` — 200 GPU nodes of 3 types, 35% of GPUs held by running gangs,
  150 pending gangs of 1..32 pods, 4 weighted queues.
* :func:`large` — the same shapes with 1,000 nodes and 5,000 pending pods.
* :func:`scheduler_perf` — the Kubernetes ``scheduler_perf`` ``GangScheduling`` shape
  (``test/integration/scheduler_perf/gangscheduling``): empty 4-core nodes, tiny pods.
* :func:`seed_deadlock` — two gangs that each need the whole 6-slot cluster.
* :func:`realistic` — a production-shaped EKS cluster (``adapter.sim.realistic``): nodes
  labelled as kubelets and the cloud label them, DaemonSets, running gangs, cordons,
  taints, and a backlog of ML / Spark / MPI gangs with selectors, affinity, tolerations.
* :func:`realistic_apart` — :func:`realistic` with a share of its multi-pod gangs asking
  a node per pod (required pod anti-affinity on ``kubernetes.io/hostname``).
* :func:`realistic_together` — :func:`realistic` with a share of its multi-pod gangs
  asking for one zone (required pod affinity on ``topology.kubernetes.io/zone``).
* :func:`realistic_perf` — the scheduler_perf gang shapes on those real-shaped CPU nodes.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence

from adapter.sim import realistic as real
from adapter.sim.realistic.catalog import ZONE
from solver.apart import may_run
from solver.model import (
    APART_EACH,
    DEFAULT_QUEUE,
    ClusterState,
    Gang,
    Node,
    Pod,
    Queue,
    Resources,
)
from solver.predicates import node_affinity_reason
from solver.scheduling_terms import DomainSpread

GiB = 2**30
MiB = 2**20

GPU_TYPE_LABEL = "gpu-type"
GPU_TYPES: tuple[str, ...] = ("a100", "v100", "t4")
GPU_NODE_CPU_MILLI = 32_000
GPU_NODE_MEMORY = 128 * GiB
GPU_NODE_GPUS = 8
NODE_MAX_PODS = 110
CPU_MILLI_PER_GPU = 4_000
MEMORY_PER_GPU = 16 * GiB

GANG_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
GANG_SIZE_WEIGHTS: tuple[int, ...] = (32, 16, 8, 4, 2, 1)  # each size half as likely
POD_GPUS: tuple[int, ...] = (1, 2, 4, 8)
POD_GPU_WEIGHTS: tuple[int, ...] = (8, 4, 2, 1)  # each shape half as likely

PRE_USED_GPU_FRACTION = 0.35
SELECTOR_PROBABILITY = 0.5
ELASTIC_PROBABILITY = 0.2  # among pending gangs of 2 or more pods
HIGH_PRIORITY = 10
HIGH_PRIORITY_PROBABILITY = 0.1
GPU_QUEUES: tuple[tuple[str, int], ...] = (("q1", 1), ("q2", 2), ("q3", 3), ("q4", 4))

PERF_NODE_CPU_MILLI = 4_000
PERF_NODE_MEMORY = 32 * GiB
PERF_POD_CPU_MILLI = 100
PERF_POD_MEMORY = 100 * MiB


def _gpu_pod_requests() -> dict[int, Resources]:
    return {
        g: Resources.of(cpu_milli=CPU_MILLI_PER_GPU * g, memory_bytes=MEMORY_PER_GPU * g, gpu=g)
        for g in POD_GPUS
    }


def _width(count: int) -> int:
    return max(4, len(str(max(count - 1, 0))))


def reference(seed: int = 0) -> ClusterState:
    """The reference GPU cluster: 200 nodes, 35% pre-used, 150 pending gangs.

    Choices, in draw order (all from ``random.Random(seed)``):

    * Nodes: 200 nodes ``node-0000``..``node-0199``, each 32 cores (32,000 millicores),
      128 GiB, 8 ``nvidia.com/gpu`` and 110 pod slots, no taints. Label ``gpu-type`` is
      ``a100``, ``v100``, ``t4`` round-robin by index (67/67/66 nodes): equal thirds,
      deterministic, and independent of the seed.
    * Pre-use: running gangs ``run-NNNN`` are added until they hold exactly
      ``round(0.35 * 1600) = 560`` GPUs. Each is drawn like a pending gang (size, GPUs
      per pod, selector, queue below); the last one is shrunk (fewer GPUs per pod, then
      fewer pods) to land on the target exactly. Every pod goes to a uniformly random
      node of its allowed type with room (up to 32 random probes, then a scan); a gang
      that does not fit is withdrawn and redrawn. Running gangs have ``min_member``
      equal to their size, priority 0, and no pending pods.
    * Pending: 150 gangs ``job-0000``..``job-0149``:

      - size from (1, 2, 4, 8, 16, 32) with weights (32, 16, 8, 4, 2, 1): each size
        half as likely as the one before, mean about 3 pods;
      - GPUs per pod from (1, 2, 4, 8) with weights (8, 4, 2, 1); all pods of a gang
        are alike; cpu is 4 cores and memory 16 GiB per GPU (so a node's cpu and
        memory run out exactly when its GPUs do);
      - with probability 0.5 a ``nodeSelector`` ``gpu-type`` of a uniform type;
      - queue uniform over ``q1``..``q4``;
      - with probability 0.2, if the gang has 2 or more pods, elastic:
        ``min_member = size // 2``; otherwise ``min_member = size``;
      - priority 10 with probability 0.1, else 0.

    * Queues ``q1``..``q4`` with weights 1..4, no capability.
    * ``created_s``: running gangs 0, 1, ...; pending gangs continue the sequence.
    """
    return _gpu_cluster(seed, nodes=200, pending_gangs=150, pending_pods=None)


def large(seed: int = 0, nodes: int = 1000, pods: int = 5000) -> ClusterState:
    """The reference shapes scaled: ``nodes`` GPU nodes and exactly ``pods`` pending pods.

    Every choice is the one :func:`reference` documents (node shape, round-robin GPU
    types, 35% of GPUs held by running gangs, gang size / GPU / selector / elastic /
    priority / queue distributions), except that pending gangs are drawn until they
    hold ``pods`` pods, the last gang being cut short to hit the count exactly (it
    keeps ``min_member <= size``). With the defaults that is about 1,650 gangs asking
    for about twice the free GPUs.
    """
    if nodes < 1 or pods < 0:
        raise ValueError("large() needs at least one node and a non-negative pod count")
    return _gpu_cluster(seed, nodes=nodes, pending_gangs=None, pending_pods=pods)


def _gpu_cluster(
    seed: int, *, nodes: int, pending_gangs: int | None, pending_pods: int | None
) -> ClusterState:
    rng = random.Random(seed)
    requests = _gpu_pod_requests()
    allocatable = Resources.of(
        cpu_milli=GPU_NODE_CPU_MILLI,
        memory_bytes=GPU_NODE_MEMORY,
        gpu=GPU_NODE_GPUS,
        pods=NODE_MAX_PODS,
    )
    selectors = {t: {GPU_TYPE_LABEL: t} for t in GPU_TYPES}
    no_selector: dict[str, str] = {}

    node_width = _width(nodes)
    node_names = [f"node-{i:0{node_width}d}" for i in range(nodes)]
    node_types = [GPU_TYPES[i % len(GPU_TYPES)] for i in range(nodes)]
    node_objs = tuple(
        Node(name=name, allocatable=allocatable, labels=selectors[t])
        for name, t in zip(node_names, node_types, strict=True)
    )
    by_type: dict[str | None, list[int]] = {None: list(range(nodes))}
    for t in GPU_TYPES:
        by_type[t] = [i for i in range(nodes) if node_types[i] == t]

    queue_names = [name for name, _ in GPU_QUEUES]
    queues = tuple(Queue(name=name, weight=weight) for name, weight in GPU_QUEUES)

    def draw_gang() -> tuple[int, int, str | None, str]:
        size = rng.choices(GANG_SIZES, GANG_SIZE_WEIGHTS)[0]
        gpus = rng.choices(POD_GPUS, POD_GPU_WEIGHTS)[0]
        gpu_type = rng.choice(GPU_TYPES) if rng.random() < SELECTOR_PROBABILITY else None
        queue = rng.choice(queue_names)
        return size, gpus, gpu_type, queue

    # --- running gangs: bound pods holding PRE_USED_GPU_FRACTION of the GPUs ---------
    free_gpus = [GPU_NODE_GPUS] * nodes
    target = round(PRE_USED_GPU_FRACTION * GPU_NODE_GPUS * nodes)
    used = 0
    pods: list[Pod] = []
    gangs: list[Gang] = []
    clock = 0
    failures = 0

    def find_node(candidates: list[int], gpus: int) -> int | None:
        for _ in range(32):
            i = candidates[rng.randrange(len(candidates))]
            if free_gpus[i] >= gpus:
                return i
        roomy = [i for i in candidates if free_gpus[i] >= gpus]
        return rng.choice(roomy) if roomy else None

    while used < target:
        size, gpus, gpu_type, queue = draw_gang()
        remaining = target - used
        if size * gpus > remaining:
            gpus = max(g for g in POD_GPUS if g <= min(gpus, remaining))
            size = min(size, remaining // gpus)
        placed: list[int] = []
        for _ in range(size):
            i = find_node(by_type[gpu_type], gpus)
            if i is None:
                break
            free_gpus[i] -= gpus
            placed.append(i)
        if len(placed) < size:
            for i in placed:
                free_gpus[i] += gpus
            failures += 1
            if failures > 1000:  # pragma: no cover - 35% pre-use always fits
                raise RuntimeError("could not place the pre-used pods")
            continue
        name = f"run-{len(gangs):04d}"
        gangs.append(Gang(name=name, min_member=size, queue=queue, created_s=float(clock)))
        selector = selectors[gpu_type] if gpu_type else no_selector
        pods.extend(
            Pod(
                name=f"{name}-{j:02d}",
                requests=requests[gpus],
                gang=name,
                node_selector=selector,
                node_name=node_names[i],
                created_s=float(clock),
            )
            for j, i in enumerate(placed)
        )
        used += size * gpus
        clock += 1

    # --- pending gangs ----------------------------------------------------------------
    count = 0
    total = 0
    while True:
        if pending_gangs is not None and count >= pending_gangs:
            break
        if pending_pods is not None and total >= pending_pods:
            break
        size, gpus, gpu_type, queue = draw_gang()
        if pending_pods is not None:
            size = min(size, pending_pods - total)
        elastic = size >= 2 and rng.random() < ELASTIC_PROBABILITY
        min_member = size // 2 if elastic else size
        priority = HIGH_PRIORITY if rng.random() < HIGH_PRIORITY_PROBABILITY else 0
        name = f"job-{count:04d}"
        gangs.append(
            Gang(
                name=name,
                min_member=min_member,
                queue=queue,
                priority=priority,
                created_s=float(clock),
            )
        )
        selector = selectors[gpu_type] if gpu_type else no_selector
        pods.extend(
            Pod(
                name=f"{name}-{j:02d}",
                requests=requests[gpus],
                priority=priority,
                gang=name,
                node_selector=selector,
                created_s=float(clock),
            )
            for j in range(size)
        )
        count += 1
        total += size
        clock += 1

    return ClusterState(nodes=node_objs, pods=tuple(pods), gangs=tuple(gangs), queues=queues)


def scheduler_perf(
    nodes: int = 5000,
    gangs_of_3: int = 1000,
    gangs_of_size: Sequence[tuple[int, int]] = (),
) -> ClusterState:
    """The Kubernetes scheduler_perf ``GangScheduling`` shape; no randomness at all.

    Upstream (``test/integration/scheduler_perf/gangscheduling``) creates ``initNodes``
    default nodes and ``initPodGroups`` PodGroups of 3 pods with ``minCount: 3``; the
    performance cases are 5000 nodes with 1000, 2000 or 3000 gangs. Here:

    * ``nodes`` nodes ``node-NNNN`` of 4 cores (4,000 millicores), 32 GiB and 110 pod
      slots (scheduler_perf's default node), no labels, no taints, nothing bound.
    * ``gangs_of_3`` gangs of 3 pods, then for each ``(count, size)`` in
      ``gangs_of_size`` another ``count`` gangs of ``size`` pods; every gang has
      ``min_member`` equal to its size (all or nothing), priority 0, queue ``default``.
      The defaults are upstream's ``5000Nodes_1000Gangs_3000Pods``; e.g.
      ``scheduler_perf(500, 300, ((3, 100),))`` is a small version with three large
      gangs, and ``scheduler_perf(5000, 5000)`` has 15,000 pods.
    * Gangs ``gang-NNNN`` are numbered in creation order; pods are
      ``test-gang-scheduling-N`` numbered consecutively, as upstream.
    * Pods request 100m cpu and 100 MiB (upstream's gang pod template), so cpu binds:
      40 pods per node.
    * One queue ``default``, weight 1. ``created_s`` is the gang's index.
    """
    shapes = [(gangs_of_3, 3), *gangs_of_size]
    if nodes < 0 or any(count < 0 or size < 1 for count, size in shapes):
        raise ValueError("scheduler_perf() needs non-negative counts and sizes >= 1")
    allocatable = Resources.of(
        cpu_milli=PERF_NODE_CPU_MILLI, memory_bytes=PERF_NODE_MEMORY, pods=NODE_MAX_PODS
    )
    node_width = _width(nodes)
    node_objs = tuple(
        Node(name=f"node-{i:0{node_width}d}", allocatable=allocatable) for i in range(nodes)
    )
    request = Resources.of(cpu_milli=PERF_POD_CPU_MILLI, memory_bytes=PERF_POD_MEMORY)
    gang_count = sum(count for count, _ in shapes)
    gang_width = _width(gang_count)
    gangs: list[Gang] = []
    pods: list[Pod] = []
    for count, size in shapes:
        for _ in range(count):
            index = len(gangs)
            name = f"gang-{index:0{gang_width}d}"
            gangs.append(Gang(name=name, min_member=size, created_s=float(index)))
            first = len(pods)
            pods.extend(
                Pod(
                    name=f"test-gang-scheduling-{first + j}",
                    requests=request,
                    gang=name,
                    created_s=float(index),
                )
                for j in range(size)
            )
    return ClusterState(
        nodes=node_objs,
        pods=tuple(pods),
        gangs=tuple(gangs),
        queues=(Queue(name=DEFAULT_QUEUE, weight=1),),
    )


def seed_deadlock() -> ClusterState:
    """Two gangs that each need the whole cluster: exactly one can run.

    * 3 nodes ``node-0``..``node-2``, each 2 cores (2,000 millicores) and 2 pod slots,
      no memory: 6 pod slots in all.
    * Gangs ``job-a`` (created at 0) and ``job-b`` (created at 1), 6 pods of 1 core
      each, ``min_member`` 6, priority 0, queue ``default`` (weight 1).
    * Pod arrivals interleave (``job-a-0`` at 0, ``job-b-0`` at 1, ``job-a-1`` at 2,
      ...), so a pod-at-a-time scheduler half-places both gangs and neither runs;
      a gang scheduler admits ``job-a`` whole and leaves ``job-b`` pending.
    """
    allocatable = Resources.of(cpu_milli=2_000, pods=2)
    request = Resources.of(cpu_milli=1_000)
    nodes = tuple(Node(name=f"node-{i}", allocatable=allocatable) for i in range(3))
    gangs = (
        Gang(name="job-a", min_member=6, created_s=0.0),
        Gang(name="job-b", min_member=6, created_s=1.0),
    )
    pods = tuple(
        Pod(
            name=f"{gang.name}-{j}",
            requests=request,
            gang=gang.name,
            created_s=float(2 * j + g),
        )
        for j in range(6)
        for g, gang in enumerate(gangs)
    )
    return ClusterState(
        nodes=nodes, pods=pods, gangs=gangs, queues=(Queue(name=DEFAULT_QUEUE, weight=1),)
    )


def realistic(seed: int = 0, nodes: int = 200, gangs: int = 300) -> ClusterState:
    """A production-shaped cluster: ``adapter.sim.realistic.cluster(seed, nodes, gangs)``.

    Every choice is documented in ``adapter.sim.realistic``; in short:

    * Nodes: 40% GPU (p4d.24xlarge / g5.12xlarge / p3.8xlarge pools, weights 1:3:2), the
      rest CPU (m5.2xlarge, m5.4xlarge, c5.9xlarge spot, r5.8xlarge, m6g.8xlarge arm64, and
      a dedicated r5.8xlarge pool for ``data-eng``, weights 1:4:3:2:1:1), spread over three
      zones of ``us-east-1``; each node unique by its ``kubernetes.io/hostname`` label, with
      allocatable as the EKS kubelet reports it (below capacity; memory and
      ephemeral-storage jitter a little from node to node), GPU and dedicated pools
      tainted, ~1% cordoned.
    * Bound: DaemonSet pods on every node (gangs of one); running gangs on a third of the
      nodes, each filled to 30..100% of its GPUs or cores.
    * Pending: ``gangs`` gangs from four weighted queues (training, single-GPU, Spark, MPI
      and single-pod jobs, 20% elastic) with node selectors, required node affinity and
      tolerations as users write them; every gang fits the empty cluster, and together
      they ask for about 1.3-2x the free GPUs and cores.
    """
    return real.cluster(seed, nodes, gangs)


def realistic_apart(
    seed: int = 0, nodes: int = 200, gangs: int = 300, share: float = 0.3
) -> ClusterState:
    """:func:`realistic`, with about ``share`` of its pending gangs of two or more pods
    keeping their pods apart (``Pod.apart``: a node per pod, as training jobs ask with a
    required pod anti-affinity on ``kubernetes.io/hostname``), drawn after the rest."""
    return _some_gangs(realistic(seed, nodes, gangs), seed, share, lambda gang: {"apart": (gang,)})


def realistic_spread(
    seed: int = 0, nodes: int = 200, gangs: int = 300, share: float = 0.3, skew: int = 2
) -> ClusterState:
    """:func:`realistic`, with about ``share`` of its pending gangs of two or more pods
    spreading their pods at most ``skew`` a node (``Pod.apart`` with ``APART_EACH``, as
    training jobs ask with a ``DoNotSchedule`` topology spread on ``kubernetes.io/hostname``
    where every node starts at none), drawn after the rest."""
    state = realistic(seed, nodes, gangs)
    return _some_gangs(state, seed, share, lambda gang: {"apart": (f"{gang}{APART_EACH}{skew}",)})


def realistic_together(
    seed: int = 0, nodes: int = 200, gangs: int = 300, share: float = 0.3
) -> ClusterState:
    """:func:`realistic`, with about ``share`` of its pending gangs of two or more pods
    keeping their pods in one zone (``Pod.together``, as training jobs ask with a required
    pod affinity on ``topology.kubernetes.io/zone`` selecting their own job), drawn after
    the rest."""
    state = realistic(seed, nodes, gangs)
    return _some_gangs(state, seed, share, lambda gang: {"together": (f"{gang}@{ZONE}",)})


def realistic_zone_spread(
    seed: int = 0, nodes: int = 200, gangs: int = 300, share: float = 0.3, skew: int = 1
) -> ClusterState:
    """:func:`realistic`, with about ``share`` of its pending gangs of two or more pods,
    of those that need every pod, spreading them over the zones at most ``skew`` apart
    (``Pod.spreads``, as jobs ask with a ``DoNotSchedule`` topology spread on
    ``topology.kubernetes.io/zone`` selecting their own pods, none of which runs yet),
    drawn after the rest."""
    state = realistic(seed, nodes, gangs)
    members = Counter(p.gang for p in state.pods if p.gang is not None and may_run(p))
    first = {p.gang: p for p in reversed(state.pods) if p.node_name is None}
    spreads: dict[str | None, dict[str, object]] = {}
    for gang in state.gangs:
        if gang.name in first and members[gang.name] <= gang.min_running:
            pod = first[gang.name]
            zones = {
                n.labels[ZONE]
                for n in state.nodes
                if ZONE in n.labels and not node_affinity_reason(pod, n)
            }
            spread = DomainSpread(
                group=f"{gang.name}@{ZONE}{APART_EACH}{skew}",
                key=ZONE,
                max_skew=skew,
                counted=tuple((z, 0) for z in sorted(zones)),
            )
            spreads[gang.name] = {"spreads": (spread,)}
    return _some_gangs(state, seed, share, lambda gang: spreads.get(gang, {}))


def _some_gangs(
    state: ClusterState, seed: int, share: float, update: Callable[[str], dict[str, object]]
) -> ClusterState:
    """``state`` with the pending pods of about ``share`` of its pending gangs of two or
    more pods (drawn by ``seed``) changed by ``update`` (of the gang's name)."""
    sizes: dict[str, int] = {}
    for pod in state.pods:
        if pod.node_name is None and pod.gang is not None:
            sizes[pod.gang] = sizes.get(pod.gang, 0) + 1
    rng = random.Random(seed)
    drawn = {g for g, n in sorted(sizes.items()) if n >= 2 and rng.random() < share}
    pods = tuple(
        p.model_copy(update=update(p.gang))
        if p.node_name is None and p.gang is not None and p.gang in drawn
        else p
        for p in state.pods
    )
    return state.model_copy(update={"pods": pods})


def realistic_perf(
    seed: int = 0,
    nodes: int = 5000,
    gangs_of_3: int = 1000,
    gangs_of_size: Sequence[tuple[int, int]] = (),
) -> ClusterState:
    """:func:`scheduler_perf`'s gangs on real-shaped nodes: ``adapter.sim.realistic.perf_gangs``.

    The same workload as :func:`scheduler_perf` (gangs of 3 pods of 100m / 100 MiB, then
    ``count`` gangs of ``size`` per ``gangs_of_size`` pair, ``min_member`` = size, queue
    ``default``), on ``nodes`` CPU nodes of the realistic pools (labelled, allocatable
    below capacity, the dedicated pool tainted, ~1% cordoned) with their DaemonSet pods
    bound and nothing else running. Names are namespaced (``default/gang-00000``,
    ``default/test-gang-scheduling-0``). The seed draws the node names, cordons and
    DaemonSet pod names only.
    """
    return real.perf_gangs(seed, nodes, gangs_of_3, gangs_of_size)
