"""Binding pods through the Binding subresource, many at once, never twice.

Binding is where a scheduler meets the API server's limit, so binds go out concurrently
from a bounded thread pool. Each bind is first *assumed* in the cache (the next snapshot
sees it; a second bind of the same pod is refused locally) and forgotten if it fails.
Answers, and what they mean:

- 201: bound.
- 409: the pod already has a node. If it is the node we asked for, an earlier attempt of
  ours landed although its answer was lost: success. Otherwise someone else bound it.
- 404: the pod is gone (deleted, or its Job finished).
- 429, 5xx, a timeout or a dropped connection: retried a few times with backoff.
- the target node vanished from the watch before the bind: not sent (a real API server
  accepts a Binding to a node that does not exist; the pod would then never start).

Leadership fences every bind: ``fence()`` is asked right before each request, so a
replica that lost its lease stops binding at once, mid-batch included.

Rollback deletes the pods of a gang that could not reach minMember (their controllers
recreate them pending), with the pod's UID as a precondition so a recreated pod of the
same name is never the one deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.cluster import ClusterError
from adapter.kube.cache import ClusterCache
from adapter.kube.resources import done, read_json

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 500, 502, 503, 504})


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _api_error(e: ApiException) -> ClusterError:
    reason = str(e.reason or e.status)
    message = str(e.reason)
    try:
        status = json.loads(e.body or "{}")
        reason = status.get("reason") or reason
        message = status.get("message") or message
    except (TypeError, ValueError):
        pass
    return ClusterError(reason, message)


class Binder:
    def __init__(
        self,
        api: client.ApiClient,
        cache: ClusterCache,
        fence: Callable[[], bool] = lambda: True,
        threads: int = 16,
        attempts: int = 4,
        backoff_s: float = 0.05,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.cache = cache
        self.fence = fence
        self.attempts = attempts
        self.backoff_s = backoff_s
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bind")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def bind(self, placements: Sequence[tuple[str, str]]) -> dict[str, ClusterError]:
        if not self.fence():
            return {
                p: ClusterError("NotLeader", "this replica does not hold the lease")
                for p, _ in placements
            }
        failures: dict[str, ClusterError] = {}
        futures = []
        for pod, node in placements:
            refused = self.cache.assume(pod, node)
            if refused is not None:
                failures[pod] = ClusterError("NotBindable", f"{pod}: {refused}")
                continue
            futures.append((pod, self._pool.submit(self._bind_one, pod, node)))
        for pod, future in futures:
            error = future.result()
            if error is not None:
                self.cache.forget(pod)
                failures[pod] = error
        return failures

    def _bind_one(self, pod: str, node: str) -> ClusterError | None:
        namespace, name = _split(pod)
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            target=client.V1ObjectReference(kind="Node", name=node, api_version="v1"),
        )
        last: ClusterError = ClusterError("NotSent", "no attempt made")
        for attempt in range(self.attempts):
            if not self.fence():
                return ClusterError("NotLeader", "lost the lease before binding")
            if not self.cache.node_exists(node):
                return ClusterError("NodeGone", f"node {node} was deleted")
            try:
                done(
                    self.core.create_namespaced_pod_binding(
                        name, namespace, body, _preload_content=False
                    )
                )
                return None
            except ApiException as e:
                if e.status == 409:
                    return self._already_bound(pod, node, e)
                last = _api_error(e)
                if e.status not in RETRYABLE:
                    return last
            except Exception as e:  # timeouts, resets: the bind may or may not have landed
                last = ClusterError(type(e).__name__, str(e))
            time.sleep(self.backoff_s * 2**attempt)
        return last

    def _already_bound(self, pod: str, node: str, conflict: ApiException) -> ClusterError | None:
        namespace, name = _split(pod)
        try:
            current = read_json(
                self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            )
        except ApiException as e:
            return _api_error(e)
        except Exception as e:
            return ClusterError(type(e).__name__, str(e))
        if (current.get("spec") or {}).get("nodeName") == node:
            return None  # our own earlier attempt landed
        return _api_error(conflict)

    def delete(self, pods: Sequence[str], reason: str) -> dict[str, ClusterError]:
        futures = [(pod, self._pool.submit(self._delete_one, pod, reason)) for pod in pods]
        return {pod: error for pod, f in futures if (error := f.result()) is not None}

    def _delete_one(self, pod: str, reason: str) -> ClusterError | None:
        namespace, name = _split(pod)
        current = self.cache.pod(pod)
        uid = ((current or {}).get("metadata") or {}).get("uid")
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid) if uid else None
        )
        last: ClusterError = ClusterError("NotSent", "no attempt made")
        for attempt in range(self.attempts):
            try:
                done(
                    self.core.delete_namespaced_pod(
                        name, namespace, body=options, _preload_content=False
                    )
                )
                log.info("deleted %s: %s", pod, reason)
                break
            except ApiException as e:
                if e.status in (404, 409):
                    break  # gone already, or replaced by a new pod: ours holds nothing
                last = _api_error(e)
                if e.status not in RETRYABLE:
                    return last
            except Exception as e:
                last = ClusterError(type(e).__name__, str(e))
            time.sleep(self.backoff_s * 2**attempt)
        else:
            return last
        if uid:
            self.cache.deleting(pod, uid)
        return None
