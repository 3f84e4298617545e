"""Required pod affinity, as kube-scheduler's InterPodAffinity filter checks it: a pod
goes to a node whose topology domain (the nodes sharing its value of the term's
``topologyKey``) runs a pod each of its terms selects. A training job asks it to keep its
workers in one zone, rack or block (a term selecting its own job's pods), or to run
beside a service (a term selecting the service's pods).

Read per term of a pending pod (``keep_together``):

- Where bound pods the term selects run on nodes with the key: the pod is held to their
  domains (a ``NodeRule`` ``In`` their values), as kube-scheduler holds it.
- Else, where the term selects pending pods (its own gang's, itself too): the pod and
  those pods are kept together (``Pod.together``: all of them in one domain, chosen by
  ``solver.together``). kube-scheduler places the first of them anywhere and the others
  after it; a gang bound at once ends where they would, and a launcher a worker's term
  selects is bound with the workers rather than first.
- Else (it selects no pod at all): the pod is held to no node, and waits, as
  kube-scheduler leaves it, until a pod the term selects runs.

kube-scheduler also refuses a pod of which one term has matches and another none; each
term is read on its own here (a placement that meets every term, the others' pods placed
with it). Pods a term selects without carrying it are kept with the carriers: at worst a
wait kube-scheduler would not make, never a placement it refuses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from adapter.kube.fields import Obj
from adapter.kube.pod_terms import AFFINITY, Selected, domains_of, terms_of
from solver.model import Node, Pod
from solver.predicates import POD_AFFINITY_MISMATCH, held_to
from solver.scheduling_terms import NodeRule, NodeSelectorRequirement, NodeSelectorTerm

# A term with no requirement matches no node: the rule of a term that selects no pod.
NO_NODE = NodeRule(reason=POD_AFFINITY_MISMATCH, terms=(NodeSelectorTerm(),))


def keep_together(
    pending: Iterable[tuple[Obj, str]],
    bound: Sequence[tuple[Obj, str]],
    pods: dict[str, Pod],
    nodes: Mapping[str, Node],
) -> None:
    """Read the required pod affinity of the ``pending`` pods (object, key) still in
    ``pods`` against the ``bound`` pods (object, node) and each other, into their
    ``node_rules`` and ``together`` (see the module)."""
    pending = [(o, name) for o, name in pending if name in pods]
    carriers = {
        name: terms for o, name in pending if (terms := terms_of(o, o.get("spec"), AFFINITY))
    }
    if not carriers:
        return
    in_cycle, running = Selected(pending), Selected(bound)
    held: dict[str, list[NodeRule]] = defaultdict(list)
    together: dict[str, set[str]] = defaultdict(set)  # pod -> its groups
    domains: dict[object, set[str]] = {}
    for name, terms in carriers.items():
        for term in terms:
            if term not in domains:
                domains[term] = domains_of(term.key, running(term), nodes)
            if values := domains[term]:
                requirement = NodeSelectorRequirement(
                    key=term.key, operator="In", values=tuple(sorted(values))
                )
                term_in = NodeSelectorTerm(match_expressions=(requirement,))
                held[name].append(NodeRule(reason=POD_AFFINITY_MISMATCH, terms=(term_in,)))
            elif selected := in_cycle(term):
                for p in {*selected, name}:
                    together[p].add(term.group())
            else:
                held[name].append(NO_NODE)
    for name in held.keys() | together.keys():
        pod = held_to(pods[name], held.get(name, ()))
        if name in together:
            pod = pod.model_copy(update={"together": tuple(sorted(together[name]))})
        pods[name] = pod
