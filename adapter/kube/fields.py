"""Reading the fields of one API object, as a real API server stores them.

Every reader raises ``BadObject`` with the field and the reason, so that one unusable
object becomes a finding (an Event, a line in ``gangsat solve``), never a failed cycle.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from adapter.quantity import QuantityError, QuantityTooLarge, parse
from solver.model import MAX_QUANTITY
from solver.units import model_unit

Obj = Mapping[str, Any]

# A pod's lists of containers, in its spec and in its status.
CONTAINER_LISTS = ("containers", "initContainers")
STATUS_LISTS = ("containerStatuses", "initContainerStatuses")


class BadObject(ValueError):
    """One object is unusable; the message says which field and why."""


# A pod in these phases holds nothing and waits for nothing: no snapshot shows it.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def finished(status: Any) -> bool:
    """Whether a pod's ``status`` says it finished; a phase that is no string (no API
    server stores one, a manifest file may) is not finished, and no crash."""
    mapping = type(status) is dict or isinstance(status, Mapping)  # type(): ABCs are slow
    phase = status.get("phase") if mapping else None
    return isinstance(phase, str) and phase in FINISHED_PHASES


# Set by the cache on a pod being deleted (a deletionTimestamp, or gangsat's own delete
# sent): ``convert`` reads it as terminating. No API object has such a top-level key.
LEAVING = "__gangsat_leaving"


def stored_status(obj: Obj) -> dict[str, Any]:
    """An object's status as gangsat reads it back to compare and update: {} when it is
    no mapping, and only the conditions that are mappings. Another controller or a user
    may have written anything there (a CRD keeps it): read as it was, one such status
    stopped the report of every gang, every cycle."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return {}
    conditions = status.get("conditions")
    if conditions is None:
        return dict(status)
    kept = [c for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []
    return {**status, "conditions": kept}


def scheduler_of(pod_spec: Obj) -> Any:
    """The scheduler a pod of this spec names: none, or an empty one, is the default
    scheduler, as the API server fills it in."""
    return pod_spec.get("schedulerName") or "default-scheduler"


def api_group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def uid_of(obj: Obj) -> str:
    """An object's metadata.uid; "" where it has none (a manifest's object)."""
    return str((obj.get("metadata") or {}).get("uid") or "")


def meta(obj: Obj) -> tuple[str, str]:
    """(namespace, name); a manifest's object without a namespace is in ``default``."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise BadObject("metadata.name is missing")
    namespace = metadata.get("namespace") or "default"
    return str(namespace), name


def created_s(obj: Obj) -> float:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    parsed = stamped(stamp) if isinstance(stamp, str) else None
    return 0.0 if parsed is None else parsed.timestamp()


def stamp(at: datetime) -> str:
    """``at`` as an API server writes a time: UTC, whole seconds."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Stamps have whole seconds: the pods of a backlog share a few (9,000 objects read in
# a first snapshot, one parse each before).
@functools.lru_cache(maxsize=4096)
def stamped(stamp: str) -> datetime | None:
    """A time as an API server writes one, read; None where it is none."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def quantities(values: Any, where: str, caps: bool = False, held: bool = False) -> dict[str, int]:
    """``caps``: the values are upper limits, and one above any machine's amount (how
    some write "unlimited") limits nothing: left out. ``held``: the values are what a
    node has, and bytes above the most any pod may ask (MAX_QUANTITY, 0.9 PiB: a 2 PiB
    filesystem under the kubelet as ephemeral-storage) hold any pod: read as that most.
    Refused, such a node was out of service. Other amounts that large (a million cores)
    no machine has: refused."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise BadObject(f"{where} must be a map of quantities")
    read = {}
    for name, q in values.items():
        try:
            amount = parse(str(name), q)
        except QuantityTooLarge as e:
            if caps:
                continue
            if held and model_unit(str(name)) > 1:
                read[str(name)] = MAX_QUANTITY
                continue
            raise BadObject(f"{where}: {e}") from None
        except QuantityError as e:
            raise BadObject(f"{where}: {e}") from None
        if held and model_unit(str(name)) > 1:
            read[str(name)] = min(amount, MAX_QUANTITY)
        elif not caps or amount <= MAX_QUANTITY:
            read[str(name)] = amount
    return read


def int_field(value: Any, where: str, low: int, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadObject(f"{where} must be an integer >= {low}, got {json.dumps(value)}")
    return value


def listed(value: Any) -> list[Any]:
    """A list field as a list; any other value (one a conforming API server would
    refuse: a fake's, a manifest's) as an empty one."""
    return value if isinstance(value, list) else []


def mappings(items: Any) -> list[Mapping[str, Any]]:
    """The mappings of a list field (``listed``), the rest left out."""
    return [i for i in listed(items) if isinstance(i, Mapping)]
