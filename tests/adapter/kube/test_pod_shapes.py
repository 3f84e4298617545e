"""Pods of one shape are converted once (``pods.shape_key``): every copy must be what
reading the pod alone gives, whatever differs between pods of a backlog or of a
cluster's running work (gang, node, the resources a bound pod's status reports)."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kube.convert import convert
from adapter.kube.memo import Memo, Shapes
from adapter.kube.pods import pod_of_object

# A PriorityClass created or changed between two snapshots changes what a shape read
# before means: shapes live from one snapshot to the next.
PRIORITIES = ({"high": 1000, "low": -5}, {"high": 1000, "low": -5, "unknown": 9})


@st.composite
def pending_pods(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """A pending pod as an API server stores it; every field drawn from a few values, so
    that many pods of a draw share a shape and the others differ from them in one way."""
    group = draw(st.sampled_from([None, "g1", "g2"]))
    annotations: dict[str, str] = {}
    if group:
        annotations["scheduling.k8s.io/group-name"] = group
    task = draw(st.sampled_from([None, "master", "worker"]))
    if task:
        annotations["volcano.sh/task-spec"] = task
    metadata: dict[str, Any] = {
        "name": f"p{index}",
        "namespace": draw(st.sampled_from(["a", "b"])),
        "uid": f"uid-{index}",
        "resourceVersion": str(index + 1),
        "creationTimestamp": draw(
            st.sampled_from(["2026-12-01T00:00:00Z", "2026-12-01T00:00:07Z", None])
        ),
        "annotations": annotations,
    }
    if draw(st.booleans()):
        metadata["ownerReferences"] = [
            {"kind": draw(st.sampled_from(["DaemonSet", "Job"])), "name": "o", "uid": "o"}
        ]
    spec: dict[str, Any] = {
        "schedulerName": "gangsat",
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": draw(st.sampled_from(["100m", "1", "2"]))}},
            }
        ],
    }
    optional: dict[str, Any] = {
        "priority": st.sampled_from([0, 7]),
        "priorityClassName": st.sampled_from(["high", "low", "unknown"]),
        "preemptionPolicy": st.sampled_from(["Never", "PreemptLowerPriority"]),
        # A manifest's YAML reads an unquoted date as a date, JSON by the standard
        # library a NaN: neither may be taken for the string or the null it prints as.
        "nodeSelector": st.sampled_from(
            [{"zone": "z1"}, {"zone": "2024-01-01"}, {"zone": datetime.date(2024, 1, 1)}]
        ),
        "tolerations": st.sampled_from(
            [
                [{"key": "gpu", "operator": "Exists"}],
                [{"key": "gpu", "value": "x"}],
                [{"key": "gpu", "value": None}],
                [{"key": "gpu", "value": float("nan")}],
            ]
        ),
        "schedulingGates": st.sampled_from([[{"name": "wait"}], [{"name": "other"}]]),
        # Drawn after the unread token volume is set (below): refused, or not, by them
        "volumes": st.sampled_from(
            [[{"name": "d", "gcePersistentDisk": {"pdName": "x"}}], [{"name": "e", "emptyDir": {}}]]
        ),
        "affinity": st.sampled_from(
            [
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
                            ]
                        }
                    }
                },
                {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "zone", "labelSelector": {}}
                        ]
                    }
                },
            ]
        ),
    }
    # What differs from pod to pod of a template, and no conversion reads.
    spec["volumes"] = [{"name": f"kube-api-access-{index}", "projected": {}}]
    for field in draw(st.sets(st.sampled_from(sorted(optional)), max_size=3)):
        if field == "volumes":
            spec["volumes"] = [*spec["volumes"], *draw(optional[field])]
        else:
            spec[field] = draw(optional[field])
    spec["hostname"] = f"worker-{index}"
    spec["containers"][0]["env"] = [{"name": "INDEX", "value": str(index)}]
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    nominated = draw(st.sampled_from([None, "n1", "n2"]))
    if nominated:
        pod["status"] = {"nominatedNodeName": nominated}
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(["n1", "n2", ""]))
        # What a bound pod's status may say of the resources it holds (in-place resize),
        # and what it says that no conversion reads.
        resized = {"name": "c", "resources": {"requests": {"cpu": "3"}}}
        pod["status"] = draw(
            st.sampled_from(
                [
                    {"phase": "Running"},
                    {"containerStatuses": [{**resized, "allocatedResources": {"cpu": "4"}}]},
                    {"containerStatuses": [resized], "resize": "Infeasible"},
                    {
                        "containerStatuses": [resized],
                        "conditions": [{"type": "PodResizePending", "reason": "Infeasible"}],
                    },
                    {"containerStatuses": [resized, "x"], "conditions": "x"},
                    # the same status in the other list: read as another container's
                    {"initContainerStatuses": [resized]},
                    {"containerStatuses": [resized]},
                    {"conditions": [{"type": "Ready", "lastTransitionTime": f"t{index}"}]},
                    "not a mapping",
                ]
            )
        )
    return pod


def read(
    pod: dict[str, Any], shapes: Shapes | None, terminating: bool = False, priorities: int = 0
) -> Any:
    """``pod_of_object`` as convert calls it, or the error it raises."""
    metadata, spec = pod["metadata"], pod["spec"]
    try:
        return pod_of_object(
            metadata["namespace"],
            metadata["name"],
            metadata,
            spec,
            float(int.from_bytes(metadata["name"].encode(), "big")),  # each its own time
            PRIORITIES[priorities],
            3 + priorities,
            float(len(metadata["name"])),
            terminating,
            pod.get("status"),
            shapes,
        )
    except Exception as e:
        return f"{type(e).__name__}: {e}"


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 12), st.data())
def test_a_pod_read_through_its_shape_is_the_pod_read_alone(n: int, data: st.DataObject) -> None:
    pods = [data.draw(pending_pods(i)) for i in range(n)]
    # Twins: the same spec under other metadata and status, as a gang's pods have it.
    pods += [
        {**data.draw(pending_pods(len(pods) + i)), "spec": p["spec"]} for i, p in enumerate(pods)
    ]
    shapes = Shapes()
    for i, pod in enumerate(pods):
        terminating, table = i % 3 == 2, i % 2
        alone = read(pod, None, terminating, table)
        shaped = read(pod, shapes, terminating, table)
        if isinstance(alone, str):
            assert shaped == alone
        else:
            assert shaped.model_dump() == alone.model_dump()
    # A gang's pods, as admission plugins and Job controllers make them, share a shape.
    # (The priority tables the pods were read with, alternating, are part of a shape.)
    assert len(shapes.now) <= len({(read_key(pod), i % 2) for i, pod in enumerate(pods)})


def read_key(pod: dict[str, Any]) -> str:
    """The pod as its shape sees it: without what is its own (name, gang, node, index,
    times), with a bound pod's status."""
    own = ("volumes", "hostname", "nodeName")
    spec = {k: v for k, v in pod["spec"].items() if k not in own}
    spec["containers"] = [{k: v for k, v in c.items() if k != "env"} for c in spec["containers"]]
    meta = pod["metadata"]
    owners = [o["kind"] for o in meta.get("ownerReferences", [])]
    task = meta["annotations"].get("volcano.sh/task-spec")
    bound = bool(pod["spec"].get("nodeName"))
    status = bound and pod.get("status")
    disks = [v for v in pod["spec"]["volumes"] if "gcePersistentDisk" in v]
    return repr((meta["namespace"], task, owners, spec, bound, status, disks))


