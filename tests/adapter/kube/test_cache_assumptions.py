"""A bind the cache assumes lasts until the watch shows the pod bound or gone, and ends
for a namesake: never does a pod look bound that is not, nor pending that is."""

from __future__ import annotations

from typing import Any

from adapter.kube.cache import ClusterCache
from adapter.kube.fields import LEAVING
from adapter.kube.resources import NODES, PODS

Obj = dict[str, Any]


def _pod(uid: str, node: str | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "p", "namespace": "default", "uid": uid}, "spec": spec}


def _shown_on(cache: ClusterCache) -> str | None:
    (pod,) = [o for o in cache.objects() if o.get("kind") == "Pod"]
    node: str | None = pod["spec"].get("nodeName")
    return node


def _cache() -> ClusterCache:
    cache = ClusterCache()
    cache.replace(NODES, [{"metadata": {"name": "n1", "uid": "n"}}])
    cache.replace(PODS, [_pod("u1")])
    return cache


def test_a_namesake_found_by_a_relist_is_pending_not_assumed_bound() -> None:
    # Bound p (u1) while the watch was down; p was deleted and recreated (u2) before the
    # re-list: the bind was for u1, and u2 must be scheduled.
    cache = _cache()
    assert cache.assume("default/p", "n1") == "u1"
    assert _shown_on(cache) == "n1"
    cache.replace(PODS, [_pod("u2")])
    assert cache.assumed() == {}
    assert _shown_on(cache) is None


def test_the_same_pod_relisted_before_its_bind_shows_stays_assumed() -> None:
    cache = _cache()
    cache.assume("default/p", "n1")
    cache.replace(PODS, [_pod("u1")])  # the bind has not reached the watch yet
    assert cache.assumed() == {"default/p": "n1"}
    cache.replace(PODS, [_pod("u1", node="n1")])
    assert cache.assumed() == {}
    assert _shown_on(cache) == "n1"


def test_a_rollback_delete_that_fails_keeps_the_bind_and_its_doubt() -> None:
    # A gang's rollback deletes p, whose bind had an unknown outcome (doubted); the delete
    # is refused (403): p may well be bound, so it keeps its node and its doubt's lapse.
    cache = _cache()
    cache.assume("default/p", "n1")
    cache.doubt("default/p", now=100.0, ttl_s=30.0)
    cache.deleting("default/p", "u1")
    assert cache.assumed() == {}
    cache.undelete("default/p")
    assert cache.assumed() == {"default/p": "n1"}
    assert _shown_on(cache) == "n1"
    assert cache.lapse(now=120.0) == 0
    assert cache.lapse(now=131.0) == 1
    assert _shown_on(cache) is None


def test_a_delete_that_succeeds_leaves_nothing_set_aside() -> None:
    cache = _cache()
    cache.assume("default/p", "n1")
    cache.deleting("default/p", "u1")
    cache.apply(PODS, "DELETED", _pod("u1", node="n1"))
    cache.undelete("default/p")  # a late failure report changes nothing now
    assert cache.assumed() == {}
    assert cache.sizes()["parked"] == 0
    assert [o for o in cache.objects() if o.get("kind") == "Pod"] == []


def test_a_pod_rolled_back_before_the_watch_showed_its_bind_holds_its_node() -> None:
    # The bind landed (assumed), the gang is rolled back and p deleted before the watch
    # shows it bound: p still terminates on n1 for its grace period, holding the room.
    cache = _cache()
    cache.assume("default/p", "n1")
    cache.deleting("default/p", "u1")
    (pod,) = [o for o in cache.objects() if o.get("kind") == "Pod"]
    assert pod["spec"]["nodeName"] == "n1"
    assert pod.get(LEAVING) is True
    cache.apply(PODS, "DELETED", _pod("u1", "n1"))
    assert [o for o in cache.objects() if o.get("kind") == "Pod"] == []
