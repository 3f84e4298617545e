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
