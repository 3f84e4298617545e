"""Koordinator's GangGroups: gangs listed in one group start together or not at all."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.convert import convert
from adapter.loop import run_cycle
from adapter.metrics import LoopMetrics
from benchmarks.fake_apiserver import FakeApiServer
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.schedulers import schedule
from solver.validate import check
from tests.adapter.kube.manifests import apply, gang_pods, live_pods, node, podgroup
from tests.adapter.kube.test_kube_cluster import FAST, podgroup_status, scheduled_condition, seen

# As Koordinator spells it (not read from the code: a slip there would pass).
GROUPS = "gang.scheduling.koordinator.sh/groups"
KOORD = "scheduling.sigs.k8s.io"  # the PodGroup Koordinator serves


def grouped(name: str, min_member: int, group: list[str]) -> dict[str, Any]:
    """A Koordinator PodGroup listing ``group`` (as ``namespace/name``)."""
    obj = podgroup(name, min_member, group=KOORD)
    obj["metadata"]["annotations"] = {GROUPS: json.dumps(group)}
    return obj


def job(master_cpu: str = "1", worker_cpu: str = "1", workers: int = 2) -> list[dict[str, Any]]:
    """A master (minMember 1) and its workers (minMember ``workers``), one GangGroup."""
    group = ["default/master", "default/worker"]
    return [
        grouped("master", 1, group),
        grouped("worker", workers, group),
        *gang_pods("master", 1, cpu=master_cpu, dialect=KOORD),
        *gang_pods("worker", workers, cpu=worker_cpu, dialect=KOORD),
    ]


def decided(state: ClusterState, scheduler: str) -> dict[str, str]:
    decision = schedule(state, scheduler, SolverConfig(time_limit_s=1.0, deterministic=True))
    assert check(state, decision) == []
    return dict(decision.placements)


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_group_without_room_for_every_gang_binds_none_of_them(scheduler: str) -> None:
    """Room for the master and one of two workers: each gang alone, the master (its
    minimum met) was bound, and held its room while its job could not run."""
    c = convert([node("n1", cpu="2"), *job()])
    assert c.findings == []
    [gang] = c.state.gangs
    assert gang.min_member == 3
    assert gang.min_task_member == {"default/master": 1, "default/worker": 2}
    assert gang.members == ("default/master", "default/worker")
    assert decided(c.state, scheduler) == {}
    roomy = convert([node("n1", cpu="3"), *job()])
    assert len(decided(roomy.state, scheduler)) == 3


def test_the_validator_refuses_a_group_started_in_part() -> None:
    c = convert([node("n1", cpu="4"), *job()])

    def refused(placements: dict[str, str]) -> bool:
        return (
            check(
                c.state,
                Decision(scheduler="test", status=SolveStatus.GREEDY, placements=placements),
            )
            != []
        )

    assert refused({"default/master-0": "n1"})
    assert refused({"default/worker-0": "n1", "default/worker-1": "n1"})
    assert not refused({p.name: "n1" for p in c.state.pods})


def test_gangs_their_pods_declare_form_a_group_too_and_names_may_omit_the_namespace() -> None:
    def declaring(name: str, gang: str, minimum: int) -> dict[str, Any]:
        obj = gang_pods(name, 1)[0]
        obj["metadata"]["name"] = name
        obj["metadata"]["annotations"] = {
            "gang.scheduling.koordinator.sh/name": gang,
            "gang.scheduling.koordinator.sh/min-available": str(minimum),
            GROUPS: json.dumps(["ps", "default/workers"]),
        }
        return obj

    pods = [declaring("ps-0", "ps", 1), *(declaring(f"w-{i}", "workers", 2) for i in range(2))]
    c = convert([node("n1", cpu="2"), *pods])
    assert c.findings == []
    [gang] = c.state.gangs
    assert gang.min_task_member == {"default/ps": 1, "default/workers": 2}
    assert decided(c.state, "cpsat") == {}


def test_gangs_that_list_each_other_in_a_chain_are_one_group() -> None:
    """a lists b, b lists c: no gang anyone listed starts without the others."""
    objects = [
        grouped("a", 1, ["default/a", "default/b"]),
        grouped("b", 1, ["default/b", "default/c"]),
        podgroup("c", 1, group=KOORD),
        *(gang_pods(g, 1, dialect=KOORD)[0] for g in "abc"),
    ]
    c = convert([node("n1", cpu="2"), *objects])
    [gang] = c.state.gangs
    assert set(gang.min_task_member) == {"default/a", "default/b", "default/c"}
    assert decided(c.state, "cpsat") == {}


def test_a_group_listing_a_gang_that_does_not_exist_waits_and_what_runs_stays() -> None:
    group = ["default/master", "default/gone"]
    running = gang_pods("master", 2, dialect=KOORD)
    running[0]["spec"]["nodeName"] = "n1"
    c = convert([node("n1", cpu="8"), grouped("master", 1, group), *running])
    [finding] = c.findings
    assert (finding.name, finding.reason) == ("default/master-1", "FailedScheduling")
    assert "lists 'default/gone', which does not exist" in finding.message
    assert [p.name for p in c.state.pods] == ["default/master-0"]  # bound: holds its room


@pytest.mark.parametrize(
    "value", ["default/a", "[1, 2]", '["default/a", ""]', "{", "[" * 100_000, "1e999999"]
)
def test_a_malformed_group_makes_its_podgroup_unusable_and_its_pods_wait(value: str) -> None:
    bad = podgroup("a", 1, group=KOORD)
    bad["metadata"]["annotations"] = {GROUPS: value}
    c = convert([node("n1"), bad, *gang_pods("a", 1, dialect=KOORD)])
    assert c.state.gangs == () and c.state.pods == ()
    group, waits = c.findings
    assert group.kind == "PodGroup" and GROUPS in group.message
    assert waits.name == "default/a-0" and "cannot be used" in waits.message


def test_a_group_spanning_gangs_with_task_minimums_waits() -> None:
    a = grouped("a", 1, ["default/a", "default/b"])
    a["spec"]["minTaskMember"] = {"t": 1}
    c = convert(
        [node("n1"), a, grouped("b", 1, ["default/a"]), gang_pods("b", 1, dialect=KOORD)[0]]
    )
    [finding] = c.findings
    assert "'default/a' has minTaskMember" in finding.message
    assert c.state.pods == ()


def test_a_group_is_bound_whole_and_each_podgroup_reports_its_own_pods(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    apply(server, [node("n1", cpu="4"), *job()])
    seen(cluster, server)
    result = run_cycle(cluster, FAST)
    assert len(result.bound) == 3
    assert cluster.writer.flush()
    assert podgroup_status(server, "master", KOORD) == {"phase": "Running", "running": 1}
    assert podgroup_status(server, "worker", KOORD) == {"phase": "Running", "running": 2}


def test_a_group_without_room_waits_and_each_podgroup_and_pod_says_why(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    apply(server, [node("n1", cpu="2"), *job()])
    seen(cluster, server)
    assert run_cycle(cluster, FAST).bound == {}
    assert cluster.writer.flush()
    for name, running in (("master", 0), ("worker", 0)):
        status = podgroup_status(server, name, KOORD)
        assert (status["phase"], status["running"]) == ("Pending", running)
    condition = scheduled_condition(server, "master-0")
    assert condition["status"] == "False"
    assert "gang group [default/master, default/worker]" in condition["message"]


def test_a_failed_bind_of_a_worker_rolls_back_the_master_too(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    """The group is one gang to the binder: a worker's bind refused leaves neither the
    master nor the other worker bound (each gang alone, the master stayed)."""
    apply(server, [node("n1", cpu="4"), *job()])
    seen(cluster, server)
    server.fail("POST", r"/pods/worker-1/binding$", 409, reason="Conflict")
    result = run_cycle(cluster, FAST)
    assert "default/worker-1" in result.failed_binds
    assert len(result.rolled_back) == 1
    assert live_pods(server) == {}


def running(
    name: str, min_member: int, pods: int, group: list[str], cpu: str = "1"
) -> list[dict[str, Any]]:
    """A PodGroup (grouped where ``group`` lists any) whose ``pods`` pods run on n1."""
    bound = gang_pods(name, pods, cpu=cpu, dialect=KOORD)
    for p in bound:
        p["spec"]["nodeName"] = "n1"
    made = grouped(name, min_member, group) if group else podgroup(name, min_member, group=KOORD)
    return [made, *bound]


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_gang_made_again_beside_a_running_one_waits_for_its_own_minimum(scheduler: str) -> None:
    """The master runs 3 pods (minMember 1); its workers (minMember 2) are made again with
    room for one. Merged with the master, its extra pods counted towards the workers'
    minimum, and cpsat bound one worker alone."""
    group = ["default/master", "default/worker"]
    objects = [
        *running("master", 1, 3, group),
        grouped("worker", 2, group),
        *gang_pods("worker", 2, dialect=KOORD),
    ]
    c = convert([node("n1", cpu="4", memory="16Gi"), *objects])
    assert {g.name: g.members for g in c.state.gangs} == {
        "default/master": (),
        "default/worker": (),
    }
    assert decided(c.state, scheduler) == {}
    roomy = convert([node("n1", cpu="5", memory="16Gi"), *objects])
    assert set(decided(roomy.state, scheduler)) == {"default/worker-0", "default/worker-1"}


def test_finished_pods_of_one_gang_do_not_cover_anothers_minimum() -> None:
    """The master's three pods succeeded (minMember 1); the workers (minMember 2) have no
    room. Summed, the master's finished pods met the group's minimum: both PodGroups
    read Running and the workers' pods were told the gang runs."""
    group = ["default/master", "default/worker"]
    done = gang_pods("master", 3, dialect=KOORD)
    for p in done:
        p["status"] = {"phase": "Succeeded"}
    objects = [grouped("master", 1, group), *done, grouped("worker", 2, group)]
    c = convert([node("n1", cpu="1"), *objects, *gang_pods("worker", 2, dialect=KOORD)])
    gangs = {g.name: g for g in c.state.gangs}
    assert gangs["default/master"].succeeded == 3 and not gangs["default/worker"].members
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0)).explained()
    assert decision.placements == {} and "default/worker" in decision.unschedulable


