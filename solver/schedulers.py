"""The schedulers by name, all with one signature: (state, config) -> Decision."""

from __future__ import annotations

from collections.abc import Callable

from solver.baselines import gang_greedy, greedy
from solver.config import SolverConfig
from solver.cpsat import solve
from solver.decision import Decision
from solver.model import ClusterState

Scheduler = Callable[[ClusterState, SolverConfig], Decision]

SCHEDULERS: dict[str, Scheduler] = {
    "cpsat": solve,
    "gang-greedy": gang_greedy,
    "greedy": greedy,
}


def schedule(
    state: ClusterState, scheduler: str = "cpsat", config: SolverConfig | None = None
) -> Decision:
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; choose from {', '.join(SCHEDULERS)}")
    return SCHEDULERS[scheduler](state, config or SolverConfig())
