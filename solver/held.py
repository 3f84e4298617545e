"""What bound pods hold, per node and per queue, summed in one vectorised pass.

A big cluster runs tens of thousands of pods; a vector operation per pod to take its
requests off its node's room and add them to its queue's usage cost a third of
``prepare`` at 5,000 nodes. Here each pod only notes (node or queue, request set), and
the sums are one ``np.add.at`` each over rows of distinct request sets: pods share a
few (the conversion builds each once), found by identity rather than by content.
"""

from __future__ import annotations

import numpy as np

from solver.arrays import IntArray
from solver.model import Resources
from solver.units import model_demand, vector


class Held:
    """Callers note each pod's (node, request set) and (queue, request set) in the lists
    ``on_nodes``/``on_sets`` and ``by_queues``/``by_sets`` (plain appends: a method call
    per pod cost as much as the vector operation it replaced), then sum."""

    def __init__(self, r_index: dict[str, int], units: IntArray) -> None:
        self._r_index = r_index
        self._units = units
        self.on_nodes: list[int] = []
        self.on_sets: list[Resources] = []
        self.by_queues: list[int] = []
        self.by_sets: list[Resources] = []

    def _rows(self, sets: list[Resources]) -> tuple[IntArray, IntArray]:
        """(rows of the distinct request sets' demand vectors, each entry's row)."""
        row_of: dict[int, int] = {}  # id of a request set -> its row; ``sets`` holds them
        distinct: list[Resources] = []
        for requests in sets:
            if id(requests) not in row_of:
                row_of[id(requests)] = len(distinct)
                distinct.append(requests)
        raw = np.zeros((len(distinct), len(self._r_index)), dtype=np.int64)
        for row, requests in enumerate(distinct):
            raw[row] = vector(requests.pod_demand(), self._r_index)
        which = np.fromiter((row_of[id(r)] for r in sets), np.int64, len(sets))
        return raw, which

    def take_from(self, raw_free: IntArray) -> None:
        """Subtract what the pods on nodes hold from ``raw_free`` (nodes x resources)."""
        if self.on_nodes:
            raw, which = self._rows(self.on_sets)
            np.subtract.at(raw_free, np.array(self.on_nodes, dtype=np.int64), raw[which])

    def add_to(self, used: IntArray) -> None:
        """Add what the pods of queues hold to ``used`` (queues x resources), in model
        units: each pod's requests rounded up, as every pod's demand is."""
        if self.by_queues:
            raw, which = self._rows(self.by_sets)
            demand = model_demand(raw, self._units)
            np.add.at(used, np.array(self.by_queues, dtype=np.int64), demand[which])
