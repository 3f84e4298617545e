"""Weighted water-filling: exact, order-independent, capped."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from solver.fairness import deserved, water_fill


def test_uncapped_weights_split_in_proportion() -> None:
    assert water_fill(100, [1, 3], [None, None]) == [Fraction(25), Fraction(75)]


def test_exact_rationals_not_floats() -> None:
    shares = water_fill(10, [1, 2], [None, None])
    assert shares == [Fraction(10, 3), Fraction(20, 3)]
    assert sum(shares) == 10


def test_capped_queue_gets_its_cap_and_the_rest_flows_on() -> None:
    # Weight 3 would give q1 75, but it asks for 40: q0 takes the remaining 60.
    assert water_fill(100, [1, 3], [None, 40]) == [Fraction(60), Fraction(40)]


def test_cascading_caps() -> None:
    # Equal weights: 30 each at first; q0 stops at 10, then q1 at 35, q2 takes the rest.
    assert water_fill(90, [1, 1, 1], [10, 35, None]) == [10, 35, 45]


def test_caps_below_total_leave_remainder_unassigned() -> None:
    shares = water_fill(100, [1, 3], [10, 20])
    assert shares == [10, 20]
    assert 100 - sum(shares) == 70


def test_zero_cap_and_zero_weight_get_nothing() -> None:
    assert water_fill(12, [1, 1, 0], [0, None, None]) == [0, 12, 0]


def test_nothing_to_split() -> None:
    assert water_fill(0, [1, 2], [None, None]) == [0, 0]
    assert water_fill(10, [], []) == []


def test_order_independent() -> None:
    weights, caps = [2, 1, 5, 3], [7, None, 40, 12]
    forward = water_fill(50, weights, caps)
    order = [2, 0, 3, 1]
    permuted = water_fill(50, [weights[i] for i in order], [caps[i] for i in order])
    assert [permuted[order.index(i)] for i in range(4)] == forward


queues = st.lists(
    st.tuples(st.integers(1, 10), st.one_of(st.none(), st.integers(0, 200))),
    min_size=1,
    max_size=6,
)


@given(total=st.integers(0, 1000), qs=queues)
def test_water_fill_properties(total: int, qs: list[tuple[int, int | None]]) -> None:
    weights = [w for w, _ in qs]
    caps = [c for _, c in qs]
    shares = water_fill(total, weights, caps)
    assert len(shares) == len(qs)
    assert sum(shares) <= total
    for share, cap in zip(shares, caps, strict=True):
        assert share >= 0
        if cap is not None:
            assert share <= cap
    # With every queue capped, enough to go round fills each to its cap. (Not so with an
    # uncapped queue present: it shares by weight, so total=1, caps [None, 1] gives 1/2.)
    if all(c is not None for c in caps) and total >= sum(c or 0 for c in caps):
        assert shares == caps
    # A queue is short of its cap only if the whole total was handed out.
    if any(c is not None and s < c for s, c in zip(shares, caps, strict=True)):
        assert sum(shares) == total
    if any(c is None for c in caps):
        # An uncapped queue absorbs whatever the capped ones leave.
        assert sum(shares) == total
    reversed_shares = water_fill(total, weights[::-1], caps[::-1])
    assert reversed_shares[::-1] == shares


def test_deserved_per_resource_capped_by_demand_and_capability() -> None:
    # Resources: cpu (total 8), gpu (total 4). Weights 1:3.
    result = deserved(
        totals=[8, 4],
        weights=[1, 3],
        demands=[[8, 4], [8, 1]],
        capabilities=[[None, None], [4, None]],
    )
    # cpu: q1 deserves 6 by weight but its capability is 4; q0 gets the other 4.
    assert result[0][0] == 4 and result[1][0] == 4
    # gpu: q1 asks for only 1, so q0 receives the other 3.
    assert result[0][1] == 3 and result[1][1] == 1


def test_deserved_backlogged_queues_split_by_weight() -> None:
    result = deserved([100, 40], [1, 3], [[1000, 1000], [1000, 1000]], [[None] * 2] * 2)
    assert result == [[25, 10], [75, 30]]


def test_queue_shares_worked_by_hand() -> None:
    from solver.fairness import fair_resource, queue_shares
    from tests.builders import gang, node, pod, queue, state

    # 8 GPUs. Team a (weight 3) holds 2 and waits for 10 more; team b (weight 1) holds 2
    # and waits for nothing. Water-filling 8 by 3:1, capped at what each wants (12, 2):
    # b saturates at 2, a gets the other 6. Shares: a 2/6, b 2/2; default wants nothing.
    snapshot = state(
        nodes=[node("n0").cap(cpu=64, gpu=8)],
        pods=[
            pod("a-run").req(gpu=2).gang("a1").on("n0"),
            pod("a-wait").req(gpu=10).gang("a2"),
            pod("b-run").req(gpu=2).gang("b1").on("n0"),
        ],
        gangs=[gang("a1").queue("a"), gang("a2").queue("a"), gang("b1").queue("b")],
        queues=[queue("a", 3), queue("b", 1)],
    )
    resource = fair_resource(snapshot.nodes)
    assert resource == "nvidia.com/gpu"
    shares = queue_shares(snapshot, resource)
    assert (shares["a"].deserved, shares["a"].allocated, shares["a"].pending) == (6, 2, 10)
    assert (shares["b"].deserved, shares["b"].allocated) == (2, 2)
    assert shares["a"].share == 2 / 6 and shares["b"].share == 1.0
    assert shares["default"].deserved == 0 and shares["default"].share == 0.0
