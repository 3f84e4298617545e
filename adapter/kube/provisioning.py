"""Claims whose volume is made where their pod goes (a StorageClass with
``volumeBindingMode: WaitForFirstConsumer`` and a provisioner: the default class of most
clouds' clusters): a decision that places their pods writes the pods' nodes on them, and
binds the gang once they are bound.

kube-scheduler's VolumeBinding does so in its PreBind: it sets the claim's annotation
``volume.kubernetes.io/selected-node``; the provisioner then makes the volume where that
node reaches it, the PV controller binds the claim, and the pod is bound once it is.
Without it such a claim stays unbound for good, and its pod pending.

A gang's claims are written only where every pod of it can be bound now (each claim as
the snapshot read it, each node still there), gang by gang, together. Written, none of
the gang's pods is bound this cycle (``WAITING_FOR_VOLUMES``): they are gated until
their claims are bound (``volumes``), their room held meanwhile (``adapter.holds``), and
the gang is then bound whole there. Bound at once, a pod whose volume its provisioner
then could not make waited on its node for good, and its gang ran short of it; waiting,
the provisioner that gives up takes the node back (removes the annotation), and the
claim is given the node again. A write answered 409 (changed since the cache read it)
where the claim names the node already is this scheduler's own write of an earlier
cycle that the watch has not shown yet: written.

A write that fails (refused, unanswered past the retries, the claim changed since the
cache read it) stops its gang, and the claims written for it are taken back
(preconditioned on the write's own version: a claim the provisioner has taken up since
stays). A write whose answer was lost may have landed: the claim then names the node,
and its pod waits for the volume made there. A pod bound before (by an older gangsat)
whose claim's node was taken back is told so by an Event (``volumes.Claims.use``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from functools import partial
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapter.cluster import WAITING_FOR_VOLUMES, ClusterError
from adapter.kube.binder import RETRYABLE  # a claim's write is retried as a bind is
from adapter.kube.cache import ClusterCache, split_key
from adapter.kube.resources import CLAIMS, MERGE_PATCH, done, read_json, version_after
from adapter.kube.sending import CONNECT_TIMEOUT_S, Fence, retried
from adapter.kube.volumes import SELECTED_NODE

log = logging.getLogger(__name__)


def select_nodes(
    core: client.CoreV1Api,
    cache: ClusterCache,
    fence: Fence,
    placements: Sequence[tuple[str, str]],
    selecting: Mapping[str, tuple[str, ...]],
    gang_of: Callable[[str], str],
    pool: Executor,
    budget_s: float = 10.0,
    backoff_s: float = 0.05,
) -> dict[str, ClusterError]:
    """Write each placed pod's node on its claims that wait for one (``selecting``: pod
    -> claim keys, as the snapshot read them); returns the pods not to bind, each with
    why: a pod whose claim could not be given its node, and its gang-mates. ``pool``: the
    threads the writes are sent on."""
    by_gang: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pod, node in placements:
        by_gang[gang_of(pod)].append((pod, node))
    refused: dict[str, ClusterError] = {}
    node_of: dict[str, str] = {}  # claim -> the node this cycle writes on it
    for gang, members in by_gang.items():
        if not any(pod in selecting for pod, _ in members):
            continue
        written: dict[str, str] = {}  # claim -> its version after this cycle's write
        why = _checked(cache, members, selecting, node_of)
        if why is None:
            write = partial(_select, core, cache, fence, budget_s=budget_s, backoff_s=backoff_s)
            why = _written(members, selecting, node_of, written, write, pool)
        if why is None:
            for pod, node in members:
                # Its own claims only: a gang's in each pod's message grew as its square.
                own = ", ".join(selecting.get(pod, ()))
                text = (
                    f"not bound until its PersistentVolumeClaim(s) {own}, given node {node}, "
                    "are provisioned"
                    if own
                    else "not bound until its gang-mates' PersistentVolumeClaims are provisioned"
                )
                refused[pod] = ClusterError(WAITING_FOR_VOLUMES, f"{pod}: {text}")
            continue
        failed, message = why
        log.warning("gang %s not bound: %s: %s", gang, failed, message)
        for claim, version in written.items():
            _take_back(core, fence, claim, version)
            node_of.pop(claim, None)
        for pod, _ in members:
            text = message if pod == failed else f"not bound with its gang-mate {failed}: {message}"
            refused[pod] = ClusterError("ClaimNotSelected", f"{pod}: {text}")
    return refused


def _written(
    members: Sequence[tuple[str, str]],
    selecting: Mapping[str, tuple[str, ...]],
    node_of: dict[str, str],
    written: dict[str, str],
    write: Callable[[str, str], tuple[str, ClusterError | None]],
    pool: Executor,
) -> tuple[str, str] | None:
    """Each claim of a gang's pods given its pod's node (``write``), into ``node_of`` and
    ``written`` (claim -> its version after the write), the writes sent together on
    ``pool`` (one after another, a gang of 64 pods waited 64 answers before its first
    bind); the first, in the gang's order, that failed: (the pod, why)."""
    wanted: dict[str, tuple[str, str]] = {}  # claim -> (its first pod, that pod's node)
    for pod, node in members:
        for claim in selecting.get(pod, ()):
            if node_of.get(claim) != node:
                wanted.setdefault(claim, (pod, node))
    answers = pool.map(lambda claim: write(claim, wanted[claim][1]), wanted)
    why = None
    for claim, (version, error) in zip(wanted, answers, strict=True):
        pod, node = wanted[claim]
        if error is None:
            written[claim] = version
            node_of[claim] = node
        elif why is None:
            why = pod, f"PersistentVolumeClaim {claim} not given node {node}: {error}"
    return why


