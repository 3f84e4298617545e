"""The greedy baselines' shortcuts change the work they do, never what they decide."""

from __future__ import annotations

import pytest

import solver.baselines
from adapter.sim import realistic
from benchmarks import instances
from solver.config import SolverConfig
from solver.model import ClusterState
from solver.placement import Placer
from solver.problem import GangInfo
from solver.schedulers import schedule
from tests.builders import gang, node, pod, state

CONFIG = SolverConfig(deterministic=True)


@pytest.mark.parametrize(
    "s",
    [realistic.cluster(seed, 40, 60) for seed in range(3)]
    + [realistic.cluster(0, 200, 300), instances.reference(0)],
)
def test_skipping_repeats_of_a_failed_one_class_gang_changes_no_decision(
    s: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = [0]
    try_gang = Placer.try_gang

    def counted(self: Placer, *args: object, **kwargs: object) -> object:
        attempts[0] += 1
        return try_gang(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Placer, "try_gang", counted)
    skipping = schedule(s, "gang-greedy", CONFIG)
    tried_with_skips = attempts[0]
    monkeypatch.setattr(solver.baselines, "one_class_shape", lambda problem, gang: None)
    attempts[0] = 0
    every = schedule(s, "gang-greedy", CONFIG)
    assert skipping.placements == every.placements
    assert skipping.admitted == every.admitted
    assert tried_with_skips <= attempts[0]


def test_gangs_alike_to_one_that_did_not_fit_are_not_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    """One node of 4 cpu; a gang of 2 x 1 cpu fits, then three gangs of 3 x 1 cpu each
    (one pod class) cannot: only the first of them is tried. A later gang of one smaller
    pod still is, and fits."""
    attempts: list[str] = []
    try_gang = Placer.try_gang

    def recorded(self: Placer, gang: GangInfo, *args: object, **kwargs: object) -> object:
        attempts.append(gang.name)
        return try_gang(self, gang, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Placer, "try_gang", recorded)
    big = [f"big{i}" for i in range(3)]
    s = state(
        nodes=[node("n").cap(cpu=4, memory="8Gi", pods=10)],
        pods=[pod(f"small-{i}").req(cpu=1).gang("small") for i in range(2)]
        + [pod(f"{g}-{i}").req(cpu=1).gang(g) for g in big for i in range(3)]
        + [pod("last-0").req(cpu="500m").gang("last")],
        gangs=[gang("small", 2).created(0)]
        + [gang(g, 3).created(1 + i) for i, g in enumerate(big)]
        + [gang("last", 1).created(9)],
    )
    d = schedule(s, "gang-greedy", CONFIG)
    assert set(d.admitted) == {"small", "last"}
    assert attempts == ["small", "big0", "last"]

