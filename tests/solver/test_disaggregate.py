"""From node-class counts to nodes: what cannot be packed costs the least valuable gangs."""

from __future__ import annotations

import time

import numpy as np
import pytest

import solver.disaggregate
from benchmarks import instances
from solver.config import SolverConfig
from solver.disaggregate import disaggregate
from solver.encode import Encoding
from solver.grouped_lp import model_lp
from solver.model import ClusterState
from solver.placement import Placer
from solver.problem import Problem, prepare
from solver.repacked import repacked_bins
from solver.solution import decode_admitted, decode_counts, rounded_for_gangs
from tests.builders import gang, node, pod, state
from tests.solver.encodings import class_model

WEIGHTS = SolverConfig().weights


def two_nodes_one_class(low_cpu: str) -> ClusterState:
    """Two nodes of 4 cpu (one class); a high-priority gang of two 2.5-cpu pods, and a
    low-priority pod of ``low_cpu``."""
    return state(
        nodes=[
            node(f"n{i}").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            *(pod(f"high-{i}").req(cpu="2500m").gang("high") for i in range(2)),
            pod("low-0").req(cpu=low_cpu).gang("low"),
        ],
        gangs=[gang("high", 2).priority(1000), gang("low", 1)],
    )


def every_pod_asked(problem: Problem) -> tuple[dict[int, list[tuple[int, int]]], set[int]]:
    """Counts asking the one class of nodes for every pod, and every gang admitted."""
    return {cls.index: [(0, cls.count)] for cls in problem.classes}, {
        g.index for g in problem.gangs
    }


def class_encoding(problem: Problem) -> Encoding:
    return class_model(problem)[1]


def test_counts_a_class_cannot_hold_cost_the_lower_priority_gang() -> None:
    """Counts that fit the class's summed 8 cpu but not its nodes: the high-priority
    gang's two 2.5-cpu pods need both nodes, and then the low-priority 3-cpu pod fits on
    neither. Placing the largest pod first would keep it and withdraw the gang that
    matters more."""
    problem = prepare(two_nodes_one_class("3"))
    assert len(problem.node_classes) == 1
    enc = class_encoding(problem)
    counts = {cls.index: [(0, cls.count)] for cls in problem.classes}
    placer = disaggregate(problem, enc, counts, {g.index for g in problem.gangs}, WEIGHTS)
    assert sorted(placer.placed) == ["high-0", "high-1"]
    assert {placer.placed["high-0"], placer.placed["high-1"]} == {0, 1}


def test_a_class_is_packed_node_by_node_where_priority_first_strands_room() -> None:
    """Two 4-cpu nodes (one class); a high-priority gang of two 1-cpu pods and two 3-cpu
    pods. Priority first, pod by pod, puts both small pods on one node, and one 3-cpu pod
    is left out; filled node by node, each node takes one 3-cpu pod and one small pod."""
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=4, memory="8Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            *(pod(f"small-{i}").req(cpu=1).gang("small") for i in range(2)),
            *(pod(f"big-{i}").req(cpu=3).gang(f"big-{i}") for i in range(2)),
        ],
        gangs=[gang("small", 2).priority(1000), gang("big-0", 1), gang("big-1", 1)],
    )
    problem = prepare(s)
    assert len(problem.node_classes) == 1
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)
    placer = disaggregate(problem, enc, counts, admitted, WEIGHTS)
    assert sorted(placer.placed) == ["big-0", "big-1", "small-0", "small-1"]
    assert placer.placed["big-0"] != placer.placed["big-1"]
    by_priority = [(c, n) for c, [(_, n)] in counts.items()]
    by_priority.sort(key=lambda item: -problem.gangs[problem.classes[item[0]].gang].rank)
    spans = {problem.classes[c].spec: True for c, _ in by_priority}
    mask = np.ones(len(problem.nodes), dtype=np.bool_)
    pod_by_pod = solver.disaggregate._place_items(Placer(problem), by_priority, mask, spans)
    assert sum(map(len, pod_by_pod)) == 3


