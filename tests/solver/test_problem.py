"""prepare(): the one grouped, checked view every scheduler reads."""

from __future__ import annotations

import warnings

import numpy as np

from solver.config import MAX_WEIGHT, SHARE_SCALE, ObjectiveWeights, SolverConfig
from solver.model import CPU, DEFAULT_QUEUE, MEMORY, PODS
from solver.problem import prepare
from solver.queue_info import NO_CAP
from solver.schedulers import schedule
from solver.units import MAX_SHARE_UNITS, share_units
from tests.builders import gang, node, pod, pods_of, queue, state


def test_identical_pods_of_a_gang_form_one_class() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=8, memory="16Gi")],
        pods=[*pods_of("g", 4, cpu=1, memory="1Gi"), pod("big").req(cpu=2).gang("g")],
        gangs=[gang("g", min_member=5)],
    )
    problem = prepare(s)
    (info,) = problem.gangs
    assert info.name == "g" and info.need == 5
    assert len(info.classes) == 2
    counts = sorted(problem.classes[c].count for c in info.classes)
    assert counts == [1, 4]
    four = next(problem.classes[c] for c in info.classes if problem.classes[c].count == 4)
    assert set(four.pods) == {"g-0", "g-1", "g-2", "g-3"}
    assert four.demand[problem.r(CPU)] == 1000
    assert four.demand[problem.r(PODS)] == 1
    assert four.feasible.tolist() == [True]


def test_a_gangs_pods_alternating_between_specs_form_one_class_per_spec() -> None:
    # Pending pods in name order: small, big, small, big. Each spec's pods are one
    # class, in that order, however the runs break.
    s = state(
        nodes=[node("n1").cap(cpu=16)],
        pods=[pod(f"g-{i}").req(cpu=1 + i % 2).gang("g") for i in range(4)],
        gangs=[gang("g", min_member=4)],
    )
    problem = prepare(s)
    assert [problem.classes[c].pods for c in problem.gangs[0].classes] == [
        ("g-0", "g-2"),
        ("g-1", "g-3"),
    ]


def test_pods_of_different_gangs_never_share_a_class() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[*pods_of("a", 2, cpu=1), *pods_of("b", 2, cpu=1)],
        gangs=[gang("a"), gang("b")],
    )
    assert len(prepare(s).classes) == 2


def test_partially_bound_gang_needs_only_the_rest() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[
            pod("g-0").req(cpu=1).gang("g").on("n1"),
            pod("g-1").req(cpu=1).gang("g").on("n1"),
            *[pod(f"g-{i}").req(cpu=1).gang("g") for i in range(2, 6)],
        ],
        gangs=[gang("g", min_member=3)],
    )
    (info,) = prepare(s).gangs
    assert info.bound == 2
    assert info.need == 1
    assert not info.running
    assert sum(prepare(s).classes[c].count for c in info.classes) == 4


def test_gang_at_min_member_runs_and_its_pending_pods_are_extras() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=[pod("g-0").req(cpu=1).gang("g").on("n1"), pod("g-1").req(cpu=1).gang("g")],
        gangs=[gang("g", min_member=1)],
    )
    (info,) = prepare(s).gangs
    assert info.running and info.need == 0


def test_bound_pods_reduce_free_capacity_and_mark_node_used() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=4, memory="8Gi", pods=10), node("n2").cap(cpu=4)],
        pods=[
            pod("a").req(cpu="1500m", memory="1Gi").on("n1"),
            pod("b").req(cpu="500m").on("n1"),
            pod("c").req(cpu=1),
        ],
    )
    problem = prepare(s)
    cpu, mem, slots = problem.r(CPU), problem.r(MEMORY), problem.r(PODS)
    assert problem.free[0, cpu] == 2000
    assert problem.free[0, mem] == 7 * 1024  # memory is modelled in MiB
    assert problem.free[0, slots] == 8
    assert problem.free[1].tolist() == problem.allocatable[1].tolist()
    assert problem.empty.tolist() == [False, True]
    # Bound pods of the implicit gangs count towards what the default queue holds.
    (default,) = problem.queues
    assert default.name == DEFAULT_QUEUE
    assert default.used[cpu] == 2000
    assert default.demand[cpu] == 3000


def test_pod_naming_unknown_gang_waits_with_a_reason() -> None:
    s = state(nodes=[node("n1").cap(cpu=4)], pods=[pod("p").req(cpu=1).gang("ghost")])
    problem = prepare(s)
    assert "ghost" in problem.waiting_pods["p"]
    assert "not found" in problem.waiting_pods["p"]
    assert problem.gangs == [] and problem.classes == []


def test_unknown_queue_makes_the_gang_invalid() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=4)],
        pods=pods_of("g", 2, cpu=1),
        gangs=[gang("g", min_member=2).queue("research")],
        queues=[queue("prod")],
    )
    problem = prepare(s)
    assert "'research'" in problem.invalid["g"]
    assert problem.gang("g") is None


