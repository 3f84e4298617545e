"""Model units: amounts as the CP-SAT and LP models count them, and the rounding each way;
share units (a resource's cluster total is SHARE_SCALE of them); how many pods fit.

Byte-counted resources are modelled in MiB, hugepages in pages. A pod's requests round
up (it never gets less than it asked) and a node's capacity rounds down (the model never
packs past what the node really has).
"""

from __future__ import annotations

import numpy as np

from solver.arrays import IntArray
from solver.config import SHARE_SCALE
from solver.model import EPHEMERAL_STORAGE, HUGEPAGES_PREFIX, MEMORY, MIB

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def model_unit(resource: str) -> int:
    """Byte-counted resources are modelled in MiB: coefficients near 1e11 slow CP-SAT's
    presolve and LP by orders of magnitude, and a MiB is below any request's precision.
    Hugepages count in pages (``hugepages-2Mi``: 2 MiB), which requests and capacity are
    whole numbers of: in MiB, 64 KiB pages were each rounded up to a MiB, and a node's
    ten of them down to none."""
    if resource.startswith(HUGEPAGES_PREFIX):
        size = resource[len(HUGEPAGES_PREFIX) :]
        number, suffix = size[:-2], size[-2:]
        if suffix in _BINARY and number.isdigit() and int(number) > 0:
            return int(number) * _BINARY[suffix]
        return MIB
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        return MIB
    return 1


def units(resources: list[str]) -> IntArray:
    return np.array([model_unit(r) for r in resources], dtype=np.int64)


def vector(values: dict[str, int], index: dict[str, int]) -> IntArray:
    """``values`` (resource -> amount) as a vector over the resources of ``index``."""
    vec = np.zeros(len(index), dtype=np.int64)
    for name, quantity in values.items():
        vec[index[name]] = quantity
    return vec


def model_demand(raw: IntArray, units: IntArray) -> IntArray:
    """Requests round up to whole model units: a pod never gets less than it asked."""
    rounded: IntArray = -(-raw // units)
    return rounded


def model_capacity(raw: IntArray, units: IntArray) -> IntArray:
    """Capacity rounds down: the model never packs past what a node really has."""
    rounded: IntArray = raw // units
    return rounded


NO_LIMIT_FIT = 2**31  # pods "fitting" where nothing is asked: large, and safe to sum


def fit_per_node(demand: IntArray, free: IntArray) -> IntArray:
    """Per row of ``free`` (a node, or a queue's room): how many pods asking ``demand`` fit
    there on their own; 0 where the room is short or negative."""
    asked = demand > 0
    if not asked.any():
        return np.full(len(free), NO_LIMIT_FIT, dtype=np.int64)
    fit: IntArray = (np.maximum(free[:, asked], 0) // demand[asked]).min(axis=1)
    return fit


# Share units saturate here: 65,536 times a resource's cluster total, which no placeable
# pod asks and no queue holds (it would need 65,536 cordoned nodes per schedulable one),
# where an API server's "1e30" against a 1m total would not fit an int64, and sums of
# thousands of saturated shares still do.
MAX_SHARE_UNITS = SHARE_SCALE * 2**16


def share_units(quantity: IntArray, totals: IntArray) -> IntArray:
    """Quantities as share units: a resource's cluster total is SHARE_SCALE units."""
    safe = np.where(totals > 0, totals, 1)
    exact = (quantity.astype(np.float64) * SHARE_SCALE / safe).round()
    # Not np.clip: called per pod spec and per victim group, where its wrapper cost
    # twice as much. Quantities may be numpy scalars (a queue's dominant resource).
    units = np.maximum(np.minimum(exact, MAX_SHARE_UNITS), -MAX_SHARE_UNITS).astype(np.int64)
    return np.where(totals > 0, units, 0)


def pod_share_units(demand: IntArray, totals: IntArray) -> IntArray:
    """One pod's demand as share units, at most the whole cluster: a pod asking more fits
    on no schedulable node (one tolerating a cordon may go to a cordoned one, out of the
    totals: its value is then understated), and its value, multiplied by priorities and
    gang sizes in the objective, must stay inside int64 (an API server's "1e30" against a
    1m total did not; nor did a running pod whose node's allocatable shrank below it)."""
    return np.minimum(share_units(demand, totals), SHARE_SCALE)
