"""PodDisruptionBudgets as kube-apiserver's eviction subresource checks them."""

from __future__ import annotations

from typing import Any

from benchmarks.fake_apiserver.objects import FailedInBody, FakeApiError, Obj


def _check_budget(objects: Any, namespace: str, pod: Obj) -> None:
    """kube-apiserver's eviction check against the pod's PodDisruptionBudget: a pod
    Pending, finished or already terminating is evicted without one (``canIgnorePDB``);
    more than one budget is a 500; else the eviction must leave the budget's healthy pods
    (bound, Running, not terminating, and Ready unless no kubelet said: there is none
    here) at its ``minAvailable`` or within its ``maxUnavailable`` (integers or
    percentages of the pods it selects, rounded up), else a 429. Computed on the spot,
    where a real server reads the status the disruption controller keeps."""
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        return

    def selected(other: Obj, wanted: dict[str, Any]) -> bool:
        labels = (other.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in wanted.items())

    budgets = [
        (name, pdb.get("spec") or {})
        for (ns, name), pdb in objects.get(("policy", "poddisruptionbudgets"), {}).items()
        if ns == namespace
        and selected(pod, ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
    ]
    if not budgets:
        return
    if len(budgets) > 1:
        raise FailedInBody(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    [(pdb_name, spec)] = budgets
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    members = [
        other
        for (pns, _), other in objects[("", "pods")].items()
        if pns == namespace and selected(other, wanted)
    ]
    healthy = sum(1 for other in members if _healthy(other))
    expected = len(members)
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = expected - _scaled(spec.get("maxUnavailable", 0), expected)
    if healthy - desired < 1:
        raise FakeApiError(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            details={"causes": [{"type": "DisruptionBudget", "message": pdb_name}]},
        )


def _healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if not (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return status.get("phase") == "Running" and all(c.get("status") == "True" for c in ready)


def _scaled(value: Any, total: int) -> int:
    """An int-or-percentage of ``total``, rounded up (as the disruption controller does)."""
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)
    return int(value)