def _checked(
    cache: ClusterCache,
    members: Sequence[tuple[str, str]],
    selecting: Mapping[str, tuple[str, ...]],
    node_of: Mapping[str, str],
) -> tuple[str, str] | None:
    """Why a gang's claims are not to be written, if so: (the pod, why). What needs no
    request: each node still there, each claim as the snapshot read it (not bound, named
    no node since), one node per claim (a claim shared by pods placed apart)."""
    wants: dict[str, str] = {}
    for pod, node in members:
        claims = selecting.get(pod, ())
        if claims and not cache.node_exists(node):
            return pod, f"node {node} is gone"
        for claim in claims:
            if wants.setdefault(claim, node) != node or node_of.get(claim, node) != node:
                return pod, f"PersistentVolumeClaim {claim} is given two nodes this cycle"
            current = cache.get(CLAIMS, claim)
            if current is None:
                return pod, f"PersistentVolumeClaim {claim} is gone"
            chosen = ((current.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE)
            if chosen and chosen != node:
                return pod, f"PersistentVolumeClaim {claim} was given node {chosen} since"
            if (current.get("spec") or {}).get("volumeName"):
                return pod, f"PersistentVolumeClaim {claim} was bound since"
    return None


def _select(
    core: client.CoreV1Api,
    cache: ClusterCache,
    fence: Fence,
    claim: str,
    node: str,
    *,
    budget_s: float,
    backoff_s: float,
) -> tuple[str, ClusterError | None]:
    """The annotation written on ``claim``, preconditioned on the claim as the cache holds
    it (one changed since is a conflict, not overwritten); the claim's version after it
    ("" where the answer does not say)."""
    current = cache.get(CLAIMS, claim) or {}
    meta = current.get("metadata") or {}
    if ((meta.get("annotations") or {}).get(SELECTED_NODE)) == node:
        return "", None  # named so already (a write of an earlier cycle that landed)
    precondition = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    body = {
        "metadata": {
            **{k: v for k, v in precondition.items() if v},
            "annotations": {SELECTED_NODE: node},
        }
    }
    version = [""]

    def send(timeout: tuple[float, float]) -> None:
        try:
            version[0] = version_after(_patch(core, claim, body, timeout))
        except ApiException as e:
            # Changed since the cache read it: by this scheduler's own write of an
            # earlier cycle, which the watch has not shown yet, where it names the node.
            if e.status != 409 or _named(core, claim, timeout) != node:
                raise

    # A 404 or a 409 (gone, or changed since) is no success here: ``gone`` is empty.
    error = retried(send, RETRYABLE, fence, backoff_s, budget_s, gone=frozenset())
    if error is None:
        log.info("PersistentVolumeClaim %s given node %s", claim, node)
    return version[0], error


def _named(core: client.CoreV1Api, claim: str, timeout: tuple[float, float]) -> str | None:
    """The node ``claim`` names now, as the server has it."""
    namespace, name = split_key(claim)
    current = read_json(
        core.read_namespaced_persistent_volume_claim(
            name, namespace, _preload_content=False, _request_timeout=timeout
        )
    )
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    return annotations.get(SELECTED_NODE)


def _take_back(core: client.CoreV1Api, fence: Fence, claim: str, version: str) -> None:
    """Remove the annotation this cycle wrote on ``claim``, once, only where the claim is
    as the write left it; else it stays (it holds the pod to that node, ``volumes``)."""
    left = fence()
    if not version or left <= 0:
        return
    body = {"metadata": {"resourceVersion": version, "annotations": {SELECTED_NODE: None}}}
    # One attempt, as short as a connect may take: the cycle's binds wait on it.
    timeout = (min(CONNECT_TIMEOUT_S, left), min(CONNECT_TIMEOUT_S, left))
    try:
        done(_patch(core, claim, body, timeout))
    except Exception as e:  # left, it holds the pod to the node: no worse than no undo
        log.info("PersistentVolumeClaim %s still names its node: %s", claim, e)


def _patch(
    core: client.CoreV1Api, claim: str, body: dict[str, Any], timeout: tuple[float, float]
) -> Any:
    namespace, name = split_key(claim)
    return core.patch_namespaced_persistent_volume_claim(
        name,
        namespace,
        body,
        _content_type=MERGE_PATCH,
        _preload_content=False,
        _request_timeout=timeout,
    )
