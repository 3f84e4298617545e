"""What kube-scheduler's InterPodAffinity reads of a pod's required pod affinity and
anti-affinity terms: the pods a term selects (``Term``, ``Selected``) and the topology
domains they run in (``domains_of``: the nodes sharing a value of the term's
``topologyKey``), shared by ``anti_affinity`` and ``pod_affinity``.

A term with a ``namespaceSelector`` is read as selecting every namespace (gangsat does
not read Namespace objects): never fewer pods than kube-scheduler selects.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapter.kube.budgets import selects
from adapter.kube.fields import Obj, mappings
from solver.model import Node

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
ANTI_AFFINITY = "podAntiAffinity"
AFFINITY = "podAffinity"
NOT_SCHEDULED = "which gangsat does not check: not scheduled (kube-scheduler would check it)"


@dataclass(frozen=True)
class Term:
    """One required (anti-)affinity term: the pods it selects, and its topology key."""

    namespaces: frozenset[str] | None  # None: any namespace
    selector: Any  # the labelSelector, frozen (``_frozen``; None selects no pod)
    key: str
    parsed: Any = field(compare=False, hash=False, repr=False)

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.parsed is not None and selects(self.parsed, labels)

    def group(self) -> str:
        """A name for the pods this term keeps apart or together, the same for every pod
        that has it."""
        spaces = ",".join(sorted(self.namespaces)) if self.namespaces is not None else "*"
        digest = hashlib.sha256(f"{spaces}|{self.selector!r}".encode()).hexdigest()[:12]
        return f"{digest}@{self.key}"

    def indexed_by(self) -> tuple[str, tuple[str, ...]] | None:
        """A label key and the values of it every pod the term selects has one of (of its
        matchLabels, else of an ``In`` expression), if any."""
        selector = self.parsed if isinstance(self.parsed, Mapping) else {}
        wanted = selector.get("matchLabels")
        if isinstance(wanted, Mapping):
            for k, v in wanted.items():
                return str(k), (str(v),)
        expressions = selector.get("matchExpressions")
        for e in mappings(expressions if isinstance(expressions, list) else None):
            values = e.get("values")
            if e.get("operator") == "In" and isinstance(values, list):
                return str(e.get("key")), tuple(str(v) for v in values)
        return None


def terms_of(pod: Obj, spec: Any, kind: str = ANTI_AFFINITY) -> list[Term]:
    """The required terms of a pod object (its ``spec``) of ``kind``: ``ANTI_AFFINITY``
    or ``AFFINITY``."""
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    if affinity is None or not isinstance(affinity, Mapping):
        return []
    rules = affinity.get(kind)
    if not isinstance(rules, Mapping):
        return []
    own = _namespace(pod)
    out = []
    for term in mappings(rules.get(REQUIRED)):
        namespaces: frozenset[str] | None = frozenset({own})
        if term.get("namespaceSelector") is not None:
            namespaces = None  # read as selecting any namespace: never too few
        elif isinstance(term.get("namespaces"), list) and term["namespaces"]:
            namespaces = frozenset(str(n) for n in term["namespaces"])
        key = term.get("topologyKey")
        if isinstance(key, str) and key:
            selector = term.get("labelSelector")
            out.append(Term(namespaces, _frozen(selector), key, selector))
    return out


def _frozen(value: Any) -> Any:
    """``value`` as nested tuples, equal for equal selectors (mappings in key order)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _namespace(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


def _labels(pod: Obj) -> Mapping[str, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def domains_of(key: str, node_names: Iterable[str], nodes: Mapping[str, Node]) -> set[str]:
    """The values of ``key`` on those nodes: their domains (a node without it is in none)."""
    return {
        value
        for name in node_names
        if (node := nodes.get(name)) is not None and (value := node.labels.get(key)) is not None
    }


class Selected:
    """The pods each term selects (of ``pods``: (object, what to answer for it)), looked
    up by a label it requires where it has one (a gang's term names its job: 400 gangs'
    terms of matchExpressions alone, each scanning every pod, took 3.6 s), else by a
    scan; each term's answer made once."""

    def __init__(self, pods: Sequence[tuple[Obj, str]]) -> None:
        self._pods = pods
        self._read: list[tuple[str, Mapping[str, str]]] | None = None
        self._by_label: dict[str, dict[str, list[int]]] = {}
        self._answers: dict[Term, list[str]] = {}

    def __call__(self, term: Term) -> list[str]:
        if term in self._answers:
            return self._answers[term]
        if self._read is None:
            self._read = [(_namespace(o), _labels(o)) for o, _ in self._pods]
        read = self._read
        indexed = term.indexed_by()
        if indexed is None:
            rows: Iterable[int] = range(len(read))
        else:
            key, values = indexed
            if key not in self._by_label:
                index: dict[str, list[int]] = defaultdict(list)
                for row, (_, labels) in enumerate(read):
                    if (v := labels.get(key)) is not None:
                        index[str(v)].append(row)
                self._by_label[key] = index
            by_value = self._by_label[key]
            rows = sorted({r for v in values for r in by_value.get(v, ())})
        answer = [self._pods[r][1] for r in rows if term.selects(*read[r])]
        self._answers[term] = answer
        return answer