def test_min_member_above_pod_count_is_not_enough_tasks() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=8)],
        pods=pods_of("g", 3, cpu=1),
        gangs=[gang("g", min_member=4)],
    )
    problem = prepare(s)
    assert problem.invalid["g"].startswith("NotEnoughTasks")
    assert "3 pod(s)" in problem.invalid["g"] and "4" in problem.invalid["g"]
    assert problem.schedulable_gangs() == []


def test_pod_without_gang_is_a_gang_of_one_in_default_queue() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=4)],
        pods=[pod("solo").req(cpu=1).priority(7)],
        queues=[queue("other", weight=2)],
    )
    problem = prepare(s)
    info = problem.gang("pod:solo")
    assert info is not None
    assert info.min_member == 1 and info.need == 1 and info.priority == 7
    assert problem.queues[info.queue].name == DEFAULT_QUEUE
    assert problem.queues[info.queue].weight == 1
    assert [q.name for q in problem.queues] == ["other", DEFAULT_QUEUE]


def test_bound_pods_of_no_gang_are_held_by_the_default_queue() -> None:
    """DaemonSet pods and other bound pods of no gang: no gang each, but what they hold
    counts against the default queue, which then exists even if nobody declared it."""
    s = state(
        nodes=[node("n1").cap(cpu=4, memory="8Gi"), node("n2").cap(cpu=4, memory="8Gi")],
        pods=[
            pod("ds-n1").req(cpu="100m", memory="64Mi").on("n1"),
            pod("ds-n2").req(cpu="100m", memory="64Mi").on("n2"),
            pod("web").req(cpu=1).on("n1"),
            *pods_of("train", 2, cpu=1),
        ],
        gangs=[gang("train", 2).queue("other")],
        queues=[queue("other", weight=2)],
    )
    problem = prepare(s)
    assert [g.name for g in problem.gangs] == ["train"]
    assert [q.name for q in problem.queues] == ["other", DEFAULT_QUEUE]
    held = problem.queues[1].used
    assert held[problem.r(CPU)] == 1200
    assert held[problem.r(PODS)] == 3
    assert not problem.queues[0].used.any()
    assert problem.free[0, problem.r(CPU)] == 2900


def _zoned_nodes() -> list[object]:
    return [
        node("a1").cap(cpu=4).label(zone="a", host="a1"),
        node("b1").cap(cpu=4).label(zone="b", host="b1"),
        node("a2").cap(cpu=4).label(zone="a", host="a2"),
        node("a3").cap(cpu=8).label(zone="a", host="a3"),
        node("a4").cap(cpu=4).label(zone="a", host="a4").taint("x", "y", "NoSchedule"),
        node("a5").cap(cpu=4).label(zone="a", host="a5").taint("soft", "", "PreferNoSchedule"),
    ]


def test_nodes_split_only_by_what_pending_pods_read() -> None:
    # p reads the zone, q does not tolerate taint x: zone b, the bigger node and the
    # tainted node are told apart; the unique host labels and the soft taint are not.
    pods = [pod("p").req(cpu=1).selector(zone="a"), pod("q").req(cpu=1)]
    s = state(nodes=_zoned_nodes(), pods=pods)
    assert sorted(prepare(s).node_classes) == [[0, 2, 5], [1], [3], [4]]


def test_nodes_no_pending_pod_may_use_share_a_class() -> None:
    # Zone b and the tainted node reject the only pending pod alike: one class.
    s = state(nodes=_zoned_nodes(), pods=[pod("p").req(cpu=1).selector(zone="a")])
    assert sorted(prepare(s).node_classes) == [[0, 2, 5], [1, 4], [3]]


def test_labels_and_taints_nobody_reads_never_split_a_class() -> None:
    # Nothing pending selects a zone and the only pod tolerates x: same allocatable,
    # same feasibility, one class.
    s = state(nodes=_zoned_nodes(), pods=[pod("p").req(cpu=1).tolerate("x", "Exists")])
    assert sorted(prepare(s).node_classes) == [[0, 1, 2, 4, 5], [3]]


def test_nodes_a_few_mib_apart_share_a_class_and_a_bigger_type_does_not() -> None:
    s = state(
        nodes=[
            node("a").cap(cpu=16, memory="62Gi"),
            node("b").cap(cpu=16, memory=f"{62 * 1024 - 37}Mi"),
            node("c").cap(cpu=16, memory=f"{62 * 1024 - 12}Mi"),
            node("d").cap(cpu=16, memory="56Gi"),
            node("e").cap(cpu=15, memory="62Gi"),
        ],
        pods=[pod("p").req(cpu=1)],
    )
    problem = prepare(s)
    assert sorted(problem.node_classes) == [[0, 1, 2], [3], [4]]


def test_a_cordoned_node_is_its_own_class() -> None:
    s = state(
        nodes=[node("a").cap(cpu=4), node("b").cap(cpu=4).cordon(), node("c").cap(cpu=4)],
        pods=[pod("p").req(cpu=1)],
    )
    assert sorted(prepare(s).node_classes) == [[0, 2], [1]]


