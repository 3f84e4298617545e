"""Nodes as the kubelet and the cloud report them (labels, allocatable, taints, cordons),
and the DaemonSet pods bound to them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cache

from adapter.sim.realistic.catalog import (
    ARCH,
    CAPACITY_TYPE,
    CORDON_TAINT,
    CPU_POOLS,
    DAEMONSETS,
    DISK_JITTER,
    GPU_POOLS,
    GPU_PRESENT,
    GPU_PRODUCT,
    HOSTNAME,
    INSTANCE_TYPE,
    INSTANCE_TYPES,
    MEMORY_JITTER,
    NAME_ALPHABET,
    NODEGROUP,
    REGION,
    TOLERATE_ALL,
    ZONE,
    GiB,
    InstanceType,
    KiB,
    MiB,
    Pool,
    res,
    resources,
)
from solver.model import GPU, Node, Pod, Resources


def kubelet_allocatable(instance: InstanceType, memory_short: int = 0,
                        disk_short: int = 0) -> Resources:
    """What the EKS AMI's kubelet reports as allocatable on a node of ``instance``.

    cpu minus kube-reserved (6% of the first core, 1% of the second, 0.5% of the next two,
    0.25% of the rest); memory capacity (MemTotal: 97% of the nominal size, in whole KiB,
    less this node's ``memory_short``) minus 255Mi + 11Mi per pod slot and the 100Mi
    eviction threshold; ephemeral-storage capacity (the root volume less this node's
    ``disk_short``) minus 1Gi reserved and the 10% eviction threshold. The shortfalls are
    whole KiB; without them the result is shared between calls.
    """
    if memory_short % KiB or disk_short % KiB or memory_short < 0 or disk_short < 0:
        raise ValueError("kubelet_allocatable() needs shortfalls of whole, non-negative KiB")
    v = instance.vcpus
    cpu_reserved = 60 + 10 * (v > 1) + 5 * min(max(v - 2, 0), 2) + max(v - 4, 0) * 25 // 10
    mem_capacity = instance.memory_gib * GiB * 97 // 100 // KiB * KiB - memory_short
    mem_reserved = (255 + 11 * instance.max_pods + 100) * MiB
    disk = instance.disk_gib * GiB - disk_short
    make = resources if memory_short or disk_short else res
    return make(v * 1000 - cpu_reserved, mem_capacity - mem_reserved, instance.gpus,
                disk - GiB - disk // 10, instance.max_pods)


def _split(total: int, pools: Sequence[Pool]) -> list[int]:
    """``total`` by pool weight, largest remainder first (ties: table order)."""
    weight = sum(p.weight for p in pools)
    counts = [total * p.weight // weight for p in pools]
    order = sorted(range(len(pools)), key=lambda i: (-(total * pools[i].weight % weight), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def kubelet_labels(
    name: str, index: int, arch: str = "amd64", region: str = "us-east-1"
) -> dict[str, str]:
    """What every kubelet and cloud node controller label a node with: a unique hostname,
    os and arch, and a zone (round-robin over three by ``index``) and region. Simulator
    scenarios give their nodes these, so that no figure comes from unlabelled nodes."""
    zone = f"{region}{'abc'[index % 3]}"
    return {
        HOSTNAME: name,
        "kubernetes.io/os": "linux",
        ARCH: arch,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": arch,
        ZONE: zone,
        REGION: region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": region,
    }


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
    Each node's memory and ephemeral-storage fall short of its type's nominal capacity
    by a uniform draw of whole KiB below ``MEMORY_JITTER`` and ``DISK_JITTER``.
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
        allocatable = kubelet_allocatable(t, rng.randrange(MEMORY_JITTER // KiB) * KiB,
                                          rng.randrange(DISK_JITTER // KiB) * KiB)
        nodes.append(Node(name=name, allocatable=allocatable,
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
            pods.append(Pod(name=name, namespace="kube-system", requests=res(cpu, memory),
                            priority=priority, tolerations=(TOLERATE_ALL,), node_name=node.name,
                            daemon=True))
    return pods
