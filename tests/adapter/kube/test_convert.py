"""Kubernetes objects -> ClusterState, in every dialect, with findings for bad objects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from adapter.cli import app
from adapter.inputs import read_objects
from adapter.kube.convert import convert
from adapter.kube.dialects import GROUP_ANNOTATIONS
from adapter.kube.memo import Memo
from solver.config import SolverConfig
from solver.decision import Decision
from solver.model import MAX_QUANTITY
from solver.schedulers import schedule
from tests.adapter.kube.manifests import volcano_queue

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "kube-batch-seed.yaml"


def seed_objects() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(SEED.read_text()) if d]


def node(name: str, cpu: str = "4", memory: str = "8Gi", **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }
    obj.update(extra)
    return obj


def pod(
    name: str,
    *,
    cpu: str = "1",
    namespace: str = "team",
    scheduler: str = "gangsat",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def podgroup(api: str, name: str, spec: dict[str, Any], namespace: str = "team") -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def test_the_workload_api_podgroups_are_read_in_their_own_shape() -> None:
    api = "scheduling.k8s.io/v1alpha2"
    objects = [
        node("n1"),
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 50,
        },
        podgroup(api, "gang", {"schedulingPolicy": {"gang": {"minCount": 2}}, "priority": 7}),
        podgroup(api, "basic", {"schedulingPolicy": {"basic": {}}, "priorityClassName": "high"}),
        podgroup(api, "bad", {"schedulingPolicy": {"gang": {"minCount": 0}}}),
        podgroup(api, "none", {}),
        *(pod(f"gang-{i}") for i in range(2)),
        pod("basic-0"),
    ]
    queued = podgroup(api, "queued", {"schedulingPolicy": {"gang": {"minCount": 1}}})
    queued["metadata"]["annotations"] = {"scheduling.sigs.dev/queue-name": "research"}
    objects.append(queued)
    for p in objects:
        if p["kind"] == "Pod":
            p["spec"]["schedulingGroup"] = {"podGroupName": p["metadata"]["name"].split("-")[0]}
    c = convert(objects)
    gangs = {g.name: g for g in c.state.gangs}
    assert (gangs["team/gang"].min_member, gangs["team/gang"].priority) == (2, 7)
    # basic: each pod on its own; priority from the class when the field is not filled.
    assert (gangs["team/basic"].min_member, gangs["team/basic"].priority) == (1, 50)
    assert gangs["team/queued"].queue == "research" and gangs["team/gang"].queue == "default"
    assert {p.name: p.gang for p in c.state.pods} == {
        "team/gang-0": "team/gang",
        "team/gang-1": "team/gang",
        "team/basic-0": "team/basic",
    }
    found = {f.name: f.message for f in c.findings}
    assert set(found) == {"team/bad", "team/none"}
    assert "spec.schedulingPolicy.gang.minCount must be an integer >= 1" in found["team/bad"]
    assert "spec.schedulingPolicy must set gang or basic" in found["team/none"]


def test_the_seed_manifests_become_one_gang_of_three() -> None:
    c = convert(seed_objects())
    assert c.findings == []
    [gang] = c.state.gangs
    # PodGroup mygroup: minMember 3, queue myqueue, priority from PriorityClass mypriority.
    assert (gang.name, gang.min_member, gang.queue, gang.priority) == (
        "default/mygroup",
        3,
        "myqueue",
        1000,
    )
    [queue] = c.state.queues
    assert (queue.name, queue.weight) == ("myqueue", 1)
    # The Job's parallelism 3 -> three pending pods from its template.
    names = sorted(p.name for p in c.state.pods)
    assert names == ["default/myjob-0", "default/myjob-1", "default/myjob-2"]
    for p in c.state.pods:
        assert p.gang == "default/mygroup" and p.node_name is None
        assert p.requests.root == {"cpu": 1000, "memory": 2**30}
    assert {n.name for n in c.state.nodes} == {"node-a", "node-b"}


def test_every_dialect_is_read() -> None:
    objects = [
        node("n1"),
        podgroup("scheduling.volcano.sh/v1beta1", "v", {"minMember": 2, "queue": "research"}),
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 4, "capability": {"cpu": "8", "memory": "16Gi"}},
        },
        podgroup("scheduling.x-k8s.io/v1alpha1", "x", {"minMember": 2}),
        pod("v-0", annotations={"scheduling.volcano.sh/group-name": "v"}),
        pod("v-1", annotations={"scheduling.k8s.io/group-name": "v"}),
        pod("x-0", labels={"scheduling.x-k8s.io/pod-group": "x"}),
        pod("x-1", labels={"scheduling.x-k8s.io/pod-group": "x"}),
        pod("solo"),
    ]
    c = convert(objects)
    assert c.findings == []
    gangs = {g.name: g for g in c.state.gangs}
    assert gangs["team/v"].queue == "research" and gangs["team/x"].queue == "default"
    of = {p.name: p.gang for p in c.state.pods}
    assert of == {
        "team/v-0": "team/v",
        "team/v-1": "team/v",
        "team/x-0": "team/x",
        "team/x-1": "team/x",
        "team/solo": None,  # no group: a gang of one
    }
    [research] = c.state.queues
    assert research.weight == 4
    assert research.capability is not None
    assert research.capability.root == {"cpu": 8000, "memory": 16 * 2**30}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"minMember": -1}, "spec.minMember must be an integer >= 0, got -1"),
        ({"minMember": "3"}, 'spec.minMember must be an integer >= 0, got "3"'),
        ({"minMember": 2, "queue": 7}, "spec.queue must be a name, got 7"),
    ],
)
def test_a_malformed_podgroup_is_a_finding_and_its_pods_wait(
    spec: dict[str, Any], fragment: str
) -> None:
    objects = [
        node("n1"),
        podgroup("scheduling.sigs.dev/v1alpha2", "bad", spec),
        pod("b-0", annotations={"scheduling.k8s.io/group-name": "bad"}),
        pod("ok"),
    ]
    c = convert(objects)
    [finding, waits] = c.findings
    assert (finding.kind, finding.name) == ("PodGroup", "team/bad")
    assert fragment in finding.message
    assert c.state.gangs == ()
    # Its pod waits, never placed alone, and is told why: not that its PodGroup was "not
    # found", as it was while it stayed in the snapshot.
    assert (waits.kind, waits.name, waits.reason) == ("Pod", "team/b-0", "FailedScheduling")
    assert waits.message == f"PodGroup 'team/bad' cannot be used: {finding.message}"
    assert {p.name for p in c.state.pods} == {"team/ok"}


def test_the_pods_of_a_podgroup_of_the_wrong_shape_are_told_why_they_wait() -> None:
    shapeless = podgroup("scheduling.sigs.dev/v1alpha2", "bad", {})
    shapeless["spec"] = "three"
    c = convert([node("n1"), shapeless, pod("b-0", annotations={GROUP_ANNOTATIONS[0]: "bad"})])
    [group, waits] = c.findings
    assert group.kind == "PodGroup" and group.message.startswith("malformed: spec")
    assert (waits.name, waits.reason) == ("team/b-0", "FailedScheduling")
    assert waits.message == f"PodGroup 'team/bad' cannot be used: {group.message}"


def test_the_older_coscheduling_group_and_label_make_one_gang() -> None:
    """scheduler-plugins before v0.24, and Koordinator, serve the PodGroup as
    scheduling.sigs.k8s.io and join pods with the label pod-group.scheduling.sigs.k8s.io.
    Unread, each pod was a gang of one: with room for two of three, two were bound."""
    objects = [
        node("n1", cpu="2"),
        podgroup("scheduling.sigs.k8s.io/v1alpha1", "g", {"minMember": 3}),
        *(pod(f"g-{i}", labels={"pod-group.scheduling.sigs.k8s.io": "g"}) for i in range(3)),
    ]
    c = convert(objects)
    assert c.findings == []
    [gang] = c.state.gangs
    assert (gang.name, gang.min_member, gang.queue) == ("team/g", 3, "default")
    assert {p.gang for p in c.state.pods} == {"team/g"}
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {}
    assert "team/g" in decision.explained().unschedulable


# The keys as upstream spells them (not read from ``dialects``: a slip there would pass).
LIGHTWEIGHT = (
    "pod-group.scheduling.sigs.k8s.io/name",
    "pod-group.scheduling.sigs.k8s.io/min-available",
)
KOORDINATOR = (
    "gang.scheduling.koordinator.sh/name",
    "gang.scheduling.koordinator.sh/min-available",
)


def declaring(
    name: str, gang: str, minimum: str | None, where: str, **extra: Any
) -> dict[str, Any]:
    """A pod that declares its gang itself: in labels (scheduler-plugins' lightweight
    coscheduling, Alibaba Cloud ACK) or annotations (Koordinator)."""
    keys = LIGHTWEIGHT if where == "labels" else KOORDINATOR
    marks = {keys[0]: gang, **({keys[1]: minimum} if minimum is not None else {})}
    return pod(name, **{where: marks}, **extra)


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_a_gang_its_pods_declare_is_one_gang_with_their_minimum(where: str) -> None:
    """No PodGroup object: the pods name the gang and its minMember. Unread, each pod was
    a gang of one: with room for two of three, two were bound."""
    objects = [
        node("n1", cpu="2"),
        *(declaring(f"g-{i}", "g", "3", where) for i in range(3)),
        declaring("h-0", "h", "1", where, cpu="1"),
    ]
    c = convert(objects)
    assert c.findings == []
    gangs = {g.name: g for g in c.state.gangs}
    assert (gangs["team/g"].min_member, gangs["team/g"].queue) == (3, "default")
    assert {p.name: p.gang for p in c.state.pods}["team/g-2"] == "team/g"
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/h-0": "n1"}
    assert "team/g" in decision.explained().unschedulable


# "²" and "٣" are digits to str.isdigit(): int() refuses the first (it failed every
# snapshot), Go's strconv both; 5,000 digits are past int()'s limit.
@pytest.mark.parametrize("minimum", [None, "two", "0", "²", "٣", "1" * 5000, " 3", "-1"])
def test_a_declared_gang_without_a_readable_minimum_waits_but_what_runs_stays(
    minimum: str | None,
) -> None:
    objects = [
        node("n1"),
        declaring("g-0", "g", minimum, "labels", node_name="n1"),
        declaring("g-1", "g", minimum, "labels"),
    ]
    c = convert(objects)
    [finding] = c.findings
    assert (finding.kind, finding.name) == ("Pod", "team/g-1")
    assert "pod-group.scheduling.sigs.k8s.io/min-available must be an integer >= 1" in (
        finding.message
    )
    assert {p.name for p in c.state.pods} == {"team/g-0"}  # bound: it holds its room


def test_a_pod_joined_to_a_podgroup_is_of_that_gang_whatever_gang_its_labels_declare() -> None:
    """The declaring labels are read last, and say only their own gang's minimum: this
    pod's PodGroup is missing, so it waits, and declares no gang of minMember 1 by it."""
    mixed = declaring("a-0", "b", "1", "labels", annotations={"scheduling.k8s.io/group-name": "a"})
    c = convert([node("n1"), mixed])
    assert c.findings == [] and c.state.gangs == ()
    assert [p.gang for p in c.state.pods] == ["team/a"]
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {}
    assert decision.waiting_pods == {"team/a-0": "PodGroup 'team/a' not found"}


