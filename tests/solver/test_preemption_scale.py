"""Preemption's work on large clusters, made smaller without changing a decision: only the
victims the cycle's first preemptors may take from are built (``victims.candidates``),
the greedy actions keep the room their chosen victims free as victims come and go
(``greedy_preemption._Gone``), and drop without a try the victims a try would drop
(``greedy_preemption._moot``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import solver.greedy_preemption as greedy_preemption
import solver.victims as victims
from benchmarks.instances import realistic
from solver.config import SolverConfig
from solver.greedy_preemption import _fit, _Gone, _moot, _queue_freed, greedy_choice
from solver.model import ClusterState
from solver.objective import coefficients
from solver.preemption_rules import takes_kinds
from solver.problem import Problem, prepare
from solver.search import gang_greedy_placer
from solver.victims import Candidates, Victim, VictimGroup, candidates, running_victims, takes_from
from tests.builders import gang, node, pod, queue, state

WEIGHTS = SolverConfig(preemption=True).weights


class _Every:
    """Every (queue, priority): what the build reads where nothing is left out."""

    def __contains__(self, kind: object) -> bool:
        return True


def _decided(problem: Problem) -> Candidates | None:
    coef = coefficients(problem, WEIGHTS)
    placer = gang_greedy_placer(problem)
    return candidates(problem, placer.placed, placer.free, placer.queue_room, coef, WEIGHTS)


def _named(problem: Problem, cand: Candidates | None) -> object:
    """What the models read of ``cand``, by name (victims' indices differ by what was
    built)."""
    if cand is None:
        return None
    name = {v.index: v.name for v in cand.victims}
    return (
        [
            (problem.gangs[p.gang].name, sorted(name[v] for v in p.eligible))
            for p in cand.preemptors
        ],
        [(name[g.victim], g.node, g.pods, g.cost, g.share, g.demand.tolist()) for g in cand.groups],
        sorted((v.name, v.evict_cost, v.withdraw_cost) for v in cand.victims if v.groups),
        cand.gained.tolist(),
    )


def _two_queues_each_with_its_own_victims() -> ClusterState:
    """Four full 4-cpu nodes. Queue a runs a-low, queue b b-low and b-mid, queue c c-top;
    no queue may be reclaimed from. a-hi and b-hi (priority 10) wait: each may take only
    from its own queue's lower priorities, and no one from c."""
    running = [("a-low", "a", 0, "n0"), ("b-low", "b", 0, "n1"), ("b-mid", "b", 5, "n2")]
    running.append(("c-top", "c", 0, "n3"))
    return state(
        [node(f"n{i}").cap(cpu=4) for i in range(4)],
        [
            *(pod(f"{g}-0").req(cpu=4).gang(g).on(n).started(0) for g, _, _, n in running),
            pod("a-hi-0").req(cpu=4).gang("a-hi"),
            pod("b-hi-0").req(cpu=4).gang("b-hi"),
        ],
        [
            *(gang(g).queue(q).priority(prio) for g, q, prio, _ in running),
            gang("a-hi").queue("a").priority(10),
            gang("b-hi").queue("b").priority(10),
        ],
        [queue(q).build().model_copy(update={"reclaimable": False}) for q in "abc"],
        now_s=600,
    )


