"""What a node has room for, as kube-scheduler reads it: a node that is not ready is
tainted as the node lifecycle controller taints it (not cordoned); a bound pod holds its
room even where gangsat cannot read the rest of it, and what an in-place resize leaves
it holding; hugepages count in pages."""

from __future__ import annotations

import copy
from typing import Any

from adapter.kube.cache import _read_view
from adapter.kube.convert import convert
from adapter.kube.enqueue import free_room
from adapter.kube.memo import Memo
from adapter.kube.resources import PODS
from solver.problem import prepare
from solver.schedulers import schedule
from tests.adapter.kube.test_convert import node, pod, podgroup

NOT_READY = "node.kubernetes.io/not-ready"


def ready(name: str, status: str) -> dict[str, Any]:
    obj = node(name)
    obj["status"]["conditions"] = [{"type": "Ready", "status": status}]
    return obj


def tolerating(obj: dict[str, Any], key: str) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["tolerations"] = [{"key": key, "operator": "Exists", "effect": "NoSchedule"}]
    return changed


def test_a_node_not_ready_takes_only_pods_that_tolerate_it_and_a_cordoned_one_none() -> None:
    objects = [
        ready("sick", "False"),
        ready("lost", "Unknown"),
        node("cordoned", spec={"unschedulable": True}),
        tolerating(pod("tolerant"), NOT_READY),
        pod("plain"),
    ]
    state = convert(objects).state
    taints = {n.name: {(t.key, t.effect) for t in n.taints} for n in state.nodes}
    assert taints["sick"] == {(NOT_READY, "NoSchedule")}
    assert taints["lost"] == {("node.kubernetes.io/unreachable", "NoSchedule")}
    assert {n.name: n.unschedulable for n in state.nodes}["cordoned"] is True
    decision = schedule(state, "cpsat")
    assert decision.placements == {"team/tolerant": "sick"}
    assert "team/plain" not in decision.placements
    # Already tainted by the controller: not tainted twice.
    tainted = ready("sick", "False")
    tainted["spec"] = {"taints": [{"key": NOT_READY, "effect": "NoSchedule"}]}
    (read,) = convert([tainted]).state.nodes
    assert [(t.key, t.effect) for t in read.taints] == [(NOT_READY, "NoSchedule")]
    # Its NoExecute taint alone keeps no pod off: every pod tolerates it a while (the
    # DefaultTolerationSeconds admission plugin), so the NoSchedule one is added.
    evicting = ready("sick", "False")
    evicting["spec"] = {"taints": [{"key": NOT_READY, "effect": "NoExecute"}]}
    admitted = pod("admitted")
    admitted["spec"]["tolerations"] = [
        {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ]
    assert schedule(convert([evicting, admitted]).state, "cpsat").placements == {}


def test_a_node_not_ready_counts_towards_no_queues_share_and_no_enqueue_room() -> None:
    objects = [node("fine"), ready("sick", "False")]
    state = convert(objects).state
    assert free_room(state)["cpu"] == 4000  # the ready node's alone
    problem = prepare(state)
    assert problem.schedulable_node_count() == 1


def test_a_bound_pod_gangsat_cannot_fully_read_still_holds_its_room() -> None:
    # A toleration operator of an API newer than gangsat knows, on a pod another
    # scheduler bound: the pod still holds 3 of the node's 4 cpu.
    bound = pod("bound", cpu="3", node_name="n1", scheduler="default-scheduler")
    bound["spec"]["tolerations"] = [{"key": "sla", "operator": "Ge", "value": "90"}]
    conversion = convert([node("n1"), bound, pod("p", cpu="3")])
    (held,) = [p for p in conversion.state.pods if p.node_name == "n1"]
    assert held.requests.root == {"cpu": 3000}
    assert "read only for the room" in conversion.findings[0].message
    assert ": :" not in conversion.findings[0].message
    assert schedule(conversion.state, "cpsat").placements == {}


def test_a_gang_member_read_for_its_room_still_counts_for_its_gang_and_queue() -> None:
    group = {"scheduling.k8s.io/group-name": "g"}
    bound = pod("g-0", cpu="3", node_name="n1", annotations=group)
    bound["spec"]["tolerations"] = [{"key": "sla", "operator": "Ge", "value": "90"}]
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "capped"},
        "spec": {"weight": 1, "capability": {"cpu": "4"}},
    }
    pg = podgroup("scheduling.sigs.dev/v1alpha2", "g", {"minMember": 1, "queue": "capped"})
    newcomer = pod("new-0", cpu="3", annotations={"scheduling.k8s.io/group-name": "h"})
    pg2 = podgroup("scheduling.sigs.dev/v1alpha2", "h", {"minMember": 1, "queue": "capped"})
    state = convert([node("n1", cpu="8"), queue, pg, pg2, bound, newcomer]).state
    (held,) = [p for p in state.pods if p.name == "team/g-0"]
    assert held.gang == "team/g"
    assert {g.name: g.preemptible for g in state.gangs}["team/g"] is False
    # 3 of the queue's 4 cpu are used: a second 3-cpu gang would break its capability.
    assert schedule(state, "cpsat").placements == {}


def test_a_volcano_member_read_for_its_room_keeps_its_task() -> None:
    def member(name: str, task: str, **kw: Any) -> dict[str, Any]:
        group = {"scheduling.k8s.io/group-name": "g", "volcano.sh/task-spec": task}
        return pod(name, cpu="1", annotations=group, **kw)

    ps = member("g-ps", "ps", node_name="n1")
    ps["spec"]["tolerations"] = [{"key": "sla", "operator": "Ge", "value": "90"}]
    spec = {"minMember": 2, "minTaskMember": {"ps": 1, "worker": 1}}
    pg = podgroup("scheduling.volcano.sh/v1beta1", "g", spec)
    state = convert([node("n1", cpu="8"), pg, ps, member("g-worker", "worker")]).state
    assert schedule(state, "cpsat").placements == {"team/g-worker": "n1"}


