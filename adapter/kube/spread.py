"""Topology spread constraints kube-scheduler's PodTopologySpread filter checks
(``whenUnsatisfiable: DoNotSchedule``): a pod goes to a node when the pods its constraint
counts in the node's domain (its ``labelSelector``, with ``matchLabelKeys``, in its
namespace), with it if it matches, are at most ``maxSkew`` above the fewest in any
eligible domain. Training jobs ask it to spread their workers over nodes.

On a topology key where each node is a domain of its own (``kubernetes.io/hostname``),
read per pending pod (``keep_spread``) as a room per node:

- the fewest (``m``) is taken over the nodes with the key that pass the pod's node
  selector and required node affinity (unless ``nodeAffinityPolicy: Ignore``), taints
  not read, and as 0 where a node's labels are unknown (gangsat could not read it): never
  more than kube-scheduler's, whose eligible domains are some of those nodes; of the pods
  it surely counts: bound, neither finished nor being deleted (nor deleted by gangsat
  without the answer yet);
- a node with more than ``m`` of the pods it may count (those gangsat's deletes may yet
  leave in place too) is ruled out, and so is a node without the key, as the filter
  rules it out;
- on every other node, the pending pods the constraint selects, the pod among them, take
  at most ``maxSkew`` a node (``Pod.apart`` with ``solver.model.APART_EACH``; no group
  where they are no more than maxSkew, which limits nothing). A selector that selects
  nothing (null, or empty without ``matchLabelKeys``) counts nothing, as the filter
  reads it: the key alone is checked.

The counts only grow while a cycle's pods are placed (a pod whose ``m`` is above 0 does
not preempt: its victims could lower it; and the loop binds before it evicts for other
gangs), so the filter passes every pod so placed, in any order. What it gives up, at
worst a wait kube-scheduler would not make: a node with between ``m`` and
``m + maxSkew`` such pods is ruled out (with maxSkew 1, none is); a job of more pods than
its eligible nodes take at maxSkew each waits, where kube-scheduler fills each node and
starts a second round (16 workers over 8 free nodes at maxSkew 1); other pending pods
the constraint selects are kept within the room as well.

A constraint over a key whose domains span several nodes (zones) is read as a
``DomainSpread`` (``_Zones``): per domain of the nodes the filter counts in (with every
key of the pod's constraints, passing its node affinity unless Ignore, tolerated with
``nodeTaintsPolicy: Honor``), the pods it surely counts and how many more it may; the
fewest is read as 0 with fewer domains than ``minDomains``, or an unread node. Each
carrier holds the spread it read, and the other pending pods the constraint counts hold
it as counted only; ``solver.zone_spread`` shares them out over the domains. A carrier
its own selector does not select is refused (its own placement would count where the
filter counts none). ``ScheduleAnyway`` constraints are preferences, which gangsat does
not score.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapter.kube.anti_affinity import one_node_domains, rule_of
from adapter.kube.fields import LEAVING, BadObject, Obj, finished, int_field
from adapter.kube.pod_terms import (
    NOT_SCHEDULED,
    Selected,
    Term,
    domains_of,
    frozen,
    namespace_of,
    read_term,
    selector_problem,
    with_label_keys,
)
from adapter.kube.reading import Finding
from solver.apart import joined
from solver.model import APART_EACH, Node, Pod, apart_room
from solver.predicates import (
    SPREAD_CONFLICT,
    SPREAD_NO_LABEL,
    held_to,
    node_affinity_reason,
    untolerated_taint,
)
from solver.scheduling_terms import DomainSpread, NodeRule, NodeSelectorRequirement

SCHEDULE_ANYWAY = "ScheduleAnyway"


@dataclass(frozen=True)
class _Spread:
    """One constraint, as read (``_read``)."""

    term: Term | None  # the pods it counts; None: none (its selector selects nothing)
    key: str
    skew: int
    min_domains: int | None  # the fewest is 0 while fewer domains count
    honours_affinity: bool  # nodeAffinityPolicy (Honor unless Ignore)
    honours_taints: bool  # nodeTaintsPolicy (Ignore unless Honor)
    selects_itself: bool  # the pod is among those it counts


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
    surely = Selected([(o, node) for o, node in bound if _counted(o, surely=True)])
    maybe = Selected([(o, node) for o, node in bound if _counted(o, surely=False)])
    fewest_of = _Fewest(nodes)
    one_node = one_node_domains(nodes)
    members: dict[str, set[str]] = {}  # group -> the pods in its room
    # Made once per set of constraints (and node affinity) a job's pods share, their
    # rules then hashed once (per pod, 5,600 pods' rules took 0.4 s), and per group (its
    # selected pods added once: per worker, a 4,000-worker job's was a pass over all).
    Made = tuple[tuple[NodeRule, ...], bool, list[str], list[tuple[DomainSpread, Term]]]
    made: dict[tuple[object, ...], Made] = {}
    over_zones = _Zones(nodes, fewest_of.unread, surely, maybe)

    def rules_of(reads: tuple[_Spread, ...], pod: Pod) -> Made:
        labelled: list[NodeSelectorRequirement] = []
        uncrowded: list[NodeSelectorRequirement] = []
        anchored = False  # whether a fewest above 0 lets it onto a node
        groups: list[tuple[str, Term]] = []
        zones: list[tuple[DomainSpread, Term]] = []
        for s in reads:
            labelled.append(NodeSelectorRequirement(key=s.key, operator="Exists"))
            if s.term is None:
                continue
            if not one_node(s.key):
                if not s.selects_itself:
                    raise BadObject(
                        "asks for a DoNotSchedule topologySpreadConstraint over "
                        f"{s.key} whose labelSelector does not select the pod itself, "
                        f"{NOT_SCHEDULED}"
                    )
                zone = over_zones(s, pod, tuple(sorted({r.key for r in reads})))
                anchored = anchored or (
                    not zone.fewest_zero and min((n for _, n in zone.counted), default=0) > 0
                )
                zones.append((zone, s.term))
                continue
            fewest = 0
            if s.min_domains is None:  # (with minDomains, taken as 0 over nodes)
                fewest = fewest_of(s.key, Counter(surely(s.term)), pod, s.honours_affinity)
            anchored = anchored or fewest > 0
            counts = Counter(maybe(s.term))
            crowded = domains_of(s.key, [n for n, c in counts.items() if c > fewest], nodes)
            if crowded:
                values = tuple(sorted(crowded))
                uncrowded.append(
                    NodeSelectorRequirement(key=s.key, operator="NotIn", values=values)
                )
            groups.append((f"{s.term.group()}{APART_EACH}{s.skew}", s.term))
        rules = [
            (tuple(dict.fromkeys(labelled)), SPREAD_NO_LABEL),
            (tuple(uncrowded), SPREAD_CONFLICT),
        ]
        for group, term in groups:  # (once every constraint of the pod is read)
            if group not in members:
                members[group] = set(in_cycle(term))
        rules_made = tuple(rule_of(*r) for r in rules if r[0])
        return rules_made, anchored, [g for g, _ in groups], zones

    # Per group over zones, the spread each carrier read, and the pending pods it counts.
    spread_over: dict[str, tuple[dict[str, DomainSpread], list[str]]] = {}
    for name, (o, found) in carriers.items():
        try:
            reads = tuple(_read(o, constraint) for constraint in found)
            spec = o.get("spec") or {}
            affinity = (spec.get("affinity") or {}).get("nodeAffinity")
            key = (reads, frozen(spec.get("nodeSelector")), frozen(affinity))
            if key not in made:
                made[key] = rules_of(reads, pods[name])
        except BadObject as e:
            gang = pods.pop(name).gang
            findings.append(Finding(kind="Pod", name=name, message=str(e), gang=gang))
            continue
        rules, anchored, groups, zones = made[key]
        pod = held_to(pods[name], rules)
        pods[name] = pod.model_copy(update={"may_preempt": False}) if anchored else pod
        for group in groups:
            members[group].add(name)
        for zone, term in zones:
            if zone.group not in spread_over:
                spread_over[zone.group] = ({}, in_cycle(term))
            spread_over[zone.group][0][name] = zone
    for group, names in members.items():
        kept = names & pods.keys()
        if len(kept) <= apart_room(group):
            continue  # no node can take more of them than maxSkew: a room limits nothing
        for p in kept:
            pods[p] = joined(pods[p], group)
    for carrying, selected in spread_over.values():
        _share_spreads(pods, carrying, selected)


def _share_spreads(
    pods: dict[str, Pod], carrying: Mapping[str, DomainSpread], selected: list[str]
) -> None:
    """A group over zones' spreads: to each carrier the one it read, and to the other
    pending pods the group counts, of any gang, the first carrier's, as counted only
    (``solver.zone_spread`` schedules them after the carriers, or holds them a cycle)."""
    carriers = sorted(p for p in carrying if p in pods)
    if not carriers:
        return
    only = carrying[carriers[0]].model_copy(update={"carried": False})
    for p in carriers:
        pods[p] = pods[p].model_copy(update={"spreads": (*pods[p].spreads, carrying[p])})
    for p in sorted(set(selected) - set(carrying)):
        if p in pods:
            pods[p] = pods[p].model_copy(update={"spreads": (*pods[p].spreads, only)})


def _constraints(pod: Obj) -> list[Any]:
    """A pod's topology spread constraints the filter checks (any but ScheduleAnyway:
    a value a later API adds is read as the strict one); a field or item of another shape
    than the API's is kept, for ``_read`` to refuse (skipped, its gang went onto one node)."""
    spec = pod.get("spec")
    found = spec.get("topologySpreadConstraints") if isinstance(spec, Mapping) else None
    if found is None:
        return []
    return [
        c
        for c in (found if isinstance(found, list) else [found])
        if not isinstance(c, Mapping) or c.get("whenUnsatisfiable") != SCHEDULE_ANYWAY
    ]