def test_a_jobs_template_declares_its_pods_gang() -> None:
    """What `gangsat solve` reads of a Job (its pods to come): three of minMember 3 where
    two fit wait, as a gang."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {
            "parallelism": 3,
            "template": {
                "metadata": {"annotations": dict(zip(KOORDINATOR, ("j", "3"), strict=True))},
                "spec": {
                    "schedulerName": "gangsat",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                },
            },
        },
    }
    c = convert([node("n1", cpu="2"), job])
    assert c.findings == []
    [gang] = c.state.gangs
    assert (gang.name, gang.min_member) == ("team/j", 3)
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {}


def test_a_volcano_queue_is_read_with_its_state() -> None:
    """Volcano's controller keeps a queue's state in its status; an admin closes a queue
    to drain it. A queue without one is open."""
    closed = volcano_queue("closed", "Closed")
    closed["status"]["pending"] = 1
    c = convert([closed, volcano_queue("open", "Open"), volcano_queue("new")])
    assert c.findings == []
    states = {q.name: (q.state, q.admits()) for q in c.state.queues}
    assert states == {
        "closed": ("Closed", False),
        "open": ("Open", True),
        "new": ("Open", True),
    }


def test_a_podgroup_without_queue_or_min_member_defaults_them() -> None:
    c = convert([podgroup("scheduling.sigs.dev/v1alpha2", "g", {})])
    [gang] = c.state.gangs
    assert (gang.min_member, gang.queue) == (1, "default")


@pytest.mark.parametrize("api", ["scheduling.x-k8s.io/v1alpha1", "scheduling.volcano.sh/v1beta1"])
def test_a_min_member_of_zero_schedules_each_pod_on_its_own(api: str) -> None:
    """Neither CRD refuses 0, and Volcano and Coscheduling then run the pods one by one;
    refused, the PodGroup's pods waited for good."""
    join = {"labels": {"scheduling.x-k8s.io/pod-group": "g"}}
    if "volcano" in api:
        join = {"annotations": {"scheduling.k8s.io/group-name": "g"}}
    objects = [node("n1"), podgroup(api, "g", {"minMember": 0}), pod("a", **join)]
    c = convert(objects)
    assert c.findings == []
    [gang] = c.state.gangs
    assert gang.min_member == 1
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/a": "n1"}