def test_pods_of_one_template_are_read_once_and_keep_their_own_names() -> None:
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"w-{i}",
                "namespace": "a",
                "uid": f"u{i}",
                "resourceVersion": "1",
                "creationTimestamp": f"2026-12-01T00:00:0{i}Z",
                "annotations": {"scheduling.k8s.io/group-name": "g"},
            },
            "spec": {
                "schedulerName": "gangsat",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
            "status": {"nominatedNodeName": "n1"} if i == 1 else {},
        }
        for i in range(4)
    ]
    memo = Memo()
    state = convert(pods, ("gangsat",), memo).state
    by_name = {p.name: p for p in state.pods}
    assert sorted(by_name) == [f"a/w-{i}" for i in range(4)]
    first = by_name["a/w-0"].created_s
    assert [by_name[f"a/w-{i}"].created_s - first for i in range(4)] == [0, 1, 2, 3]
    assert [by_name[f"a/w-{i}"].nominated_node for i in range(4)] == [None, "n1", None, None]
    assert {p.gang for p in state.pods} == {"a/g"}
    assert len(memo.shapes) == 1
    # A later snapshot in which no pod is new keeps no shape: the memory follows arrivals.
    convert(pods, ("gangsat",), memo)
    assert memo.shapes == {}


def test_the_pods_of_many_gangs_of_one_template_are_one_shape_pending_and_bound() -> None:
    def pod(gang: int, i: int, node: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "schedulerName": "gangsat",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        }
        if node:
            spec["nodeName"] = node
        metadata = {
            "name": f"g{gang}-{i}",
            "namespace": "a",
            "uid": f"u{gang}-{i}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "annotations": {"scheduling.k8s.io/group-name": f"g{gang}"},
        }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "uid": n},
            "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}},
        }
        for n in ("n1", "n2")
    ]
    pending = [pod(g, i, None) for g in range(3) for i in range(2)]
    running = [pod(3, 0, "n1"), pod(3, 1, "n2"), pod(4, 0, "n2")]
    memo = Memo()
    state = convert([*nodes, *pending, *running], ("gangsat",), memo).state
    by_name = {p.name: p for p in state.pods}
    assert {by_name[f"a/g{g}-{i}"].gang for g in range(3) for i in range(2)} == {
        "a/g0",
        "a/g1",
        "a/g2",
    }
    assert by_name["a/g0-1"].gang == "a/g0" and by_name["a/g2-0"].node_name is None
    assert [by_name[p].node_name for p in ("a/g3-0", "a/g3-1", "a/g4-0")] == ["n1", "n2", "n2"]
    assert by_name["a/g4-0"].gang == "a/g4" and by_name["a/g4-0"].started_s is not None
    assert len(memo.shapes) == 2  # one pending, one bound


