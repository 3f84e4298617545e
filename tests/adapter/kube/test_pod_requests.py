"""A pod's requests as Kubernetes sums them (``PodRequests``), so gangsat reserves on a
node what the kubelet will admit: containers and native sidecars summed, or an init
container with the sidecars started before it if that is more, plus overhead."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.kube.convert import convert
from tests.adapter.kube.test_convert import node, pod

Obj = dict[str, Any]


def _container(cpu: str, memory: str, sidecar: bool = False, limits: bool = False) -> Obj:
    amounts = {"cpu": cpu, "memory": memory}
    c: Obj = {"name": "c", "resources": {"limits" if limits else "requests": amounts}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def _requests(containers: list[Obj], init: list[Obj], overhead: Obj | None = None) -> Any:
    p = pod("p-0")
    p["spec"]["containers"] = containers
    p["spec"]["initContainers"] = init
    if overhead:
        p["spec"]["overhead"] = overhead
    state = convert([node("n1", cpu="64"), p], ("gangsat",)).state
    (converted,) = state.pods
    return converted.requests.root


GI = 1024**3


@pytest.mark.parametrize(
    ("containers", "init", "cpu", "memory"),
    [
        ([_container("1", "1Gi"), _container("500m", "1Gi")], [], 1500, 2 * GI),
        ([_container("1", "1Gi", limits=True)], [], 1000, GI),  # limits only: requested so
        # A plain init container runs alone before the others: the larger counts.
        ([_container("1", "1Gi")], [_container("3", "512Mi")], 3000, GI),
        # A sidecar keeps running beside the containers: it adds.
        ([_container("1", "1Gi")], [_container("1", "1Gi", sidecar=True)], 2000, 2 * GI),
        # An init container after a sidecar runs beside it: 2 + 1 cpu at that moment.
        (
            [_container("1", "1Gi")],
            [_container("1", "1Gi", sidecar=True), _container("2", "512Mi")],
            3000,
            2 * GI,
        ),
        # ... but not beside a sidecar started after it.
        (
            [_container("1", "1Gi")],
            [_container("2", "512Mi"), _container("1", "1Gi", sidecar=True)],
            2000,
            2 * GI,
        ),
    ],
)
def test_requests_are_summed_as_kubernetes_does(
    containers: list[Obj], init: list[Obj], cpu: int, memory: int
) -> None:
    assert _requests(containers, init) == {"cpu": cpu, "memory": memory}


def test_overhead_adds_to_everything() -> None:
    got = _requests([_container("1", "1Gi")], [], overhead={"cpu": "250m"})
    assert got == {"cpu": 1250, "memory": GI}


def test_a_limit_alone_is_the_request_resource_by_resource() -> None:
    # As the API server defaults a manifest: requests cpu, limits memory -> both asked.
    both = {"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}}}
    assert _requests([both], []) == {"cpu": 1000, "memory": 4 * GI}
    # A request below its limit stays the request.
    lower = {"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}
    assert _requests([lower], []) == {"cpu": 1000}


def test_pod_level_resources_replace_the_containers_sum_for_cpu_and_memory() -> None:
    p = pod("p-0")
    p["spec"]["containers"] = [_container("1", "1Gi"), _container("1", "1Gi")]
    p["spec"]["resources"] = {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}}
    p["spec"]["overhead"] = {"cpu": "100m"}
    (converted,) = convert([node("n1", cpu="64"), p], ("gangsat",)).state.pods
    assert converted.requests.root == {"cpu": 4100, "memory": 8 * GI}
    # Nothing else may be set at pod level: a GPU stays the containers' sum.
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    p["spec"]["resources"]["requests"]["nvidia.com/gpu"] = "4"
    (converted,) = convert([node("n1", cpu="64"), p], ("gangsat",)).state.pods
    assert converted.requests.root["nvidia.com/gpu"] == 1
