"""Topology spread constraints kube-scheduler's PodTopologySpread filter checks
(``whenUnsatisfiable: DoNotSchedule``): a pod goes to a node when the pods its constraint
counts in the node's domain (its ``labelSelector``, with ``matchLabelKeys``, in its
namespace), with it if it matches, are at most ``maxSkew`` above the fewest in any
eligible domain. Training jobs ask it to spread their workers over nodes.

On a topology key where each node is a domain of its own (``kubernetes.io/hostname``),
read per pending pod (``keep_spread``) as a room per node:

- the fewest (``m``) is taken over every node, a node without the key or the pods as 0:
  never more than kube-scheduler's, whose eligible domains are some of those nodes; of
  the pods it counts: bound, neither finished nor being deleted;
- a node running more than ``m`` of the pods it counts is ruled out, and so is a node
  without the key, as the filter rules it out;
- on every other node, the pending pods the constraint selects, the pod among them, take
  at most ``maxSkew`` a node (``Pod.apart`` with ``solver.model.APART_EACH``).

The counts only grow while a cycle's pods are placed (a pod whose ``m`` is above 0 does
not preempt: its victims could lower it), so the filter passes every pod so placed, in
any order. What it gives up, at worst a wait kube-scheduler would not make: a node with
between ``m`` and ``m + maxSkew`` such pods is ruled out (with maxSkew 1, none is); a job
of more pods than its eligible nodes take at maxSkew each waits, where kube-scheduler
fills each node and starts a second round (16 workers over 8 free nodes at maxSkew 1);
other pending pods the constraint selects are kept within the room as well.

A constraint over a key whose domains span several nodes (zones) is not checked: its pod
is not scheduled, with an ``InvalidSpec`` finding, and its gang waits. ``ScheduleAnyway``
constraints are preferences, which gangsat does not score.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adapter.kube.anti_affinity import one_node_domains
from adapter.kube.fields import LEAVING, BadObject, Obj, finished, int_field, mappings
from adapter.kube.pod_terms import (
    NOT_SCHEDULED,
    Selected,
    Term,
    domains_of,
    namespace_of,
    read_term,
)
from adapter.kube.reading import Finding
from solver.model import APART_EACH, Node, Pod
from solver.predicates import SPREAD_CONFLICT, SPREAD_NO_LABEL, held_to
from solver.scheduling_terms import NodeRule, NodeSelectorRequirement, NodeSelectorTerm

SCHEDULE_ANYWAY = "ScheduleAnyway"


def keep_spread(
    pending: Iterable[tuple[Obj, str]],
    bound: Sequence[tuple[Obj, str]],
    pods: dict[str, Pod],
    nodes: Mapping[str, Node],
    findings: list[Finding],
) -> None:
    """Read the DoNotSchedule topology spread constraints of the ``pending`` pods (object,
    key) still in ``pods`` against the ``bound`` pods (object, node) and each other, into
    their ``node_rules``, ``apart`` and ``may_preempt`` (see the module); a pod whose
    constraint cannot be checked is taken out of ``pods`` with a finding."""
    pending = [(o, name) for o, name in pending if name in pods]
    carriers = {name: (o, found) for o, name in pending if (found := _constraints(o))}
    if not carriers:
        return
    in_cycle = Selected(pending)
    live = Selected([(o, node) for o, node in bound if _counted(o)])
    one_node = one_node_domains(nodes)
    members: dict[str, set[str]] = {}  # group -> the pods in its room
    # Made once per set of constraints a job's pods share (their rules then hashed once:
    # per pod, 5,600 pods' rules took 0.4 s) and per group (its selected pods added once:
    # per worker, a 4,000-worker job's was a pass over all 4,000 each).
    made: dict[tuple[tuple[Term, int, bool], ...], tuple[tuple[NodeRule, ...], bool, list[str]]]
    made = {}

    def rules_of(
        reads: tuple[tuple[Term, int, bool], ...],
    ) -> tuple[tuple[NodeRule, ...], bool, list[str]]:
        labelled: list[NodeSelectorRequirement] = []
        uncrowded: list[NodeSelectorRequirement] = []
        anchored = False  # whether a fewest above 0 lets it onto a node
        groups = []
        for term, skew, counts_fewest in reads:
            if not one_node(term.key):
                raise BadObject(
                    "asks for a DoNotSchedule topologySpreadConstraint on topologyKey "
                    f"{term.key}, whose domains span several nodes, {NOT_SCHEDULED}"
                )
            fewest, crowded = _room(term, counts_fewest, live, nodes)
            anchored = anchored or fewest > 0
            labelled.append(NodeSelectorRequirement(key=term.key, operator="Exists"))
            uncrowded += crowded
            groups.append((f"{term.group()}{APART_EACH}{skew}", term))
        rules = [
            (tuple(dict.fromkeys(labelled)), SPREAD_NO_LABEL),
            (tuple(uncrowded), SPREAD_CONFLICT),
        ]
        for group, term in groups:  # (once every constraint of the pod is read)
            if group not in members:
                members[group] = set(in_cycle(term))
        return tuple(_rule(*r) for r in rules if r[0]), anchored, [g for g, _ in groups]

    for name, (o, found) in carriers.items():
        try:
            reads = tuple(_read(o, constraint) for constraint in found)
            if reads not in made:
                made[reads] = rules_of(reads)
        except BadObject as e:
            gang = pods.pop(name).gang
            findings.append(Finding(kind="Pod", name=name, message=str(e), gang=gang))
            continue
        rules, anchored, groups = made[reads]
        pod = held_to(pods[name], rules)
        pods[name] = pod.model_copy(update={"may_preempt": False}) if anchored else pod
        for group in groups:
            members[group].add(name)
    for group, names in members.items():
        for p in names & pods.keys():
            pods[p] = pods[p].model_copy(update={"apart": tuple(sorted({*pods[p].apart, group}))})


def _rule(requirements: tuple[NodeSelectorRequirement, ...], reason: str) -> NodeRule:
    return NodeRule(reason=reason, terms=(NodeSelectorTerm(match_expressions=requirements),))


def _constraints(pod: Obj) -> list[Mapping[str, Any]]:
    """A pod's topology spread constraints the filter checks (any but ScheduleAnyway:
    a value a later API adds is read as the strict one)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return []
    return [
        c
        for c in mappings(spec.get("topologySpreadConstraints"))
        if c.get("whenUnsatisfiable") != SCHEDULE_ANYWAY
    ]