def test_a_class_the_first_packing_leaves_short_is_packed_again_pod_by_pod() -> None:
    """Two nodes of 4 cpu and 4 GiB (one class); high-priority pods of (1 cpu, 2 GiB) and
    (1 cpu, 1 GiB), and two low-priority pods of (4 cpu, 3 GiB), each its own gang.
    Matched to the room, the large pods take both nodes, and nothing else fits; priority
    first, the small pods share one node and one large pod the other: more worth."""
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=4, memory="4Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            pod("small-0").req(cpu=1, memory="2Gi").gang("small-0"),
            pod("small-1").req(cpu=1, memory="1Gi").gang("small-1"),
            *(pod(f"big-{i}").req(cpu=4, memory="3Gi").gang(f"big-{i}") for i in range(2)),
        ],
        gangs=[
            gang("small-0", 1).priority(1000),
            gang("small-1", 1).priority(1000),
            gang("big-0", 1),
            gang("big-1", 1),
        ],
    )
    problem = prepare(s)
    assert len(problem.node_classes) == 1
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)
    first_only = disaggregate(problem, enc, counts, admitted, WEIGHTS)
    assert sorted(first_only.placed) == ["big-0", "big-1"]
    placer = disaggregate(problem, enc, counts, admitted, WEIGHTS, reorder_budget_s=1.0)
    assert sorted(placer.placed) == ["big-0", "small-0", "small-1"]
    assert placer.placed["small-0"] == placer.placed["small-1"] != placer.placed["big-0"]
    # With the cycle's time used, the budget is not spent: the first pass stands.
    late = disaggregate(
        problem, enc, counts, admitted, WEIGHTS, reorder_budget_s=1.0, until=time.perf_counter()
    )
    assert sorted(late.placed) == ["big-0", "big-1"]
    soon = time.perf_counter() + 60
    in_time = disaggregate(
        problem, enc, counts, admitted, WEIGHTS, reorder_budget_s=1.0, until=soon
    )
    assert len(in_time.placed) == 3


def exact_packing_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The exact packing replaced by one that finds nothing in its time; returns the
    number of items of each packing tried."""
    calls: list[int] = []

    def pack(free: object, demands: list[object], *rest: object) -> None:
        calls.append(len(demands))

    monkeypatch.setattr(solver.disaggregate, "pack", pack)
    return calls


def one_pod_gangs(kinds: list[tuple[str, int, str, int, int]]) -> Problem:
    """Two nodes of 4 cpu and 4 GiB (one class); per (name, cpu, memory, pods, priority),
    that many one-pod gangs ``name-i``."""
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=4, memory="4Gi").label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            pod(f"{name}-{i}").req(cpu=cpu, memory=memory).gang(f"{name}-{i}")
            for name, cpu, memory, count, _ in kinds
            for i in range(count)
        ],
        gangs=[
            gang(f"{name}-{i}", 1).priority(priority) if priority else gang(f"{name}-{i}", 1)
            for name, _, _, count, priority in kinds
            for i in range(count)
        ],
    )
    problem = prepare(s)
    assert len(problem.node_classes) == 1
    return problem


def test_a_packing_no_order_improves_on_stays_as_it_was() -> None:
    """A high-priority (1 cpu, 2 GiB) pod, two (3, 1) and two (4, 2). Node by node: the
    high-priority pod and a (3, 1) on one node, a (4, 2) on the other. Priority first, pod
    by pod, places both (3, 1) and no (4, 2): less worth. What is restored is the first
    packing, not the order tried, nor the first order placed again pod by pod."""
    problem = one_pod_gangs(
        [("high", 1, "2Gi", 1, 1000), ("mid", 3, "1Gi", 2, 0), ("big", 4, "2Gi", 2, 0)]
    )
    enc = class_encoding(problem)
    rank = {"high": 0, "mid": 1, "big": 2}  # as given; pod by pod, this order fails
    items = [(cls.index, cls.count) for cls in problem.classes]
    items.sort(key=lambda it: rank[problem.gangs[problem.classes[it[0]].gang].name[:-2]])
    placer = Placer(problem)
    placed = solver.disaggregate._matched(placer, enc.bins[0], items)
    before = dict(placer.placed)
    assert sorted(before) == ["big-0", "high-0", "mid-0"]
    mask = np.ones(len(problem.nodes), dtype=np.bool_)
    spans = {problem.classes[c].spec: True for c, _ in items}
    order, again = solver.disaggregate._best_order(placer, items, placed, [items], mask, spans)
    assert order == items
    assert placer.placed == before
    assert sorted(p for pods in again for p in pods) == sorted(before)


def test_a_class_both_packings_leave_short_may_be_packed_largest_first() -> None:
    """Three high-priority 1-cpu pods and three low-priority 3-cpu pods: node by node and
    priority first both place the three small pods and one large one; largest first, a
    large and a small pod on each node: more worth."""
    problem = one_pod_gangs([("small", 1, "1Gi", 3, 1000), ("large", 3, "1Gi", 3, 0)])
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)
    first_only = disaggregate(problem, enc, counts, admitted, WEIGHTS)
    assert sorted(first_only.placed) == ["large-0", "small-0", "small-1", "small-2"]
    placer = disaggregate(problem, enc, counts, admitted, WEIGHTS, reorder_budget_s=1.0)
    assert sorted(placer.placed) == ["large-0", "large-1", "small-0", "small-1"]


def test_a_packing_the_exact_packing_cannot_improve_stays_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three high-priority (1 cpu, 1 GiB) pods and three low-priority (3, 2). Node by
    node, each node takes a (1, 1) and a (3, 2). When the exact packing finds nothing,
    that packing stands: the same counts placed again pod by pod, priority first, would
    put both (1, 1) on one node and only one (3, 2) beside them."""
    problem = one_pod_gangs([("small", 1, "1Gi", 3, 1000), ("mid", 3, "2Gi", 3, 0)])
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)
    calls = exact_packing_finds_nothing(monkeypatch)
    placer = disaggregate(problem, enc, counts, admitted, WEIGHTS, pack_budget_s=1.0)
    assert calls  # the exact packing was tried
    assert sorted(placer.placed) == ["mid-0", "mid-1", "small-0", "small-1"]
    assert placer.placed["small-0"] != placer.placed["small-1"]


