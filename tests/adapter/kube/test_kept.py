"""What the cache keeps of an object (``kept``) converts to the same snapshot, findings
and all, as the object the API server sent: nothing trimmed is read."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.kube.convert import convert
from adapter.kube.kept import kept
from adapter.kube.resources import NODES, PODS, Resource
from tests.adapter.kube.test_convert_fuzz import objects, quantity


def _resource(obj: dict[str, Any]) -> Resource | None:
    return {"Pod": PODS, "Node": NODES}.get(obj.get("kind"))  # type: ignore[arg-type]


def _kept_all(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [kept(r, o) if (r := _resource(o)) is not None else o for o in objs]


def _same_conversion(objs: list[dict[str, Any]]) -> None:
    sent = convert(copy.deepcopy(objs))
    cached = convert(_kept_all(copy.deepcopy(objs)))
    assert cached.state == sent.state
    assert cached.findings == sent.findings


containers = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["a", "b", "c"]),
            "image": st.just("registry.example.com/train:1"),
            "command": st.just(["python", "-m", "train"]),
            "env": st.just([{"name": "RANK", "value": "0"}]),
            "volumeMounts": st.just([{"name": "data", "mountPath": "/data"}]),
            "livenessProbe": st.just({"exec": {"command": ["true"]}}),
            "resources": st.fixed_dictionaries(
                {
                    "requests": st.dictionaries(
                        st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity, max_size=2
                    ),
                    "limits": st.dictionaries(
                        st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity, max_size=2
                    ),
                }
            ),
        },
        optional={
            "ports": st.lists(
                st.fixed_dictionaries(
                    {"containerPort": st.just(80)}, optional={"hostPort": st.just(8080)}
                ),
                max_size=1,
            ),
            "restartPolicy": st.sampled_from(["Always", "OnFailure"]),
        },
    ),
    min_size=1,
    max_size=3,
)
volumes = st.lists(
    st.sampled_from(
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "disk", "awsElasticBlockStore": {"volumeID": "vol-1"}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "tmp", "emptyDir": {}},
        ]
    ),
    max_size=4,
)
statuses = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["a", "b", "c"]),
            "state": st.just({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
            "imageID": st.just("sha256:" + "a" * 64),
        },
        optional={
            "resources": st.fixed_dictionaries(
                {"requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity)}
            ),
            "allocatedResources": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity),
        },
    ),
    max_size=3,
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(["p0", "p1", "p2"]))
    spec: dict[str, Any] = {
        "schedulerName": "gangsat",
        "containers": draw(containers),
        "initContainers": draw(st.one_of(st.none(), containers)),
        "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
        "volumes": draw(volumes),
        "nodeName": draw(st.sampled_from([None, "n1"])),
        "overhead": draw(st.one_of(st.none(), st.just({"cpu": "250m"}))),
    }
    status = {
        "phase": draw(st.sampled_from(["Pending", "Running"])),
        "containerStatuses": draw(statuses),
        "initContainerStatuses": draw(statuses),
        "resize": draw(st.sampled_from([None, "Infeasible"])),
    }
    annotations = {
        "scheduling.k8s.io/group-name": "g",
        "kubectl.kubernetes.io/last-applied-configuration": '{"kind": "Pod"}',
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "annotations": annotations,
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {k: v for k, v in spec.items() if v is not None},
        "status": {k: v for k, v in status.items() if v is not None},
    }


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "images": [{"names": ["registry.example.com/train:1"], "sizeBytes": 10**9}],
    },
}
PODGROUP = {
    "apiVersion": "scheduling.sigs.dev/v1alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "g", "namespace": "ns"},
    "spec": {"minMember": 1},
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pods(), max_size=4))
def test_a_trimmed_pod_converts_as_the_pod_the_server_sent(objs: list[dict[str, Any]]) -> None:
    _same_conversion([NODE, PODGROUP, *objs])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(objects(), max_size=8))
def test_any_object_trimmed_converts_as_sent(objs: list[dict[str, Any]]) -> None:
    _same_conversion(objs)


def test_a_pod_as_a_server_sends_it_is_kept_at_a_fraction_of_its_size() -> None:
    worker = {
        "name": "worker",
        "image": "registry.example.com/ml/train:2026.01",
        "command": ["python", "-m", "train", "--epochs", "10"],
        "env": [{"name": f"ENV_{i}", "value": f"value-{i}"} for i in range(8)],
        "resources": {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0",
            "namespace": "ns",
            "managedFields": [{"manager": "m", "fieldsV1": {f"f:{i}": {} for i in range(50)}}],
        },
        "spec": {
            "containers": [worker],
            "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {}}]}}],
            "nodeName": "n1",
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "worker", "imageID": "sha256:" + "a" * 64, "containerID": "b" * 64}
            ],
        },
    }
    trimmed = kept(PODS, pod)
    before, after = len(orjson.dumps(pod)), len(orjson.dumps(trimmed))
    assert after < before / 3, (before, after)
    assert "managedFields" not in trimmed["metadata"]
    assert trimmed["spec"]["containers"] == [{"name": "worker", "resources": worker["resources"]}]
