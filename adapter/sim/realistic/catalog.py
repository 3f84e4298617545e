"""The catalogue the generator draws from: instance types, node pools, teams, DaemonSets,
the label keys, taints and tolerations they use, and the per-node jitter of capacity.

Also ``res``, the one place ``Resources`` are made for requests and capabilities (shared
where equal).
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from solver.model import CPU, EPHEMERAL_STORAGE, GPU, MEMORY, PODS, Resources
from solver.scheduling_terms import Taint, TaintEffect, Toleration

GiB = 2**30
MiB = 2**20
KiB = 2**10
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

# Per-node jitter of capacity: how far below the instance type's nominal figure a node's
# MemTotal and its root filesystem may fall (drawn uniformly, in whole KiB). CPU, GPUs and
# pod slots are exact per type.
MEMORY_JITTER = 64 * MiB
DISK_JITTER = 512 * MiB
JITTERED = frozenset({MEMORY, EPHEMERAL_STORAGE})


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


def resources(cpu: int, memory: int, gpu: int = 0, disk: int = 0, pods: int = 0) -> Resources:
    """A ``Resources`` of the quantities given, zeros left out."""
    values = {CPU: cpu, MEMORY: memory, GPU: gpu, EPHEMERAL_STORAGE: disk, PODS: pods}
    return Resources({name: q for name, q in values.items() if q})


res = cache(resources)  # the same, shared where equal: requests, capabilities