def test_the_time_spared_is_what_the_first_passes_to_come_leave() -> None:
    # 100 pods passed in 1 s, 100 to come: 1 s more at that pace.
    pace = solver.disaggregate._Pace(200, time.perf_counter() + 0.5)
    pace.passed(100, 1.0)
    assert not pace.spare()
    pace = solver.disaggregate._Pace(200, time.perf_counter() + 30)
    pace.passed(100, 1.0)
    assert pace.spare()
    pace.passed(100, 1.0)  # none to come: any time left is spare
    assert pace.spare()
    assert not solver.disaggregate._Pace(0, time.perf_counter() - 1).spare()
    assert solver.disaggregate._Pace(10, None).spare()  # no deadline


def test_the_steps_after_the_classes_are_kept_their_time() -> None:
    """100 of 200 pods passed in 1 s: the 100 to come need 1 s, and the steps after the
    classes TAIL_PASSES x 2 s (as long as all the first passes take)."""
    tail = solver.disaggregate.TAIL_PASSES * 2.0
    assert tail > 0
    pace = solver.disaggregate._Pace(200, time.perf_counter() + 1.0 + tail + 5.0)
    pace.passed(100, 1.0)
    assert 4.5 < pace.spare_s() <= 5.0
    pace = solver.disaggregate._Pace(200, time.perf_counter() + 1.0 + tail / 2)
    pace.passed(100, 1.0)
    assert not pace.spare()  # the passes to come fit; the steps after them do not
    pace.passed(100, 1.0)  # every class passed: the steps after them still need theirs
    assert pace.spare_s() < 0


def test_no_reorder_starts_that_the_time_to_spare_does_not_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The class that largest first packs better (``test_a_class_both_packings_leave_short
    _may_be_packed_largest_first``), with an hour to its deadline: reordered where a
    reorder takes REORDER_PASSES of its first pass, kept as packed where it would take
    more than the hour (the reorders' own budget is a whole second either way)."""
    problem = one_pod_gangs([("small", 1, "1Gi", 3, 1000), ("large", 3, "1Gi", 3, 0)])
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)

    def decided() -> list[str]:
        until = time.perf_counter() + 3600
        placer = disaggregate(
            problem, enc, counts, admitted, WEIGHTS, reorder_budget_s=1.0, until=until
        )
        return sorted(placer.placed)

    assert decided() == ["large-0", "large-1", "small-0", "small-1"]
    monkeypatch.setattr(solver.disaggregate, "REORDER_PASSES", 1e12)
    assert decided() == ["large-0", "small-0", "small-1", "small-2"]