def test_a_queue_capability_above_any_machine_is_no_cap_on_that_resource() -> None:
    """Volcano's root queue as a user posted it (volcano#4350): memory capped at
    7630840000Gi, past any machine. Refused, it took the Queue with it, and every gang of
    the queue waited for a queue "not found"."""
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "team-q"},
        "spec": {
            "weight": 1,
            "capability": {"cpu": "91696k", "memory": "7630840000Gi", "pods": "1e999999"},
        },
    }
    objects = [
        node("n1"),
        queue,
        podgroup("scheduling.volcano.sh/v1beta1", "g", {"minMember": 1, "queue": "team-q"}),
        pod("g-0", annotations={"scheduling.k8s.io/group-name": "g"}),
    ]
    c = convert(objects)
    assert c.findings == []
    [q] = c.state.queues
    assert q.capability is not None and q.capability.root == {"cpu": 91_696_000_000}
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/g-0": "n1"}


def test_a_coscheduling_gang_has_its_pods_highest_priority() -> None:
    """scheduler-plugins' PodGroup has no priority: Coscheduling orders by each pod's.
    Read as the default (0), a gang of priority-1000 pods lost the node to a
    priority-500 pod."""
    classes = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for name, value in (("high", 1000), ("mid", 500))
    ]
    train = [pod(f"t-{i}", labels={"scheduling.x-k8s.io/pod-group": "train"}) for i in range(2)]
    web = pod("web", cpu="2")
    for p, cls in ((train[0], "high"), (train[1], "high"), (web, "mid")):
        p["spec"]["priorityClassName"] = cls
    objects = [
        *classes,
        node("n1", cpu="2"),
        podgroup("scheduling.x-k8s.io/v1alpha1", "train", {"minMember": 2}),
        *train,
        web,
    ]
    c = convert(objects)
    [gang] = [g for g in c.state.gangs if g.name == "team/train"]
    assert gang.priority == 1000
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/t-0": "n1", "team/t-1": "n1"}


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [("1.5", 1500), ("500m", 500), ("1e3", 1_000_000), ("2", 2000)],
)
def test_quantities_as_kubernetes_writes_them(cpu: str, expected: int) -> None:
    c = convert([pod("p", cpu=cpu)])
    assert c.state.pods[0].requests["cpu"] == expected


def test_bad_quantities_are_findings_not_crashes() -> None:
    c = convert([node("n1", cpu="lots"), pod("neg", cpu="-1"), pod("fine")])
    kinds = sorted((f.kind, f.name) for f in c.findings)
    assert kinds == [("Node", "n1"), ("Pod", "team/neg")]
    assert "is negative" in next(f.message for f in c.findings if f.kind == "Pod")
    assert [p.name for p in c.state.pods] == ["team/fine"]


def test_which_pods_count() -> None:
    objects = [
        node("n1"),
        pod("ours"),
        pod("theirs-pending", scheduler="default-scheduler"),
        pod("theirs-bound", scheduler="default-scheduler", node_name="n1"),
        pod("done", node_name="n1", phase="Succeeded"),
        pod("ghost", node_name="vanished"),
    ]
    c = convert(objects)
    names = {p.name for p in c.state.pods}
    # Another scheduler's bound pod holds capacity; its pending pod is not ours; a
    # finished pod holds nothing; a pod on a node that no longer exists is a finding.
    assert names == {"team/ours", "team/theirs-bound"}
    [finding] = c.findings
    assert finding.name == "team/ghost" and "unknown node vanished" in finding.message


def test_a_gang_whose_pods_all_name_another_scheduler_is_foreign() -> None:
    """Its PodGroup is the other scheduler's to report on; a gang with one pod of ours is
    ours; both hold their room. The same when the memo recalls the pods."""
    group = {"scheduling.volcano.sh/group-name": "theirs"}
    mixed = {"scheduling.volcano.sh/group-name": "mixed"}
    objects = [
        node("n1"),
        podgroup("scheduling.volcano.sh/v1beta1", "theirs", {"minMember": 2}),
        podgroup("scheduling.volcano.sh/v1beta1", "mixed", {"minMember": 2}),
        pod("t0", scheduler="volcano", node_name="n1", annotations=group),
        pod("t1", scheduler="volcano", annotations=group),
        pod("m0", scheduler="volcano", node_name="n1", annotations=mixed),
        pod("m1", annotations=mixed),
    ]
    memo = Memo()
    stored = [versioned(o, f"u{i}", "1") for i, o in enumerate(objects)]
    again = [dict(o) for o in stored]  # unchanged objects in new dicts (a re-list)
    for seen in (stored, stored, again):
        c = convert(seen, memo=memo)
        assert c.foreign_gangs == {"team/theirs"}
        assert {p.name for p in c.state.pods} == {"team/t0", "team/m0", "team/m1"}