def test_a_pod_of_another_gang_with_an_inline_disk_is_refused_not_copied() -> None:
    def pod(name: str, group: str, volume: dict[str, Any]) -> dict[str, Any]:
        spec = {
            "schedulerName": "gangsat",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "volumes": [volume],
        }
        metadata = {
            "name": name,
            "namespace": "a",
            "annotations": {"scheduling.k8s.io/group-name": group},
        }
        return {"metadata": metadata, "spec": spec}

    plain = pod("a-0", "ga", {"name": "scratch", "emptyDir": {}})
    disk = pod("b-0", "gb", {"name": "d", "gcePersistentDisk": {"pdName": "x"}})
    shapes = Shapes()
    assert not isinstance(read(plain, shapes), str)
    refused = read(disk, None)
    assert isinstance(refused, str) and "gcePersistentDisk" in refused
    assert read(disk, shapes) == refused


def test_a_bound_pods_status_list_is_part_of_its_shape() -> None:
    """What a container's status says of its resources counts for the container of that
    list: reported in the other list, it is another container's (here, none)."""

    def pod(name: str, statuses: str) -> dict[str, Any]:
        spec = {
            "schedulerName": "gangsat",
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        }
        status = {statuses: [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]}
        return {"metadata": {"name": name, "namespace": "a"}, "spec": spec, "status": status}

    shapes = Shapes()
    for p in (pod("p0", "initContainerStatuses"), pod("p1", "containerStatuses")):
        assert read(p, shapes).requests == read(p, None).requests


def test_a_spec_that_is_no_json_is_read_alone() -> None:
    spec: dict[str, Any] = {
        "schedulerName": "gangsat",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        "odd": {1, 2},  # a manifest's YAML may hold what JSON cannot
    }
    shapes = Shapes()
    for name in ("p", "q"):
        metadata = {"name": name, "namespace": "a", "creationTimestamp": None}
        pod = read({"metadata": metadata, "spec": spec}, shapes)
        assert pod.name == f"a/{name}"
    assert shapes.now == {}


def test_values_json_cannot_hold_are_never_taken_for_what_they_print_as() -> None:
    """A date a manifest's YAML read where a string was meant is refused, and so is a NaN
    the standard library's JSON reads; the string and the null they print as are not."""
    base = {
        "schedulerName": "gangsat",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }
    pairs = [
        ({"nodeSelector": {"d": "2024-01-01"}}, {"nodeSelector": {"d": datetime.date(2024, 1, 1)}}),
        (
            {"tolerations": [{"key": "k", "value": None}]},
            {"tolerations": [{"key": "k", "value": float("nan")}]},
        ),
    ]
    for fine, odd in pairs:

        def pod(extra: dict[str, Any], i: int) -> dict[str, Any]:
            metadata = {"name": f"p{i}", "namespace": "a", "creationTimestamp": None}
            return {"metadata": metadata, "spec": {**base, **extra}}

        shapes = Shapes()
        assert not isinstance(read(pod(fine, 0), shapes), str)  # read, its shape kept
        refused = read(pod(odd, 1), None)
        assert isinstance(refused, str)
        assert read(pod(odd, 1), shapes) == refused


def test_a_malformed_pod_that_asks_for_an_unmodelled_rule_is_told_the_rule() -> None:
    metadata = {"name": "p", "namespace": "a", "creationTimestamp": None, "annotations": "x"}
    spec = {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu"}]}
    for shapes in (None, Shapes()):
        assert "resourceClaims" in read({"metadata": metadata, "spec": spec}, shapes)
