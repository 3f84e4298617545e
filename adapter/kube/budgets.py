"""PodDisruptionBudgets, as preemption reads them: which pods one covers.

gangsat evicts a victim's pods one by one through the Eviction API, which honours the
budgets: one that lets some of a gang's evictions through and refuses the rest (a
``maxUnavailable: 1`` over a gang of four) would leave that gang running below
minMember, the partial gang gang scheduling exists to prevent. So a gang with a bound
pod any budget covers is no victim at all (``Gang.preemptible`` false): stricter than
counting each budget's allowed disruptions, and never partial.

Selectors as policy/v1 reads them: an empty selector covers every pod of the budget's
namespace, a missing one none; ``matchLabels`` and ``matchExpressions`` (In, NotIn,
Exists, DoesNotExist) all hold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]


def _holds(requirement: Any, labels: Mapping[str, str]) -> bool:
    if not isinstance(requirement, Mapping):
        return False
    key, op = str(requirement.get("key")), requirement.get("operator")
    values = requirement.get("values") or []
    if not isinstance(values, list):
        return False  # the API server admits only a list: a hand-written object's mistake
    match op:
        case "In":
            return key in labels and labels[key] in values
        case "NotIn":
            return key not in labels or labels[key] not in values
        case "Exists":
            return key in labels
        case "DoesNotExist":
            return key not in labels
    return False  # an operator the API server would have refused: covers nothing


def selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether a budget's ``spec.selector`` selects a pod with ``labels``."""
    if not isinstance(selector, Mapping):
        return False
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(wanted, Mapping) or not isinstance(expressions, list):
        return False
    return all(labels.get(k) == v for k, v in wanted.items()) and all(
        _holds(e, labels) for e in expressions
    )


class Budgets:
    """The budgets of a snapshot, by namespace."""

    def __init__(self, budgets: Iterable[Obj]) -> None:
        self._by_namespace: dict[str, list[Any]] = defaultdict(list)
        for budget in budgets:
            meta = budget.get("metadata") or {}
            spec = budget.get("spec") or {}
            if isinstance(meta, Mapping) and isinstance(spec, Mapping):
                self._by_namespace[str(meta.get("namespace") or "default")].append(
                    spec.get("selector")
                )

    def __bool__(self) -> bool:
        return bool(self._by_namespace)

    def cover(self, pod: Obj) -> bool:
        """Whether any budget of the pod's namespace selects it."""
        meta = pod.get("metadata") or {}
        selectors = self._by_namespace.get(str(meta.get("namespace") or "default"))
        if not selectors:
            return False
        labels = meta.get("labels") or {}
        if not isinstance(labels, Mapping):
            return False
        return any(selects(selector, labels) for selector in selectors)