def _read(pod: Obj, constraint: Any) -> _Spread:
    """A constraint as the filter reads it: its selector with ``matchLabelKeys``' values
    of the pod's labels, in the pod's namespace. One the API server would refuse is a
    ``BadObject`` (read otherwise, it might count fewer pods than kube-scheduler)."""
    if not isinstance(constraint, Mapping):
        raise BadObject(f"has a topologySpreadConstraint that is no mapping, {NOT_SCHEDULED}")
    key = constraint.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise BadObject(f"has a topologySpreadConstraint without a topologyKey, {NOT_SCHEDULED}")
    skew = int_field(constraint.get("maxSkew"), "topologySpreadConstraint maxSkew", 1)
    selector = constraint.get("labelSelector")
    keys = constraint.get("matchLabelKeys")
    labels = (pod.get("metadata") or {}).get("labels") or {}
    labels = labels if isinstance(labels, Mapping) else {}
    why = None if selector is None else selector_problem(selector)
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        why = f"matchLabelKeys {keys!r} is not a list of label keys"
    elif keys and selector is None:
        why = "matchLabelKeys without a labelSelector"
    elif keys and any(k in labels and not isinstance(labels[k], str) for k in keys):
        why = "a label matchLabelKeys names is not a string"
    if why is not None:
        raise BadObject(f"has a topologySpreadConstraint the API server would refuse: {why}")
    # Since 1.34 kube-apiserver merges them into a pod it stores (before, the API forbade
    # a key in both, and kube-scheduler merged them): a key the selector names is merged
    # already, with the labels the pod had then (merged again with its labels now, the
    # selector could select nothing).
    named = set((selector or {}).get("matchLabels") or ())
    named |= {e["key"] for e in (selector or {}).get("matchExpressions") or ()}
    selector = with_label_keys(selector, labels, [k for k in keys or () if k not in named])
    counts = selector is not None and bool(
        selector.get("matchLabels") or selector.get("matchExpressions")
    )
    term = read_term(frozenset({namespace_of(pod)}), selector, key) if counts else None
    return _Spread(
        term=term,
        key=key,
        skew=skew,
        min_domains=_min_domains(constraint.get("minDomains")),
        honours_affinity=constraint.get("nodeAffinityPolicy") != "Ignore",
        honours_taints=constraint.get("nodeTaintsPolicy") == "Honor",
        selects_itself=term is not None and term.selects(namespace_of(pod), labels),
    )


