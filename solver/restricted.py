"""Models over some of a model's pairs: the neighbourhoods the LP-guided and RINS
searches explore. Each keeps the full model's rows over the pairs it holds, so placing
nothing is always allowed; none is a relaxation of the real problem."""

from __future__ import annotations

import numpy as np

from solver.arrays import BoolArray, FloatArray, IntArray
from solver.bins import Pairs
from solver.encode import Encoding, encode
from solver.objective import Coefficients

RESTRICT_ZERO = 1e-6  # an LP value below this is zero (HiGHS' feasibility tolerance is 1e-7)


def restricted(
    enc: Encoding,
    coef: Coefficients,
    guide: FloatArray,
    incumbent: IntArray | None = None,
    also: BoolArray | None = None,
) -> Encoding:
    """The model over only the counts the ``guide`` (an LP optimum) or the ``incumbent``
    uses: the rest are fixed at zero by leaving them out.

    Without an incumbent, the LP's support alone. With one (a decision found so far),
    its counts too (RINS): a neighbourhood that contains the incumbent; ``also`` adds
    more pairs (``waiting_pairs``). Any of them is never
    infeasible (placing nothing is still allowed) and no longer a relaxation of the real
    problem, so its bound is not reported. Built small rather than fixed in a copy: on
    1,000 real-shaped nodes, presolving 11,000 fixed variables away took the cycle.
    """
    pairs = restricted_pairs(enc.pairs, guide, incumbent, also)
    return encode(
        enc.problem, enc.shapes, enc.bins, coef, pairs, rounding=enc.rounding, room=enc.room
    )


def restricted_pairs(
    pairs: Pairs,
    guide: FloatArray,
    incumbent: IntArray | None = None,
    also: BoolArray | None = None,
) -> Pairs:
    """The pairs ``restricted`` keeps (count variables come first in ``guide`` and
    ``incumbent``), for any model built over pairs (``solver.encode_victims`` too)."""
    used = np.asarray(guide[: len(pairs)], dtype=np.float64) >= RESTRICT_ZERO
    if incumbent is not None:
        used |= incumbent[: len(pairs)] > 0
    if also is not None:
        used |= also
    return Pairs(pairs.cls[used], pairs.bin[used], pairs.cap[used])


def waiting_pairs(enc: Encoding, incumbent: IntArray) -> BoolArray:
    """The pairs of every shape ``incumbent`` leaves waiting (not all its gangs admitted).

    Added to a RINS neighbourhood, they let a waiting gang take any bin while admitted
    ones keep where they are or drop out: one big gang traded for several smaller ones
    elsewhere, which neither the LP's support (it had them at 0) nor the incumbent's
    holds. Real-shaped 40-node clusters: seed 18's class model went from 4.3% below its
    bound to its optimum in 0.04 s."""
    waiting = [s for s, var in enc.admitted.items() if incumbent[var] < enc.shapes.shapes[s].size]
    shape_of = np.array([sc.shape for sc in enc.shapes.classes], dtype=np.int64)
    found: BoolArray = np.isin(shape_of[enc.pairs.cls], waiting)
    return found