def test_an_exact_packing_is_given_no_more_than_the_time_to_spare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A class the first pass leaves short, a second for its exact packing and an hour to
    the deadline: given what the pace leaves beyond the first passes and the steps after
    them where that is less (4 ms here), and not tried where the steps after the classes
    need more than the hour."""
    problem = one_pod_gangs([("small", 1, "1Gi", 3, 1000), ("mid", 3, "2Gi", 3, 0)])
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)
    limits: list[float] = []

    def pack(
        free: object,
        demands: list[object],
        counts: object,
        values: object,
        limit: float,
        *rest: object,
    ) -> None:
        limits.append(limit)

    monkeypatch.setattr(solver.disaggregate, "pack", pack)

    def packed() -> None:
        until = time.perf_counter() + 3600
        disaggregate(problem, enc, counts, admitted, WEIGHTS, pack_budget_s=1.0, until=until)

    packed()
    assert len(limits) == 1 and limits[0] == pytest.approx(solver.disaggregate.PACK_BIN_S)
    limits.clear()
    with monkeypatch.context() as patch:
        patch.setattr(solver.disaggregate._Pace, "spare_s", lambda self: 0.004)
        packed()
    assert len(limits) == 1 and 0 < limits[0] <= 0.004
    limits.clear()
    monkeypatch.setattr(solver.disaggregate, "TAIL_PASSES", 1e12)
    packed()
    assert limits == []


def test_a_class_is_repacked_with_what_its_nodes_could_not_hold_taken_out() -> None:
    problem = prepare(two_nodes_one_class("3"))
    enc = class_encoding(problem)
    counts = {cls.index: [(0, cls.count)] for cls in problem.classes}
    placer = disaggregate(problem, enc, counts, {g.index for g in problem.gangs}, WEIGHTS)
    bins = repacked_bins(problem, enc, counts, placer)
    assert bins is not None
    cpu = problem.r("cpu")
    assert enc.bins[0].free[cpu] == 8000
    assert bins[0].free[cpu] == 5000  # the 3-cpu pod left out
    assert bins[0].nodes == enc.bins[0].nodes


def test_counts_that_all_found_a_node_need_no_repacking() -> None:
    problem = prepare(two_nodes_one_class("1500m"))
    enc = class_encoding(problem)
    counts = {cls.index: [(0, cls.count)] for cls in problem.classes}
    placer = disaggregate(problem, enc, counts, {g.index for g in problem.gangs}, WEIGHTS)
    assert len(placer.placed) == 3
    assert repacked_bins(problem, enc, counts, placer) is None


def test_a_class_too_large_to_pack_exactly_keeps_the_greedy_packing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above PACK_MAX_PAIRS (nodes x items) no exact packing is tried: at 1,000 nodes such
    models found nothing within their time, and building them cost as much again."""
    problem = prepare(two_nodes_one_class("3"))
    enc = class_encoding(problem)
    counts, admitted = every_pod_asked(problem)
    calls = exact_packing_finds_nothing(monkeypatch)
    disaggregate(problem, enc, counts, admitted, WEIGHTS, pack_budget_s=1.0)
    assert calls == [2]  # 2 nodes x 2 items: tried
    monkeypatch.setattr(solver.disaggregate, "PACK_MAX_PAIRS", 3)
    calls.clear()
    placer = disaggregate(problem, enc, counts, admitted, WEIGHTS, pack_budget_s=1.0)
    assert calls == []
    assert sorted(placer.placed) == ["high-0", "high-1"]


def test_a_deterministic_disaggregation_does_not_read_the_clock() -> None:
    """Real-shaped 200 nodes, seed 12, the class LP's optimum rounded: a deadline already
    past once changed a deterministic decision (the short gangs' completion by
    displacement, and the top-up, read it); deterministic, it is ignored."""
    problem = prepare(instances.realistic(12, 200, 300))
    enc = class_encoding(problem)
    lp = model_lp(enc, 30.0)
    assert lp is not None
    rounded = rounded_for_gangs(enc, lp.values)
    counts, admitted = decode_counts(enc, rounded), decode_admitted(enc, rounded)

    def decided(until: float | None) -> dict[str, int]:
        placer = disaggregate(
            problem,
            enc,
            counts,
            admitted,
            WEIGHTS,
            pack_budget_s=0.1,
            deterministic=True,
            reorder_budget_s=0.2,
            until=until,
            lp_budget_s=0.15,
        )
        return placer.placed

    assert decided(time.perf_counter() - 1.0) == decided(None)