def _counted(pod: Obj, surely: bool) -> bool:
    """Whether the filter counts a bound pod (neither finished nor being deleted), where
    gangsat's own delete sent without an answer yet counts as deleted, or, not ``surely``,
    as not."""
    if finished(pod.get("status")) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return not (surely and pod.get(LEAVING))


class _Fewest:
    """The fewest pods a constraint surely counts on a node it may count (see the
    module), over ``nodes``: of a node selector's label, the nodes with it first."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        self.nodes = nodes
        # A node whose object gangsat could not read (``unusable.out_of_service``: no
        # labels, not ready) may be one kube-scheduler counts, with none of the pods.
        self.unread = any(not node.labels and not node.ready for node in nodes.values())
        self._by_label: dict[tuple[str, str], list[str]] | None = None

    def __call__(self, key: str, counts: Mapping[str, int], pod: Pod, honours: bool) -> int:
        if self.unread:
            return 0
        candidates: Iterable[str] = self.nodes
        if honours and pod.node_selector:
            if self._by_label is None:
                self._by_label = defaultdict(list)
                for name, node in self.nodes.items():
                    for label in node.labels.items():
                        self._by_label[label].append(name)
            rows = [self._by_label.get(label, []) for label in pod.node_selector.items()]
            shortest: list[str] = min(rows, key=len)
            candidates = shortest

        def counted(name: str) -> bool:
            node = self.nodes[name]
            return key in node.labels and not (honours and node_affinity_reason(pod, node))

        if any(name not in counts and counted(name) for name in candidates):
            return 0
        return min(
            (n for name, n in counts.items() if name in self.nodes and counted(name)), default=0
        )


class _Zones:
    """A constraint over a key whose domains span several nodes, read for a pod as a
    ``DomainSpread``: per domain of the nodes the filter counts in (with every key of the
    pod's constraints, passing its node selector and required affinity unless
    ``nodeAffinityPolicy: Ignore``, and with ``nodeTaintsPolicy: Honor`` tolerated), the
    pods it surely counts there, and how many more it may count. Those nodes are worked
    out once per placement shape and keys."""

    def __init__(
        self, nodes: Mapping[str, Node], unread: bool, surely: Selected, maybe: Selected
    ) -> None:
        self.nodes, self.unread, self.surely, self.maybe = nodes, unread, surely, maybe
        self._in: dict[tuple[object, ...], dict[str, str]] = {}  # per shape, node -> domain

    def __call__(self, s: _Spread, pod: Pod, keys: tuple[str, ...]) -> DomainSpread:
        assert s.term is not None
        tolerations = pod.tolerations if s.honours_taints else ()
        shape: tuple[object, ...] = (keys, s.key, s.honours_affinity, s.honours_taints)
        shape += (frozen(pod.node_selector), pod.affinity, tolerations)
        if (domain_of := self._in.get(shape)) is None:
            domain_of = self._in[shape] = {
                name: node.labels[s.key]
                for name, node in self.nodes.items()
                if all(k in node.labels for k in keys)
                and not (s.honours_affinity and node_affinity_reason(pod, node))
                and not (s.honours_taints and untolerated_taint(pod, node))
            }
        counted = dict.fromkeys(domain_of.values(), 0)
        extra: Counter[str] = Counter()
        for name in self.surely(s.term):
            if (domain := domain_of.get(name)) is not None:
                counted[domain] += 1
        for name in self.maybe(s.term):
            if (domain := domain_of.get(name)) is not None:
                extra[domain] += 1
        return DomainSpread(
            group=f"{s.term.group()}{APART_EACH}{s.skew}",
            key=s.key,
            max_skew=s.skew,
            counted=tuple(sorted(counted.items())),
            extra=tuple(sorted((d, n - counted[d]) for d, n in extra.items() if n > counted[d])),
            fewest_zero=self.unread or (s.min_domains is not None and len(counted) < s.min_domains),
        )


def _min_domains(value: Any) -> int | None:
    """``minDomains`` as the API admits it (an integer of at least 1, with DoNotSchedule),
    else a ``BadObject``; None where unset."""
    if value is None:
        return None
    return int_field(value, "topologySpreadConstraint minDomains", 1)