def test_feasibility_is_per_node() -> None:
    s = state(
        nodes=[node("a").label(zone="a"), node("b").label(zone="b"), node("c").cordon()],
        pods=[pod("p").selector(zone="a")],
    )
    problem = prepare(s)
    (cls,) = problem.classes
    assert cls.feasible.tolist() == [True, False, False]
    assert problem.schedulable_node_count() == 2


def test_deserved_of_backlogged_queues_follows_weights() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=8, memory="32Gi"), node("n2").cap(cpu=8, memory="32Gi")],
        pods=[*pods_of("ga", 40, cpu=1, memory="2Gi"), *pods_of("gb", 40, cpu=1, memory="2Gi")],
        gangs=[gang("ga").queue("a"), gang("gb").queue("b")],
        queues=[queue("a", weight=1), queue("b", weight=3)],
    )
    problem = prepare(s)
    a, b = problem.queues
    assert (a.name, b.name) == ("a", "b")
    cpu, mem = problem.r(CPU), problem.r(MEMORY)
    assert problem.totals[cpu] == 16000
    assert (a.deserved[cpu], b.deserved[cpu]) == (4000, 12000)
    assert (a.deserved[mem], b.deserved[mem]) == (16 * 1024, 48 * 1024)  # MiB


def test_capability_is_recorded_and_room_subtracts_use() -> None:
    s = state(
        nodes=[node("n1").cap(cpu=16)],
        pods=[pod("g-0").req(cpu=2).gang("g").on("n1"), pod("g-1").req(cpu=2).gang("g")],
        gangs=[gang("g").queue("q")],
        queues=[queue("q").capability(cpu=3)],
    )
    problem = prepare(s)
    (q,) = problem.queues
    cpu, slots = problem.r(CPU), problem.r(PODS)
    assert q.capability[cpu] == 3000 and q.capability[slots] == NO_CAP
    assert q.room()[cpu] == 1000
    assert q.room()[slots] > 10**15


def test_cordoned_nodes_do_not_count_towards_totals() -> None:
    s = state(nodes=[node("a").cap(cpu=4), node("b").cap(cpu=6).cordon()])
    problem = prepare(s)
    assert problem.totals[problem.r(CPU)] == 4000
    assert np.array_equal(problem.allocatable[:, problem.r(CPU)], [4000, 6000])


def test_priority_ranks() -> None:
    s = state(
        nodes=[node("n").cap(cpu=8)],
        pods=[*pods_of("lo", 1, cpu=1), *pods_of("mid", 1, cpu=1), *pods_of("hi", 1, cpu=1)],
        gangs=[gang("lo").priority(-3), gang("mid").priority(5), gang("hi").priority(100)],
    )
    problem = prepare(s)
    assert {g.name: g.rank for g in problem.gangs} == {"lo": 0, "mid": 1, "hi": 2}


def test_byte_resources_round_requests_up_and_capacity_down() -> None:
    """Modelled in MiB, a node never looks bigger, nor a pod smaller, than it is."""
    s = state(
        nodes=[node("n").cap(cpu=4, memory=2**30 + 2**19)],  # 1 GiB + half a MiB
        pods=[pod("p").req(cpu=1, memory=2**20 + 1).gang("g")],
        gangs=[gang("g", 1)],
    )
    problem = prepare(s)
    mem = problem.r(MEMORY)
    assert problem.allocatable[0, mem] == 1024
    assert problem.classes[0].demand[mem] == 2


def test_share_units_saturate_where_a_quantity_dwarfs_its_total() -> None:
    # An API server stores "1e30"; against a 1m total its share would overflow int64.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        units = share_units(np.array([2**62, 5, -(2**62)]), np.array([1, 10, 1]))
    assert units.tolist() == [MAX_SHARE_UNITS, SHARE_SCALE // 2, -MAX_SHARE_UNITS]
    assert int(units[:1].repeat(10_000).sum()) > 0  # sums of saturated shares stay int64
    one = np.array([2**62, 3])  # a queue's dominant resource: numpy scalars
    assert int(share_units(one[0], one[1])) == MAX_SHARE_UNITS


def test_a_pod_asking_more_than_the_cluster_is_worth_at_most_the_cluster() -> None:
    # Its share saturated at 65,536 clusters, the objective's prices (value x priority
    # x gang size, at the heaviest weights) left int64 and every scheduler raised.
    weights = ObjectiveWeights(**dict.fromkeys(ObjectiveWeights.model_fields, MAX_WEIGHT))
    huge = {"example.com/x": 10**15}
    st_ = state(
        [node("n0").cap(cpu=4, pods=2000, **{"example.com/x": 1})],
        [
            *(pod(f"a-{i}").req(cpu="1m", **huge).gang("a") for i in range(200)),
            pod("lo").req(cpu="1m").gang("lo").on("n0"),
        ],
        [gang("a", 200).priority(10), gang("lo", 1).priority(1)],
        [queue()],
    )
    assert {c.value for c in prepare(st_).classes} == {SHARE_SCALE}
    for scheduler in ("cpsat", "greedy", "gang-greedy"):
        decision = schedule(st_, scheduler, SolverConfig(weights=weights, time_limit_s=0.5))
        assert "a" not in decision.admitted