def _read(pod: Obj, constraint: Mapping[str, Any]) -> tuple[Term, int, bool]:
    """A constraint's term (its selector with ``matchLabelKeys``' values of the pod's
    labels, in its namespace), its maxSkew, and whether the fewest counts (with
    ``minDomains``, which reads it as 0 while too few domains have the key, it is taken
    as 0)."""
    key = constraint.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise BadObject(f"has a topologySpreadConstraint without a topologyKey, {NOT_SCHEDULED}")
    skew = int_field(constraint.get("maxSkew"), "topologySpreadConstraint maxSkew", 1)
    selector = constraint.get("labelSelector")
    keys = constraint.get("matchLabelKeys")
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if isinstance(keys, list) and keys and isinstance(selector, Mapping):
        more = [
            {"key": k, "operator": "In", "values": [labels[k]]}
            for k in keys
            if isinstance(k, str) and isinstance(labels, Mapping) and k in labels
        ]
        expressions = selector.get("matchExpressions") or []
        if more and isinstance(expressions, list):
            selector = {**selector, "matchExpressions": [*expressions, *more]}
    term = read_term(frozenset({namespace_of(pod)}), selector, key)
    return term, skew, constraint.get("minDomains") is None


def _counted(pod: Obj) -> bool:
    """Whether the filter counts a bound pod: neither finished nor being deleted."""
    leaving = pod.get(LEAVING) or (pod.get("metadata") or {}).get("deletionTimestamp")
    return not leaving and not finished(pod.get("status"))


def _room(
    term: Term, counts_fewest: bool, live: Selected, nodes: Mapping[str, Node]
) -> tuple[int, tuple[NodeSelectorRequirement, ...]]:
    """The fewest pods ``term`` counts on a node (see the module), and the rule off the
    domains of the nodes with more (``live``: the bound pods it may count, answering their
    nodes), if any."""
    fewest = 0
    counts = Counter(live(term))
    if counts_fewest and len(counts) >= len(nodes):  # (else a node has none)
        fewest = min(
            counts.get(n, 0) if term.key in node.labels else 0 for n, node in nodes.items()
        )
    crowded = domains_of(term.key, [n for n, count in counts.items() if count > fewest], nodes)
    if not crowded:
        return fewest, ()
    return fewest, (
        NodeSelectorRequirement(key=term.key, operator="NotIn", values=tuple(sorted(crowded))),
    )
