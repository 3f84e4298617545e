"""The room a node can give this cycle's pods, resource by resource: what the capacity rows
of a class of nodes may count without cutting off any placement.

A node's free capacity is not all usable. On real clusters a class of nodes holds empty
nodes beside nodes whose running pods took nearly all of one resource (a 32-core node
with 125 millicores but 100 GiB of memory left): no pending pod fits there, yet summed
capacity counted its memory and disk as room, and the class model placed counts that no
node could hold (a real-shaped 1,000-node cluster: the first packing pass found no node
for 14% of the pods the classes were asked to take, and 2-2.5% of the objective was lost
placing them).

Per node, the pods that may go there bound what each resource can be used for:
- a node where no such pod fits on its own can take nothing;
- if every such pod asks at most rho units of resource r per unit of resource s, the
  pods on the node use at most rho x (free s) of r.
Both hold for every set of pods the node can hold, so the summed rows stay a relaxation
of the real problem and their LP optimum a valid bound.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solver.arrays import BoolArray, IntArray

# Products of ratios are floats: rounded up past this relative error before the floor, so
# that float error never cuts a unit off a valid bound.
FLOAT_SLACK = 1e-9


def usable_free(free: IntArray, demands: IntArray, apart: Sequence[int] = ()) -> IntArray:
    """Per node (a row of ``free``) and resource, the most that pods of the given
    ``demands`` (a row per pod spec that may use these nodes) can use there together.
    Columns ``apart`` (``solver.apart``: a room per node, one per pod) are left as they are:
    their ratios bound nothing worth their cost, quadratic in the columns."""
    room = np.maximum(free, 0)
    if not len(demands) or not len(room):
        return np.zeros_like(room)
    specs = np.unique(demands, axis=0)
    fits: BoolArray = np.all(room[:, None, :] >= specs[None, :, :], axis=2)  # one fits
    real = np.ones(room.shape[1], dtype=np.bool_)
    real[list(apart)] = False
    asked = specs[:, real].astype(np.float64)
    # ratio[k, r, s]: units of r per unit of s for spec k; inf where s is not asked but
    # r is (s then bounds nothing), 0 where neither is.
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = asked[:, :, None] / asked[:, None, :]
    ratio = np.where(
        asked[:, None, :] > 0, ratio, np.where(asked[:, :, None] > 0, np.inf, 0.0)
    )
    most = np.where(fits[:, :, None, None], ratio[None], 0.0).max(axis=1)  # node x r x s
    own = room[:, real]
    with np.errstate(invalid="ignore"):  # inf x 0: no bound, replaced by inf
        cap = np.where(np.isinf(most), np.inf, most * own[:, None, :]).min(axis=2)
    cap = np.floor(cap * (1 + FLOAT_SLACK) + FLOAT_SLACK)
    usable: IntArray = room.copy()
    usable[:, real] = np.where(np.isfinite(cap), np.minimum(cap, own), own).astype(np.int64)
    usable[~fits.any(axis=1)] = 0
    return usable
