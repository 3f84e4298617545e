"""The ``DisruptionTarget`` pod condition: written by gangsat on a pod before it ends it,
and read back from the pods a leader before it marked.

kube-scheduler sets this condition (reason ``PreemptionByScheduler``) on a pod before it
deletes it for a preemptor, so that a Job whose ``podFailurePolicy`` ignores the
condition does not count the disruption against its ``backoffLimit``. gangsat sets it:

- before a rollback deletes a pod (``ROLLBACK_REASON``; best effort, ``Binder``);
- before it evicts a preemption's victim (``PREEMPTION_REASON``; ``Evictor.mark``). There
  it is also the record a new leader reads: a victim some of whose evictions went and
  others failed runs below minMember until those are sent again, and which to send again
  was the old leader's memory only (``Holds.recover`` reads the marks).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from adapter.kube.fields import listed, stamp
from adapter.kube.resources import STRATEGIC_MERGE_PATCH, done

CONDITION = "DisruptionTarget"
# The reasons: kube-scheduler's for a preemption (Jobs match the condition's type; the
# reason says who and why), gangsat's own for a rollback.
PREEMPTION_REASON = "PreemptionByScheduler"
ROLLBACK_REASON = "GangRollbackByScheduler"
# How a message of gangsat's begins: a mark of kube-scheduler's (or another scheduler's)
# is that scheduler's to finish.
AUTHOR = "gangsat: "


def send_mark(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    uid: str,
    reason: str,
    why: str,
    timeout: tuple[float, float],
) -> None:
    """Set the condition on the pod (a strategic merge by type: the pod's other conditions
    stay); raises what the request raises. The UID in the patch makes a namesake's answer
    an error (the UID is immutable: a conflict), not a write."""
    condition = {
        "type": CONDITION,
        "status": "True",
        "reason": reason,
        "message": f"{AUTHOR}{why}",
        "lastTransitionTime": stamp(datetime.now(UTC)),
    }
    body = {"metadata": {"uid": uid}, "status": {"conditions": [condition]}}
    done(
        core.patch_namespaced_pod_status(
            name,
            namespace,
            body,
            _content_type=STRATEGIC_MERGE_PATCH,
            _preload_content=False,
            _request_timeout=timeout,
        )
    )


def marked_victim(status: Any) -> str | None:
    """Why gangsat marked the pod of this ``status`` to be evicted for a preemption, if it
    did and the mark still says so (the Eviction API's own mark replaces it once the
    eviction is granted, on a pod then terminating)."""
    if not isinstance(status, Mapping):
        return None
    for c in listed(status.get("conditions")):
        if (
            isinstance(c, Mapping)
            and c.get("type") == CONDITION
            and c.get("status") == "True"
            and c.get("reason") == PREEMPTION_REASON
            and isinstance(message := c.get("message"), str)
            and message.startswith(AUTHOR)
        ):
            return message.removeprefix(AUTHOR) or "preempted"
    return None
