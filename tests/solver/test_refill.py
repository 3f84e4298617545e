"""A placed gang making way for waiting gangs that add more together (``refill``), and where
the placement stages' end runs it (``exchanges.refilled_once``)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import solver.exchanges as exchanges
from solver.config import SolverConfig
from solver.decision import SolveStatus
from solver.decode import decision_from_placements
from solver.objective import objective_of
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.refill import refilled
from solver.validate import check
from tests.builders import gang, node, pod, state
from tests.solver.encodings import search_for

WEIGHTS = SolverConfig().weights
FAR = 3600.0


def one_node(big_priority: int, small: int = 2) -> Problem:
    """One 4-cpu node; a one-pod gang ``big`` of 4 cpu (``big_priority``) and ``small``
    one-pod gangs of 2 cpu (priority 100)."""
    return prepare(
        state(
            nodes=[node("n0").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": "n0"})],
            pods=[
                pod("big-0").req(cpu=4).gang("big"),
                *(pod(f"small{i}-0").req(cpu=2).gang(f"small{i}") for i in range(small)),
            ],
            gangs=[
                gang("big", 1).priority(big_priority),
                *(gang(f"small{i}", 1).priority(100) for i in range(small)),
            ],
        )
    )


def holding(problem: Problem, *names: str) -> Placer:
    """A placement of the named gangs' pods, each on the one node."""
    placer = Placer(problem)
    for cls in problem.classes:
        if problem.gangs[cls.gang].name in names:
            placer.place_on(cls, 0, cls.count)
    return placer


def test_a_placed_gang_makes_way_for_waiting_gangs_that_add_more_together() -> None:
    """The node held by one gang that the two small ones, together, outweigh (each alone
    worth no more than it, so no exchange would take it out): out it goes, both are placed."""
    problem = one_node(big_priority=10)
    start = holding(problem, "big")
    both = holding(problem, "small0", "small1")
    assert objective_of(both, WEIGHTS) > objective_of(start, WEIGHTS)
    found = refilled(start, WEIGHTS, time.perf_counter() + FAR)
    assert found is not None and found is not start
    assert sorted(found.placed) == ["small0-0", "small1-0"]
    assert objective_of(found, WEIGHTS) == objective_of(both, WEIGHTS)
    assert sorted(start.placed) == ["big-0"]  # the placement it started from is unchanged
    decision = decision_from_placements(
        problem, found, SolverConfig(), scheduler="cpsat", status=SolveStatus.FEASIBLE
    )
    assert check(problem.state, decision) == []


def test_no_trade_that_adds_nothing_is_kept() -> None:
    """The node's gang outweighs the two small ones together: nothing to gain."""
    problem = one_node(big_priority=100_000)
    start = holding(problem, "big")
    assert objective_of(start, WEIGHTS) > objective_of(
        holding(problem, "small0", "small1"), WEIGHTS
    )
    assert refilled(start, WEIGHTS, time.perf_counter() + FAR) is None


def test_no_gang_is_taken_out_past_the_deadline() -> None:
    problem = one_node(big_priority=10)
    assert refilled(holding(problem, "big"), WEIGHTS, time.perf_counter() - 1) is None


def test_a_running_gang_keeps_its_extra_pods() -> None:
    """A gang already at minMember (one pod bound on a second node) has an elastic extra
    placed on the node the two small gangs want: it is not a gang to take out."""
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            pod("run-0").req(cpu=4).gang("run").on("n1"),
            pod("run-1").req(cpu=4).gang("run"),
            *(pod(f"small{i}-0").req(cpu=2).gang(f"small{i}") for i in range(2)),
        ],
        gangs=[gang("run", 1), *(gang(f"small{i}", 1).priority(100) for i in range(2))],
    )
    problem = prepare(s)
    assert next(g for g in problem.gangs if g.name == "run").running
    start = Placer(problem)
    extra = next(c for c in problem.classes if problem.gangs[c.gang].name == "run")
    start.place_on(extra, 0, 1)
    assert refilled(start, WEIGHTS, time.perf_counter() + FAR) is None


def test_the_placement_stages_end_refills_the_best_and_names_it() -> None:
    """``refilled_once``: the refilled placement joins the candidates, named after the one it
    came from, with the gangs its exchanges tried; deterministic solves do not refill (how
    far a pass gets would depend on the load), nor is a placement at its bound refilled."""
    problem = one_node(big_priority=10)
    for deterministic in (False, True):
        config = SolverConfig(time_limit_s=10.0, deterministic=deterministic)
        with ThreadPoolExecutor(max_workers=1) as pool:
            search = search_for(problem, config, pool)
            start = holding(problem, "big")
            search.solved = [start]
            search.origin[id(start)] = "node-classes-lp-rounded"
            best = exchanges.refilled_once(search, start)
            if deterministic:
                assert best is start
                continue
            assert sorted(best.placed) == ["small0-0", "small1-0"]
            assert best in search.solved
            assert search.origin[id(best)] == "node-classes-lp-rounded+refill"
            # The waiting gangs its exchanges tried are not tried again in the refilled one's.
            assert search.exchange_tried[id(best)] is search.exchange_tried[id(start)]
            search.bounds = [search.score(start)]  # the start at its bound
            assert exchanges.refilled_once(search, start) is start


def test_a_gang_of_several_pod_classes_makes_way_whole() -> None:
    """An MPI-like gang (a 1-cpu launcher and two 1.5-cpu workers, minMember 3) fills the
    node; two one-pod gangs of 2 cpu at a higher priority outweigh it: every pod of it
    goes, none is left below minMember, and the validator accepts the result."""
    s = state(
        nodes=[node("n0").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": "n0"})],
        pods=[
            pod("mpi-launcher").req(cpu=1).gang("mpi"),
            *(pod(f"mpi-worker-{i}").req(cpu="1500m").gang("mpi") for i in range(2)),
            *(pod(f"small{i}-0").req(cpu=2).gang(f"small{i}") for i in range(2)),
        ],
        gangs=[
            gang("mpi", 3).priority(10),
            *(gang(f"small{i}", 1).priority(100) for i in range(2)),
        ],
    )
    problem = prepare(s)
    start = holding(problem, "mpi")
    assert len(start.placed) == 3
    found = refilled(start, WEIGHTS, time.perf_counter() + FAR)
    assert found is not None
    assert sorted(found.placed) == ["small0-0", "small1-0"]
    decision = decision_from_placements(
        problem, found, SolverConfig(), scheduler="cpsat", status=SolveStatus.FEASIBLE
    )
    assert check(problem.state, decision) == []
