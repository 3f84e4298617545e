"""An API server whose resourceVersions go back (restored from an older state, or another
one on the same address): the cache re-lists, so what no longer exists leaves it."""

from __future__ import annotations

from adapter.kube.cluster import KubeCluster
from adapter.kube.reflector import _went_back
from adapter.kube.resources import NODES, PODS, PRIORITY_CLASSES
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import node, wait_until


def _names(cluster: KubeCluster) -> list[str]:
    return sorted(o["metadata"]["name"] for o in cluster.cache.of(NODES))


def test_a_server_that_went_back_in_versions_is_listed_again() -> None:
    first = FakeApiServer(bookmark_interval_s=0.2).start()
    port = first._http.server_address[1]
    for i in range(10):
        first.put(node(f"old-{i}"))
    cluster = KubeCluster(first.client(), resources=[NODES, PODS, PRIORITY_CLASSES])
    cluster.start(sync_timeout_s=10)
    second: FakeApiServer | None = None
    try:
        assert len(_names(cluster)) == 10
        first.stop()
        second = FakeApiServer(port=port, bookmark_interval_s=0.2)
        second.put(node("new-1"))  # made while gangsat reconnects: its version is lower
        second.start()
        second.put(node("new-2"))
        wait_until(lambda: _names(cluster) == ["new-1", "new-2"], what="the old nodes gone")
        assert [n.name for n in cluster.snapshot().nodes] == ["new-1", "new-2"]
    finally:
        cluster.stop()
        if second is not None:
            second.stop()


def test_only_integer_versions_are_compared() -> None:
    assert _went_back("16", "8")
    assert not _went_back("16", "17")
    assert not _went_back(None, "8")
    assert not _went_back("abc", "8")  # opaque: nothing concluded
