"""Model units: amounts as the CP-SAT and LP models count them, and the rounding each way.

Byte-counted resources are modelled in MiB, hugepages in pages. A pod's requests round
up (it never gets less than it asked) and a node's capacity rounds down (the model never
packs past what the node really has).
"""

from __future__ import annotations

import numpy as np

from solver.arrays import IntArray
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