def test_a_node_with_a_bound_pod_whose_requests_are_unreadable_takes_no_new_pods() -> None:
    bound = pod("bound", node_name="n1", scheduler="default-scheduler")
    bound["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    # Tolerating everything (a cordon too) is no way past it.
    anywhere = pod("anywhere", cpu="1")
    anywhere["spec"]["tolerations"] = [{"operator": "Exists"}]
    conversion = convert([node("n1"), node("n2", cpu="1"), bound, pod("p", cpu="1"), anywhere])
    assert any(f.kind == "Node" and f.name == "n1" for f in conversion.findings)
    placed = schedule(conversion.state, "cpsat").placements
    assert "n1" not in placed.values() and len(placed) == 1
    # Its room counts towards no queue's share and no enqueue room.
    assert free_room(conversion.state)["cpu"] == 1000


def test_hugepages_count_in_pages() -> None:
    # Ten 64 KiB pages: ten pods of one page each fit, as the kubelet would admit them.
    small = node("n1", status={"allocatable": {"cpu": "16", "hugepages-64Ki": "640Ki"}})
    pods = []
    for i in range(11):
        p = pod(f"p{i}", cpu="100m")
        p["spec"]["containers"][0]["resources"]["requests"]["hugepages-64Ki"] = "64Ki"
        pods.append(p)
    placed = schedule(convert([small, *pods]).state, "cpsat").placements
    assert len(placed) == 10


def test_a_selector_whose_values_are_not_a_list_selects_nothing_and_converts() -> None:
    # The API server admits only a list; a hand-written manifest may not.
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": "team"},
        "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": 7}]}},
    }
    group = {"scheduling.k8s.io/group-name": "g"}
    bound = pod("bound", node_name="n1", labels={"app": "x"}, annotations=group)
    state = convert([node("n1"), budget, bound]).state
    assert [p.name for p in state.pods] == ["team/bound"]


def resized(cpu_spec: str, cpu_running: str, infeasible: bool = False) -> dict[str, Any]:
    """A bound pod of one container asking ``cpu_spec``, run by the kubelet with
    ``cpu_running`` (an in-place resize under way)."""
    obj = pod("resized", cpu=cpu_spec, node_name="n1", scheduler="default-scheduler")
    obj["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "c", "resources": {"requests": {"cpu": cpu_running}}, "ready": True}
        ],
    }
    if infeasible:
        obj["status"]["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
        ]
    return obj


def test_a_bound_pod_being_resized_holds_the_most_of_its_spec_and_what_it_runs_with() -> None:
    # Shrinking 3 -> 1 cpu: until the kubelet has done it, the pod holds 3 of 4.
    shrinking = convert([node("n1"), resized("1", "3"), pod("p", cpu="2")]).state
    assert {p.name: p.requests.root["cpu"] for p in shrinking.pods}["team/resized"] == 3000
    assert schedule(shrinking, "cpsat").placements == {}
    # Growing 1 -> 3 cpu where it cannot: the resize is infeasible, it holds the 1 it runs
    # with, and a 2-cpu pod fits beside it.
    refused = convert([node("n1"), resized("3", "1", infeasible=True), pod("p", cpu="2")]).state
    assert schedule(refused, "cpsat").placements == {"team/p": "n1"}


def test_a_malformed_status_is_read_as_reporting_no_resources() -> None:
    # A conforming API server refuses these; a fake or a broken one may send them, and
    # neither the watch (the cache's read view) nor the conversion may fail on them.
    odd = pod("odd", cpu="1", node_name="n1", scheduler="default-scheduler")
    odd["status"] = {"phase": "Running", "containerStatuses": 3, "conditions": 7}
    assert _read_view(PODS, odd) == _read_view(PODS, copy.deepcopy(odd))
    conversion = convert([node("n1"), odd])
    assert conversion.findings == []
    assert [p.requests.root["cpu"] for p in conversion.state.pods] == [1000]


def test_a_resize_moves_the_caches_read_view_and_ordinary_status_chatter_does_not() -> None:
    before = resized("1", "1")
    after = copy.deepcopy(before)
    after["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"] = "2"
    assert _read_view(PODS, before) != _read_view(PODS, after)
    chatter = copy.deepcopy(before)
    chatter["status"]["containerStatuses"][0]["ready"] = False
    chatter["status"]["podIP"] = "10.0.0.7"
    assert _read_view(PODS, before) == _read_view(PODS, chatter)


def test_a_gang_with_a_member_read_for_its_room_stays_no_victim_through_the_memo() -> None:
    group = {"scheduling.k8s.io/group-name": "g"}
    bound = pod("g-0", cpu="1", node_name="n1", annotations=group)
    bound["metadata"].update(
        uid="u-1", resourceVersion="7", creationTimestamp="2026-12-01T00:00:00Z"
    )
    bound["spec"]["tolerations"] = [{"key": "sla", "operator": "Ge", "value": "90"}]
    pg = podgroup("scheduling.sigs.dev/v1alpha2", "g", {"minMember": 1})
    memo = Memo()
    for _ in range(3):  # the first conversion, then the memo's by identity
        state = convert([node("n1"), pg, bound], memo=memo).state
        assert {g.name: g.preemptible for g in state.gangs}["team/g"] is False
    again = copy.deepcopy(bound)  # the same object in a new dict: the memo's by key
    state = convert([node("n1"), pg, again], memo=memo).state
    assert {g.name: g.preemptible for g in state.gangs}["team/g"] is False
