"""Node predicates: may this pod run on this node, and if not, why (in Kubernetes' words).

Placement predicates (selector, affinity, taints, cordon) depend only on the pod's
``placement_key`` and the node, so ``Feasibility`` memoises them on that pair: the pods
of a gang share one computation per node (and ``problem.prepare`` asks once per distinct
view of a node, ``equivalence.node_view``).
Resource fit is separate (``insufficient``) because it depends on the free capacity
that changes as a decision is built.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from solver.model import APART_EACH, APART_PORT, APART_PREFIX, PODS, Node, Pod
from solver.scheduling_terms import (
    NODE_NAME_FIELD,
    NodeRule,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
    int64_of,
)

UNSCHEDULABLE = "node(s) were unschedulable"
# kube-scheduler's NodeUnschedulable lets a pod tolerating this taint onto a cordoned node
# (DaemonSets' pods do), whether or not the node carries the taint yet.
CORDONED = Taint(key="node.kubernetes.io/unschedulable", effect=TaintEffect.NO_SCHEDULE)
SELECTOR_MISMATCH = "node(s) didn't match node selector"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity"
TOO_MANY_PODS = "Too many pods"
# kube-scheduler's words for a node a pod's volumes, or a bound pod's anti-affinity, rule
# out (``NodeRule``).
VOLUME_CONFLICT = "node(s) had volume node affinity conflict"
NO_VOLUME_TO_BIND = "node(s) didn't find available persistent volumes to bind"
NO_VOLUME_ZONE = "node(s) had no available volume zone"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
# ... and for a node that another pod kept apart from this one takes (``Pod.apart``).
APART_CONFLICT = "node(s) didn't match pod anti-affinity rules"
# ... and for a node outside the domain a pod's required pod affinity holds it to.
POD_AFFINITY_MISMATCH = "node(s) didn't match pod affinity rules"
# ... and for a node a pod's topology spread rules out: it has no domain of its key, or
# pods the spread counts run there or go there too (``Pod.apart``, ``apart_room``).
SPREAD_NO_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
SPREAD_CONFLICT = "node(s) didn't match pod topology spread constraints"
# ... and for a node where a pod holding the host port a pod asks for runs or goes.
PORTS_CONFLICT = "node(s) didn't have free ports for the requested pod ports"
# kube-scheduler's filters read these in this order (VolumeBinding, VolumeZone,
# PodTopologySpread, InterPodAffinity), and a node is counted under the first that fails
# it.
RULE_ORDER = {
    VOLUME_CONFLICT: 0,
    NO_VOLUME_TO_BIND: 0,
    NO_VOLUME_ZONE: 1,
    SPREAD_NO_LABEL: 2,
    SPREAD_CONFLICT: 2,
    EXISTING_ANTI_AFFINITY: 3,
    POD_AFFINITY_MISMATCH: 3,
}


def _requirement_holds(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    value = labels.get(req.key)
    match req.operator:
        case "In":
            return present and value in req.values
        case "NotIn":
            return not present or value not in req.values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt":
            # Kubernetes fails the requirement when the label is not an integer.
            label_int = int64_of(value) if value is not None else None
            bound = int64_of(req.values[0])
            if label_int is None or bound is None:
                return False
            return label_int > bound if req.operator == "Gt" else label_int < bound
    return False  # pragma: no cover - Literal exhausts the operators


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if not toleration.key:  # validated to be Exists: tolerates every key
        return True
    if toleration.key != taint.key:
        return False
    match toleration.operator:
        case "Exists":
            return True
        case "Equal":
            return toleration.value == taint.value
        case "Gt" | "Lt":
            # As kube-scheduler (component-helpers' compareNumericValues): the taint's
            # value above (Gt) or below (Lt) the toleration's, both canonical integers.
            mine, theirs = _canonical_int(toleration.value), _canonical_int(taint.value)
            if mine is None or theirs is None:
                return False
            return theirs > mine if toleration.operator == "Gt" else theirs < mine
    return False  # pragma: no cover - Literal exhausts the operators


_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")


def _canonical_int(text: str) -> int | None:
    """An int64 written as Kubernetes' IsDecimalInteger wants it for toleration values:
    no sign but a minus, no leading zero ("+5", "05" and "-0" are none), then ParseInt's
    64 bits. Stricter than a node affinity's Gt/Lt operand (``int64_of``)."""
    if not _CANONICAL_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def untolerated_taint(pod: Pod, node: Node) -> Taint | None:
    for taint in node.taints:
        if taint.effect == TaintEffect.PREFER_NO_SCHEDULE:
            continue  # a preference, not a predicate
        if not any(tolerates(t, taint) for t in pod.tolerations):
            return taint
    return None


