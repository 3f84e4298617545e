"""Required pod anti-affinity, both ways, as kube-scheduler's InterPodAffinity filter
checks it: a pod goes to no node whose topology domain (the nodes sharing its value of
the term's ``topologyKey``) runs a pod its term selects, nor one where a pod whose term
selects it runs.

- A bound pod's terms keep the pending pods they select off its domain
  (``BoundAntiAffinity``): held to ``NotIn`` the domain's label value.
- A pending pod's own terms (``keep_apart``), against the bound pods they select: held
  off those pods' domains the same way, whatever the topology key.
- Against the pending pods they select (a gang's workers asking one node each, the common
  case): where the topology key makes each node a domain of its own (every node with the
  label has a value no other node has, as ``kubernetes.io/hostname``), the pod and the
  pending pods the term selects are kept apart (``Pod.apart``: at most one of them per
  node, ``solver.apart``). Those of them that do not carry the term are then kept apart
  from each other too, and so are the pods of one term that does not select its own,
  which kube-scheduler would allow: never a placement it refuses, at worst a wait it
  would not make. A node without the label is in no domain, where kube-scheduler lets
  such pods share it; kept apart there too, for the same reason.
- A term that selects pending pods but not its own pod, of a pod whose required pod
  affinity keeps it with others on the term's key, keeps jobs each kept in a domain of
  that key out of each other's (``pod_affinity``: JobSet's exclusive placement, a job
  per zone, node pool or node). Any other term over a zone (domains of several nodes)
  that selects pending pods is not checked: its pod is not scheduled, with an
  ``InvalidSpec`` finding that says why, and its gang waits.

How a term is read (which pods, which domains): ``pod_terms``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache

from adapter.kube.fields import Obj
from adapter.kube.pod_terms import AFFINITY, NOT_SCHEDULED, Selected, Term, domains_of, terms_of
from adapter.kube.reading import Finding
from solver.model import Node, Pod
from solver.predicates import APART_CONFLICT, EXISTING_ANTI_AFFINITY, held_to
from solver.scheduling_terms import NodeRule, NodeSelectorRequirement, NodeSelectorTerm


@dataclass
class BoundAntiAffinity:
    """The bound pods of a snapshot (``add``): their required anti-affinity terms, as the
    nodes they keep the pods they select off, and the pods themselves, for the terms of
    pending pods (``keep_apart``)."""

    # Each term once, with the nodes of the pods that have it (a gang's workers share
    # one): read per pending pod, a cycle of 1,600 bound and 1,600 pending such workers
    # took 7.5 s.
    terms: dict[Term, set[str]] = field(default_factory=dict)
    bound: list[tuple[Obj, str]] = field(default_factory=list)  # (pod, its node)

    def add(self, pod: Obj, spec: Obj, node: str) -> None:
        """Read a bound pod (most pods have no affinity: one lookup, and no check against
        an abstract type, which costs more than it)."""
        self.bound.append((pod, node))
        affinity = spec.get("affinity")
        if affinity is None or not isinstance(affinity, Mapping):
            return
        for term in terms_of(pod, spec):
            self.terms.setdefault(term, set()).add(node)


def _not_in(values: Mapping[str, set[str]]) -> tuple[NodeSelectorRequirement, ...]:
    return tuple(
        NodeSelectorRequirement(key=key, operator="NotIn", values=tuple(sorted(vals)))
        for key, vals in sorted(values.items())
    )


def kept_off(pod: Pod, requirements: tuple[NodeSelectorRequirement, ...], reason: str) -> Pod:
    """``pod`` held to ``requirements`` besides its own affinity, wherever it goes; a node
    that fails them is counted under ``reason``."""
    return held_to(pod, (rule_of(requirements, reason),)) if requirements else pod


def rule_of(requirements: tuple[NodeSelectorRequirement, ...], reason: str) -> NodeRule:
    """The rule a node must meet all ``requirements`` of, counted under ``reason``."""
    return NodeRule(reason=reason, terms=(NodeSelectorTerm(match_expressions=requirements),))


def keep_apart(
    pending: Iterable[tuple[Obj, str]],
    bound: BoundAntiAffinity,
    pods: dict[str, Pod],
    nodes: Mapping[str, Node],
    findings: list[Finding],
) -> list[tuple[str, Term, list[str]]]:
    """Read the required anti-affinity of the ``pending`` pods (object, key) still in
    ``pods``, both ways, into their ``node_rules`` and ``apart`` (see the module); a pod
    whose term cannot be checked is taken out of ``pods`` with a finding. Returns the
    terms that select pending pods but not their own, of pods whose pod affinity keeps
    them with others on the term's key (pod, term, the pods it selects):
    ``pod_affinity.keep_together`` reads them between jobs each kept in a domain."""
    pending = [(o, name) for o, name in pending if name in pods]
    # Per pod, per topology key, the domains kept off: by bound pods' terms (theirs), and
    # by its own terms (mine), each counted under kube-scheduler's words for it.
    theirs: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    mine: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    in_cycle = Selected(pending)
    for term, node_names in bound.terms.items():
        if domains := domains_of(term.key, node_names, nodes):
            for name in in_cycle(term):
                theirs[name][term.key] |= domains
    carriers = {name: terms for o, name in pending if (terms := terms_of(o, o.get("spec")))}
    objects = dict((name, o) for o, name in pending)

    @cache
    def kept_with(name: str) -> frozenset[str]:
        # The keys a pod's required pod affinity keeps it with pods on.
        o = objects[name]
        return frozenset(t.key for t in terms_of(o, o.get("spec"), AFFINITY))

    refused: dict[str, str] = {}
    apart: dict[str, set[str]] = defaultdict(set)
    zone_wide: list[tuple[str, Term, list[str]]] = []
    if carriers:
        running = Selected(bound.bound)
        one_node = one_node_domains(nodes)
        kept: dict[Term, set[str]] = {}  # terms that keep the pods they select apart
        held_off: dict[Term, set[str]] = {}  # the domains of the bound pods a term selects
        # Per term, the pending pods it selects, and whether their pod affinity keeps each
        # with others on its key.
        among: dict[Term, tuple[set[str], bool]] = {}
        for name, terms in carriers.items():
            for term in terms:
                if term not in held_off:
                    held_off[term] = domains_of(term.key, running(term), nodes)
                if held_off[term]:
                    mine[name][term.key] |= held_off[term]
                selected = in_cycle(term)
                if not selected or selected == [name]:
                    continue
                if term not in among:  # (each job's pods share its term: read once)
                    among[term] = (set(selected), all(term.key in kept_with(p) for p in selected))
                chosen, all_kept = among[term]
                if name not in chosen and all_kept and term.key in kept_with(name):
                    # Its job kept with its own on the key, away from other jobs' pods
                    # kept so too: a domain each (JobSet's exclusive placement).
                    zone_wide.append((name, term, selected))
                elif one_node(term.key):
                    # With what it selects, itself too where it does not select itself
                    # (then pods of that term are kept apart from each other as well).
                    kept.setdefault(term, {*selected}).add(name)
                else:
                    other = next(p for p in selected if p != name)
                    refused.setdefault(name, why_not(term, other))
        for term, together in kept.items():
            group = term.group()
            for p in together:
                apart[p].add(group)
    for name, why in refused.items():
        findings.append(Finding(kind="Pod", name=name, message=why, gang=pods.pop(name).gang))
    for name, groups in apart.items():
        if name in pods:
            pods[name] = pods[name].model_copy(update={"apart": tuple(sorted(groups))})
    for name in theirs.keys() | mine.keys():
        if name in pods:
            pod = kept_off(pods[name], _not_in(theirs.get(name, {})), EXISTING_ANTI_AFFINITY)
            pods[name] = kept_off(pod, _not_in(mine.get(name, {})), APART_CONFLICT)
    return zone_wide


def why_not(term: Term, other: str) -> str:
    """Why a pod whose term over a zone selects pending pods is not scheduled."""
    return (
        f"asks for required podAntiAffinity against pending pods ({other}) on topologyKey "
        f"{term.key}, whose domains span several nodes, {NOT_SCHEDULED}"
    )


def one_node_domains(nodes: Mapping[str, Node]) -> Callable[[str], bool]:
    """Whether a topology key makes each node a domain of its own: no two nodes share a
    value of it (nodes without it are in no domain)."""

    @cache
    def one_node(key: str) -> bool:
        values = [v for n in nodes.values() if (v := n.labels.get(key)) is not None]
        return len(values) == len(set(values))

    return one_node
