"""A list response decoded item by item (large bodies) gives what decoding it whole gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter.kube import lists
from adapter.kube.cluster import KubeCluster
from adapter.kube.lists import list_page
from adapter.kube.resources import PODS
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import apply, gang_pods, node, podgroup
from tests.adapter.kube.test_kube_cluster import seen


def _body(items: list[dict[str, Any]], **meta: str) -> bytes:
    list_ = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}
    return json.dumps(list_).encode()


PODS_SENT = [
    {
        "metadata": {"name": f"p{i}", "namespace": "ns", "managedFields": [{"manager": "m"}]},
        "spec": {
            "containers": [{"name": "c", "env": [], "resources": {"requests": {"cpu": "1.5"}}}],
            "priority": 10**20,  # past 64 bits, as JSON allows
        },
        "status": {"phase": "Pending", "ratio": 0.25},
    }
    for i in range(3)
]


@pytest.mark.parametrize("stream_above", [0, 10**9])
def test_items_and_metadata_whichever_way_a_body_is_decoded(
    stream_above: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lists, "STREAM_ABOVE", stream_above)
    items, meta = list_page(PODS, _body(PODS_SENT, resourceVersion="42", **{"continue": "t"}))
    assert meta == {"resourceVersion": "42", "continue": "t"}
    assert [i["metadata"]["name"] for i in items] == ["p0", "p1", "p2"]
    assert all("managedFields" not in i["metadata"] for i in items)
    assert all(i["kind"] == "Pod" for i in items)  # typed, as the cache keeps them
    assert items[0]["spec"]["priority"] == 10**20
    assert items[0]["status"]["ratio"] == 0.25 and isinstance(items[0]["status"]["ratio"], float)


def test_the_same_items_streamed_or_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    body = _body(PODS_SENT, resourceVersion="7")
    whole = list_page(PODS, body)
    monkeypatch.setattr(lists, "STREAM_ABOVE", 0)
    assert list_page(PODS, body) == whole


def test_what_the_streaming_parser_refuses_is_decoded_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lists, "STREAM_ABOVE", 0)
    body = (
        b'{"metadata": {"resourceVersion": "1"}, "items": [{"metadata": {"name": "a"}, "x": NaN}]}'
    )
    items, meta = list_page(PODS, body)
    assert meta == {"resourceVersion": "1"} and items[0]["metadata"]["name"] == "a"


def test_a_cluster_whose_lists_are_streamed_schedules_as_any(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lists, "STREAM_ABOVE", 0)
    apply(server, [node("n1", cpu="8"), podgroup("g", 2), *gang_pods("g", 2)])
    cluster = KubeCluster(server.client()).start(sync_timeout_s=10)
    try:
        seen(cluster, server)
        state = cluster.snapshot()
        assert {p.name for p in state.pending_pods()} == {"default/g-0", "default/g-1"}
        assert [g.name for g in state.gangs] == ["default/g"]
    finally:
        cluster.stop()