@pytest.mark.parametrize("cpu", ["1e30", "999999999999Ti"])
def test_a_pod_asking_more_than_any_machine_has_is_a_finding_and_the_rest_is_scheduled(
    cpu: str,
) -> None:
    objects = [node("n1"), pod("huge", cpu=cpu), pod("ok")]
    c = convert(objects)
    [finding] = c.findings
    assert (finding.kind, finding.name) == ("Pod", "team/huge")
    assert "above the largest any machine has" in finding.message
    assert {p.name for p in c.state.pods} == {"team/ok"}
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/ok": "n1"}


def test_bytes_above_the_most_a_pod_may_ask_are_that_most_on_a_node() -> None:
    """A 2 PiB filesystem under the kubelet is ephemeral-storage a real node reports:
    refused, the node was out of service. A million cores no node has: still refused."""
    big = node("big")
    big["status"]["allocatable"]["ephemeral-storage"] = "2Pi"
    absurd = node("absurd", cpu="1e30")
    c = convert([big, absurd, pod("p")])
    assert [(f.kind, f.name) for f in c.findings] == [("Node", "absurd")]
    nodes = {n.name: n for n in c.state.nodes}
    assert nodes["big"].allocatable["ephemeral-storage"] == MAX_QUANTITY
    assert nodes["big"].in_service and not nodes["absurd"].in_service
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/p": "big"}


def test_the_pods_on_a_node_that_cannot_be_read_still_run_and_count() -> None:
    """A node whose object cannot be read is kept, out of service, for the pods bound
    there: dropped with it, its gang of three read as one pod short of minMember (its
    re-created member waited for good, NotEnoughTasks) and its queue's share as empty."""
    odd = {**node("odd"), "status": "Ready"}  # a status no kubelet writes
    group = {"scheduling.k8s.io/group-name": "g"}
    objects = [
        odd,
        node("n2"),
        podgroup("scheduling.sigs.dev/v1alpha2", "g", {"minMember": 3}),
        pod("g-0", annotations=group, node_name="odd"),
        pod("g-1", annotations=group, node_name="odd"),
        pod("g-2", annotations=group),
    ]
    c = convert(objects)
    assert [(f.kind, f.name) for f in c.findings] == [("Node", "odd")]
    assert {p.name for p in c.state.pods} == {"team/g-0", "team/g-1", "team/g-2"}
    [kept] = [n for n in c.state.nodes if n.name == "odd"]
    assert not kept.in_service and kept.allocatable["pods"] == 0
    decision = schedule(c.state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/g-2": "n2"}
    assert decision.admitted == ("team/g",)


def test_scheduling_gates_are_read() -> None:
    gated = pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    pods = {p.name: p for p in convert([node("n1"), gated, pod("free")]).state.pods}
    assert pods["team/gated"].gates == ("kueue.x-k8s.io/admission",)
    assert pods["team/free"].gates == ()


@pytest.mark.parametrize(
    ("annotations", "preemptible"),
    [
        ({}, True),
        ({"gangsat.io/preemptible": "false"}, False),
        ({"volcano.sh/preemptable": "False"}, False),
        ({"volcano.sh/preemptable": "true"}, True),
    ],
)
def test_a_podgroup_can_be_marked_never_to_be_a_victim(
    annotations: dict[str, str], preemptible: bool
) -> None:
    group = podgroup("scheduling.volcano.sh/v1beta1", "g", {"minMember": 1})
    group["metadata"]["annotations"] = annotations
    [gang] = convert([group]).state.gangs
    assert gang.preemptible is preemptible


def test_volcanos_preemptable_false_marks_the_podgroup_never_to_be_a_victim() -> None:
    groups = [
        podgroup("scheduling.volcano.sh/v1beta1", name, {"minMember": 1, **spec})
        for name, spec in (("off", {"preemptable": False}), ("on", {"preemptable": True}))
    ]
    gangs = {g.name: g.preemptible for g in convert(groups).state.gangs}
    assert gangs == {"team/off": False, "team/on": True}


def test_a_podgroup_without_a_known_class_has_the_global_default_priority() -> None:
    classes = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            **extra,
        }
        for name, value, extra in (("batch", 1000, {"globalDefault": True}), ("low", 10, {}))
    ]
    groups = [
        podgroup("scheduling.volcano.sh/v1beta1", "none", {"minMember": 1}),
        podgroup("scheduling.volcano.sh/v1beta1", "low", {"priorityClassName": "low"}),
        podgroup("scheduling.sigs.dev/v1alpha2", "gone", {"priorityClassName": "deleted"}),
    ]
    gangs = {g.name: g.priority for g in convert([*classes, *groups]).state.gangs}
    assert gangs == {"team/none": 1000, "team/low": 10, "team/gone": 1000}
    # Without a default class, 0.
    [alone] = convert([groups[0]]).state.gangs
    assert alone.priority == 0


def test_volcanos_queue_reclaimable_is_read() -> None:
    queues = [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1, **spec},
        }
        for name, spec in (
            ("closed", {"reclaimable": False}),
            ("open", {}),
            ("bad", {"reclaimable": "no"}),
        )
    ]
    converted = convert(queues)
    assert {q.name: q.reclaimable for q in converted.state.queues} == {
        "closed": False,
        "open": True,
    }
    assert [f.name for f in converted.findings] == ["bad"]


def test_preemption_policy_never_is_read_from_the_pod() -> None:
    never = pod("never")
    never["spec"]["preemptionPolicy"] = "Never"
    pods = {p.name: p for p in convert([node("n1"), never, pod("may")]).state.pods}
    assert pods["team/never"].may_preempt is False
    assert pods["team/may"].may_preempt is True


