"""Placing pods on real nodes, and saying why a gang does not fit."""

from __future__ import annotations

import random

import numpy as np
import pytest

import solver.placement
from adapter.sim import realistic
from solver.config import SolverConfig
from solver.model import ClusterState
from solver.placement import Placer, Policy
from solver.problem import prepare
from solver.schedulers import schedule

CONFIG = SolverConfig(deterministic=True)


@pytest.mark.parametrize("s", [realistic.cluster(0, 40, 60), realistic.cluster(1, 200, 300)])
def test_explanations_shared_across_gangs_of_a_spec_are_each_gangs_own(s: ClusterState) -> None:
    """Why a gang waits is worked out once per pod spec where it can be: each answer must
    be what a placer that explains only that gang says."""
    decision = schedule(s, "cpsat", CONFIG)
    problem = prepare(s)
    node_index = {n.name: i for i, n in enumerate(problem.nodes)}
    of_pod = problem.class_of_pod()
    waiting = [g for g in problem.gangs if g.name in decision.unschedulable][:40]
    assert len(waiting) >= 10
    for gang in waiting:
        fresh = Placer(problem)
        for pod, node_name in decision.placements.items():
            fresh.place(problem.classes[of_pod[pod]], node_index[node_name])
        assert fresh.explain(gang) == decision.unschedulable[gang.name], gang.name


def test_an_explanation_follows_the_room_not_the_count_of_pods_placed() -> None:
    """A pod taken back and another placed leave as many pods placed but other room:
    the explanation is worked out again, not served from before."""
    from tests.builders import gang, node, pod, pods_of, state

    s = state(
        nodes=[node("big").cap(cpu=4), node("small").cap(cpu=1)],
        pods=[pod("filler").req(cpu=3), pod("other").req(cpu=1), *pods_of("w", 2, cpu=2)],
        gangs=[gang("w", 2)],
    )
    problem = prepare(s)
    of_pod = problem.class_of_pod()
    waiting = next(g for g in problem.gangs if g.name == "w")
    filler, other = (problem.classes[of_pod[p]] for p in ("filler", "other"))
    placer = Placer(problem)
    placer.place(filler, 0)  # 1 cpu left on each node: no pod of w fits
    crowded = placer.explain(waiting)
    placer.unplace([filler.pods[0]])
    placer.place(other, 1)  # one pod placed again, and big is empty
    fresh = Placer(problem)
    fresh.place(other, 1)
    assert placer.explain(waiting) == fresh.explain(waiting) != crowded


def test_explanations_are_shared_by_placement_and_demand_not_across_placements() -> None:
    """Pods asking alike of alike nodes share why they wait, whatever their task; pods
    asking alike of other nodes (another toleration) each get their own."""
    from tests.builders import gang, node, pod, state

    s = state(
        nodes=[node("gpu").cap(cpu=2).taint("nvidia.com/gpu"), node("cpu").cap(cpu=2)],
        pods=[
            pod("t-0").req(cpu=3).gang("t").tolerate("nvidia.com/gpu", op="Exists"),
            pod("u-0").req(cpu=3).gang("u"),
            pod("v-0").req(cpu=3).gang("v").task("worker"),
        ],
        gangs=[gang("t"), gang("u"), gang("v")],
    )
    problem = prepare(s)
    placer = Placer(problem)
    why = {g.name: placer.explain(g) for g in problem.gangs}
    assert why["t"] == "0/1 pods fit (minMember 1): 2 Insufficient cpu"
    assert "untolerated taint {nvidia.com/gpu}" in why["u"] and why["u"] == why["v"]
    # Asked in the other order, the same answers: nothing is served from the other.
    again = Placer(problem)
    assert {g.name: again.explain(g) for g in reversed(problem.gangs)} == why


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_scores_follow_every_change_of_room(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scores are kept per spec and per demand, rescored where room changed since they
    were read. With caches of two entries (every read may miss the spec's and fall back
    on the demand's, or miss both), after each placement or roll-back every class's
    scores are those a placer computing them afresh finds."""
    monkeypatch.setattr(solver.placement, "MAX_SCORED_SPECS", 2)
    monkeypatch.setattr(solver.placement, "MAX_SCORED_DEMANDS", 2)
    problem = prepare(realistic.cluster(seed, 40, 60))
    rng = random.Random(seed)
    placer = Placer(problem)
    placed: list[str] = []
    for _ in range(60):
        cls = rng.choice(problem.classes)
        policy = rng.choice(list(Policy))
        if placed and rng.random() < 0.25:
            k = rng.randint(1, min(3, len(placed)))
            placer.unplace(placed[-k:])
            del placed[-k:]
        elif placer.next_pod[cls.index] < cls.count:
            node = placer.best_node(cls, policy)
            if node is not None:
                placed.append(placer.place(cls, node))
        fresh = Placer(problem)
        fresh.place_like(placer.placed)
        for other in rng.sample(problem.classes, 8):
            got = placer._scores(other, policy)
            assert np.array_equal(got, fresh._score_rows(other, policy, slice(None)))
