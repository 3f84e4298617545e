"""What a pod requires of a node's labels and taints: node selector terms and tolerations,
as Kubernetes spells them (``solver.predicates`` reads them against nodes)."""

from __future__ import annotations

import re
from enum import StrEnum
from itertools import product
from typing import Literal

from pydantic import Field, model_validator

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


class NodeRule(Hashed):
    """Node affinity a pod is held to besides its own, with the reason kube-scheduler
    gives for a node that fails it: what a bound volume asks of a node ("node(s) had
    volume node affinity conflict", or of its zone labels "node(s) had no available
    volume zone"), or a bound pod's anti-affinity ("node(s) didn't satisfy existing pods
    anti-affinity rules"). Folded into the pod's own affinity, a
    pod kept off by either was told its own node affinity did not match. Its terms are
    ORed, as a node affinity's; a pod's rules all hold."""

    reason: str = Field(min_length=1)
    terms: tuple[NodeSelectorTerm, ...] = Field(min_length=1)


def both(
    ours: tuple[NodeSelectorTerm, ...], theirs: tuple[NodeSelectorTerm, ...]
) -> tuple[NodeSelectorTerm, ...]:
    """Terms that hold where one of ``ours`` and one of ``theirs`` hold (``ours`` empty:
    no affinity, any node): a pod's affinity and its ``NodeRule``s written as one node
    affinity. A term without requirements matches no node, and stays one."""
    if not ours:
        return theirs
    return tuple(dict.fromkeys(_and(a, b) for a, b in product(ours, theirs)))


def _and(a: NodeSelectorTerm, b: NodeSelectorTerm) -> NodeSelectorTerm:
    if not (a.match_expressions or a.match_fields) or not (b.match_expressions or b.match_fields):
        return a if not (a.match_expressions or a.match_fields) else b
    return NodeSelectorTerm(
        match_expressions=tuple(dict.fromkeys((*a.match_expressions, *b.match_expressions))),
        match_fields=tuple(dict.fromkeys((*a.match_fields, *b.match_fields))),
    )


class DomainSpread(Hashed):
    """A DoNotSchedule topology spread over a key whose domains span several nodes (a
    zone), as read for one pod (``solver.zone_spread``): the pending pods sharing
    ``group`` are those it counts, ``carried`` by those that carry it. ``counted`` is, per
    domain of the nodes the filter counts in (for a carrier: with every key of its
    constraints, passing its node selector and required affinity unless
    ``nodeAffinityPolicy: Ignore``), how many bound pods it surely counts there;
    ``extra``, per domain, how many more it may count (bound pods gangsat deleted without
    an answer yet). ``fewest_zero``: the fewest over the domains is read as 0 (fewer
    domains than ``minDomains``, or a node whose labels are unknown)."""

    group: str = Field(min_length=1)
    key: str = Field(min_length=1)
    max_skew: int = Field(ge=1)
    counted: tuple[tuple[str, int], ...] = ()
    extra: tuple[tuple[str, int], ...] = ()
    fewest_zero: bool = False
    carried: bool = True