def placement_reason(pod: Pod, node: Node) -> str | None:
    """Why ``pod`` may not use ``node`` regardless of free capacity; None if it may. A
    node failing several is counted under the first kube-scheduler's filters find, in
    their order: NodeUnschedulable, TaintToleration, NodeAffinity (selector, then
    affinity), and after NodeResourcesFit (not read here) the volumes' and the bound
    pods' rules (``RULE_ORDER``)."""
    if node.unschedulable and not any(tolerates(t, CORDONED) for t in pod.tolerations):
        return UNSCHEDULABLE
    taint = untolerated_taint(pod, node)
    if taint is not None:
        shown = f"{taint.key}: {taint.value}" if taint.value else taint.key
        return f"node(s) had untolerated taint {{{shown}}}"
    if (mismatch := node_affinity_reason(pod, node)) is not None:
        return mismatch
    for rule in pod.node_rules:
        if not any(term_holds(term, node) for term in rule.terms):
            return rule.reason
    return None


def node_affinity_reason(pod: Pod, node: Node) -> str | None:
    """Why ``node`` fails ``pod``'s node selector or required node affinity (NodeAffinity,
    which a kubelet checks too), if it does."""
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return SELECTOR_MISMATCH
    if pod.affinity and not any(term_holds(term, node) for term in pod.affinity):
        return AFFINITY_MISMATCH
    return None


def term_holds(term: NodeSelectorTerm, node: Node) -> bool:
    """Whether ``node`` meets every requirement of ``term``; an empty term matches no
    node, as in Kubernetes."""
    return (
        bool(term.match_expressions or term.match_fields)
        and all(_requirement_holds(req, node.labels) for req in term.match_expressions)
        and all(_requirement_holds(req, {NODE_NAME_FIELD: node.name}) for req in term.match_fields)
    )


def insufficient(demand: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """The resources ``demand`` lacks on a node with ``free`` left, in Kubernetes' words."""
    short = []
    for name, quantity in sorted(demand.items()):
        if quantity > free.get(name, 0):
            short.append(TOO_MANY_PODS if name == PODS else f"Insufficient {name}")
    return short


class Feasibility:
    """Memoised placement predicates over (pod placement key, node), for one snapshot.

    Nodes are keyed by name, unique in a snapshot: keying them by what the predicates
    read meant sorting every node's labels on every call (0.1 s per 1,000-node cycle),
    and on real clusters every node's labels differ anyway."""

    def __init__(self) -> None:
        # Per placement key, per node name: a placement key (selector, affinity terms,
        # tolerations, rules) is hashed once per lookup of many nodes, not once per node
        # (271 nodes seen alike by none of 374 keys: 0.88 million hashes of their terms,
        # a fifth of preparing the snapshot).
        self._memo: dict[tuple[object, ...], dict[str, str | None]] = {}

    def reason(
        self, pod: Pod, node: Node, placement: tuple[object, ...] | None = None
    ) -> str | None:
        """``placement``: ``pod.placement_key()``, where the caller asks of many nodes."""
        return self.reasons_of(pod, [node], placement)[0]

    def reasons_of(
        self, pod: Pod, nodes: Sequence[Node], placement: tuple[object, ...] | None = None
    ) -> list[str | None]:
        """``reason`` on each of ``nodes``."""
        key = pod.placement_key() if placement is None else placement
        memo = self._memo.get(key)
        if memo is None:
            memo = self._memo[key] = {}
        for node in nodes:
            if node.name not in memo:
                memo[node.name] = placement_reason(pod, node)
        return [memo[node.name] for node in nodes]

    def __len__(self) -> int:
        return sum(len(memo) for memo in self._memo.values())


def summarize(reasons: Counter[str], nodes_total: int, nodes_available: int = 0) -> str:
    """Kubernetes' FailedScheduling phrase: "0/4 nodes are available: 2 Insufficient cpu"."""
    parts = ", ".join(
        f"{count} {reason}"
        for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    head = f"{nodes_available}/{nodes_total} nodes are available"
    return f"{head}: {parts}" if parts else head


def held_to(pod: Pod, rules: Iterable[NodeRule]) -> Pod:
    """``pod`` held to ``rules`` as well, each once, in the order kube-scheduler's filters
    read them (``RULE_ORDER``), so that a node failing two is counted as it counts it."""
    merged = tuple(
        sorted(dict.fromkeys((*pod.node_rules, *rules)), key=lambda r: RULE_ORDER.get(r.reason, 4))
    )
    return pod if merged == pod.node_rules else pod.model_copy(update={"node_rules": merged})


def apart_reason(group: str) -> str:
    """kube-scheduler's words for a node without room for one more of a group kept apart
    (``Pod.apart``, or its column's name): a topology spread's, a host port's, or
    anti-affinity's."""
    if APART_EACH in group:
        return SPREAD_CONFLICT
    return (
        PORTS_CONFLICT
        if group.removeprefix(APART_PREFIX).startswith(APART_PORT)
        else APART_CONFLICT
    )
