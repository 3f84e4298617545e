"""A fake API server over real HTTP with every PodGroup/Queue dialect's CRDs, and a
``KubeCluster`` watching it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapter.kube.cluster import KubeCluster
from adapter.kube.resources import DIALECTS
from benchmarks.fake_apiserver import FakeApiServer
from tests.adapter.kube.manifests import ships_inline_status


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    fake = FakeApiServer(bookmark_interval_s=0.2)
    for r in DIALECTS:
        # As the CRDs ship upstream: Volcano's PodGroup has no status subresource.
        fake.add_resource(
            r.group,
            r.version,
            r.plural,
            r.kind,
            namespaced=r.namespaced,
            status_subresource=not ships_inline_status(r.group, r.plural),
        )
    with fake:
        yield fake


@pytest.fixture
def cluster(server: FakeApiServer) -> Iterator[KubeCluster]:
    kube = KubeCluster(server.client(), writes_per_s=1000.0).start(sync_timeout_s=10)
    try:
        yield kube
    finally:
        kube.stop()
