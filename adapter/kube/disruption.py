"""The ``DisruptionTarget`` pod condition: written by gangsat on a pod before it ends it,
and read back from the pods a leader before it marked.

kube-scheduler sets this condition (reason ``PreemptionByScheduler``) on a pod before it
deletes it for a preemptor, so that a Job whose ``podFailurePolicy`` ignores the
condition does not count the disruption against its ``backoffLimit``. gangsat sets it:

- before a rollback deletes a pod (``ROLLBACK_REASON``; best effort, ``Binder``), for
  that reason;
- before it evicts a preemption's victim (``PREEMPTION_REASON``; ``Evictor.mark``), as
  the record a leader after it reads (the Eviction API marks the pods it evicts itself,
  reason ``EvictionByEvictionAPI``). A victim some of whose evictions went and others
  failed runs below minMember until those are sent again, and which to send again was
  the old leader's memory only (``Holds.recover`` reads the marks). On a pod not being
  deleted, kube-controller-manager's disruption controller turns the condition False
  two minutes after its ``lastTransitionTime`` (``holds.MARK_STALE_S``): the marks of a
  victim that kept every pod, which gangsat withdraws at once (``Evictor.withdraw``),
  lapse so where that fails; a mark sent again is refreshed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from adapter.kube.fields import stamp, stamped
from adapter.kube.resources import STRATEGIC_MERGE_PATCH, version_after
from solver.model import VictimMark

CONDITION = "DisruptionTarget"
# The reasons: kube-scheduler's for a preemption (Jobs match the condition's type; the
# reason says who and why), gangsat's own for a rollback.
PREEMPTION_REASON = "PreemptionByScheduler"
ROLLBACK_REASON = "GangRollbackByScheduler"
# How a message of gangsat's begins: a mark of kube-scheduler's (or another scheduler's)
# is that scheduler's to finish. Then the deployment's scheduler names (``author``) in
# brackets: another gangsat deployment's marks are its own to finish (read as ours, a new
# leader evicted again the pods the other evicted). Marks before them said none.
AUTHOR = "gangsat"


def author(scheduler_names: Iterable[str]) -> str:
    """Who a deployment's marks say marked the pod: the scheduler names it serves."""
    return ",".join(sorted(scheduler_names))


def send_mark(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    uid: str,
    reason: str,
    why: str,
    timeout: tuple[float, float],
    status: str = "True",
    version: str = "",
    by: str = "",
) -> str:
    """Set the condition on the pod (a strategic merge by type: the pod's other conditions
    stay), ``status`` False to withdraw it, its message saying who (``by``: ``author``);
    returns the pod's resourceVersion after it ("" where the answer does not say), raises
    what the request raises. The UID in the patch makes a namesake's answer an error (the
    UID is immutable: a 422), not a write; a ``version`` makes any write to the pod since
    that one a conflict (409)."""
    condition = {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": f"{AUTHOR}[{by}]: {why}" if by else f"{AUTHOR}: {why}",
        "lastTransitionTime": stamp(datetime.now(UTC)),
    }
    meta = {"uid": uid, **({"resourceVersion": version} if version else {})}
    body = {"metadata": meta, "status": {"conditions": [condition]}}
    answer = core.patch_namespaced_pod_status(
        name,
        namespace,
        body,
        _content_type=STRATEGIC_MERGE_PATCH,
        _preload_content=False,
        _request_timeout=timeout,
    )
    return version_after(answer)


def marked_victim(status: Any) -> VictimMark | None:
    """gangsat's mark on the pod of this ``status`` as a preemption's victim, if it has one
    that still says so (the Eviction API's own mark replaces it once the eviction is
    granted, on a pod then terminating; kube-controller-manager's turns it False after
    two minutes). A mark whose time cannot be read is as old as can be. Read for every
    pod event (the watch cache's read view): most pods have no such condition, and a
    test of each condition's type is all they cost (a JSON object is a dict)."""
    conditions = status.get("conditions") if type(status) is dict else None
    if type(conditions) is not list:
        return None
    for c in conditions:
        if type(c) is dict and c.get("type") == CONDITION:
            return _mark_of(c)
    return None


def _mark_of(condition: Mapping[str, Any]) -> VictimMark | None:
    message = condition.get("message")
    if (
        condition.get("status") != "True"
        or condition.get("reason") != PREEMPTION_REASON
        or not isinstance(message, str)
        or not message.startswith(AUTHOR)
    ):
        return None
    by, why = "", message.removeprefix(AUTHOR)
    if why.startswith("[") and "]: " in why:
        by, _, why = why[1:].partition("]: ")
    elif why.startswith(": "):
        why = why.removeprefix(": ")
    else:
        return None  # (another scheduler's name that begins so)
    at = condition.get("lastTransitionTime")
    when = stamped(at) if isinstance(at, str) else None
    return VictimMark(
        why=why or "preempted", at_s=when.timestamp() if when is not None else 0.0, by=by
    )
