"""The HTTP endpoint, over real HTTP: metrics as Prometheus reads them, probes."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from adapter import serve
from adapter.metrics import LoopMetrics
from adapter.results import CycleResult
from adapter.serve import Endpoint


class Ready:
    def __init__(self) -> None:
        self.answer: tuple[bool, str] = (False, "no snapshot yet")

    def __call__(self) -> tuple[bool, str]:
        return self.answer


@pytest.fixture
def served() -> Iterator[tuple[Endpoint, LoopMetrics, Ready]]:
    metrics = LoopMetrics()
    ready = Ready()
    endpoint = Endpoint(metrics.registry, ready, host="127.0.0.1", port=0).start()
    yield endpoint, metrics, ready
    endpoint.stop()


def get(endpoint: Endpoint, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_are_served_as_prometheus_text(
    served: tuple[Endpoint, LoopMetrics, Ready],
) -> None:
    endpoint, metrics, _ = served
    metrics.observe(CycleResult(scheduler="cpsat", pending_pods=7, total_s=0.2))
    code, text = get(endpoint, "/metrics")
    assert code == 200
    assert 'gangsat_cycles_total{outcome="ok",scheduler="cpsat"} 1.0' in text
    assert "gangsat_pending_pods 7.0" in text
    assert 'gangsat_cycle_duration_seconds_bucket{le="0.25",scheduler="cpsat"} 1.0' in text


def test_probes(served: tuple[Endpoint, LoopMetrics, Ready]) -> None:
    endpoint, _, ready = served
    assert get(endpoint, "/healthz") == (200, "ok\n")
    assert get(endpoint, "/readyz") == (503, "no snapshot yet\n")
    ready.answer = (True, "")
    assert get(endpoint, "/readyz") == (200, "ok\n")
    assert get(endpoint, "/nope")[0] == 404


def test_a_failing_readiness_check_is_not_ready(
    served: tuple[Endpoint, LoopMetrics, Ready],
) -> None:
    endpoint, _, _ = served

    def broken() -> tuple[bool, str]:
        raise RuntimeError("cache gone")

    endpoint.ready = broken
    code, text = get(endpoint, "/readyz")
    assert code == 503 and "RuntimeError: cache gone" in text
    assert get(endpoint, "/healthz")[0] == 200


def test_healthz_says_what_the_liveness_check_says(
    served: tuple[Endpoint, LoopMetrics, Ready],
) -> None:
    endpoint, _, _ = served
    endpoint.alive = lambda: (False, "wedged: the scheduling loop has not gone round for 300 s")
    assert get(endpoint, "/healthz") == (
        503,
        "wedged: the scheduling loop has not gone round for 300 s\n",
    )


def test_build_info_and_no_created_series(served: tuple[Endpoint, LoopMetrics, Ready]) -> None:
    endpoint, metrics, _ = served
    metrics.observe(CycleResult(scheduler="cpsat", pending_pods=1, total_s=0.1))
    _, text = get(endpoint, "/metrics")
    assert 'gangsat_build_info{version="' in text
    assert "_created" not in text


def probe(host: str, port: int) -> int:
    with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5) as r:
        return int(r.status)


def test_by_default_the_endpoint_answers_on_ipv6_and_ipv4() -> None:
    # The kubelet probes the pod's IP: on an IPv6-only cluster an IPv6 address.
    endpoint = Endpoint(LoopMetrics().registry, Ready(), port=0).start()
    try:
        assert probe("[::1]", endpoint.port) == 200
        assert probe("127.0.0.1", endpoint.port) == 200
    finally:
        endpoint.stop()


def test_without_ipv6_the_default_endpoint_falls_back_to_ipv4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_ipv6(*args: object, **kwargs: object) -> None:
        raise OSError("Address family not supported by protocol")

    monkeypatch.setattr(serve._DualStackServer, "__init__", no_ipv6)
    endpoint = Endpoint(LoopMetrics().registry, Ready(), port=0).start()
    try:
        assert probe("127.0.0.1", endpoint.port) == 200
    finally:
        endpoint.stop()


def test_an_explicit_ipv6_host_is_served() -> None:
    endpoint = Endpoint(LoopMetrics().registry, Ready(), host="::1", port=0).start()
    try:
        assert probe("[::1]", endpoint.port) == 200
    finally:
        endpoint.stop()
