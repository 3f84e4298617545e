"""What a pod requires of a node's labels and taints: node selector terms and tolerations,
as Kubernetes spells them (``solver.predicates`` reads them against nodes)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import model_validator

from solver.frozen import Frozen, Hashed


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(Frozen):
    key: str
    value: str = ""
    effect: TaintEffect


class Toleration(Hashed):
    """An empty ``key`` with operator Exists tolerates every taint; an empty effect, all
    effects. Gt and Lt (Kubernetes 1.35, feature gate TaintTolerationComparisonOperators)
    compare integers: the taint's value above (below) the toleration's; a value that is
    no integer, on either side, tolerates nothing."""

    key: str = ""
    operator: Literal["Equal", "Exists", "Gt", "Lt"] = "Equal"
    value: str = ""
    effect: TaintEffect | Literal[""] = ""

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists must not have a value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key must use operator Exists")
        return self


_INT64 = re.compile(r"[+-]?[0-9]+")


def int64_of(text: str) -> int | None:
    """``text`` as Kubernetes reads a Gt/Lt operand (Go's ParseInt, base 10, 64 bits);
    None where it reads none. Python's int() also takes "1_0", " 7", Arabic-Indic digits
    and numbers past 64 bits: a node label Kubernetes never matches would match here."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


class NodeSelectorRequirement(Hashed):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> NodeSelectorRequirement:
        op = self.operator
        if op in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {op} takes no values")
        # A Gt or Lt value that is no integer is admitted by the API server (it is a valid
        # label value), and kube-scheduler's node affinity reads the requirement as
        # matching no node; refusing the pod made its gang wait forever where another
        # term of the pod matched.
        if op in ("Gt", "Lt") and len(self.values) != 1:
            raise ValueError(f"operator {op} takes exactly one value")
        return self


# The one node field a node selector term may read (``matchFields``): the node's name.
NODE_NAME_FIELD = "metadata.name"


class NodeSelectorTerm(Hashed):
    """Requirements that must all hold; a pod's terms are ORed, as in Kubernetes.
    ``match_fields`` read node fields (only ``metadata.name``: the DaemonSet controller
    pins each of its pods to a node so)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()