def test_a_daemonset_pod_is_marked_so_its_node_still_counts_as_empty() -> None:
    daemon = pod("node-exporter-x", scheduler="default-scheduler", node_name="n1")
    daemon["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-exporter", "uid": "u"}
    ]
    job = pod("job-0", scheduler="default-scheduler", node_name="n1")
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "v"}
    ]
    pods = {p.name: p for p in convert([node("n1"), daemon, job]).state.pods}
    assert pods["team/node-exporter-x"].daemon is True
    assert pods["team/job-0"].daemon is False


def test_solve_manifests_places_the_seed_gang_whole(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["solve", "--manifests", str(SEED), "-t", "5"])
    assert result.exit_code == 0, result.output
    decision = Decision.model_validate_json(result.stdout)
    assert decision.admitted == ("default/mygroup",)
    assert sorted(decision.placements) == ["default/myjob-0", "default/myjob-1", "default/myjob-2"]


def test_solve_manifests_warns_about_what_it_cannot_read(tmp_path: Path) -> None:
    objects = [*seed_objects(), podgroup("scheduling.sigs.dev/v1alpha2", "bad", {"minMember": -1})]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    result = CliRunner().invoke(app, ["solve", "--manifests", str(path)])
    assert result.exit_code == 0, result.output
    assert "gangsat: warning: PodGroup team/bad: spec.minMember" in result.stderr
    assert Decision.model_validate_json(result.stdout).admitted == ("default/mygroup",)


def test_solve_reads_manifests_from_several_files_typed_lists_and_standard_input(
    tmp_path: Path,
) -> None:
    """Nodes in one file (a NodeList as the API serves it: items without a kind), the
    rest in another, or both through standard input. Before, only the last --manifests
    was read, and a NodeList's items were "None object(s) not read"."""
    nodes = [o for o in seed_objects() if o["kind"] == "Node"]
    typed = {"apiVersion": "v1", "kind": "NodeList", "items": nodes}
    for n in typed["items"]:
        n.pop("kind"), n.pop("apiVersion")
    rest = [o for o in seed_objects() if o["kind"] != "Node"]
    (tmp_path / "nodes.json").write_text(json.dumps(typed))
    (tmp_path / "rest.yaml").write_text(yaml.safe_dump_all(rest))
    both = ["--manifests", str(tmp_path / "nodes.json"), "--manifests", str(tmp_path / "rest.yaml")]
    piped = (tmp_path / "rest.yaml").read_text() + "---\n" + json.dumps(typed)
    for args, given in ((both, None), (["--manifests", "-"], piped)):
        result = CliRunner().invoke(app, ["solve", *args], input=given)
        assert result.exit_code == 0, result.output
        assert "not read" not in result.stderr
        assert Decision.model_validate_json(result.stdout).admitted == ("default/mygroup",)


def test_a_manifest_naming_a_key_twice_is_bad_input_as_kubectl_refuses_it(
    tmp_path: Path,
) -> None:
    """Read last-wins, the container's second resources replaced its first without a
    word, where kubectl refuses the file."""
    text = yaml.safe_dump_all(seed_objects()) + (
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: twice\n  namespace: team\n"
        "spec:\n  schedulerName: gangsat\n  containers:\n  - name: c\n"
        "    resources: {requests: {cpu: '64'}}\n    resources: {requests: {cpu: '1'}}\n"
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["solve", "--manifests", str(path)])
    assert result.exit_code == 2
    assert "key 'resources' appears twice" in result.stderr
    assert f"line {text.count(chr(10))}" in result.stderr  # where the second one is
    # A merge's keys may be overridden, as YAML allows.
    merged = "base: &b {cpu: '1'}\nrequests:\n  <<: *b\n  cpu: '2'\n"
    (tmp_path / "merge.yaml").write_text(merged)
    assert read_objects(tmp_path / "merge.yaml") == [
        {"base": {"cpu": "1"}, "requests": {"cpu": "2"}}
    ]


