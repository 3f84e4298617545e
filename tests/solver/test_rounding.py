"""The LP's optimum as a decision: rounded down, with each admitted gang's pods that
rounding took below its need put back (``solution.rounded_for_gangs``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.encode import Encoding, demand_matrix, queue_of_pair
from solver.problem import prepare
from solver.relaxation import FloatArray
from solver.solution import decode_admitted, decode_counts, rounded_down, rounded_for_gangs
from tests.builders import gang, node, pod, pods_of, queue, state
from tests.solver.encodings import class_model


def two_classes(capability_cpu: int | None = None) -> Encoding:
    """Two classes of nodes (their memory differs), one node each; gang a needs both its
    1-cpu pods, gang b all three of its own."""
    q = queue("q", 1)
    if capability_cpu is not None:
        q = q.capability(cpu=capability_cpu)
    s = state(
        nodes=[
            node("small").cap(cpu=4, memory="16Gi"),
            node("large").cap(cpu=4, memory="32Gi"),
        ],
        pods=[*pods_of("a", 2, cpu=1), *pods_of("b", 3, cpu=1)],
        gangs=[gang("a", 2).queue("q"), gang("b", 3).queue("q")],
        queues=[q],
    )
    _, enc = class_model(prepare(s))
    return enc


def shape_of(enc: Encoding, name: str) -> int:
    return next(
        s
        for s, shape in enumerate(enc.shapes.shapes)
        if enc.problem.gangs[shape.gangs[0]].name == name
    )


def pair(enc: Encoding, name: str, node_name: str) -> int:
    """The count variable of gang ``name``'s pods on the class holding ``node_name``."""
    s = shape_of(enc, name)
    n = next(i for i, n in enumerate(enc.problem.nodes) if n.name == node_name)
    return next(v for v in enc.shape_span(s) if n in enc.bins[int(enc.pairs.bin[v])].nodes)


def lp_values(enc: Encoding, admitted: dict[str, float], counts: dict[int, float]) -> FloatArray:
    values = np.zeros(len(enc.rows.low))
    for name, value in admitted.items():
        values[enc.admitted[shape_of(enc, name)]] = value
    for v, value in counts.items():
        values[v] = value
    return values


def test_a_gang_split_in_fractions_keeps_the_pods_it_needs() -> None:
    """Gang a admitted, 1.5 pods on one class and 0.5 on the other: rounded down it asks
    for 1 of its 2, and would be withdrawn; the fraction rounded up places it whole."""
    enc = two_classes()
    small, large = pair(enc, "a", "small"), pair(enc, "a", "large")
    values = lp_values(enc, {"a": 1.0}, {small: 1.4, large: 0.6})
    assert rounded_down(values)[small] + rounded_down(values)[large] == 1
    rounded = rounded_for_gangs(enc, values)
    assert (rounded[small], rounded[large]) == (1, 1)  # the larger fraction went up
    problem = enc.problem
    a = next(g.index for g in problem.gangs if g.name == "a")
    assert decode_admitted(enc, rounded) == {a}
    per_class = decode_counts(enc, rounded)
    assert sum(n for c in problem.gangs[a].classes for _, n in per_class[c]) == 2


def test_gangs_not_admitted_and_whole_gangs_are_left_as_rounded_down() -> None:
    enc = two_classes()
    a_small, b_small = pair(enc, "a", "small"), pair(enc, "b", "small")
    b_large = pair(enc, "b", "large")
    # a: not admitted (0.5), its pods 0.5 and 0.5; b: whole, 3 on one class plus a fraction.
    values = lp_values(
        enc,
        {"a": 0.5, "b": 1.0},
        {a_small: 0.5, pair(enc, "a", "large"): 0.5, b_small: 3.0, b_large: 0.4},
    )
    assert rounded_for_gangs(enc, values) == rounded_down(values)


