"""A reflector's requests end: a server that accepts the connection and never answers
(dead behind a load balancer, a half-open TCP connection) fails the list in bounded
time, so the reflector retries instead of freezing its resource in the cache."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from adapter.kube import reflector
from adapter.kube.cache import ClusterCache
from adapter.kube.reflector import Reflector
from adapter.kube.resources import PODS
from tests.adapter.kube.conftest import Silent


@pytest.mark.parametrize("relists", [0, 1], ids=["first list", "re-list"])
def test_a_list_the_server_never_answers_fails_in_bounded_time(
    silent_server: Silent, relists: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reflector, "LIST_TIMEOUT_S", (1, 1))
    configuration = client.Configuration()
    configuration.host = silent_server.url
    listing = Reflector(client.ApiClient(configuration), PODS, ClusterCache())
    listing.relists = relists
    started = time.monotonic()
    with pytest.raises(HTTPError):  # timed out, after the client's retries
        listing._list()
    assert time.monotonic() - started < 10