def test_the_gangs_gauge_and_statuses_count_each_podgroup_of_a_group(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    apply(server, [node("n1", cpu="2"), *job(), podgroup("solo", 1), *gang_pods("solo", 1, "4")])
    seen(cluster, server)
    metrics = LoopMetrics()
    result = run_cycle(cluster, FAST, metrics=metrics)
    assert {s.gang for s in result.statuses} == {"default/master", "default/worker", "default/solo"}
    labels = {"state": "Pending", "reason": "NotEnoughResources", "queue": "default"}
    assert metrics.registry.get_sample_value("gangsat_gangs", labels) == 3


def test_no_gang_of_a_group_is_a_victim_of_preemption() -> None:
    """Evicting one gang of a running group breaks its job (a master evicted, its
    workers kept); evicting a group whole is not modelled. The same two gangs, not
    grouped, make room for a gang of higher priority."""
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    high |= {"metadata": {"name": "high"}, "value": 1000}
    urgent = gang_pods("urgent", 2, cpu="2", dialect=KOORD)
    for p in urgent:
        p["spec"]["priorityClassName"] = "high"
    cluster = [node("n1", cpu="4", memory="16Gi"), high, podgroup("urgent", 2, group=KOORD)]
    config = SolverConfig(time_limit_s=1.0, deterministic=True, preemption=True)
    for group in (["default/master", "default/worker"], []):
        objects = [*running("master", 1, 1, group, "2"), *running("worker", 1, 1, group, "2")]
        c = convert([*cluster, *objects, *urgent])
        decision = schedule(c.state, "cpsat", config)
        assert check(c.state, decision) == []
        assert bool(decision.evictions) == (not group)


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_group_that_preempts_is_named_by_its_gangs(scheduler: str) -> None:
    """Its victims' Events said they were preempted by "gang-group:...", a name gangsat
    gives the group it decides on and no object carries."""
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    high |= {"metadata": {"name": "high"}, "value": 1000}
    pending = job()
    for p in pending:
        if p["kind"] == "Pod":
            p["spec"]["priorityClassName"] = "high"
    objects = [node("n1", cpu="4", memory="16Gi"), high, *running("low", 2, 2, [], "2")]
    c = convert([*objects, *pending])
    config = SolverConfig(time_limit_s=1.0, deterministic=True, preemption=True)
    decision = schedule(c.state, scheduler, config)
    assert check(c.state, decision) == []
    assert set(decision.evictions) == {"default/low-0", "default/low-1"}
    for why in decision.evictions.values():
        assert why == (
            "preempted by gangs default/master, default/worker (one GangGroup) (priority 1000 > 0)"
        )
