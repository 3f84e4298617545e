"""Claims whose volume is made where their pod goes (a StorageClass with
``volumeBindingMode: WaitForFirstConsumer`` and a provisioner: the default class of most
clouds' clusters): each pod's bind writes its node on them first.

kube-scheduler's VolumeBinding does so in its PreBind: it sets the claim's annotation
``volume.kubernetes.io/selected-node``; the provisioner then makes the volume where that
node reaches it, the PV controller binds the claim, and the kubelet mounts it once bound.
Without it such a claim stays unbound for good, and its pod pending.

Unlike kube-scheduler, the bind does not wait for the claim to be bound: a provisioner
that fails on that node leaves the pod bound, waiting for its volume (kube-scheduler
would place it again). A claim that cannot be given the node (the write refused or
unanswered past the retries, the claim given another node or bound since the snapshot,
or given two nodes by two pods of one decision) keeps its pod from binding this cycle:
bound without it, the pod waited on its node for a volume no provisioner would make. A
write whose answer was lost may have landed; the claim then names the node, and the next
snapshot holds its pod to it (``volumes``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

from kubernetes import client

from adapter.cluster import ClusterError
from adapter.kube.cache import ClusterCache, split_key
from adapter.kube.resources import CLAIMS
from adapter.kube.sending import Fence, retried
from adapter.kube.volumes import SELECTED_NODE

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RETRYABLE = frozenset({429, 500, 502, 503, 504})


def select_nodes(
    core: client.CoreV1Api,
    cache: ClusterCache,
    fence: Fence,
    placements: Sequence[tuple[str, str]],
    selecting: Mapping[str, tuple[str, ...]],
    budget_s: float = 10.0,
    backoff_s: float = 0.05,
) -> dict[str, ClusterError]:
    """Write each placed pod's node on its claims that wait for one (``selecting``: pod
    -> claim keys, as the snapshot read them); returns the pods not to bind, each with
    why."""
    node_of: dict[str, str] = {}  # claim -> the node written on it
    users: dict[str, list[str]] = defaultdict(list)  # claim -> pods placed with it
    refused: dict[str, ClusterError] = {}
    for pod, node in placements:
        for claim in selecting.get(pod, ()):
            if node_of.setdefault(claim, node) != node:
                refused[pod] = ClusterError(
                    "ClaimNodeConflict",
                    f"{pod}: PersistentVolumeClaim {claim} is given node {node_of[claim]} "
                    f"for another pod of this cycle, not {node}",
                )
            else:
                users[claim].append(pod)
    for claim, node in node_of.items():
        error = _select(core, cache, fence, claim, node, budget_s, backoff_s)
        if error is None:
            continue
        log.warning("PersistentVolumeClaim %s not given node %s: %s", claim, node, error)
        for pod in users[claim]:
            refused.setdefault(
                pod,
                ClusterError(
                    error.reason,
                    f"{pod}: PersistentVolumeClaim {claim} not given node {node}: {error.message}",
                ),
            )
    return refused


def _select(
    core: client.CoreV1Api,
    cache: ClusterCache,
    fence: Fence,
    claim: str,
    node: str,
    budget_s: float,
    backoff_s: float,
) -> ClusterError | None:
    """The annotation written on ``claim``, preconditioned on the claim as the cache holds
    it (a claim given a node meanwhile is a conflict, not overwritten)."""
    current = cache.get(CLAIMS, claim)
    if current is None:
        return ClusterError("NotFound", "the claim is gone")
    meta = current.get("metadata") or {}
    chosen = (meta.get("annotations") or {}).get(SELECTED_NODE)
    if chosen == node:
        return None
    if chosen:
        return ClusterError("Conflict", f"it was given node {chosen} since")
    if (current.get("spec") or {}).get("volumeName"):
        return ClusterError("Conflict", "it was bound since: its volume is read next cycle")
    namespace, name = split_key(claim)
    precondition = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    body = {
        "metadata": {
            **{k: v for k, v in precondition.items() if v},
            "annotations": {SELECTED_NODE: node},
        }
    }

    def send(timeout: tuple[float, float]) -> None:
        core.patch_namespaced_persistent_volume_claim(
            name,
            namespace,
            body,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=timeout,
        )

    # A 404 or a 409 (gone, or changed since) is no success here: ``gone`` is empty.
    error = retried(send, RETRYABLE, fence, backoff_s, budget_s, gone=frozenset())
    if error is None:
        log.info("PersistentVolumeClaim %s given node %s", claim, node)
    return error