def test_solve_manifests_notes_what_it_leaves_alone(tmp_path: Path) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {"replicas": 3},
    }
    others = [pod(f"other-{i}", scheduler="default-scheduler") for i in range(2)]
    objects = [*seed_objects(), deployment, *others]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    result = CliRunner().invoke(app, ["solve", "--manifests", str(path)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("gangsat: note:")]
    assert len(notes) == 2, result.stderr
    assert "2 pending pod(s) with schedulerName 'default-scheduler'" in notes[0]
    assert "1 Deployment object(s) not read" in notes[1]
    decision = Decision.model_validate_json(result.stdout)
    assert decision.admitted == ("default/mygroup",)
    assert not any("other-" in p for p in decision.placements)


def test_a_clusters_other_pods_are_noted_not_findings() -> None:
    # In a cluster they are the normal case: no Event may be written about them.
    c = convert([node("n1"), pod("mine"), pod("theirs", scheduler="default-scheduler")])
    assert c.findings == []
    assert [p.name for p in c.state.pods] == ["team/mine"]
    assert len(c.ignored) == 1


@pytest.mark.parametrize("named", ["", None])
def test_a_manifests_empty_scheduler_name_is_the_default_scheduler(named: str | None) -> None:
    """As the API server fills it in: a gangsat that replaces the default scheduler
    schedules such a pod, and one that does not notes it as the default scheduler's (it
    was noted as a scheduler named '' or None)."""
    empty = pod("empty")
    empty["spec"]["schedulerName"] = named
    replacing = convert([node("n1"), empty], ("default-scheduler",))
    assert [p.name for p in replacing.state.pods] == ["team/empty"]
    beside = convert([node("n1"), empty], ("gangsat",))
    assert beside.state.pods == ()
    assert "schedulerName 'default-scheduler'" in beside.ignored[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["solve"], "give either STATE.json or --manifests"),
        (["solve", "--manifests", "absent.yaml"], "absent.yaml: no such file"),
    ],
)
def test_solve_needs_exactly_one_input(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert fragment in result.stderr


def versioned(obj: dict[str, Any], uid: str, version: str) -> dict[str, Any]:
    """``obj`` as an API server stores it: with a uid, a version and a creation time."""
    metadata = {**obj["metadata"], "uid": uid, "resourceVersion": version}
    return {**obj, "metadata": {"creationTimestamp": "2026-12-01T00:00:00Z", **metadata}}


def stored_node_pod_and_bad_pod() -> list[dict[str, Any]]:
    """A node, a pod and a pod with a negative request, as a server stores them."""
    return [
        versioned(node("n1"), "u-n1", "1"),
        versioned(pod("p", cpu="1"), "u-p", "2"),
        versioned(pod("bad", cpu="-1"), "u-bad", "3"),
    ]


def test_a_memo_reuses_unchanged_objects_and_rereads_changed_ones() -> None:
    memo = Memo()
    objects = stored_node_pod_and_bad_pod()
    first = convert(objects, memo=memo)
    second = convert(objects, memo=memo)
    assert second.state == first.state
    [p1], [p2] = first.state.pods, second.state.pods
    assert p2 is p1  # the same object, not re-read
    assert [f.name for f in second.findings] == [f.name for f in first.findings] == ["team/bad"]

    # A new resourceVersion is read again; a bind the cache overlays (same version, a
    # node set) is a different pod too; an object gone is dropped from the memo.
    changed = versioned(pod("p", cpu="2"), "u-p", "4")
    third = convert([objects[0], changed], memo=memo)
    [p3] = third.state.pods
    assert p3.requests["cpu"] == 2000 and third.findings == []
    overlaid = {**changed, "spec": {**changed["spec"], "nodeName": "n1"}}
    [p4] = convert([objects[0], overlaid], memo=memo).state.pods
    assert p4.node_name == "n1"
    assert not any(key[1] == "u-bad" for _, key, *_ in memo.by_id.values())
    assert all(o is not objects[2] for o, *_ in memo.by_id.values())


def test_copies_of_unchanged_objects_are_recalled_by_uid_and_version_findings_and_all() -> None:
    """A re-list hands out new dicts of the same objects: each is found by its uid and
    resourceVersion (``Reading._keyed``), not read again, and its finding is replayed."""
    memo = Memo()
    objects = stored_node_pod_and_bad_pod()
    first = convert(objects, memo=memo)
    again = convert([dict(o) for o in objects], memo=memo)
    assert again == first
    [p1], [p2] = first.state.pods, again.state.pods
    assert p2 is p1
    assert [f.name for f in again.findings] == ["team/bad"]


def test_a_pod_without_a_creation_time_is_ordered_by_its_place_with_a_memo_too() -> None:
    """Without a creation time a pod's age is its place among the objects, which no memo
    key holds: recalled, pods that changed places kept their first order."""
    memo = Memo()
    a = {**pod("a"), "metadata": {**pod("a")["metadata"], "uid": "u-a", "resourceVersion": "1"}}
    b = {**pod("b"), "metadata": {**pod("b")["metadata"], "uid": "u-b", "resourceVersion": "1"}}
    convert([a, b], memo=memo)
    swapped = convert([b, a], memo=memo)
    assert swapped == convert([b, a])
    assert {p.name: p.created_s for p in swapped.state.pods} == {"team/b": 0.0, "team/a": 1.0}


def test_a_memo_reads_an_unchanged_object_again_when_what_it_depends_on_changed() -> None:
    """The memo finds an object it saw by identity; a PriorityClass created since (the
    pod's priority) or another scheduler name must still make it read again."""
    memo = Memo()
    urgent = versioned(pod("p", cpu="1"), "u-p", "2")
    urgent["spec"]["priorityClassName"] = "urgent"
    first = convert([urgent], memo=memo)
    assert [p.priority for p in first.state.pods] == [0]
    urgency = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "urgent", "uid": "u-pc", "resourceVersion": "3"},
        "value": 1000,
    }
    second = convert([urgent, urgency], memo=memo)
    assert [p.priority for p in second.state.pods] == [1000]
    assert convert([urgent, urgency], ("other",), memo=memo).state.pods == ()
    assert [p.priority for p in convert([urgent, urgency], memo=memo).state.pods] == [1000]


def test_duplicate_names_in_manifests_are_findings_and_the_later_object_is_used() -> None:
    c = convert([node("n1", cpu="4"), node("n1", cpu="8"), pod("p", cpu="1"), pod("p", cpu="2")])
    assert sorted((f.kind, f.name) for f in c.findings) == [("Node", "n1"), ("Pod", "team/p")]
    assert all("duplicate name" in f.message for f in c.findings)
    assert [n.allocatable["cpu"] for n in c.state.nodes] == [8000]
    assert [p.requests["cpu"] for p in c.state.pods] == [2000]


def test_a_podgroup_of_an_unknown_api_group_is_a_finding_not_silence() -> None:
    c = convert([node("n1"), podgroup("scheduling.example.io/v1", "g", {"minMember": 2})])
    [finding] = c.findings
    assert (finding.kind, finding.name) == ("PodGroup", "g")
    assert "'scheduling.example.io/v1' is not a dialect gangsat reads" in finding.message
    assert c.state.gangs == ()


def test_a_job_of_absurd_parallelism_is_a_finding_not_minutes_of_work() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "huge", "namespace": "team"},
        "spec": {
            "parallelism": 10**7,
            "template": {
                "spec": {
                    "schedulerName": "gangsat",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                }
            },
        },
    }
    c = convert([node("n1"), job, pod("ok")])
    [finding] = c.findings
    assert (finding.kind, finding.name) == ("Job", "team/huge")
    assert "above 20,000 pods" in finding.message
    assert [p.name for p in c.state.pods] == ["team/ok"]


def test_objects_of_the_wrong_shape_are_findings_and_the_rest_is_read() -> None:
    bad_meta = {**pod("a"), "metadata": ["a", "b"]}
    bad_spec = {**pod("b"), "spec": "hello"}
    bad_status = {**node("n2"), "status": "Running"}
    c = convert([node("n1"), bad_meta, bad_spec, bad_status, pod("ok")])
    assert sorted((f.kind, f.name) for f in c.findings) == [
        ("Node", "n2"),
        ("Pod", "(unnamed)"),
        ("Pod", "b"),
    ]
    assert all(f.message.startswith("malformed: ") for f in c.findings)
    assert [p.name for p in c.state.pods] == ["team/ok"]
    # The node is kept for the pods bound there, out of service.
    assert {n.name: n.in_service for n in c.state.nodes} == {"n1": True, "n2": False}


