"""The real-shaped instances written as an API server's objects read back as themselves."""

from __future__ import annotations

import math

import pytest

from adapter.loop import LoopSettings, run_cycle
from benchmarks import instances
from benchmarks.api_objects import EPOCH, api_objects, timestamp
from benchmarks.cycle import real_cluster
from solver.baselines import gang_greedy
from solver.config import SolverConfig
from solver.model import ClusterState, Pod
from solver.scheduling_terms import Taint, TaintEffect
from solver.validate import check
from tests.builders import gang, node, pod

ADMISSION = "node.kubernetes.io/"


def _as_stored(state: ClusterState) -> ClusterState:
    """``state`` as an API server can hold it: creation times in whole seconds."""
    return state.model_copy(
        update={
            "pods": tuple(
                p.model_copy(update={"created_s": float(math.floor(p.created_s))})
                for p in state.pods
            ),
            "gangs": tuple(
                g.model_copy(update={"created_s": float(math.floor(g.created_s))})
                for g in state.gangs
            ),
        }
    )


def _as_domain(state: ClusterState) -> ClusterState:
    """A snapshot of the exported objects back on the domain's clock, without what
    admission added to every pod (DefaultTolerationSeconds) or the adapter reads off a
    bound pod's creation (its start)."""
    base = EPOCH.timestamp()

    def pod(p: Pod) -> Pod:
        kept = tuple(t for t in p.tolerations if not t.key.startswith(ADMISSION))
        assert len(kept) == len(p.tolerations) - 2  # admission's two, on every pod
        return p.model_copy(
            update={"tolerations": kept, "created_s": p.created_s - base, "started_s": None}
        )

    return state.model_copy(
        update={
            "pods": tuple(pod(p) for p in state.pods),
            "gangs": tuple(
                g.model_copy(update={"created_s": g.created_s - base}) for g in state.gangs
            ),
            "now_s": 0.0,
        }
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_real_shaped_cluster_reads_back_as_it_was_written(seed: int) -> None:
    state = instances.realistic(seed, 40, 60)
    kube = real_cluster(state)
    read = _as_domain(kube.snapshot())
    assert kube.findings == []  # nothing unreadable, nothing left out
    want = _as_stored(state)
    assert read.nodes == want.nodes
    assert read.queues == want.queues
    assert {g.name: g for g in read.gangs} == {g.name: g for g in want.gangs}
    assert {p.name: p for p in read.pods} == {
        p.name: p.model_copy(update={"started_s": None}) for p in want.pods
    }
    # What the instance exercises is there to be read back: taints, selectors, affinity,
    # tolerations, GPUs, a capped queue, running and pending pods, DaemonSet pods.
    assert any(n.taints for n in read.nodes) and any(p.affinity for p in read.pods)
    assert any(p.node_selector for p in read.pods) and any(q.capability for q in read.queues)
    assert any(p.daemon for p in read.pods) and read.pending_pods()


def test_the_same_decision_on_the_objects_as_on_the_instance() -> None:
    state = _as_stored(instances.realistic(3, 40, 60))
    read = _as_domain(real_cluster(state).snapshot())
    config = SolverConfig()
    placed = gang_greedy(state, config).placements
    assert placed and gang_greedy(read, config).placements == placed


def test_objects_are_as_an_api_server_stores_them() -> None:
    objects = api_objects(instances.realistic(0, 40, 60))
    pod = next(
        p for p in objects.pods if "nodeName" in p["spec"] and p["metadata"].get("annotations")
    )
    assert (
        pod["metadata"]["creationTimestamp"].endswith("Z") and pod["status"]["phase"] == "Running"
    )
    assert pod["spec"]["priority"] >= 0 and pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert {pg["status"]["phase"] for pg in objects.podgroups} >= {"Running", "Inqueue"}
    assert {pc["metadata"]["name"] for pc in objects.priority_classes} >= {"system-node-critical"}
    assert timestamp(1.9) == "2026-12-01T00:00:01Z"  # whole seconds
    for n in objects.nodes:  # the kubelet's node, in the instance's zone
        zone = n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        assert n["spec"]["providerID"].startswith(f"aws:///{zone}/")


def test_what_the_realistic_instances_never_set_reads_back_too() -> None:
    """Members that succeeded (per task), a pending DaemonSet pod, a gated pod, a pod that
    may not preempt, a terminating one, a cordoned and a not-ready node, taints with and
    without values, a non-preemptible gang with task minimums."""
    gpu = Taint(key="nvidia.com/gpu", effect=TaintEffect.NO_SCHEDULE)
    # As the node lifecycle controller leaves a node that is not ready.
    not_ready = Taint(key="node.kubernetes.io/not-ready", effect=TaintEffect.NO_SCHEDULE)
    state = _as_stored(
        ClusterState(
            nodes=(
                node("n1").cap(cpu=4, memory="8Gi").build(),
                node("n2").cap(cpu=4).build().model_copy(update={"unschedulable": True}),
                node("n3")
                .cap(cpu=4)
                .build()
                .model_copy(update={"ready": False, "taints": (gpu, not_ready)}),
            ),
            pods=(
                pod("ns/ds-1").req(cpu=1).build().model_copy(update={"daemon": True}),
                pod("ns/w-0").req(cpu=1).gang("ns/mpi").task("worker").on("n1").build(),
                pod("ns/w-1").req(cpu=1).gang("ns/mpi").task("worker").build(),
                pod("ns/gated").req(cpu=1).build().model_copy(update={"gates": ("kueue",)}),
                pod("ns/meek").req(cpu=1).build().model_copy(update={"may_preempt": False}),
                pod("ns/gone")
                .req(cpu=1)
                .on("n1")
                .build()
                .model_copy(update={"terminating": True, "created_s": 7.0}),
            ),
            gangs=(
                gang("ns/mpi", min_member=3)
                .task_minimums(launcher=1, worker=2)
                .not_preemptible()
                .build()
                .model_copy(update={"succeeded": 2, "succeeded_by_task": {"launcher": 1}}),
            ),
        )
    )
    # The builders name pods "ns/...", in the default namespace: as the adapter reads them.
    state = state.model_copy(
        update={"pods": tuple(p.model_copy(update={"namespace": "ns"}) for p in state.pods)}
    )
    kube = real_cluster(state)
    read = _as_domain(kube.snapshot())
    assert kube.findings == []
    assert read.nodes == state.nodes
    assert read.gangs == state.gangs  # succeeded 2, one of them its launcher
    assert {p.name: p for p in read.pods} == {
        p.name: p.model_copy(update={"started_s": None}) for p in state.pods
    }
    done = [p for p in api_objects(state).pods if p["status"]["phase"] == "Succeeded"]
    assert len(done) == 2 and {p["spec"]["schedulerName"] for p in done} == {"gangsat"}
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "Job" for p in done)
    with pytest.raises(ValueError, match="pod slots"):
        api_objects(state.model_copy(update={"pods": (pod("ns/x").req(pods=2).build(),)}))


def test_the_loop_schedules_a_real_shaped_cluster_without_breaking_a_rule() -> None:
    kube = real_cluster(instances.realistic(0, 40, 60))
    state = kube.snapshot()
    result = run_cycle(kube, LoopSettings(solver=SolverConfig(time_limit_s=0.5)))
    assert result.error is None and result.decision is not None and result.bound
    assert result.violations == [] and check(state, result.decision) == []
    # Every gang the decision admitted is bound whole: binds answer in-process.
    assert set(result.admitted()) == set(result.decision.admitted)
