"""Evicting the victims of preemption through the Eviction API (``policy/v1``).

Unlike a rollback's delete (``Binder.delete``), a preemption evicts pods that are doing
work, so it goes through ``pods/eviction``: the API server honours PodDisruptionBudgets
and the pods' termination grace. Answers, and what they mean:

- 201 (or 200): evicted; the pod terminates and, until it is gone, its node's room is
  still held in the snapshot (``ClusterCache.deleting``), as no member of its gang.
- 429: a PodDisruptionBudget forbids it now. Not retried within the cycle: the victim
  stays, and the gang it was evicted for is not held (the loop decides afresh).
- 404 or 409: the pod is gone, or a namesake replaced it: nothing of ours is left there.
- 5xx, a timeout: retried with backoff within the retry budget; but a pod that more than
  one PodDisruptionBudget selects, which kube-apiserver refuses to evict on every attempt
  (a Status of code 500, sent with HTTP 201: its eviction handler returns the Status as
  its result), is refused as a 429 is, its dry run refusing its victim whole.

The UID the snapshot showed is a precondition, so a recreated pod of the same name is
never evicted, and leadership fences every request as it fences binds.

Before any of a victim gang's pods is evicted, each of them is evicted in a dry run
(``dryRun=All``: the API server runs the same checks, its budgets' included, and
changes nothing), so that a PodDisruptionBudget made since the snapshot refuses the
victim whole rather than after some of its pods are gone (``check``); then each is
marked as a victim (``mark``, the record a leader after this one reads). Left open: a budget
that allows fewer disruptions than the victim has pods (the dry runs do not spend it),
one made between the dry runs and the evictions, and one whose dry run went unanswered
(a 5xx or no answer refuses nothing): each may still refuse part of a victim.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.cluster import ClusterError
from adapter.kube.cache import ClusterCache, split_key
from adapter.kube.disruption import PREEMPTION_REASON, send_mark
from adapter.kube.resources import read_json
from adapter.kube.sending import (
    CONNECT_TIMEOUT_S,
    LANDS_LATE,
    MAX_BIND_WAIT_S,
    Fence,
    api_error,
    remove,
    retried,
    without_retries,
)

log = logging.getLogger(__name__)

RETRYABLE = frozenset({500, 502, 503, 504})
MARK_RETRYABLE = RETRYABLE | {409, 429}
# kube-apiserver's words for a pod under two PodDisruptionBudgets (since policy/v1beta1).
MULTIPLE_BUDGETS = "more than one PodDisruptionBudget"


class Evictor:
    def __init__(
        self,
        api: client.ApiClient,
        cache: ClusterCache,
        fence: Fence,
        threads: int = 4,
        retry_budget_s: float = 5.0,
        backoff_s: float = 0.05,
        author: str = "",
    ) -> None:
        """``author``: who its marks say marked the pods (``disruption.author``)."""
        self.api = without_retries(api)
        self.author = author
        self.core = client.CoreV1Api(self.api)
        self.cache = cache
        self.fence = fence
        self.retry_budget_s = retry_budget_s
        self.backoff_s = backoff_s
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="evict")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.api.rest_client.pool_manager.clear()  # its own connections

    def evict(
        self, evictions: Mapping[str, str], seen_uids: Mapping[str, str] | None = None
    ) -> dict[str, ClusterError]:
        """Evict each pod (pod -> why); returns the pods not evicted. ``seen_uids``: the
        pods' UIDs as the decision saw them: the eviction's precondition, so a namesake
        created since is never the one evicted (the server answers 409: gone)."""
        seen = seen_uids or {}
        futures = [
            (pod, self._pool.submit(self._evict_one, pod, why, seen.get(pod)))
            for pod, why in evictions.items()
        ]
        return {pod: error for pod, f in futures if (error := f.result()) is not None}

    def check(
        self, pods: Collection[str], seen_uids: Mapping[str, str] | None = None
    ) -> dict[str, ClusterError]:
        """The pods whose eviction the API server refuses now (a dry run each, in
        parallel): a budget's 429, or any answer but 404 and 409 (the pod is gone) and
        5xx; a 5xx or no answer at all refuses nothing (the eviction is tried)."""
        seen = seen_uids or {}
        futures = [(pod, self._pool.submit(self._dry_run, pod, seen.get(pod))) for pod in pods]
        return {pod: error for pod, f in futures if (error := f.result()) is not None}

    def mark(
        self, evictions: Mapping[str, str], seen_uids: Mapping[str, str] | None = None
    ) -> Marks:
        """Mark each pod (pod -> why) as a preemption's victim (``disruption``), in
        parallel. The mark is what a leader after this one reads of the evictions: a pod
        is evicted only once marked. A pod gone (404, or a namesake: 422 as the patch's
        UID meets it) counts as marked: its eviction finds it gone too. A pod marked
        already (an eviction sent again) is marked anew, its ``lastTransitionTime`` too,
        though the condition did not change: so its mark does not go stale while its
        eviction is still wanted (``holds.MARK_STALE_S``)."""
        seen = seen_uids or {}
        futures = [
            (pod, self._pool.submit(self._mark_one, pod, why, seen.get(pod)))
            for pod, why in evictions.items()
        ]
        marks = Marks({}, {})
        for pod, f in futures:
            if isinstance(outcome := f.result(), ClusterError):
                marks.failed[pod] = outcome
            elif outcome:
                marks.versions[pod] = outcome
        return marks

    def withdraw(self, kept: Mapping[str, str], versions: Mapping[str, str]) -> None:
        """Turn False the marks of victims that kept every pod (pod -> why not evicted):
        left True, a leader after this one would take such a gang, once it lost a pod of
        its own, for a victim left below minMember, and evict the rest (a chaos probe).
        Each only if the pod is as the mark left it (``versions``, its resourceVersion
        then): an eviction that went through after all (its answer lost) has marked it
        itself, and must not be undone. Best effort, one attempt each:
        kube-controller-manager turns a mark False after two minutes anyway
        (``holds.MARK_STALE_S``)."""
        futures = [
            self._pool.submit(self._withdraw_one, pod, why, version)
            for pod, why in kept.items()
            if (version := versions.get(pod))
        ]
        for f in futures:
            f.result()

    def _mark_one(self, pod: str, why: str, seen_uid: str | None) -> ClusterError | str:
        """The pod's resourceVersion after its mark ("" where unknown); retried as an
        eviction is, and on a 429 too (no budget refuses a mark: the API server's own flow
        control) and a 409 (a conflict: a patch carries no precondition that says gone)."""
        namespace, name = split_key(pod)
        uid = self._uid(pod, seen_uid)
        if uid == "":
            return ""
        if not uid:
            return ClusterError("UnknownUID", f"{pod}: no UID known; not marked")
        version = [""]

        def send(timeout: tuple[float, float]) -> None:
            try:
                version[0] = send_mark(
                    self.core, namespace, name, uid, PREEMPTION_REASON, why, timeout, by=self.author
                )
            except ApiException as e:
                if not _replaced(e):
                    raise

        error = retried(
            send,
            MARK_RETRYABLE,
            self.fence,
            self.backoff_s,
            self.retry_budget_s,
            gone=frozenset({404}),
        )
        if error is not None:
            log.warning("could not mark %s as a victim; not evicted: %s", pod, error)
            return error
        return version[0]

    def _withdraw_one(self, pod: str, why: str, version: str) -> None:
        namespace, name = split_key(pod)
        uid = self._uid(pod, None)
        if not uid:
            return
        left = self.fence()
        if left <= 0:
            return
        timeout = (min(CONNECT_TIMEOUT_S, left), min(left, MAX_BIND_WAIT_S, self.retry_budget_s))
        try:
            send_mark(
                self.core,
                namespace,
                name,
                uid,
                PREEMPTION_REASON,
                why,
                timeout,
                "False",
                version,
                by=self.author,
            )
        except Exception as e:  # it lapses in two minutes: nothing else to do
            log.info("mark of %s as a victim left (%s): %s", pod, why, e)

    def _uid(self, pod: str, seen_uid: str | None) -> str | None:
        """The UID an eviction of ``pod`` is preconditioned on: as the decision saw it,
        else as the cache holds it; "" for a pod the cache no longer has (gone, as a 404
        says: an eviction sent again after the snapshot lost the pod, ``evicting``)."""
        if seen_uid:
            return seen_uid
        current = self.cache.pod(pod)
        return "" if current is None else (current.get("metadata") or {}).get("uid")

    def _dry_run(self, pod: str, seen_uid: str | None) -> ClusterError | None:
        """Anything raised but the answers below is a fault of ours: it reaches the loop,
        which then evicts nothing."""
        namespace, name = split_key(pod)
        uid = self._uid(pod, seen_uid)
        if uid == "":
            return None  # gone: nothing to refuse
        if not uid:
            return ClusterError("UnknownUID", f"{pod}: no UID known; not evicted")
        left = self.fence()
        if left <= 0:
            return ClusterError("NotLeader", "lost the lease before sending")
        try:
            _answered(
                self.core.create_namespaced_pod_eviction(
                    name,
                    namespace,
                    _eviction(namespace, name, uid),
                    dry_run="All",
                    _preload_content=False,
                    # Within the eviction's own budget: a dry run is one attempt of it.
                    _request_timeout=(
                        min(CONNECT_TIMEOUT_S, left),
                        min(left, MAX_BIND_WAIT_S, self.retry_budget_s),
                    ),
                )
            )
        except ApiException as e:
            if e.status in (404, 409):
                return None
            if refused_for_good(e):
                return api_error(e)
            if e.status in RETRYABLE or not e.status:
                # No answer (status 0: the client's own, e.g. TLS), as with a timeout
                # below: the eviction itself still meets the budgets, and is retried on
                # these; a victim kept would cost its preemptor a cycle on one dropped
                # request.
                log.warning("dry run of evicting %s not answered: %s", pod, api_error(e))
                return None
            return api_error(e)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            log.warning("dry run of evicting %s not answered: %s", pod, e)
        return None

    def _evict_one(self, pod: str, why: str, seen_uid: str | None = None) -> ClusterError | None:
        namespace, name = split_key(pod)
        uid = self._uid(pod, seen_uid)
        if uid == "":
            return None  # gone: evicted already
        if not uid:
            return ClusterError("UnknownUID", f"{pod}: no UID known; not evicted")
        body = _eviction(namespace, name, uid)
        unanswered = [False]  # the last attempt's answer, lost or a failure it may follow

        def send(timeout: tuple[float, float]) -> None:
            unanswered[0] = True
            try:
                _answered(
                    self.core.create_namespaced_pod_eviction(
                        name, namespace, body, _preload_content=False, _request_timeout=timeout
                    )
                )
            except ApiException as e:
                unanswered[0] = e.status in LANDS_LATE and not refused_for_good(e)
                raise
            unanswered[0] = False
            log.info("evicted %s: %s", pod, why)

        # A 429 is a disruption budget saying not now: final for this cycle.
        error = remove(
            self.cache,
            pod,
            uid,
            lambda: retried(
                send,
                RETRYABLE,
                self.fence,
                self.backoff_s,
                self.retry_budget_s,
                final=refused_for_good,
            ),
        )
        if error is not None and unanswered[0]:
            # It may have gone: its gang is judged as one that lost a pod (``evicting``).
            why_not = f"{error.message} (it may have gone)"
            return ClusterError(error.reason, why_not, uncertain=True)
        return error


def _answered(response: object) -> None:
    """Read an eviction's answer; a Status of failure in a 2xx answer is that failure,
    raised as the client raises any other (the Go client reads it so too)."""
    try:
        answer = read_json(response)
    except ValueError:  # no JSON body: nothing says it failed
        return
    if (
        isinstance(answer, dict)
        and answer.get("kind") == "Status"
        and answer.get("status") == "Failure"
    ):
        e = ApiException(status=int(answer.get("code") or 500), reason=answer.get("reason"))
        e.body = json.dumps(answer)
        raise e


class Marks(NamedTuple):
    failed: dict[str, ClusterError]  # pod -> why it could not be marked
    versions: dict[str, str]  # pod -> its resourceVersion once marked (where known)


def _replaced(e: ApiException) -> bool:
    """A patch carrying the UID of a pod a namesake replaced: kube-apiserver validates the
    patched object, whose UID changed (422, "metadata.uid: ... field is immutable")."""
    return e.status == 422 and "metadata.uid" in _body(e)


def refused_for_good(e: ApiException) -> bool:
    """An eviction the API server refuses whatever the retries (``MULTIPLE_BUDGETS``)."""
    return e.status == 500 and MULTIPLE_BUDGETS in _body(e)


def _body(e: ApiException) -> str:
    return e.body.decode("utf-8", "replace") if isinstance(e.body, bytes) else str(e.body or "")


def _eviction(namespace: str, name: str, uid: str) -> client.V1Eviction:
    return client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
    )
