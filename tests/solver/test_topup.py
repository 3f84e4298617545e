"""The room a candidate leaves, filled as the objective prices gangs: what each queue
already got from the candidate counts, and so does the fairness a gang buys."""

from __future__ import annotations

import time

import pytest

from benchmarks import instances
from solver.baselines import allocate_gangs
from solver.config import SolverConfig
from solver.decision import SolveStatus
from solver.decode import decision_from_placements
from solver.model import ClusterState
from solver.objective import coefficients, evaluate, shortfall
from solver.placement import Placer, Policy
from solver.problem import Problem, prepare
from solver.search import gang_greedy_placer
from solver.topup import fill_by_worth, gang_prices, topped_up, worth
from solver.validate import check
from tests.builders import gang, node, pod, queue, state

CONFIG = SolverConfig()
WEIGHTS = CONFIG.weights


def two_queues_one_slot() -> ClusterState:
    """One 4-cpu node; queues a and b weighted alike; a-first and a-second in queue a and
    b-only in queue b, one 2-cpu pod each: a's deserved share is 2 cpu, and so is b's."""
    return state(
        nodes=[node("n0").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": "n0"})],
        pods=[
            pod("a-first-0").req(cpu=2).gang("a-first"),
            pod("a-second-0").req(cpu=2).gang("a-second"),
            pod("b-only-0").req(cpu=2).gang("b-only"),
        ],
        gangs=[
            gang("a-first", 1).queue("a"),
            gang("a-second", 1).queue("a"),
            gang("b-only", 1).queue("b"),
        ],
        queues=[queue("a").build(), queue("b").build()],
    )


def with_a_first_placed(problem: Problem) -> Placer:
    placer = Placer(problem)
    first = next(c for c in problem.classes if problem.gangs[c.gang].name == "a-first")
    placer.place_on(first, 0, 1)
    return placer


def score(problem: Problem, placer: Placer) -> int:
    return sum(evaluate(problem, placer.placed, WEIGHTS).values())


def gangs_placed(problem: Problem, placer: Placer) -> set[str]:
    of_pod = problem.class_of_pod()
    return {problem.gangs[problem.classes[of_pod[p]].gang].name for p in placer.placed}


def test_the_room_left_goes_to_the_queue_the_candidate_left_short() -> None:
    """The candidate gave queue a its deserved 2 cpu and b nothing: the 2 cpu left go to
    b-only, which buys b's shortfall; kube-batch's order, reading shares from before the
    cycle (both queues at 0), gives them to a-second."""
    problem = prepare(two_queues_one_slot())
    placer = topped_up(problem, with_a_first_placed(problem), WEIGHTS)
    assert gangs_placed(problem, placer) == {"a-first", "b-only"}

    as_kube_batch = with_a_first_placed(problem)
    rest = [g for g in problem.gangs if g.name != "a-first"]
    allocate_gangs(problem, as_kube_batch, rest, Policy.PACK)
    assert gangs_placed(problem, as_kube_batch) == {"a-first", "a-second"}
    assert score(problem, placer) > score(problem, as_kube_batch)


def test_a_queue_filled_by_the_fill_itself_stops_buying_fairness() -> None:
    """Nothing placed yet, room for two of the three gangs: the first of queue a fills
    a's deserved share, so the second slot goes to b, not to a's second gang."""
    problem = prepare(two_queues_one_slot())
    placer = Placer(problem)
    fill_by_worth(problem, placer, list(problem.gangs), WEIGHTS)
    assert gangs_placed(problem, placer) in ({"a-first", "b-only"}, {"a-second", "b-only"})


def dense_small_or_large() -> ClusterState:
    """One 4-cpu node; in queue a a 4-cpu gang (priority 100), in queue b a 1-cpu gang
    (priority 200): the small one is worth more per cpu, the large one more in all."""
    return state(
        nodes=[node("n0").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": "n0"})],
        pods=[pod("large-0").req(cpu=4).gang("large"), pod("small-0").req(cpu=1).gang("small")],
        gangs=[
            gang("large", 1).queue("a").priority(100),
            gang("small", 1).queue("b").priority(200),
        ],
        queues=[queue("a").build(), queue("b").build()],
    )


def test_the_better_of_the_two_orders_stands() -> None:
    """By worth per share the small gang goes first and the large one no longer fits;
    kube-batch's order (queue a first, both at share 0) places the large one, which
    scores more: the top-up keeps that."""
    problem = prepare(dense_small_or_large())
    by_worth = Placer(problem)
    fill_by_worth(problem, by_worth, list(problem.gangs), WEIGHTS)
    assert gangs_placed(problem, by_worth) == {"small"}
    topped = topped_up(problem, Placer(problem), WEIGHTS)
    assert gangs_placed(problem, topped) == {"large"}
    assert score(problem, topped) > score(problem, by_worth)


def test_a_top_up_past_its_deadline_fills_by_worth_only() -> None:
    """The cycle out of time (``until`` passed): kube-batch's order, which would place the
    large gang here, is not filled; by worth, the small one. In time, the better of the
    two stands as before."""
    problem = prepare(dense_small_or_large())
    late = topped_up(problem, Placer(problem), WEIGHTS, until=time.perf_counter() - 1)
    assert gangs_placed(problem, late) == {"small"}
    in_time = topped_up(problem, Placer(problem), WEIGHTS, until=time.perf_counter() + 60)
    assert gangs_placed(problem, in_time) == {"large"}


@pytest.mark.parametrize("seed", [0, 3])
def test_a_top_up_never_lowers_the_objective_nor_leaves_a_partial_gang(seed: int) -> None:
    """Real-shaped 40 nodes x 100 gangs, every other gang gang-greedy placed taken out:
    the top-up scores at least what it started from, every gang it touches reaches its
    minMember, and the decision passes the validator."""
    problem = prepare(instances.realistic(seed, 40, 100))
    placer = gang_greedy_placer(problem)
    of_pod = problem.class_of_pod()
    taken = [p for p in placer.placed if problem.classes[of_pod[p]].gang % 2]
    placer.unplace(taken)
    before = score(problem, placer)
    topped = topped_up(problem, placer, WEIGHTS)
    assert score(problem, topped) >= before
    for g in problem.gangs:
        pods = sum(topped.next_pod[c] for c in g.classes)
        assert pods == 0 or topped.reached(g), g.name
    decision = decision_from_placements(
        problem, topped, CONFIG, scheduler="cpsat", status=SolveStatus.FEASIBLE
    )
    assert check(problem.state, decision) == []


def test_a_gang_buys_fairness_only_up_to_what_its_queue_lacks() -> None:
    """With a-first placed, queue a is at its deserved share and b lacks 2 cpu: b-only is
    worth its base price and b's shortfall, a-second its base price alone."""
    problem = prepare(two_queues_one_slot())
    prices = gang_prices(problem, WEIGHTS)
    per_unit = coefficients(problem, WEIGHTS).shortfall
    by_name = {g.name: g for g in problem.gangs}
    short = shortfall(problem, WEIGHTS, with_a_first_placed(problem).next_pod)
    b_only, a_second = by_name["b-only"], by_name["a-second"]
    assert short[a_second.queue] == 0
    assert short[b_only.queue] == prices.units[b_only.index] > 0
    base = prices.base
    assert worth(a_second, prices, short, per_unit) == base[a_second.index]
    assert worth(b_only, prices, short, per_unit) == (
        base[b_only.index] - per_unit * prices.units[b_only.index]
    )
    assert base[b_only.index] == base[a_second.index]
