"""Binding pods through the Binding subresource, many at once, never twice.

Binding is where a scheduler meets the API server's limit, so binds go out concurrently
from a bounded thread pool. Each bind is first *assumed* in the cache (the next snapshot
sees it; a second bind of the same pod is refused locally) and forgotten if it fails.
Answers, and what they mean:

- 201: bound.
- 409: the pod already has a node (or its UID changed: a namesake replaced it). If it is
  the node we asked for, an earlier attempt of ours landed although its answer was lost:
  success. Otherwise someone else bound it.
- 404: the pod is gone (deleted, or its Job finished).
- 429: retried after the server's Retry-After; 5xx, a timeout or a dropped connection:
  retried with backoff — within a budget per bind (and one last try, below), so a cycle
  ends. A 5xx or a timeout
  may follow a bind that landed: if the retries end in failure, the pod is read to learn
  where it is; read unbound after an unanswered attempt (which may still land), the bind
  is sent once more, and if even that says nothing the failure is *uncertain*: a
  rolled-back gang evicts the pod too, and otherwise the pod stays assumed until the
  watch shows it bound or gone, for at most ``DOUBT_TTL_S`` (then it is pending again,
  not lost).
- the target node vanished from the watch before the bind: not sent (a real API server
  accepts a Binding to a node that does not exist; the pod would then never start).

Leadership fences every bind: ``fence()`` (seconds of leadership left) is asked right
before each request, and the request may not outlive it, so a replica that lost its
lease sends no bind that could arrive after another replica took over.

A bind is the one request sent thousands of times a second, and on a small control plane
every millisecond of the scheduler's CPU is taken from the API server: it is posted as
pre-encoded JSON on a connection its thread keeps (``connections``: auth headers, TLS
and socket options as the client configures them), skipping the generated client's
per-call model validation and serialisation and the connection pool's layers.

Rollback deletes the pods of a gang that could not reach minMember (their controllers
recreate them pending), with the UID they were bound with as a precondition, so a
recreated pod of the same name is never the one deleted; each is first marked with the
``DisruptionTarget`` condition, as kube-scheduler marks the pods it preempts.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ConnectTimeoutError

from adapter.cluster import ClusterError
from adapter.kube.cache import ClusterCache, Unbindable, split_key
from adapter.kube.connections import Connections
from adapter.kube.disruption import ROLLBACK_REASON, send_mark
from adapter.kube.resources import PODS, done, path_of, read_json
from adapter.kube.sending import (
    CONNECT_TIMEOUT_S,
    LANDS_LATE,
    MAX_BIND_WAIT_S,
    POOL_CONNECT_RETRIES,
    Fence,
    always,
    api_error,
    remove,
    retried,
    retry_after,
    without_retries,
)

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 500, 502, 503, 504})
# A bind of unknown outcome is sent once more after its budget (``Binder._last_try``),
# waiting this long at most for the answer.
LAST_TRY_WAIT_S = 5.0
MARK_WAIT_S = 2.0  # for the DisruptionTarget mark before a rollback's delete


# kube-apiserver's answer to a Binding of a pod that has a node (its registry's words
# since Kubernetes 1.0); the UID precondition is checked before it, so the pod is ours.
_ASSIGNED = re.compile(r'is already assigned to node "([^"]+)"')


def _assigned_or(pod: str, node: str, error: ClusterError, message: str) -> ClusterError | None:
    """Where the pod could not be read after a bind: a 409 that names the node the pod is
    on still says where it is (success if it is ``node``: an earlier attempt of ours
    landed); otherwise the outcome is uncertain. Read as uncertain, a new leader whose
    watch lags behind its predecessor's binds, sending them again, could count such a
    gang short and delete the pods of it that it took for its own binds."""
    assigned = _ASSIGNED.search(error.message)
    if assigned is None:
        return ClusterError(error.reason, message, uncertain=True)
    if assigned.group(1) == node:
        return None
    return ClusterError(
        error.reason,
        f"{pod} was bound to {assigned.group(1)} by another binder",
        bound_to=assigned.group(1),
    )


def binding_body(namespace: str, name: str, node: str, uid: str = "") -> bytes:
    """The JSON of a Binding of pod ``namespace/name`` to ``node``."""
    metadata = {"name": name, "namespace": namespace}
    if uid:
        # The UID makes the API server refuse the bind if the pod was replaced by a
        # namesake since the snapshot (it may ask for more than the node has).
        metadata["uid"] = uid
    target = {"kind": "Node", "name": node, "apiVersion": "v1"}
    return json.dumps(
        {"apiVersion": "v1", "kind": "Binding", "metadata": metadata, "target": target},
        separators=(",", ":"),
    ).encode()


def post_binding(
    connections: Connections,
    namespace: str,
    name: str,
    body: bytes,
    connect_s: float = CONNECT_TIMEOUT_S,
    read_s: float = MAX_BIND_WAIT_S,
    send_by: float | None = None,
) -> None:
    """POST a Binding (``body``: its JSON) for pod ``namespace/name``, sent before
    ``send_by`` (``time.monotonic``) or not at all; raises ``ApiException`` for any
    answer but 2xx, as the generated client does (``Connections.post``)."""
    path = path_of(PODS, namespace, name, "binding")
    connections.post(path, body, connect_s, read_s, send_by)


class Binder:
    def __init__(
        self,
        api: client.ApiClient,
        cache: ClusterCache,
        fence: Fence = always,
        threads: int = 16,
        retry_budget_s: float = 10.0,
        backoff_s: float = 0.05,
    ) -> None:
        self.api = without_retries(api)
        self.connections = Connections(self.api)
        self.core = client.CoreV1Api(self.api)
        self.cache = cache
        self.fence = fence
        self.retry_budget_s = retry_budget_s
        self.backoff_s = backoff_s
        self._uids: dict[str, str] = {}  # pod -> UID it was bound with, this batch
        # pod -> UID of a delete that failed: the pod a later delete must reach, where a
        # namesake may hold the name by then (the watch has long shown the bind, so the
        # UIDs above forgot it). Kept while the name is in the cache.
        self._undeleted: dict[str, str] = {}
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bind")

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The binding threads, idle between binds (a bind's claims are written on them
        first: ``provisioning``)."""
        return self._pool

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.connections.close()
        self.api.rest_client.pool_manager.clear()  # its own connections

    def bind(
        self, placements: Sequence[tuple[str, str]], seen_uids: Mapping[str, str] | None = None
    ) -> dict[str, ClusterError]:
        """``seen_uids``: the pods' UIDs as the decision saw them (a namesake is not bound)."""
        # The UIDs of binds the watch has not shown yet stay: a second batch in the same
        # cycle (a second chance) must not make a rollback of the first fall back to
        # whatever pod holds the name by then.
        assumed = self.cache.assumed()
        self._uids = {pod: uid for pod, uid in self._uids.items() if pod in assumed}
        self._undeleted = {p: uid for p, uid in self._undeleted.items() if self.cache.pod(p)}
        if self.fence() <= 0:
            return {
                p: ClusterError("NotLeader", "this replica does not hold the lease")
                for p, _ in placements
            }
        failures: dict[str, ClusterError] = {}
        # A few workers take binds from a queue as they are assumed, in order: a future
        # per bind cost the loop more CPU than assuming and sending the bind did.
        work: queue.SimpleQueue[tuple[str, str, str] | None] = queue.SimpleQueue()
        answers: dict[str, ClusterError | None] = {}

        def worker() -> None:
            while (item := work.get()) is not None:
                pod, node, uid = item
                try:
                    answers[pod] = self._bind_one(pod, node, uid)
                except Exception as e:  # a bug in one bind must not lose the others
                    # Requests' own failures are answered inside _bind_one: this one
                    # came before the request was sent, so the pod is still pending.
                    log.exception("bind of %s failed", pod)
                    answers[pod] = ClusterError(type(e).__name__, str(e))

        workers = [self._pool.submit(worker) for _ in range(min(self.threads, len(placements)))]
        for pod, node in placements:
            try:
                uid = self.cache.assume(pod, node, (seen_uids or {}).get(pod))
            except Unbindable as e:
                failures[pod] = ClusterError("NotBindable", f"{pod}: {e}", bound_to=e.bound_to)
                continue
            self._uids[pod] = uid
            if self._undeleted.get(pod, uid) != uid:
                # A namesake bound now: the pod the failed delete was for is gone, and a
                # rollback of this bind must reach this one, not answer 409 for that one.
                del self._undeleted[pod]
            work.put((pod, node, uid))
        for _ in workers:
            work.put(None)
        for future in workers:
            future.result()
        for pod, error in answers.items():
            if error is not None:
                if error.uncertain:
                    self.cache.doubt(pod, time.monotonic())
                else:
                    self.cache.forget(pod)
                failures[pod] = error
        return failures

    def _bind_one(self, pod: str, node: str, uid: str) -> ClusterError | None:
        namespace, name = split_key(pod)
        body = binding_body(namespace, name, node, uid)
        deadline = time.monotonic() + self.retry_budget_s
        ambiguous = False  # an attempt may have landed although it did not say so
        # An attempt unanswered (a timeout, a reset, a TLS error mid-answer, a gateway's
        # or etcd's timeout) may be running still, and land after the pod reads unbound.
        in_flight = False
        attempt = 0
        while True:
            left = self.fence()
            if left <= 0:
                error = ClusterError("NotLeader", "lost the lease before binding")
                break
            if not self.cache.node_exists(node):
                error = ClusterError("NodeGone", f"node {node} was deleted", retry_elsewhere=True)
                break
            delay = self.backoff_s * 2**attempt
            try:
                # No bind may arrive after this replica's lease could have passed to
                # another: the request ends with the leadership left.
                connect_s, read_s = min(CONNECT_TIMEOUT_S, left), min(MAX_BIND_WAIT_S, left)
                # Sent while the lease lasts, or not at all (a slow connect may use it up).
                send_by = time.monotonic() + left if left < math.inf else None
                post_binding(self.connections, namespace, name, body, connect_s, read_s, send_by)
                return None
            except ApiException as e:
                if e.status == 409:
                    return self._settle(pod, node, api_error(e), uid)
                error = api_error(e)
                if e.status not in RETRYABLE:
                    break
                ambiguous = ambiguous or e.status != 429  # a 5xx may follow a committed write
                in_flight = in_flight or e.status in LANDS_LATE
                if e.status == 429:
                    delay = max(delay, retry_after(e, delay))
            except Exception as e:  # timeouts, resets: the bind may or may not have landed
                error = ClusterError(type(e).__name__, str(e))
                ambiguous = True
                # Sent, then no answer: it may be running still. A connection never made
                # (refused, a connect timeout, a name not resolved) sent nothing.
                in_flight = in_flight or not isinstance(e, ConnectTimeoutError)
            attempt += 1
            if time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
        if not ambiguous:
            return error
        settled = self._settle(pod, node, error, uid, in_flight)
        if settled is None or not settled.uncertain:
            return settled
        return self._last_try(pod, node, body, uid, settled)

    def _last_try(
        self, pod: str, node: str, body: bytes, uid: str, doubt: ClusterError
    ) -> ClusterError | None:
        """A bind left unanswered and read unbound may still land: sent once more (the
        budget spent, for at most LAST_TRY_WAIT_S), it lands, or meets the first one
        landed (409 to the node asked for: bound). Rolled back around the doubt, a gang
        of pods no controller makes again was deleted where the bind landed 2 s late
        (fault injection: a 12 s bind). Anything else leaves the doubt as it was."""
        left = self.fence()
        if left <= 0 or not self.cache.node_exists(node):
            return doubt
        namespace, name = split_key(pod)
        connect_s, read_s = min(CONNECT_TIMEOUT_S, left), min(LAST_TRY_WAIT_S, left)
        send_by = time.monotonic() + left if left < math.inf else None
        try:
            post_binding(self.connections, namespace, name, body, connect_s, read_s, send_by)
            return None
        except ApiException as e:
            if e.status == 409:
                settled = self._settle(pod, node, api_error(e), uid)
                if settled is None or settled.bound_to:
                    return settled
            return doubt
        except Exception:
            return doubt

    def _settle(
        self, pod: str, node: str, error: ClusterError, uid: str, in_flight: bool = False
    ) -> ClusterError | None:
        """Read the pod to learn where an ambiguous or conflicting bind left it. Read
        unbound after an attempt left ``in_flight``, its outcome stays unknown: counted a
        plain failure, a gang rolled back around it kept it pending, and its bind, landing
        later, left that one member running alone."""
        namespace, name = split_key(pod)
        try:
            current = read_json(
                self.core.read_namespaced_pod(
                    name,
                    namespace,
                    _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT_S, MAX_BIND_WAIT_S),
                )
            )
        except ApiException as e:
            if e.status == 404:
                return ClusterError("NotFound", f"pod {pod} is gone")
            return _assigned_or(pod, node, error, f"{error.message}; then: {api_error(e)}")
        except Exception as e:
            return _assigned_or(pod, node, error, f"{error.message}; then: {e}")
        bound = (current.get("spec") or {}).get("nodeName")
        if bound == node:
            return None  # our own earlier attempt landed
        if bound and (not uid or (current.get("metadata") or {}).get("uid") == uid):
            return ClusterError(
                error.reason, f"{pod} was bound to {bound} by another binder", bound_to=bound
            )
        if in_flight and not bound:
            why = f"{error.message}; it read unbound then, but that bind may still land"
            return ClusterError(error.reason, why, uncertain=True)
        return error

    def delete(self, pods: Sequence[str], reason: str) -> dict[str, ClusterError]:
        futures = [(pod, self._pool.submit(self._delete_one, pod, reason)) for pod in pods]
        return {pod: error for pod, f in futures if (error := f.result()) is not None}

    def _delete_one(self, pod: str, reason: str) -> ClusterError | None:
        namespace, name = split_key(pod)
        uid = self._uids.get(pod) or self._undeleted.get(pod)
        if not uid:
            current = self.cache.pod(pod)
            if current is None:
                return None  # gone, as a 404 says (a rollback finished later, ``rollbacks``)
            uid = (current.get("metadata") or {}).get("uid")
        if not uid:
            # Without its UID the delete could hit a namesake created since: not sent.
            return ClusterError("UnknownUID", f"{pod}: no UID known; not deleted")
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        self._mark_disrupted(namespace, name, uid, reason)

        def delete(timeout: tuple[float, float]) -> None:
            done(
                self.core.delete_namespaced_pod(
                    name, namespace, body=options, _preload_content=False, _request_timeout=timeout
                )
            )
            log.info("deleted %s: %s", pod, reason)

        budget = self.retry_budget_s
        # Fenced like the binds: a delete sent after the lease passed could take a pod
        # of a gang the new leader has since completed, leaving that one partial. A gang
        # left short by a lost lease is the new leader's: it counts the bound pods.
        error = remove(
            self.cache,
            pod,
            uid,
            lambda: retried(delete, RETRYABLE, self.fence, self.backoff_s, budget),
        )
        if error is None:
            self._undeleted.pop(pod, None)
        else:
            self._undeleted[pod] = uid
        return error

    def _mark_disrupted(self, namespace: str, name: str, uid: str, reason: str) -> None:
        """The ``DisruptionTarget`` condition (``disruption``): a Job whose podFailurePolicy
        ignores that condition (Kubernetes' documented way to keep disruptions off its
        backoffLimit) does not count the rollback as one of its pod's failures. Best
        effort, one attempt (a 429 loses the mark), fenced: the delete follows whatever
        the answer."""
        left = self.fence()
        if left <= 0:
            return
        # Within the leadership left, as every request of ours (the pool may connect 1 +
        # POOL_CONNECT_RETRIES times), and short: a hung patch must leave the delete time.
        connect = min(CONNECT_TIMEOUT_S, left / (1 + POOL_CONNECT_RETRIES))
        timeout = (connect, min(left / 2, MARK_WAIT_S))
        try:
            send_mark(self.core, namespace, name, uid, ROLLBACK_REASON, reason, timeout)
        except Exception as e:  # the rollback must go on: the gang is short either way
            log.warning(
                "could not mark %s/%s as disrupted before deleting it: %s", namespace, name, e
            )
