"""Topology spreads over zones (``Pod.spreads``), checked on the raw state as
``solver.validate`` checks placements: a pod carrying one is placed or nominated in a
domain of its key the spread counts, and every such domain ends at most maxSkew above
the fewest, counting the carriers placed (the order in which kube-scheduler's
PodTopologySpread filter lets a gang's carriers in, the fewest first, then the pods the
spread only counts, which it does not filter), and the pods it only counts that may have
to go before them (``goes_first``). Pods a hold shows bound add to their domain's count,
never to the fewest; a carrier placed counts towards the fewest another reads only where
both read the same nodes (``counted_over``). Reads only ``solver.model``."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from solver.decision import Decision
from solver.model import Node, Pod
from solver.scheduling_terms import DomainSpread
from solver.violations import Violation


def check_spreads(
    pods: Mapping[str, Pod], nodes: Mapping[str, Node], decision: Decision
) -> list[Violation]:
    """The placements and nominations of pods spread over zones that break the spread."""
    where: list[tuple[Pod, Node]] = []
    for pod_name, node_name in sorted({**decision.placements, **decision.nominated}.items()):
        pod = pods.get(pod_name)
        if pod is None or not pod.spreads or pod.node_name is not None:
            continue
        if (node := nodes.get(node_name)) is not None:  # (an unknown node, reported as such)
            where.append((pod, node))
    if not where:
        return []
    placed: dict[str, Counter[str]] = defaultdict(Counter)  # group -> domain -> pods
    carriers: dict[str, list[tuple[Pod, Node, DomainSpread]]] = defaultdict(list)
    # Pending pods a hold shows bound (the adapter reads spreads of pending pods only).
    for pod in pods.values():
        if not pod.spreads or pod.node_name is None or pod.terminating:
            continue
        if (node := nodes.get(pod.node_name)) is not None:
            for spread in pod.spreads:
                if (domain := node.labels.get(spread.key)) is not None:
                    placed[spread.group][domain] += 1
    for pod, node in where:
        for spread in pod.spreads:
            if not spread.carried and not goes_first(pod):
                continue  # scheduled after the carriers, which it does not move then
            if (domain := node.labels.get(spread.key)) is not None:
                placed[spread.group][domain] += 1
            if spread.carried:
                carriers[spread.group].append((pod, node, spread))
    out: list[Violation] = []
    fewest: dict[tuple[object, ...], int] = {}
    read: dict[DomainSpread, tuple[dict[str, int], dict[str, int]]] = {}
    for group, carrying in carriers.items():
        for pod, node, spread in carrying:
            if spread not in read:  # (a gang's pods share theirs)
                read[spread] = dict(spread.counted), dict(spread.extra)
            counted, extra = read[spread]
            domain = node.labels.get(spread.key)
            if domain is None or domain not in counted:
                why = f"a node outside the domains of {spread.key!r} it counts"
            else:
                shape = counted_over(pod, spread)
                if shape not in fewest:
                    fewest[shape] = _fewest(pod, spread, counted, carrying)
                own = counted[domain] + extra.get(domain, 0) + placed[group][domain]
                if own - fewest[shape] <= spread.max_skew:
                    continue
                why = f"{own} pods in {domain!r}, over maxSkew {spread.max_skew} above the fewest"
            message = f"pod {pod.name!r} breaks its topology spread {group}: {why}"
            kind = "nomination" if pod.name in decision.nominated else "predicate"
            out.append(Violation(kind=kind, subject=pod.name, message=message))
    return out


def goes_first(pod: Pod) -> bool:
    """Whether a pod a spread only counts may have to be scheduled before its carriers:
    it carries a spread over zones of its own, or keeps together with pods (required pod
    affinity, which the first of a group meets by itself, the others after it)."""
    return bool(pod.together) or any(s.carried for s in pod.spreads)


def counted_over(pod: Pod, spread: DomainSpread | None) -> tuple[object, ...]:
    """What decides the nodes a carrier's spread counts pods on: the spread as read, the
    pod's node selector and required affinity, and its tolerations (with
    ``nodeTaintsPolicy: Honor``). Carriers alike so read each other's placed pods."""
    return (spread, frozenset(pod.node_selector.items()), pod.affinity, pod.tolerations)


def _fewest(
    pod: Pod,
    spread: DomainSpread,
    counted: Mapping[str, int],
    carrying: list[tuple[Pod, Node, DomainSpread]],
) -> int:
    """The fewest ``pod``'s spread counts over its domains once the carriers are placed,
    of them those alike (``counted_over``): one of another shape may stand on a node this
    one's filter does not count."""
    if spread.fewest_zero:
        return 0
    shape = counted_over(pod, spread)
    added: Counter[str] = Counter()
    for other, node, theirs in carrying:
        domain = node.labels.get(spread.key)
        if domain is not None and domain in counted and counted_over(other, theirs) == shape:
            added[domain] += 1
    return min((n + added[d] for d, n in counted.items()), default=0)
