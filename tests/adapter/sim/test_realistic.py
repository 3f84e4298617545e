"""The production-shaped cluster generator: real labels and allocatable, bound pods within
the nodes, every pending gang placeable in principle, and a backlog.

Feasibility is judged by ``solver.predicates.placement_reason`` (the solver's own
predicates), not by the generator's internal matching, so a drift between the two fails
here. Free capacity is computed from the pods' requests independently of the generator.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from adapter.sim import realistic
from adapter.sim.scenario import load_scenario, materialise
from benchmarks import instances
from benchmarks import solver as bench
from solver.model import CPU, EPHEMERAL_STORAGE, GPU, MEMORY, PODS, ClusterState, Node, Pod
from solver.predicates import placement_reason, untolerated_taint

GIB = 2**30
MIB = 2**20
REQUIRED_LABELS = {
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "eks.amazonaws.com/nodegroup",
}
GPU_LABELS = {"nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.present"}


@pytest.fixture(scope="module")
def default() -> ClusterState:
    return realistic.cluster(0)


@pytest.fixture(scope="module")
def big() -> ClusterState:
    return realistic.cluster(3, nodes=1000, pending_gangs=1500)


@pytest.fixture(scope="module")
def perf() -> ClusterState:
    return realistic.perf_gangs(0, nodes=300, gangs_of_3=200, gangs_of_size=((2, 100),))


def _used(state: ClusterState) -> dict[str, Counter[str]]:
    used: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in state.bound_pods():
        assert pod.node_name is not None
        used[pod.node_name].update(pod.demand())
    return used


def _free(state: ClusterState) -> Counter[str]:
    """Free capacity over the schedulable nodes, summed."""
    used = _used(state)
    free: Counter[str] = Counter()
    for node in state.nodes:
        if not node.unschedulable:
            for name, q in node.allocatable.items():
                free[name] += q - used[node.name][name]
    return free


def _pending_demand(state: ClusterState) -> Counter[str]:
    demand: Counter[str] = Counter()
    for pod in state.pending_pods():
        demand.update(pod.demand())
    return demand


def test_same_seed_same_state_different_seed_different() -> None:
    assert realistic.cluster(5, 60, 80) == realistic.cluster(5, 60, 80)
    assert realistic.cluster(5, 60, 80) != realistic.cluster(6, 60, 80)
    assert realistic.perf_gangs(1, 50, 10) == realistic.perf_gangs(1, 50, 10)
    assert realistic.perf_gangs(1, 50, 10) != realistic.perf_gangs(2, 50, 10)


def test_global_random_left_alone() -> None:
    random.seed(123)
    expected = random.random()
    random.seed(123)
    realistic.cluster(1, 50, 50)
    assert random.random() == expected


def test_validates_as_a_cluster_state(default: ClusterState) -> None:
    again = ClusterState.model_validate(default.model_dump())
    assert again == default


@pytest.mark.parametrize("which", ["default", "big", "perf"])
def test_nodes_labelled_as_kubelets_label_them(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    hostnames = [n.labels["kubernetes.io/hostname"] for n in state.nodes]
    assert hostnames == [n.name for n in state.nodes]
    assert len(set(hostnames)) == len(hostnames)
    zones = Counter(n.labels["topology.kubernetes.io/zone"] for n in state.nodes)
    assert set(zones) == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert max(zones.values()) - min(zones.values()) <= len(state.nodes) // 10
    for node in state.nodes:
        assert set(node.labels) >= REQUIRED_LABELS, node.name
        assert node.labels["kubernetes.io/os"] == "linux"
        assert node.labels["topology.kubernetes.io/region"] == "us-east-1"
        assert node.labels["failure-domain.beta.kubernetes.io/zone"] == (
            node.labels["topology.kubernetes.io/zone"]
        )
        assert (set(node.labels) >= GPU_LABELS) == (node.allocatable[GPU] > 0)
    arches = {n.labels["eks.amazonaws.com/nodegroup"]: n.labels["kubernetes.io/arch"]
              for n in state.nodes}
    assert [pool for pool, arch in arches.items() if arch == "arm64"] == ["arm"]


@pytest.mark.parametrize("which", ["default", "big", "perf"])
def test_allocatable_below_the_instance_capacity(
    which: str, request: pytest.FixtureRequest
) -> None:
    state: ClusterState = request.getfixturevalue(which)
    for node in state.nodes:
        t = realistic.INSTANCE_TYPES[node.labels["node.kubernetes.io/instance-type"]]
        assert t.vcpus * 1000 - 400 < node.allocatable[CPU] < t.vcpus * 1000
        reserved = t.vcpus * 1000 - node.allocatable[CPU]
        assert 70 <= reserved <= 320
        assert 0.9 * t.memory_gib * GIB < node.allocatable[MEMORY] < t.memory_gib * GIB
        assert node.allocatable[PODS] in (58, 110, 234)
        assert node.allocatable[GPU] == t.gpus
        assert node.allocatable["ephemeral-storage"] < t.disk_gib * GIB
    assert {n.allocatable[PODS] for n in state.nodes} >= {58, 234}


@pytest.mark.parametrize("which", ["default", "big", "perf"])
def test_capacity_jitters_per_node_within_a_type(
    which: str, request: pytest.FixtureRequest
) -> None:
    """Nodes of one type differ a little in memory and ephemeral-storage, never in cpu,
    GPUs or pod slots; memory in whole KiB, as the kubelet reports it."""
    state: ClusterState = request.getfixturevalue(which)
    by_pool: dict[str, list[Node]] = defaultdict(list)
    for node in state.nodes:
        by_pool[node.labels["eks.amazonaws.com/nodegroup"]].append(node)
    assert any(len(pool) >= 10 for pool in by_pool.values())
    for name, pool in by_pool.items():
        t = realistic.INSTANCE_TYPES[pool[0].labels["node.kubernetes.io/instance-type"]]
        nominal = realistic.kubelet_allocatable(t)
        for resource in (CPU, GPU, PODS):
            assert {n.allocatable[resource] for n in pool} == {nominal[resource]}, name
        memory = [n.allocatable[MEMORY] for n in pool]
        disk = [n.allocatable[EPHEMERAL_STORAGE] for n in pool]
        assert all(m % 1024 == 0 for m in memory), name
        assert nominal[MEMORY] - 64 * MIB < min(memory) <= max(memory) <= nominal[MEMORY]
        assert nominal[EPHEMERAL_STORAGE] - 512 * MIB < min(disk)
        assert max(disk) <= nominal[EPHEMERAL_STORAGE]
        if len(pool) >= 10:
            assert max(memory) - min(memory) < 64 * MIB, name
            assert len(set(memory)) > 1 and len(set(disk)) > 1, name


def test_kubelet_allocatable_of_a_short_node() -> None:
    t = realistic.INSTANCE_TYPES["m5.4xlarge"]
    nominal = realistic.kubelet_allocatable(t)
    assert realistic.kubelet_allocatable(t) is nominal  # shared while exact
    short = realistic.kubelet_allocatable(t, 3 * MIB + 4096, 200 * MIB)
    assert nominal[MEMORY] - short[MEMORY] == 3 * MIB + 4096
    assert 0.9 * 200 * MIB <= nominal[EPHEMERAL_STORAGE] - short[EPHEMERAL_STORAGE] <= 200 * MIB
    assert {r: short[r] for r in (CPU, GPU, PODS)} == {r: nominal[r] for r in (CPU, GPU, PODS)}
    with pytest.raises(ValueError):
        realistic.kubelet_allocatable(t, 1000)
    with pytest.raises(ValueError):
        realistic.kubelet_allocatable(t, 0, -1024)


def test_gpu_nodes_tainted_and_gpu_pods_tolerate_them(big: ClusterState) -> None:
    gpu_nodes = [n for n in big.nodes if n.allocatable[GPU]]
    assert 0.35 < len(gpu_nodes) / len(big.nodes) < 0.45
    assert all(realistic.GPU_TAINT in n.taints for n in gpu_nodes)
    assert not any(realistic.GPU_TAINT in n.taints for n in big.nodes if not n.allocatable[GPU])
    plain_gpu_node = next(n for n in gpu_nodes if n.taints == (realistic.GPU_TAINT,))
    gpu_pods = [p for p in big.pods if p.requests[GPU]]
    assert gpu_pods
    for pod in gpu_pods:
        assert untolerated_taint(pod, plain_gpu_node) is None, pod.name
    # A CPU pod without a blanket toleration stays off GPU nodes.
    cpu_pod = next(p for p in big.pending_pods() if not p.requests[GPU] and p.tolerations == ())
    assert untolerated_taint(cpu_pod, plain_gpu_node) == realistic.GPU_TAINT


def test_cordons_and_other_taints(big: ClusterState) -> None:
    cordoned = [n for n in big.nodes if n.unschedulable]
    assert len(cordoned) == 10  # 1% of 1,000
    with_taint = [n for n in cordoned if realistic.CORDON_TAINT in n.taints]
    assert 0 < len(with_taint) < len(cordoned)
    assert all(n.unschedulable for n in big.nodes if realistic.CORDON_TAINT in n.taints)
    dedicated = [n for n in big.nodes if realistic.DEDICATED_TAINT in n.taints]
    assert dedicated and all(n.labels.get("dedicated") == "data-eng" for n in dedicated)
    assert any(realistic.ARM_TAINT in n.taints for n in big.nodes)


@pytest.mark.parametrize("which", ["default", "perf"])
def test_daemonsets_on_every_node(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    system = [p for p in state.pods if p.namespace == "kube-system"]
    per_node: dict[str, set[str]] = defaultdict(set)
    for pod in system:
        assert pod.gang is None and pod.node_name is not None
        assert [t.operator for t in pod.tolerations] == ["Exists"]
        assert pod.tolerations[0].key == ""
        per_node[pod.node_name].add(pod.name.split("/")[1].rsplit("-", 1)[0])
    for node in state.nodes:
        expected = {"kube-proxy", "aws-node", "node-exporter"}
        if node.allocatable[GPU]:
            expected.add("nvidia-device-plugin")
        assert per_node[node.name] == expected, node.name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_pods_within_allocatable(seed: int) -> None:
    state = realistic.cluster(seed)
    nodes = {n.name: n for n in state.nodes}
    used = _used(state)
    for name, demand in used.items():
        for resource, q in demand.items():
            assert q <= nodes[name].allocatable[resource], (name, resource)
    # Every bound pod was admitted by its node's predicates (before any cordon).
    for pod in state.bound_pods():
        node = nodes[str(pod.node_name)]
        uncordoned = node.model_copy(update={
            "unschedulable": False,
            "taints": tuple(t for t in node.taints if t != realistic.CORDON_TAINT),
        })
        assert placement_reason(pod, uncordoned) is None, pod.name
    gangs = {g.name: g for g in state.gangs}
    running = Counter(p.gang for p in state.bound_pods() if p.gang is not None)
    assert running
    for gang, size in running.items():
        assert gangs[gang].min_member == size
    busy = {p.node_name for p in state.bound_pods() if p.gang is not None}
    assert 0.25 * len(state.nodes) < len(busy) <= round(0.33 * len(state.nodes))


def _members(state: ClusterState) -> dict[str, list[Pod]]:
    members: dict[str, list[Pod]] = defaultdict(list)
    for pod in state.pods:
        members[pod.gang_name()].append(pod)
    return members


@pytest.mark.parametrize("which", ["default", "big"])
def test_every_pending_gang_fits_in_principle(which: str, request: pytest.FixtureRequest) -> None:
    """Each gang's pods fit, all at once, on the schedulable nodes that admit them."""
    state: ClusterState = request.getfixturevalue(which)
    members = _members(state)
    nothing: Counter[str] = Counter()
    base: dict[str, Counter[str]] = {}
    for pod in state.pods:
        if pod.namespace == "kube-system":
            assert pod.node_name is not None
            base.setdefault(pod.node_name, Counter()).update(pod.demand())
    admits: dict[tuple[object, ...], list[Node]] = {}
    pending = [g for g in state.gangs if any(p.node_name is None for p in members[g.name])]
    assert len(pending) == len(state.gangs) - len({p.gang for p in state.bound_pods() if p.gang})
    for gang in pending:
        pods = members[gang.name]
        assert all(p.node_name is None for p in pods)
        assert 1 <= gang.min_member <= len(pods)
        key = pods[0].placement_key()
        assert all(p.placement_key() == key for p in pods)
        if key not in admits:
            admits[key] = [n for n in state.nodes if placement_reason(pods[0], n) is None]
        feasible = admits[key]
        assert feasible, gang.name
        envelope: Counter[str] = Counter()
        for pod in pods:
            envelope |= Counter(pod.demand())
        room = sum(
            min((n.allocatable[r] - base.get(n.name, nothing)[r]) // q for r, q in envelope.items())
            for n in feasible
        )
        assert room >= len(pods), gang.name


def test_pending_gangs_use_the_constraints_users_write(big: ClusterState) -> None:
    pending = big.pending_pods()
    selectors = Counter(k for p in pending for k in p.node_selector)
    assert selectors["node.kubernetes.io/instance-type"] and selectors["nvidia.com/gpu.product"]
    operators = Counter(
        (r.key, r.operator) for p in pending for t in p.affinity for r in t.match_expressions
    )
    assert operators[("topology.kubernetes.io/zone", "In")]
    assert operators[("kubernetes.io/arch", "In")]
    assert operators[("eks.amazonaws.com/capacityType", "NotIn")]
    assert operators[("nvidia.com/gpu.present", "Exists")]
    gangs = {p.gang for p in pending}
    bare = {p.gang for p in pending if not p.node_selector and not p.affinity}
    assert 0.3 < len(bare) / len(gangs) < 0.8
    assert any(t.key == "" for p in pending for t in p.tolerations)
    data_eng = [p for p in pending if p.namespace == "data-eng"]
    assert data_eng and all(
        any(t.key == "dedicated" for t in p.tolerations) or p.tolerations[0].key == ""
        for p in data_eng
    )


def test_gangs_queues_priorities_and_arrivals(big: ClusterState) -> None:
    queues = {q.name: q for q in big.queues}
    assert sorted(q.weight for q in queues.values()) == [1, 2, 3, 4]
    capped = [q for q in queues.values() if q.capability is not None]
    assert [q.name for q in capped] == ["batch"]
    assert {g.priority for g in big.gangs} == {0, 100, 1000}
    members = _members(big)
    for gang in big.gangs:
        assert gang.queue in queues
        assert {(p.priority, p.namespace, p.created_s) for p in members[gang.name]} == {
            (gang.priority, gang.queue, gang.created_s)
        }
    created = [g.created_s for g in big.gangs]
    assert created == sorted(created)
    elastic = [g for g in big.gangs if g.min_member < len(members[g.name])]
    assert elastic
    # The capped queue: running gangs hold at most half, each pending gang asks at most half.
    cap = capped[0].capability
    assert cap is not None
    half = cap[CPU] // 2
    batch = [g for g in big.gangs if g.queue == "batch"]
    held = sum(p.requests[CPU] for g in batch for p in members[g.name] if p.node_name)
    assert held <= half
    for gang in batch:
        assert sum(p.requests[CPU] for p in members[gang.name]) <= half


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pending_demand_exceeds_free_capacity(seed: int) -> None:
    state = realistic.cluster(seed)
    free, demand = _free(state), _pending_demand(state)
    assert 1.2 * free[GPU] < demand[GPU] < 3 * free[GPU]
    assert 1.2 * free[CPU] < demand[CPU] < 3 * free[CPU]


def test_small_and_cpu_only_clusters() -> None:
    tiny = realistic.cluster(0, nodes=3, pending_gangs=10)
    assert len(tiny.nodes) == 3 and len({p.gang for p in tiny.pending_pods()}) == 10
    cpu_only = realistic.cluster(0, nodes=30, pending_gangs=40, gpu_fraction=0.0)
    assert not any(n.allocatable[GPU] for n in cpu_only.nodes)
    assert not any(p.requests[GPU] for p in cpu_only.pods)
    empty = realistic.cluster(0, nodes=20, pending_gangs=0, busy_fraction=0.0)
    assert all(p.namespace == "kube-system" for p in empty.pods)
    with pytest.raises(ValueError):
        realistic.cluster(0, nodes=0, pending_gangs=1)


def test_perf_gangs_shapes(perf: ClusterState) -> None:
    assert len(perf.nodes) == 300 and not any(n.allocatable[GPU] for n in perf.nodes)
    members = _members(perf)
    sizes = Counter(len(members[g.name]) for g in perf.gangs)
    assert sizes == {3: 200, 100: 2}
    assert all(g.min_member == len(members[g.name]) for g in perf.gangs)
    pending = perf.pending_pods()
    assert len(pending) == 800
    assert {(p.requests[CPU], p.requests[MEMORY]) for p in pending} == {(100, 100 * 2**20)}
    assert all(not p.node_selector and not p.affinity and not p.tolerations for p in pending)
    assert [p.name for p in pending[:2]] == [
        "default/test-gang-scheduling-0",
        "default/test-gang-scheduling-1",
    ]


def test_benchmark_instances_wrap_the_generator() -> None:
    assert instances.realistic(4, 40, 60) == realistic.cluster(4, 40, 60)
    assert instances.realistic_perf(1, 60, 20, ((1, 50),)) == realistic.perf_gangs(
        1, 60, 20, ((1, 50),)
    )
    assert {"real-40", "real-200", "real-1000", "real-perf-5000"} <= set(bench.INSTANCES)
    state = bench.INSTANCES["real-40"](0)
    assert len(state.nodes) == 40
    assert len({p.gang for p in state.pending_pods()}) == 60


@pytest.mark.parametrize("name", ["philly", "scheduler-perf-gangs", "contention", "seed-deadlock"])
def test_every_packaged_scenario_labels_its_nodes_as_kubelets_do(name: str) -> None:
    nodes = materialise(load_scenario(name)).nodes
    hostnames = [n.labels["kubernetes.io/hostname"] for n in nodes]
    assert hostnames == [n.name for n in nodes]  # unique, as the node names are
    assert {n.labels["kubernetes.io/os"] for n in nodes} == {"linux"}
    assert len({n.labels["topology.kubernetes.io/zone"] for n in nodes}) == min(3, len(nodes))