@pytest.mark.parametrize("resource", ["cpu ", "", "two words"])
def test_a_request_for_a_resource_no_node_can_name_is_a_finding(resource: str) -> None:
    odd = pod("odd")
    odd["spec"]["containers"][0]["resources"]["requests"] = {resource: "1"}
    c = convert([node("n1"), odd, pod("ok")])
    [finding] = c.findings
    assert finding.name == "team/odd" and "is not a resource name" in finding.message
    assert [p.name for p in c.state.pods] == ["team/ok"]


def test_a_kind_gangsat_reads_of_another_api_group_is_noted_as_not_read() -> None:
    kueue = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": "team"},
        "spec": {"queueName": "team-queue", "podSets": []},
    }
    c = convert([node("n1"), kueue])
    assert c.findings == [] and c.state.gangs == ()
    [note] = c.ignored
    assert note.startswith("1 Workload (kueue.x-k8s.io/v1beta1) object(s) not read")
    assert "scheduling.k8s.io Workloads" in note


def _job(
    spec: dict[str, Any], status: dict[str, Any], scheduler: str = "gangsat"
) -> dict[str, Any]:
    template = {
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        }
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {**spec, "template": template},
        **({"status": status} if status else {}),
    }


ENDED = {"type": "Complete", "status": "True"}
_PER_INDEX = {
    "parallelism": 8,
    "completions": 8,
    "completionMode": "Indexed",
    "backoffLimitPerIndex": 1,
}


@pytest.mark.parametrize(
    ("spec", "status", "pods"),
    [
        ({"parallelism": 5}, {}, 5),
        ({"parallelism": 5, "completions": 2}, {}, 2),
        ({"completions": 3}, {}, 1),  # parallelism defaults to 1
        ({"parallelism": 5, "suspend": True}, {}, 0),
        # As read from a cluster (`kubectl get jobs,pods -o yaml`): what it runs is made,
        # what succeeded is done; an ended Job makes nothing. Before, each such Job got
        # parallelism phantom pods beside its real ones.
        ({"parallelism": 3, "completions": 3}, {"active": 3}, 0),
        ({"parallelism": 3, "completions": 3}, {"active": 1, "succeeded": 1}, 1),
        ({"parallelism": 3, "completions": 3}, {"succeeded": 3, "conditions": [ENDED]}, 0),
        ({"parallelism": 2}, {"succeeded": 1}, 0),  # no completions: one success ends it
        # Replaced only once gone, with podReplacementPolicy Failed (a podFailurePolicy's).
        ({"parallelism": 3, "podReplacementPolicy": "Failed"}, {"terminating": 2}, 1),
        ({"parallelism": 3}, {"terminating": 2}, 3),
        # Another controller's Job (Kueue's MultiKueue runs its pods elsewhere).
        ({"parallelism": 3, "managedBy": "kueue.x-k8s.io/multikueue"}, {}, 0),
        ({"parallelism": 3, "managedBy": "kubernetes.io/job-controller"}, {}, 3),
        # An Indexed Job with a backoff limit per index never runs a failed index again
        # (4 of 8 failed, 2 succeeded: 2 left); more failed than maxFailedIndexes: it
        # ends. Before, each failed index got a pod the controller would never make.
        (_PER_INDEX, {"succeeded": 2, "failedIndexes": "1,3-5"}, 2),
        ({**_PER_INDEX, "maxFailedIndexes": 3}, {"failedIndexes": "1,3-5"}, 0),
        ({**_PER_INDEX, "maxFailedIndexes": 4}, {"failedIndexes": "1,3-5"}, 4),
        # Without a limit per index, failed indexes are retried (backoffLimit).
        ({**_PER_INDEX, "backoffLimitPerIndex": None}, {"failedIndexes": "1,3-5"}, 8),
    ],
)
def test_a_jobs_pods_are_those_its_controller_would_make_now(
    spec: dict[str, Any], status: dict[str, Any], pods: int
) -> None:
    assert len(convert([node("n1"), _job(spec, status)]).state.pods) == pods


@pytest.mark.parametrize("listed", ["3-1", "1,,2", "1-²", "²", "one"])
def test_a_job_with_unreadable_failed_indexes_is_a_finding(listed: str) -> None:
    c = convert([node("n1"), _job(_PER_INDEX, {"failedIndexes": listed})])
    assert c.state.pods == ()
    assert any("failedIndexes" in str(f) for f in c.findings)


def test_a_job_for_another_scheduler_is_noted_as_its_pods_would_be() -> None:
    c = convert([node("n1"), _job({"parallelism": 3}, {}, scheduler="volcano")])
    assert c.state.pods == ()
    assert c.ignored[0].startswith("3 pending pod(s) with schedulerName 'volcano' left to")
    # An empty name is the API server's default; an ended Job of another makes nothing.
    empty = convert([node("n1"), _job({"parallelism": 2}, {}, scheduler="")])
    assert empty.ignored[0].startswith("2 pending pod(s) with schedulerName 'default-scheduler'")
    ended = _job({"parallelism": 2}, {"conditions": [ENDED]}, scheduler="volcano")
    assert convert([node("n1"), ended]).ignored == []


def _pinned(name: str, *terms: dict[str, Any]) -> dict[str, Any]:
    p = pod(name)
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }
    return p


