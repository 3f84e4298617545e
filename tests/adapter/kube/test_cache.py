"""The cache's version moves only when what a snapshot reads moves.

A new cycle runs when the version moves. The echo of gangsat's own writes (a bind it
assumed, a PodGroup status it wrote) and status chatter no decision reads (a kubelet's
pod conditions) must not start one: at 1,000 nodes each such cycle cost 0.13-0.19 s of
CPU, taken from the API server on a small machine. What does change a decision must.
The second half holds ``convert`` to the same view: whatever the cache ignores, convert
does not read."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kube.cache import ClusterCache, _read_view
from adapter.kube.convert import convert
from adapter.kube.resources import DIALECTS, NODES, PODS, Resource
from tests.adapter.kube.test_convert import node, pod, podgroup
from tests.adapter.kube.test_convert_fuzz import objects, values

Obj = dict[str, Any]


def dialect(group: str, kind: str) -> Resource:
    return next(r for r in DIALECTS if (r.group, r.kind) == (group, kind))


SIGS_PODGROUPS = dialect("scheduling.sigs.dev", "PodGroup")
VOLCANO_QUEUES = dialect("scheduling.volcano.sh", "Queue")


def stored(obj: Obj, version: int = 1) -> Obj:
    obj = copy.deepcopy(obj)
    obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def bumped(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    change(new)
    return new


def moves(resource: Resource, old: Obj, new: Obj, assumed: str | None = None) -> bool:
    cache = ClusterCache()
    cache.replace(resource, [old])
    if assumed is not None:
        cache.assume(f"{old['metadata']['namespace']}/{old['metadata']['name']}", assumed)
    before = cache.version
    cache.apply(resource, "MODIFIED", new)
    return cache.version != before


def _bind(node_name: str) -> Callable[[Obj], None]:
    def change(p: Obj) -> None:
        p["spec"]["nodeName"] = node_name
        scheduled = {"type": "PodScheduled", "status": "True"}
        p["status"] = {"phase": "Pending", "conditions": [scheduled]}

    return change


def _set(path: tuple[str, ...], value: Any) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        at = o
        for key in path[:-1]:
            at = at.setdefault(key, {})
        at[path[-1]] = value

    return change


PENDING = stored(pod("p", annotations={"scheduling.k8s.io/group-name": "g"}))
GROUP = stored(podgroup("scheduling.sigs.dev/v1alpha2", "g", {"minMember": 2}))
QUEUE = stored(
    {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"weight": 2},
    }
)
NODE = stored(node("n1"))
NODE["status"]["conditions"] = [
    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
]


def _heartbeat(o: Obj) -> None:
    o["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:05:00Z"


def test_echoes_of_gangsats_own_writes_start_no_cycle() -> None:
    # The watch confirming a bind gangsat assumed: the snapshot already showed it.
    assert not moves(PODS, PENDING, bumped(PENDING, _bind("n1")), assumed="n1")
    # A PodGroup or Queue status it wrote (Volcano's bumps generation too).
    status = {"phase": "Running", "running": 2}
    assert not moves(SIGS_PODGROUPS, GROUP, bumped(GROUP, _set(("status",), status)))
    volcano = bumped(GROUP, _set(("status",), status))
    volcano["metadata"]["generation"] = 2
    assert not moves(SIGS_PODGROUPS, GROUP, volcano)
    allocated = {"pending": 0, "running": 1, "allocated": {"cpu": "3"}}
    assert not moves(VOLCANO_QUEUES, QUEUE, bumped(QUEUE, _set(("status",), allocated)))
    # A pod condition (gangsat's PodScheduled=False, a kubelet's Ready).
    condition = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert not moves(PODS, PENDING, bumped(PENDING, _set(("status", "conditions"), condition)))
    # A kubelet starting a bound pod.
    bound = bumped(PENDING, _bind("n1"))
    assert not moves(PODS, bound, bumped(bound, _set(("status", "phase"), "Running")))
    # A condition written on a pod whose bind gangsat assumed, before the bind's echo.
    late = bumped(PENDING, _set(("status", "conditions"), condition))
    assert not moves(PODS, PENDING, late, assumed="n1")
    # A kubelet's heartbeat.
    assert not moves(NODES, NODE, bumped(NODE, _heartbeat))


@pytest.mark.parametrize(
    ("resource", "old", "change", "assumed"),
    [
        (PODS, PENDING, _bind("n2"), "n1"),  # bound elsewhere than gangsat assumed
        (PODS, PENDING, _bind("n1"), None),  # bound by someone else
        (PODS, PENDING, _set(("status", "phase"), "Failed"), None),
        (PODS, PENDING, _set(("metadata", "annotations"), {}), None),  # left its gang
        (PODS, PENDING, _set(("metadata", "deletionTimestamp"), "2026-01-01T00:00:00Z"), None),
        (PODS, PENDING, _set(("spec", "schedulingGates"), []), None),
        # Nominated for a preempting gang: a new leader holds its room (``Holds.recover``).
        (PODS, PENDING, _set(("status", "nominatedNodeName"), "n1"), None),
        (SIGS_PODGROUPS, GROUP, _set(("spec", "minMember"), 3), None),
        (VOLCANO_QUEUES, QUEUE, _set(("spec", "weight"), 5), None),
        # An admin closing a queue (Volcano's controller writes the state).
        (VOLCANO_QUEUES, QUEUE, _set(("status", "state"), "Closed"), None),
        (NODES, NODE, _set(("spec", "unschedulable"), True), None),
        (NODES, NODE, _set(("status", "allocatable", "cpu"), "2"), None),
        (NODES, NODE, _set(("metadata", "labels"), {"zone": "b"}), None),
        (NODES, NODE, _set(("status", "conditions"), [{"type": "Ready", "status": "False"}]), None),
    ],
)
def test_what_a_decision_reads_starts_a_cycle(
    resource: Resource, old: Obj, change: Callable[[Obj], None], assumed: str | None
) -> None:
    assert moves(resource, old, bumped(old, change), assumed)


def test_added_deleted_relisted_and_failed_binds_start_a_cycle() -> None:
    cache = ClusterCache()
    cache.replace(PODS, [PENDING])
    for step in (
        lambda: cache.apply(PODS, "ADDED", stored(pod("q"))),
        lambda: cache.forget("team/p") if cache.assume("team/p", "n1") else None,
        lambda: cache.apply(PODS, "DELETED", PENDING),
        lambda: cache.replace(NODES, [NODE]),
    ):
        before = cache.version
        step()
        assert cache.version != before


def test_a_bind_gangsat_sends_starts_no_cycle_of_its_own() -> None:
    cache = ClusterCache()
    cache.replace(PODS, [PENDING])
    before = cache.version
    cache.assume("team/p", "n1")
    assert cache.version == before


def test_convert_reads_nothing_the_cache_ignores() -> None:
    """Each ignored change leaves convert's snapshot as it was (else a cycle would be
    missed): the assumed bind as the cache overlays it equals the confirmed one."""
    objects = [NODE, GROUP, QUEUE, PENDING]
    overlaid = copy.deepcopy(PENDING)
    overlaid["spec"]["nodeName"] = "n1"
    confirmed = bumped(PENDING, _bind("n1"))
    assert (
        convert([NODE, GROUP, QUEUE, overlaid]).state
        == convert([NODE, GROUP, QUEUE, confirmed]).state
    )
    started = bumped(confirmed, _set(("status", "phase"), "Running"))
    assert (
        convert([NODE, GROUP, QUEUE, started]).state
        == convert([NODE, GROUP, QUEUE, confirmed]).state
    )
    status = {"phase": "Running", "running": 2, "conditions": [{"type": "Scheduled"}]}
    changed = [
        bumped(NODE, _heartbeat),
        bumped(GROUP, _set(("status",), status)),
        bumped(QUEUE, _set(("status",), {"running": 1, "allocated": {"cpu": "3"}})),
        bumped(PENDING, _set(("status", "conditions"), [{"type": "Ready", "status": "False"}])),
    ]
    assert convert(changed).state == convert(objects).state


def _resource_of(obj: Obj) -> Resource:
    kind, api_version = obj.get("kind"), str(obj.get("apiVersion"))
    if kind == "Pod":
        return PODS
    if kind == "Node":
        return NODES
    group = api_version.rpartition("/")[0]
    for r in DIALECTS:
        if (r.group, r.kind) == (group, kind):
            return r
    return Resource("example.com", "v1", "others", str(kind), True)


@st.composite
def echoes(draw: st.DrawFn) -> tuple[Obj, Obj]:
    """An object, and the same object after changes of the kind the cache ignores."""
    old = draw(objects())
    new = copy.deepcopy(old)
    if isinstance(new.get("metadata"), dict):
        new["metadata"]["resourceVersion"] = draw(st.sampled_from(["7", "8"]))
        new["metadata"]["generation"] = draw(st.integers(1, 3))
    status = new.get("status")
    if isinstance(status, dict) and new["kind"] == "Pod":
        status["conditions"] = draw(values)
        if not isinstance(status.get("phase"), str) or status["phase"] not in FINISHED:
            status["phase"] = draw(st.sampled_from(["Pending", "Running", "Unknown"]))
    elif new["kind"] in ("PodGroup", "Queue", "Workload"):
        keys = st.one_of(st.sampled_from(["state", "phase", "running"]), st.text(max_size=4))
        new["status"] = draw(st.one_of(st.none(), st.dictionaries(keys, values)))
    return old, new


FINISHED = ("Succeeded", "Failed")


@settings(max_examples=150, deadline=None)
@given(echoes())
def test_what_the_cache_ignores_never_changes_a_snapshot(pair: tuple[Obj, Obj]) -> None:
    old, new = pair
    resource = _resource_of(old)
    if _read_view(resource, old) != _read_view(resource, new):
        return  # a change the cache reports: a cycle runs, whatever it is
    before, after = convert([NODE, old]), convert([NODE, new])
    assert before.state == after.state
    assert [f.message for f in before.findings] == [f.message for f in after.findings]


def test_convert_reads_a_pending_pods_nomination_and_nothing_else_as_one() -> None:
    nominated = bumped(PENDING, _set(("status", "nominatedNodeName"), "n1"))
    garbled = bumped(PENDING, _set(("status", "nominatedNodeName"), ["n1"]))
    bound = bumped(nominated, _bind("n1"))
    bound["status"]["nominatedNodeName"] = "n1"

    def nomination(o: Obj) -> str | None:
        (p,) = convert([NODE, GROUP, o]).state.pods
        return p.nominated_node

    assert nomination(nominated) == "n1"
    assert nomination(garbled) is None  # no finding: it would only have held room
    assert nomination(bound) is None
    assert nomination(PENDING) is None


def test_a_resource_equals_its_namesake_whatever_its_status_subresource() -> None:
    served_without_status = Resource("", "v1", "pods", "Pod", True, status_subresource=False)
    assert served_without_status == PODS and hash(served_without_status) == hash(PODS)
    assert {PODS: "pods"}[served_without_status] == "pods"
    assert PODS != NODES and Resource("", "v2", "pods", "Pod", True) != PODS
    assert PODS != "pods" and PODS in [NODES, PODS] and NODES not in [PODS]


def test_removals_count_what_leaves_the_cache_and_nothing_else() -> None:
    cache = ClusterCache()
    a, b = stored(pod("a")), stored(pod("b"))
    cache.replace(PODS, [a])
    cache.apply(PODS, "ADDED", b)
    cache.apply(PODS, "MODIFIED", bumped(b, _bind("n1")))
    cache.replace(PODS, [a, b, stored(pod("c"))])  # a re-list that only adds
    assert cache.removals == 0
    cache.apply(PODS, "DELETED", b)
    assert cache.removals == 1
    cache.apply(PODS, "DELETED", b)  # gone already: nothing left
    assert cache.removals == 1
    cache.replace(PODS, [a])  # c is gone from the re-list
    assert cache.removals == 2
    cache.replace(NODES, [stored(node("n1"))])
    cache.drop(NODES)
    assert cache.removals == 3
