"""Whose freed room a pod may use, on a node where several victims lose pods.

A pod placed there may use the node's free room and the room of the victims it may take
from (its *eligible* victims), never another's. Whether the pods fit so is a transport
problem, and Hall's condition decides it: for every set ``U`` of the node's victims, the
pods eligible for none outside ``U`` fit in the free room plus what ``U``'s victims free.
Counting the pods' demand against the whole node's room, or against the room less one
victim at a time, lets two pods each eligible for one victim share a third's room.

Only the unions of the pods' eligible sets need a row: any other ``U`` asks for the same
pods as the largest such union inside it, and offers more room. Shared by the joint model
(``solver.encode_victims``) and the validator (``solver.validate_preemption``); it reads
nothing else of the solver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Distinct sets per node before the rows give up on telling victims apart: the eligible
# sets come from a few (queue, priority) pairs, so their unions are a handful in practice.
MAX_SETS = 64


def hall_sets(
    eligible: Iterable[frozenset[int]], victims: frozenset[int]
) -> list[frozenset[int]] | None:
    """The victim sets ``U`` whose Hall rows a node needs: every union of the pods'
    ``eligible`` sets (each cut to the node's ``victims``), but ``victims`` itself (the
    node's capacity row). None when they pass MAX_SETS: the caller then keeps every pod
    not eligible for all of the node's victims in the free room (stricter, still sound)."""
    found: set[frozenset[int]] = set()
    for own in {e & victims for e in eligible}:
        found |= {own} | {own | other for other in found}
        if len(found) > MAX_SETS:
            return None
    found.discard(victims)
    return sorted(found, key=lambda s: (len(s), sorted(s)))


def hall_rows(
    eligible: Sequence[frozenset[int]], victims: frozenset[int]
) -> list[tuple[frozenset[int], list[bool]]]:
    """A node's Hall rows: per row, the victims whose freed room it counts (with the free
    room), and for each pod (``eligible``, each already cut to the node's ``victims``)
    whether the row confines it there. Where ``hall_sets`` gives up, one row: every pod not
    eligible for all of the node's victims, in the free room alone."""
    sets = hall_sets(eligible, victims)
    if sets is None:
        return [(frozenset(), [own != victims for own in eligible])]
    return [(u, [own <= u for own in eligible]) for u in sets]