@pytest.mark.parametrize(
    "make",
    [_two_queues_each_with_its_own_victims, lambda: realistic(2, 200, 300)],
    ids=["two-queues", "real-shaped-200"],
)
def test_victims_built_for_the_first_preemptors_only_decide_as_all_of_them(
    make: Callable[[], ClusterState], monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = prepare(make())
    built: list[int] = []
    real_running, real_placed = running_victims, victims._placed_victims

    def counted(*args: Any, **kwargs: Any) -> tuple[list[Victim], list[VictimGroup]]:
        found = real_running(*args, **kwargs)
        built.append(len(found[0]))
        return found

    monkeypatch.setattr(victims, "running_victims", counted)
    narrow = _decided(problem)
    # Only the victims of the kinds wanted were built (each once per cycle).
    made = problem.memo[("victims built", WEIGHTS)]
    assert isinstance(made, dict) and len(made) < len(victims._victim_gangs(problem))
    monkeypatch.setattr(
        victims, "running_victims", lambda p, w, skip=(), kinds=None: counted(p, w, skip)
    )
    monkeypatch.setattr(victims, "_placed_victims", lambda *args: real_placed(*args[:-1], _Every()))
    wide = _decided(problem)
    assert narrow is not None
    assert _named(problem, narrow) == _named(problem, wide)
    assert built[0] < built[1]  # the build left some out


def test_each_preemptor_may_take_only_from_its_own_queue_here() -> None:
    problem = prepare(_two_queues_each_with_its_own_victims())
    cand = _decided(problem)
    assert cand is not None
    eligible = dict(_named(problem, cand)[0])  # type: ignore[index]
    assert eligible == {"a-hi": ["a-low"], "b-hi": ["b-low", "b-mid"]}
    assert "c-top" not in {v.name for v in cand.victims}


def test_a_kind_may_be_taken_from_exactly_where_a_victim_of_it_may() -> None:
    """``takes_kinds`` over victims' (queue, priority) agrees with ``takes_from`` over the
    victims, for every queue and priority and either side of the deserved shares."""
    problem = prepare(realistic(0, 40, 60))
    found, _ = running_victims(problem, WEIGHTS)
    assert found
    kinds = {(v.queue, v.priority) for v in found}
    queues = len(problem.queues)
    for below_mask in range(2**queues):
        below = [bool(below_mask >> q & 1) for q in range(queues)]
        above = [not b for b in below]
        by_victim = takes_from(found, below, above)  # type: ignore[arg-type]
        by_kind = takes_kinds(kinds, below, above)  # type: ignore[arg-type]
        for q in range(queues):
            for priority in {v.priority for v in found} | {-(10**9), 10**9}:
                expected = {(found[v].queue, found[v].priority) for v in by_victim(q, priority)}
                assert by_kind(q, priority) == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_the_room_kept_as_victims_come_and_go_is_the_room_made_afresh(seed: int) -> None:
    problem = prepare(realistic(seed, 200, 300))
    placer = gang_greedy_placer(problem)
    cand = _decided(problem)
    assert cand is not None and len(cand.victims) > 3
    rng = random.Random(seed)
    for q in range(len(problem.queues)):
        gone = _Gone(
            placer.free.copy(), placer.queue_room[q].copy(), np.zeros(len(placer.free), np.int64)
        )
        chosen: list[int] = []
        for _ in range(40):
            v = rng.randrange(len(cand.victims))
            if v in chosen and rng.random() < 0.5:
                chosen.remove(v)
                gone.change(problem, cand, q, v, -1)
            elif v not in chosen:
                chosen.append(v)
                gone.change(problem, cand, q, v, 1)
            # Made afresh, as the code before the kept room made it at each try.
            room = placer.free.copy()
            capability = placer.queue_room[q].copy()
            counted = ~problem.queues[q].over()
            for chosen_v in chosen:
                for g in cand.victims[chosen_v].groups:
                    grp = cand.groups[g]
                    room[grp.node] += grp.demand * len(grp.pods)
                    if cand.victims[chosen_v].queue == q:
                        capability += np.where(counted, grp.demand * len(grp.pods), 0)
            assert np.array_equal(
                _queue_freed(problem, cand, placer.queue_room[q], q, chosen), capability
            )
            nodes = {cand.groups[g].node for v in chosen for g in cand.victims[v].groups}
            assert np.array_equal(gone.room, room)
            assert np.array_equal(gone.queue_room, capability)
            assert set(np.flatnonzero(gone.nodes > 0).tolist()) == nodes


def _tempting_but_not_victims() -> ClusterState:
    """top (queue a, priority 10) fits nowhere, and the only gangs of its queue below it
    are no victims: grow, running, is given its pending pod by this decision, and fixed,
    admitted by it, is not preemptible. mid (queue b, priority 5) may take from low.
    c-top holds the last node; no queue may be reclaimed from."""
    return state(
        [node(f"n{i}").cap(cpu=4) for i in range(3)],
        [
            pod("grow-0").req(cpu=2).gang("grow").on("n0").started(0),
            pod("grow-1").req(cpu=1).gang("grow"),
            pod("fixed-0").req(cpu=1).gang("fixed"),
            pod("low-0").req(cpu=4).gang("low").on("n1").started(0),
            pod("c-top-0").req(cpu=4).gang("c-top").on("n2").started(0),
            pod("top-0").req(cpu=4).gang("top"),
            pod("mid-0").req(cpu=4).gang("mid"),
        ],
        [
            gang("grow").queue("a"),
            gang("fixed").queue("a").not_preemptible(),
            gang("top").queue("a").priority(10),
            gang("low").queue("b"),
            gang("mid").queue("b").priority(5),
            gang("c-top").queue("c").priority(100),
        ],
        [queue(q).build().model_copy(update={"reclaimable": False}) for q in "abc"],
        now_s=600,
    )


@pytest.mark.parametrize("most", [1, 2, 8])
def test_a_gang_whose_only_victims_are_no_victims_is_no_preemptor(
    most: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chosen by the kinds of the victims there are, not of every gang: top would come
    first, but grow (growing) and fixed (not preemptible) are no victims."""
    monkeypatch.setattr(victims, "MAX_PREEMPTORS", most)
    problem = prepare(_tempting_but_not_victims())
    placed = gang_greedy_placer(problem).placed
    assert {"grow-1", "fixed-0"} <= set(placed) and "top-0" not in placed
    cand = _decided(problem)
    assert cand is not None
    assert dict(_named(problem, cand)[0]) == {"mid": ["low"]}  # type: ignore[index]


def test_victims_that_tie_are_kept_by_name_whatever_their_indices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(victims, "MAX_VICTIM_GROUPS", 2)
    names = ["v3", "v1", "v2", "v0"]
    for order in (names, names[::-1]):
        found = [
            Victim(index=i, name=n, queue=0, priority=0, bound=1, min_member=1, value=1, groups=[i])
            for i, n in enumerate(order)
        ]
        groups = [
            VictimGroup(
                victim=i, node=i, pods=(f"{n}-0",), demand=np.ones(1, np.int64), share=1, cost=5
            )
            for i, n in enumerate(order)
        ]
        kept = victims.cheapest_victims(found, groups, set(range(len(order))))
        assert {found[v].name for v in kept} == {"v0", "v1"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_victim_dropped_without_a_try_is_one_whose_try_gives_the_same_placement(
    seed: int,
) -> None:
    # Random victim sets of each preemptor, the room they leave, a gang's fit in it:
    # every victim ``_moot`` drops unasked leaves ``_fit`` placing exactly as before.
    problem = prepare(realistic(seed, 200, 300))
    placer = gang_greedy_placer(problem)
    cand = _decided(problem)
    assert cand is not None
    rng = random.Random(seed)
    moot = tried = 0
    for pre in cand.preemptors:
        gang = problem.gangs[pre.gang]
        eligible = sorted(pre.eligible)
        for _ in range(6):
            chosen = rng.sample(eligible, min(len(eligible), rng.randrange(1, 40)))
            gone = _Gone(
                placer.free.copy(),
                placer.queue_room[gang.queue].copy(),
                np.zeros(len(placer.free), np.int64),
            )
            for v in chosen:
                gone.change(problem, cand, gang.queue, v, 1)
            placement = _fit(problem, cand, gang, gone)
            if placement is None:
                continue
            for v in chosen:
                without = gone.copy()
                without.change(problem, cand, gang.queue, v, -1)
                tried += 1
                if _moot(problem, cand, gang.queue, v, set(placement.values())):
                    moot += 1
                    assert _fit(problem, cand, gang, without) == placement
    assert moot > 0 and moot < tried  # both kinds of victim were met


# Instances whose preemptors choose victims on nodes their placement does not use (on
# most real-shaped seeds every chosen victim is on a used node).
@pytest.mark.parametrize(("seed", "nodes", "gangs"), [(2, 200, 300), (9, 200, 300), (5, 40, 60)])
def test_the_greedy_actions_choose_as_when_every_victim_was_tried(
    seed: int, nodes: int, gangs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = prepare(realistic(seed, nodes, gangs))
    cand = _decided(problem)
    assert cand is not None
    coef = coefficients(problem, WEIGHTS)
    used: list[bool] = []
    real_moot = greedy_preemption._moot

    def counted(*args: Any) -> bool:
        used.append(real_moot(*args))
        return used[-1]

    monkeypatch.setattr(greedy_preemption, "_moot", counted)
    shortcut = greedy_choice(problem, cand, coef)
    monkeypatch.setattr(greedy_preemption, "_moot", lambda *args: False)
    every = greedy_choice(problem, cand, coef)
    assert any(used)
    assert shortcut.evictions == every.evictions and shortcut.nominated == every.nominated
    assert shortcut.disruption == every.disruption


def test_a_victim_that_frees_only_its_queues_capability_is_tried_not_dropped() -> None:
    # Queue a (capability 10 cpu, 8 used) runs young (2 cpu) beside keep (2 cpu, above
    # hi's priority) on n0 and old (4 cpu) on n1. hi (2 x 4 cpu) fits on n1 and n2 once
    # young and old are gone: young frees no node hi uses, but 2 cpu of the capability
    # it needs. Dropped unasked, old alone would be evicted and hi placed, 2 cpu over
    # the capability. Tried, young stays needed, and a victim freeing no room hi uses is
    # never evicted: hi waits.
    problem = prepare(
        state(
            [node(f"n{i}").cap(cpu=4) for i in range(3)],
            [
                pod("young-0").req(cpu=2).gang("young").on("n0").started(300),
                pod("keep-0").req(cpu=2).gang("keep").on("n0").started(0),
                pod("old-0").req(cpu=4).gang("old").on("n1").started(0),
                *(pod(f"hi-{i}").req(cpu=4).gang("hi") for i in range(2)),
            ],
            [
                gang("young").queue("a"),
                gang("keep").queue("a").priority(20),
                gang("old").queue("a"),
                gang("hi", 2).queue("a").priority(10),
            ],
            [queue("a").capability(cpu="10")],
            now_s=600,
        )
    )
    cand = _decided(problem)
    assert cand is not None and [problem.gangs[p.gang].name for p in cand.preemptors] == ["hi"]
    choice = greedy_choice(problem, cand, coefficients(problem, WEIGHTS))
    assert choice.evictions == {} and choice.nominated == {}
