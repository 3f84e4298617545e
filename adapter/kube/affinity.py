"""Required node affinity read together: two sets of terms, each ORed, both to hold (a
pod's own, and what a bound pod's anti-affinity or a volume adds to it)."""

from __future__ import annotations

from itertools import product

from solver.scheduling_terms import NodeSelectorTerm


def both(
    ours: tuple[NodeSelectorTerm, ...], theirs: tuple[NodeSelectorTerm, ...]
) -> tuple[NodeSelectorTerm, ...]:
    """Terms that hold where one of ``ours`` and one of ``theirs`` hold (``ours`` empty:
    no affinity, any node). A term without requirements matches no node, and stays one."""
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
