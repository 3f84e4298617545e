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
* Per-node jitter of capacity, as hosts and boots differ: each node's MemTotal falls short
  of its type's figure by a uniform 0..64 MiB (``MEMORY_JITTER``) and its root filesystem
  by a uniform 0..512 MiB of overhead (``DISK_JITTER``), both in whole KiB as the kubelet
  reports them (``memory: 65047356Ki``); allocatable memory and ephemeral-storage follow.
  So nodes of one type differ in allocatable memory by less than 64 MiB; cpu, GPUs and
  pod slots are exact per type.
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
  that match it, each node with its own allocatable and only DaemonSets bound; a
  ``batch`` gang also within half the queue's capability (running ``batch`` gangs hold at
  most the other half).

What it does not model: limits, init containers and pod overhead; pod (anti-)affinity,
topology spread, preferred node affinity and Gt/Lt; volumes and their zones; NoExecute
taints, node conditions and pressure; autoscaling and spot interruption; ENI prefix
delegation; other DaemonSets (CSI, logging) and static pods; ResourceQuotas; when running
gangs finish.

Every random choice is drawn from the ``random.Random`` passed in (``cluster`` and
``perf_gangs`` make one from the seed), so the same arguments give an equal state.
Pydantic objects are shared where equal (``Resources`` of requests, taints, tolerations,
affinity); each node's allocatable is its own.

Modules: ``catalog`` (instance types, pools, teams, DaemonSets, label keys, taints and
tolerations, jitter bounds), ``nodes`` (``cloud_nodes``, ``kubelet_allocatable``,
``daemonset_pods``), ``fleet`` (the generator's free capacity, node classes and
predicates), ``jobs`` (constraints and pods as teams write them), ``workloads``
(``team_queues``, ``running_gangs``, ``pending_gangs``); here ``cluster`` and
``perf_gangs``, which put them together.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from adapter.sim.realistic import workloads
from adapter.sim.realistic.catalog import (
    ARCH,
    ARM_TAINT,
    CAPACITY_TYPE,
    CAPPED_QUEUE,
    CORDON_TAINT,
    CPU_POOLS,
    DAEMONSETS,
    DEDICATED,
    DEDICATED_TAINT,
    DEDICATED_TEAM,
    DISK_JITTER,
    GPU_KINDS,
    GPU_POOLS,
    GPU_PRESENT,
    GPU_PRODUCT,
    GPU_TAINT,
    HIGH,
    HOSTNAME,
    INSTANCE_TYPE,
    INSTANCE_TYPES,
    LOW,
    MEMORY_JITTER,
    NODEGROUP,
    NORMAL,
    REGION,
    SYSTEM_NODE_CRITICAL,
    TEAMS,
    TOLERATE_ALL,
    TOLERATE_DEDICATED,
    TOLERATE_GPU,
    ZONE,
    InstanceType,
    MiB,
    Pool,
    Team,
    res,
)
from adapter.sim.realistic.nodes import (
    cloud_nodes,
    daemonset_pods,
    kubelet_allocatable,
    kubelet_labels,
)
from adapter.sim.realistic.workloads import pending_gangs, running_gangs, team_queues
from solver.model import DEFAULT_QUEUE, ClusterState, Gang, Pod, Queue

__all__ = [
    "ARCH",
    "ARM_TAINT",
    "CAPACITY_TYPE",
    "CAPPED_QUEUE",
    "CORDON_TAINT",
    "CPU_POOLS",
    "DAEMONSETS",
    "DEDICATED",
    "DEDICATED_TAINT",
    "DEDICATED_TEAM",
    "DISK_JITTER",
    "GPU_KINDS",
    "GPU_POOLS",
    "GPU_PRESENT",
    "GPU_PRODUCT",
    "GPU_TAINT",
    "HIGH",
    "HOSTNAME",
    "INSTANCE_TYPE",
    "INSTANCE_TYPES",
    "LOW",
    "MEMORY_JITTER",
    "NODEGROUP",
    "NORMAL",
    "REGION",
    "SYSTEM_NODE_CRITICAL",
    "TEAMS",
    "TOLERATE_ALL",
    "TOLERATE_DEDICATED",
    "TOLERATE_GPU",
    "ZONE",
    "InstanceType",
    "Pool",
    "Team",
    "cloud_nodes",
    "cluster",
    "daemonset_pods",
    "kubelet_allocatable",
    "kubelet_labels",
    "pending_gangs",
    "perf_gangs",
    "running_gangs",
    "team_queues",
]


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
    # workloads.pending_gangs: the parameter of that name hides the function here.
    pending, pending_pods = workloads.pending_gangs(
        rng, node_list, pending_gangs, system, queues=queues,
        start_s=max((g.created_s for g in running), default=0.0), first_index=len(running))
    return ClusterState(nodes=tuple(node_list), pods=(*system, *running_pods, *pending_pods),
                        gangs=(*running, *pending), queues=tuple(queues))


def perf_gangs(seed: int = 0, nodes: int = 5000, gangs_of_3: int = 1000,
               gangs_of_size: Sequence[tuple[int, int]] = ()) -> ClusterState:
    """scheduler_perf's ``GangScheduling`` workload on real-shaped CPU nodes.

    ``cloud_nodes`` without GPU pools (cordons and jitter included) and their DaemonSets,
    nothing else running; ``gangs_of_3`` gangs of 3 pods, then ``count`` gangs of ``size``
    for each ``(count, size)`` of ``gangs_of_size``. Pods ask for 100m and 100Mi
    (upstream's template) with no constraints or tolerations; ``min_member`` = size,
    priority 0, queue ``default``; gangs ``default/gang-NNNNN`` and pods
    ``default/test-gang-scheduling-N`` in creation order, ``created_s`` the gang's index.
    """
    shapes = [(gangs_of_3, 3), *gangs_of_size]
    if any(n < 0 or size < 1 for n, size in shapes):
        raise ValueError("perf_gangs() needs non-negative counts and sizes >= 1")
    rng = random.Random(seed)
    node_list = cloud_nodes(rng, nodes, gpu_fraction=0.0)
    request = res(100, 100 * MiB)
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
