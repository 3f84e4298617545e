"""How gangsat's requests about a pod are sent: fenced by leadership, within timeouts
that end with it, and retried by gangsat alone (binds, deletes, evictions, marks)."""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.cluster import ClusterError
from adapter.kube.cache import ClusterCache

# Answers after which a write may still land: kube-apiserver's 500 when etcd timed out
# ("etcdserver: request timed out": the write may commit later), and a gateway's 502 and
# 504 (the request was passed on, its answer lost).
LANDS_LATE = frozenset({500, 502, 504})
CONNECT_TIMEOUT_S = 5.0
MAX_BIND_WAIT_S = 10.0  # the longest a request waits for its answer
# urllib3's connection retries in a client's pool (its default, Retry(3)): a request may
# connect up to this many times more. The binder's and the evictor's clients retry nothing
# (``without_retries``); their connect timeouts still allow for it, a margin.
POOL_CONNECT_RETRIES = 3
MAX_RETRY_AFTER_S = 5.0
MIN_READ_S = 1.0  # the least a request waits for its answer (``retried``)


def without_retries(api: client.ApiClient) -> client.ApiClient:
    """A client over ``api``'s configuration whose connection pool never sends a request
    again on its own. urllib3's default, Retry(3), sends a DELETE again after a read
    timeout (it counts as idempotent), each time with a fresh timeout: a rollback's delete
    reached the server up to 3 s after the lease ran out, where the fence allowed none.
    The binder and the evictor retry themselves, each attempt fenced. Close it with the
    writer that made it (its pool cleared)."""
    configuration = copy.deepcopy(api.configuration)
    configuration.retries = False
    return client.ApiClient(configuration)


def api_error(e: ApiException) -> ClusterError:
    reason = str(e.reason or e.status)
    message = str(e.reason)
    try:
        status = json.loads(e.body or "{}")
        reason = status.get("reason") or reason
        message = status.get("message") or message
    except (TypeError, ValueError):
        pass
    return ClusterError(reason, message)


Fence = Callable[[], float]  # seconds this replica may still bind; <= 0: not the leader


def always() -> float:
    return math.inf


def retry_after(e: ApiException, default: float) -> float:
    """The server's Retry-After (seconds), if it sent one, capped: a cycle must end."""
    try:
        value = float((e.headers or {}).get("Retry-After", default))
    except (TypeError, ValueError):
        value = default
    return min(max(value, 0.0), MAX_RETRY_AFTER_S)


def remove(
    cache: ClusterCache, pod: str, uid: str, send: Callable[[], ClusterError | None]
) -> ClusterError | None:
    """``send`` a request that ends a pod (a delete, an eviction: ``retried``). The cache
    leaves the pod out of snapshots meanwhile and takes it back if the request fails."""
    cache.deleting(pod, uid)  # its DELETED event may come before the answer
    error = send()
    if error is not None:
        cache.undelete(pod)
    return error


def retried(
    send: Callable[[tuple[float, float]], None],
    retryable: frozenset[int],
    fence: Fence,
    backoff_s: float,
    budget_s: float,
    final: Callable[[ApiException], bool] = lambda e: False,
    gone: frozenset[int] = frozenset({404, 409}),
) -> ClusterError | None:
    """Send a request about a pod, retried with backoff within ``budget_s`` while the
    answer is in ``retryable`` (a 429 waits for the server's Retry-After) and not
    ``final``, each attempt fenced by leadership; ``send`` takes the attempt's (connect,
    read) timeouts. An answer in ``gone`` is success: a 404 or (for a request with a UID
    precondition) a 409, the pod is gone, or a namesake replaced it."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        left = fence()
        if left <= 0:
            return ClusterError("NotLeader", "lost the lease before sending")
        delay = backoff_s * 2**attempt
        try:
            # No request may arrive after the lease could have passed to another replica:
            # every connect the pool may try ends within the leadership left. Nor may
            # one wait for its answer past the budget (an eviction's 5 s): a server that
            # answered after 10 s held the cycle's evictions, and the cycle, that long.
            connect = min(CONNECT_TIMEOUT_S, left / (1 + POOL_CONNECT_RETRIES))
            budget_left = max(deadline - time.monotonic(), MIN_READ_S)
            send((connect, min(left, MAX_BIND_WAIT_S, budget_left)))
            return None
        except ApiException as e:
            if e.status in gone:
                return None
            error = api_error(e)
            if e.status not in retryable or final(e):
                return error
            if e.status == 429:
                delay = max(delay, retry_after(e, delay))
        except Exception as e:
            error = ClusterError(type(e).__name__, str(e))
        attempt += 1
        if time.monotonic() + delay > deadline:
            return error
        time.sleep(delay)
