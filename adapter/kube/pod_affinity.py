"""Required pod affinity, as kube-scheduler's InterPodAffinity filter checks it: a pod
goes to a node whose topology domain (the nodes sharing its value of the term's
``topologyKey``) runs a pod each of its terms selects. A training job asks it to keep its
workers in one zone, rack or block (a term selecting its own job's pods), or to run
beside a service (a term selecting the service's pods).

Read per pending pod (``keep_together``), its terms together, as the filter reads them:

- Every term selects bound pods (on nodes with the key): the pod is held to their
  domains, each term's (a ``NodeRule`` ``In`` their values). It does not preempt: kube-
  scheduler's preemption checks the filter again without the victims it picks, so never
  evicts the pods a term needs; gangsat's victims are chosen without reading the terms.
- No term selects a bound pod, the pod matches every term of its own and each selects
  pending pods (its own job's): the first of a series, which kube-scheduler places on any
  node with the keys and its mates after it, in its domains. The pod and the pending pods
  each term selects are kept together (``Pod.together``: one domain of that term's key,
  chosen by ``solver.together``); a gang bound at once ends where they would. A term that
  does not select its own pod (workers asking for their launcher's domain) is read so
  too when every pending pod it selects is of the pod's own gang, bound with it.
- Otherwise (a term selecting no pod at all, or selecting bound pods while another
  selects none, or only pods outside its gang) the filter refuses the pod until a pod its
  terms select runs: it is held to no node, and waits, as kube-scheduler leaves it.

Jobs each kept in a domain and kept from each other by an anti-affinity term on the same
key (JobSet's exclusive placement; the terms ``anti_affinity.keep_apart`` hands over) are
given ``exclusive_of``: the groups whose domains theirs may not share.

Pods a term selects without carrying it (an MPI launcher) go to the workers' domain with
them: at worst a wait kube-scheduler would not make. A gang whose minMember is below its
size may be placed without the pods its workers' terms select (a launcher): then placed
where kube-scheduler would refuse until the launcher runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from adapter.kube.anti_affinity import kept_off, why_not
from adapter.kube.fields import Obj
from adapter.kube.pod_terms import AFFINITY, Selected, Term, domains_of, terms_of
from adapter.kube.reading import Finding
from solver.model import Node, Pod, topology_key
from solver.predicates import APART_CONFLICT, held_to
from solver.scheduling_terms import NodeSelectorRequirement
from solver.together import held_in


def keep_together(
    pending: Iterable[tuple[Obj, str]],
    bound: Sequence[tuple[Obj, str]],
    pods: dict[str, Pod],
    nodes: Mapping[str, Node],
    zone_wide: Sequence[tuple[str, Term, list[str]]],
    findings: list[Finding],
) -> None:
    """Read the required pod affinity of the ``pending`` pods (object, key) still in
    ``pods`` against the ``bound`` pods (object, node) and each other, into their
    ``node_rules``, ``together`` and ``may_preempt`` (see the module); then the
    anti-affinity terms ``keep_apart`` hands over (``zone_wide``: pod, term, the
    pending pods it selects) into ``exclusive_of``, or a finding."""
    pending = [(o, name) for o, name in pending if name in pods]
    carriers = {
        name: terms for o, name in pending if (terms := terms_of(o, o.get("spec"), AFFINITY))
    }
    if not carriers:
        return
    in_cycle, running = Selected(pending), Selected(bound)
    domains: dict[Term, set[str]] = {}
    kept: dict[Term, set[str]] = {}  # the pods each term keeps together
    held: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, terms in carriers.items():
        for term in terms:
            if term not in domains:
                domains[term] = domains_of(term.key, running(term), nodes)
        if all(domains[term] for term in terms):
            rules = [held_in(t.key, tuple(sorted(domains[t]))) for t in terms]
            pods[name] = held_to(pods[name], rules).model_copy(update={"may_preempt": False})
            for t in terms:
                held[name][t.key] |= domains[t]
        elif not any(domains[t] for t in terms) and all(
            _first_of_series(name, pods, in_cycle(t)) for t in terms
        ):
            for term in terms:
                kept.setdefault(term, {*in_cycle(term)}).add(name)
        else:
            pods[name] = held_to(pods[name], [held_in(t.key, ()) for t in terms[:1]])
    together: dict[str, set[str]] = defaultdict(set)
    for term, names in kept.items():
        group = term.group()
        for name in names:
            together[name].add(group)
    excluded = _Exclusive(together, held, pods, findings).read(zone_wide)
    made: dict[tuple[str, ...], tuple[str, ...]] = {}
    for name in together.keys() & pods.keys():
        groups = tuple(sorted(together[name]))
        if groups not in made:
            made[groups] = tuple(sorted({x for g in groups for x in excluded.get(g, ())}))
        update = {"together": groups, "exclusive_of": made[groups]}
        pods[name] = pods[name].model_copy(update=update)


class _Exclusive:
    """Anti-affinity over a key between pods kept with their own on it (jobs each asking
    for a domain of their own): per group kept together, the groups it may not share a
    domain with (``read``), and ``NotIn`` rules against the domains of pods held to
    running pods' (a job's pod made again while the rest of it runs)."""

    def __init__(
        self,
        together: Mapping[str, set[str]],
        held: Mapping[str, Mapping[str, set[str]]],
        pods: dict[str, Pod],
        findings: list[Finding],
    ) -> None:
        self.together, self.held, self.pods, self.findings = together, held, pods, findings
        # Per term, its selected pods' groups on its key and the domains they are held
        # to: every pod of a job has the same term (200 jobs of 8: 2.5M sets made per pod).
        self._theirs: dict[Term, tuple[set[str], set[str]]] = {}
        self._where: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}

    def where(self, name: str, key: str) -> tuple[frozenset[str], frozenset[str]]:
        """A pod's groups on ``key``, and the domains of it the pod is held to."""
        if (name, key) not in self._where:
            groups = frozenset(g for g in self.together.get(name, ()) if topology_key(g) == key)
            self._where[name, key] = (groups, frozenset(self.held.get(name, {}).get(key, ())))
        return self._where[name, key]

    def read(self, zone_wide: Sequence[tuple[str, Term, list[str]]]) -> dict[str, set[str]]:
        excluded: dict[str, set[str]] = defaultdict(set)
        for name, term, selected in zone_wide:
            if name not in self.pods:
                continue
            mine, mine_held = self.where(name, term.key)
            if term not in self._theirs:
                found = {self.where(p, term.key) for p in selected if p in self.pods}
                groups = set().union(*(g for g, _ in found))
                self._theirs[term] = (groups, set().union(*(h for _, h in found)))
            others, others_held = self._theirs[term]
            if mine & others:  # its own job among the pods it keeps away from
                why = why_not(term, selected[0])
                gang = self.pods.pop(name).gang
                self.findings.append(Finding(kind="Pod", name=name, message=why, gang=gang))
                continue
            for group in mine:
                excluded[group] |= others
            for group in others:
                excluded[group] |= mine
            # Pods held to running pods' domains, on either side: the other side is kept
            # out of those domains (no group to choose around).
            if others_held:
                self.keep_out(name, term.key, others_held)
            if mine_held:
                for p in selected:
                    if p in self.pods:
                        self.keep_out(p, term.key, mine_held)
        return excluded

    def keep_out(self, name: str, key: str, values: Iterable[str]) -> None:
        out = NodeSelectorRequirement(key=key, operator="NotIn", values=tuple(sorted(values)))
        self.pods[name] = kept_off(self.pods[name], (out,), APART_CONFLICT)


def _first_of_series(name: str, pods: Mapping[str, Pod], selected: list[str]) -> bool:
    """Whether a term of pod ``name`` that selects no bound pod lets it be placed with
    the pending pods it selects (``selected``): it selects the pod itself, or pods all of
    its gang (bound with it)."""
    if name in selected:
        return True
    gang = pods[name].gang
    return bool(selected) and gang is not None and all(pods[p].gang == gang for p in selected)