def test_no_pod_is_put_back_beyond_the_queue_capability() -> None:
    """The queue may take 1 cpu: of gang a's two 1-cpu pods, one fits it, the other is
    not put back, and a stays short (the disaggregation withdraws it)."""
    enc = two_classes(capability_cpu=1)
    small, large = pair(enc, "a", "small"), pair(enc, "a", "large")
    values = lp_values(enc, {"a": 1.0}, {small: 0.5, large: 0.5})
    rounded = rounded_for_gangs(enc, values)
    assert rounded[small] + rounded[large] == 1
    values = lp_values(enc, {"a": 1.0}, {small: 1.0, large: 0.5})
    assert rounded_for_gangs(enc, values)[large] == 0


def test_a_class_never_gets_more_pods_than_its_admitted_gangs_have() -> None:
    """Two alike gangs of a driver and two workers, 1.5 of them admitted by the LP: one
    is. Its workers' counts, rounded down, already hold what one gang has of them (2),
    though their fraction is the largest: the missing pod is its driver."""
    s = state(
        nodes=[
            node("small").cap(cpu=8, memory="16Gi"),
            node("large").cap(cpu=8, memory="32Gi"),
        ],
        pods=[
            p
            for name in ("c1", "c2")
            for p in (
                pod(f"{name}-driver").req(cpu=1).gang(name).build(),
                *(pod(f"{name}-w{i}").req(cpu=2).gang(name).build() for i in range(2)),
            )
        ],
        gangs=[gang("c1", 3), gang("c2", 3)],
    )
    _, enc = class_model(prepare(s))
    (shape,) = [s for s, sh in enumerate(enc.shapes.shapes) if sh.size == 2]
    driver, workers = sorted(
        enc.shapes.shapes[shape].classes, key=lambda c: enc.shapes.classes[c].demand[0]
    )
    values = np.zeros(len(enc.rows.low))
    values[enc.admitted[shape]] = 1.5
    d_start, d_end = enc.class_span[driver]
    w_start, w_end = enc.class_span[workers]
    assert (d_end - d_start, w_end - w_start) == (2, 2)  # each class on both classes of nodes
    values[[d_start, d_start + 1]] = [0.2, 0.3]
    values[[w_start, w_start + 1]] = [1.9, 1.1]
    rounded = rounded_for_gangs(enc, values)
    assert rounded[w_start : w_start + 2] == [1, 1]
    assert rounded[d_start : d_start + 2] == [0, 1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 3), min_size=4, max_size=4),
    st.lists(st.floats(0, 1), min_size=2, max_size=2),
    st.sampled_from([None, 2, 4]),
)
def test_rounded_counts_stay_within_every_rule_and_only_fractions_go_up(
    counts: list[float], admitted: list[float], capability: int | None
) -> None:
    enc = two_classes(capability)
    variables = [pair(enc, g, n) for g in ("a", "b") for n in ("small", "large")]
    # Within each pair's cap, as every LP value is.
    counts = [min(x, float(enc.pairs.cap[v])) for x, v in zip(counts, variables, strict=True)]
    values = lp_values(
        enc, dict(zip(("a", "b"), admitted, strict=True)), dict(zip(variables, counts, strict=True))
    )
    down = rounded_down(values)
    rounded = rounded_for_gangs(enc, values)
    pairs = enc.pairs
    for v in range(len(values)):
        assert down[v] <= rounded[v] <= max(down[v], int(np.ceil(values[v])))
        if v < len(pairs):
            assert rounded[v] <= pairs.cap[v]
    for s, var in enc.admitted.items():
        shape = enc.shapes.shapes[s]
        for c in shape.classes:
            start, end = enc.class_span[c]
            if rounded[start:end] != down[start:end]:
                assert sum(rounded[start:end]) <= enc.shapes.classes[c].per_gang * rounded[var]
        span = enc.shape_span(s)
        if sum(down[v] for v in span) >= shape.need * rounded[var]:
            assert [rounded[v] for v in span] == [down[v] for v in span]  # nothing missing
    demand = demand_matrix(enc)[pairs.cls]
    added = np.asarray(rounded[: len(pairs)]) - np.asarray(down[: len(pairs)])
    if capability is not None and added.any():
        queue_of = queue_of_pair(enc)
        cpu = enc.problem.r("cpu")
        for q in enc.problem.queues:
            mine = queue_of == q.index
            assert (
                int((demand[mine, cpu] * np.asarray(rounded[: len(pairs)])[mine]).sum())
                <= q.room()[cpu]
            )