def test_match_fields_pin_a_pod_to_a_node_by_name() -> None:
    # As the DaemonSet controller pins its pods; on two nodes alike in every other way.
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    mixed = {
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}],
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
    }
    nodes = [node("n1", cpu="4"), node("n2", cpu="4"), node("n3", cpu="4")]
    nodes[0]["metadata"]["labels"] = nodes[2]["metadata"]["labels"] = {"zone": "a"}
    state = convert([*nodes, _pinned("ds", by_name), _pinned("mix", mixed)]).state
    decision = schedule(state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/ds": "n2", "team/mix": "n3"}
    # No other field exists: a term reading one is a finding.
    other = {"matchFields": [{"key": "spec.unschedulable", "operator": "In", "values": ["x"]}]}
    converted = convert([nodes[0], _pinned("bad", other)])
    assert [f.name for f in converted.findings] == ["team/bad"]


def test_equal_affinity_terms_are_one_object_and_malformed_ones_a_finding() -> None:
    # Of two shapes (another priority), as pods of two templates that ask alike are.
    zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
    one, other = _pinned("one", zone), _pinned("other", zone)
    other["spec"]["priority"] = 7
    pods = {p.name: p for p in convert([node("n1"), one, other]).state.pods}
    first, second = pods["team/one"].affinity, pods["team/other"].affinity
    assert first[0] is second[0] and first[0].match_expressions[0].values == ("a", "b")
    assert pods["team/other"].priority == 7
    # A value no API server stores (unhashable here) still reads as the model's finding.
    odd = {"matchExpressions": [{"key": "zone", "operator": "In", "values": [{"a": 1}]}]}
    assert [f.name for f in convert([node("n1"), _pinned("odd", odd)]).findings] == ["team/odd"]
    # Terms that differ in values only are not one.
    other_zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]}
    read = convert([node("n1"), _pinned("c", other_zone)]).state.pods[0].affinity
    assert read[0].match_expressions[0].values == ("c",)


def test_members_that_succeeded_count_towards_min_member() -> None:
    """As Volcano's and kube-batch's gang plugins count them: worker-0 finished, two run,
    the fourth (re-created) waits; minMember 4 is met once it is bound. A Failed member
    does not count."""
    group = podgroup("scheduling.volcano.sh/v1beta1", "job", {"minMember": 4})
    members = []
    for i, (phase, node_name) in enumerate(
        (("Succeeded", "n1"), ("Running", "n1"), ("Running", "n1"), (None, None))
    ):
        p = pod(f"job-{i}", annotations={"scheduling.k8s.io/group-name": "job"}, phase=phase)
        if node_name:
            p["spec"]["nodeName"] = node_name
        members.append(p)
    state = convert([node("n1", cpu="8"), group, *members]).state
    [gang] = state.gangs
    assert gang.succeeded == 1 and gang.min_running == 3
    decision = schedule(state, "cpsat", SolverConfig(time_limit_s=1.0))
    assert decision.placements == {"team/job-3": "n1"}
    members[0]["status"]["phase"] = "Failed"
    state = convert([node("n1", cpu="8"), group, *members]).state
    assert state.gangs[0].succeeded == 0
    assert schedule(state, "cpsat", SolverConfig(time_limit_s=1.0)).placements == {}


def test_volcanos_min_task_member_and_task_annotation_are_read() -> None:
    group = podgroup(
        "scheduling.volcano.sh/v1beta1", "job", {"minMember": 2, "minTaskMember": {"ps": 1}}
    )
    ps = pod("job-ps-0", annotations={"scheduling.k8s.io/group-name": "job"})
    ps["metadata"]["annotations"]["volcano.sh/task-spec"] = "ps"
    state = convert([node("n1"), group, ps, pod("loner")]).state
    [gang] = state.gangs
    assert gang.min_task_member == {"ps": 1}
    assert {p.name: p.task for p in state.pods} == {"team/job-ps-0": "ps", "team/loner": None}
    bad = podgroup("scheduling.volcano.sh/v1beta1", "bad", {"minTaskMember": {"ps": -1}})
    assert [f.name for f in convert([bad]).findings] == ["team/bad"]


def test_members_that_succeeded_are_counted_per_task_too() -> None:
    group = podgroup(
        "scheduling.volcano.sh/v1beta1", "job", {"minMember": 2, "minTaskMember": {"w": 2}}
    )
    done = pod("job-w-0", annotations={"scheduling.k8s.io/group-name": "job"}, phase="Succeeded")
    done["metadata"]["annotations"]["volcano.sh/task-spec"] = "w"
    [gang] = convert([node("n1"), group, done]).state.gangs
    assert gang.succeeded == 1 and gang.succeeded_by_task == {"w": 1}


def test_a_pending_pod_with_a_gt_toleration_goes_where_it_tolerates_the_taint() -> None:
    # Kubernetes 1.35's numeric toleration operators: the taint's value must be above
    # the toleration's. Before they were read, such a pod was refused as unreadable.
    def tainted(name: str, sla: str) -> dict[str, Any]:
        taint = {"key": "example.com/sla", "value": sla, "effect": "NoSchedule"}
        return node(name, spec={"taints": [taint]})

    wanting = pod("p", cpu="1")
    toleration = {"key": "example.com/sla", "operator": "Gt", "value": "950"}
    wanting["spec"]["tolerations"] = [toleration]
    conversion = convert([tainted("n-990", "990"), tainted("n-900", "900"), wanting])
    assert not conversion.findings
    (read,) = conversion.state.pods
    assert read.tolerations[0].operator == "Gt"
    assert schedule(conversion.state, "cpsat").placements == {"team/p": "n-990"}
    assert schedule(conversion.state, "gang-greedy").placements == {"team/p": "n-990"}


def test_a_podgroup_of_another_dialect_kept_under_a_coscheduling_name_keeps_its_priority() -> None:
    # Two dialects' PodGroups of one name: the later is kept, and a Volcano one has its
    # own priority (its class), not its pods'.
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    member = pod("g-0", labels={"scheduling.x-k8s.io/pod-group": "g"})
    member["spec"]["priorityClassName"] = "high"
    objects = [
        high,
        podgroup("scheduling.x-k8s.io/v1alpha1", "g", {"minMember": 1}),
        podgroup("scheduling.volcano.sh/v1beta1", "g", {"minMember": 1}),
        member,
    ]
    [gang] = convert(objects).state.gangs
    assert gang.priority == 0
