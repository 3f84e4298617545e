"""Reasons that changed in their counts alone are told again only after minutes.

Each decision moves the counts of most of a backlog's reasons ("23 Insufficient cpu",
then 25; "0/4 pods fit", then 1/4): real-shaped 5,000 nodes, 63 gangs admitted
otherwise changed 2,927 of 4,104 gangs' reasons. Telling each pod and each PodGroup
again every such cycle queued 29,000 pod conditions and 4,300 PodGroup statuses a
cycle, sent at 50 a second: a Volcano PodGroup's Inqueue, which its job controller
waits for, queued behind them. A reason that names something else (another resource
short, a taint, a claim) is told at once; one that changed in its counts is told again
``RECOUNT_S`` to twice that after it was last told (``recount_s``).
"""

from __future__ import annotations

import functools
import re
import zlib
from typing import Any

from adapter.kube.fields import Obj, stamped, stored_status

# kube-scheduler retries a pod no cluster event has moved after 5 minutes
# (podMaxInUnschedulablePodsDuration).
RECOUNT_S = 300.0
# The counts in a reason that a decision moves: how many pods of how many fit or are
# unplaced ("3/5 pods fit", the 3), and how many nodes fail in each way ("134 node(s)
# didn't match", "2 Insufficient cpu"). Not numbers in names ('data-1', node-12, team1,
# mig-1g.5gb), nor minMember or a gang's size, nor how many of its pods exist, wait for
# gates or volumes, or succeeded ("3 pod(s) exist", ", 1 succeeded"), which users and
# controllers move, each move news.
_COUNT = re.compile(r"\b\d+(?=/\d)|(?:^|(?<=: )|(?<=, ))\d+(?= )(?! pod\(s\))(?! succeeded)")


def alike_reasons(told: str, message: str) -> bool:
    """Whether two reasons say the same, in any order of their parts, but for counts."""
    return _named(told) == _named(message)


# A gang's pods share its reason: read once for them all, not once per pod.
@functools.lru_cache(maxsize=16_384)
def _named(reason: str) -> tuple[str, tuple[str, ...]]:
    head, _, parts = _COUNT.sub("#", reason).rpartition(": ")
    return head, tuple(sorted(parts.split(", ")))


def recount_s(uid: str) -> float:
    """RECOUNT_S to twice it, by object: those first told in one cycle come due over
    minutes, not in one cycle (29,000 at once: 10 minutes of the writer's rate)."""
    return RECOUNT_S * (1 + zlib.crc32(uid.encode()) % 1000 / 1000)


def alike_statuses(sig: tuple[Any, ...], other: tuple[Any, ...] | None) -> bool:
    """Whether two PodGroup status signatures (phase, running, conditions as (type,
    status, reason, message)) differ at most in the counts of their conditions'
    messages: the same phase, the same pods running, the same conditions."""
    if other is None or len(sig) != 3 or len(other) != 3:
        return False
    (phase, running, conditions), (other_phase, other_running, other_conditions) = sig, other
    if (phase, running, len(conditions)) != (other_phase, other_running, len(other_conditions)):
        return False
    return all(
        mine[:3] == theirs[:3]
        and isinstance(mine[3], str)
        and isinstance(theirs[3], str)
        and alike_reasons(mine[3], theirs[3])
        for mine, theirs in zip(conditions, other_conditions, strict=True)
    )


# What a pod's PodScheduled condition says it waits with, and when that was stamped
# (None where the time is unreadable or has no zone): ``waiting_condition``.
Said = tuple[str, float | None]


def waiting_condition(pod: Obj) -> Said | None:
    """The reason a pod's PodScheduled condition says it waits with (False,
    Unschedulable, a message), and when it was stamped; None where it says none. Read
    once per object: the reporter derives what it was shown and when it was told from
    it (``last_told``)."""
    for condition in stored_status(pod).get("conditions") or []:
        if not isinstance(condition, dict) or condition.get("type") != "PodScheduled":
            continue
        if (condition.get("status"), condition.get("reason")) != ("False", "Unschedulable"):
            return None
        message = condition.get("message")
        if not isinstance(message, str):
            return None
        return message, _stamped(condition.get("lastTransitionTime"))
    return None


def _stamped(stamp: Any) -> float | None:
    parsed = stamped(stamp) if isinstance(stamp, str) else None
    if parsed is None or parsed.tzinfo is None:
        return None  # the API server writes UTC with its zone; no guess at a local time
    return parsed.timestamp()


def last_told(said: Said | None, uid: str, now: float) -> tuple[Any, ...] | None:
    """What a pod was last told it waits with, as its condition says it
    (``waiting_condition``), in the form the reporter remembers a write (``("PodScheduled",
    message, uid, when)``), or None. gangsat stamps each condition it writes with the
    time it is written (``pod_unschedulable``): after a restart, a pod told minutes ago
    that its counts have since moved is told again when its ``recount_s`` has passed, not
    at once (a backlog's 29,000 pods would queue 10 minutes of the writer's rate at each
    take-over, a Volcano PodGroup's Inqueue behind them). A time past ``now`` (another
    clock) is not read as when it was told."""
    if said is None or said[1] is None or said[1] > now:
        return None
    return ("PodScheduled", said[0], uid, said[1])


def held_as_recount(
    sent: float | None,
    now: float,
    uid: str,
    sig: tuple[Any, ...],
    has: tuple[Any, ...],
    written: tuple[Any, ...] | None,
) -> bool:
    """Whether a PodGroup's status (``sig``) differs from what the server will hold (the
    last status sent, ``written``, else the one it has) only in its conditions' counts,
    and was sent (at ``sent``) less than ``recount_s`` before ``now``: not sent again
    yet. Not against the one it has while another is on its way (a Running queued, then
    a Pending again: held back, the Running would land and stand). Not where the status
    says no running count (the Workload API's: its message alone says how many pods are
    bound). After a restart, nothing was sent: sent once."""
    return (
        sent is not None
        and sig[1] is not None
        and now - sent < recount_s(uid)
        and alike_statuses(sig, has if written is None else written)
    )
