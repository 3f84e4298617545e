"""The LP's optimum as a decision: rounded down, with each admitted gang's pods that
rounding took below its need put back (``solution.rounded_for_gangs``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.arrays import FloatArray
from solver.encode import Encoding, demand_matrix, queue_of_pair
from solver.problem import prepare
from solver.solution import ROUND_UP_ADMITTED, decode_counts, rounded_down, rounded_for_gangs
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
    """Gang a admitted, 1.4 pods on one class and 0.6 on the other: rounded down it asks
    for 1 of its 2, and would be withdrawn; the larger fraction rounded up places it."""
    enc = two_classes()
    small, large = pair(enc, "a", "small"), pair(enc, "a", "large")
    values = lp_values(enc, {"a": 1.0}, {small: 1.4, large: 0.6})
    assert rounded_down(values)[small] + rounded_down(values)[large] == 1
    rounded = rounded_for_gangs(enc, values)
    assert (rounded[small], rounded[large]) == (1, 1)
    a = next(g for g in enc.problem.gangs if g.name == "a")
    per_class = decode_counts(enc, rounded)
    assert sum(n for c in a.classes for _, n in per_class[c]) == 2


def test_gangs_not_admitted_and_whole_gangs_are_left_as_rounded_down() -> None:
    enc = two_classes()
    # a: half admitted, its pods 0.5 and 0.5; b: whole, 2 pods on one class, 1 on the other.
    values = lp_values(
        enc,
        {"a": 0.5, "b": 1.0},
        {
            pair(enc, "a", "small"): 0.5,
            pair(enc, "a", "large"): 0.5,
            pair(enc, "b", "small"): 2.0,
            pair(enc, "b", "large"): 1.0,
        },
    )
    assert rounded_for_gangs(enc, values) == rounded_down(values)


def test_a_gang_nearly_admitted_is_rounded_up_with_its_pods() -> None:
    """Gang b admitted at 0.8 (its pods 1.6 and 0.8): rounded down it would be left out
    whole, and everything the LP gave it lost; past ROUND_UP_ADMITTED it is admitted,
    and all three of its pods come back. At 0.5, it stays out."""
    enc = two_classes()
    small, large = pair(enc, "b", "small"), pair(enc, "b", "large")
    b = shape_of(enc, "b")
    near = lp_values(enc, {"b": 0.8}, {small: 1.6, large: 0.8})
    assert ROUND_UP_ADMITTED <= 0.8
    rounded = rounded_for_gangs(enc, near)
    assert rounded[enc.admitted[b]] == 1
    assert rounded[small] + rounded[large] == 3
    half = lp_values(enc, {"b": 0.5}, {small: 1.0, large: 0.5})
    rounded = rounded_for_gangs(enc, half)
    assert rounded[enc.admitted[b]] == 0
    assert rounded[small] + rounded[large] == 0


def elastic(task_minimums: bool = False) -> Encoding:
    """One gang of 1 ps and 4 workers on two classes of nodes: at least 3 pods (or, with
    task minimums, 4 with at least 1 ps and 3 workers)."""
    pods = [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(4)]
    pods.append(pod("job-ps").req(cpu="500m").gang("job").task("ps"))
    job = gang("job", 4).task_minimums(ps=1, worker=3) if task_minimums else gang("job", 3)
    s = state(
        nodes=[node("small").cap(cpu=8, memory="16Gi"), node("large").cap(cpu=8, memory="32Gi")],
        pods=pods,
        gangs=[job],
    )
    _, enc = class_model(prepare(s))
    return enc


def spans(enc: Encoding) -> tuple[int, int, int]:
    """The job's shape, and where its ps and its workers' counts start (two each)."""
    (shape,) = enc.admitted
    start = {
        enc.problem.classes[enc.shapes.classes[c].members[0]].pods[0]: enc.class_span[c]
        for c in enc.shapes.shapes[shape].classes
    }
    assert all(end - begin == 2 for begin, end in start.values())  # both classes of nodes
    return shape, start["job-ps"][0], start["job-w0"][0]


def test_only_the_pods_missing_are_put_back() -> None:
    """Workers 1.5 and 1.5 for a gang of at least 3 pods: one of the two fractions goes
    up (3 pods), not both (4, which the gang could also take)."""
    enc = elastic()
    shape, ps, workers = spans(enc)
    values = np.zeros(len(enc.rows.low))
    values[enc.admitted[shape]] = 1.0
    values[[workers, workers + 1]] = [1.5, 1.5]
    rounded = rounded_for_gangs(enc, values)
    assert rounded[workers : workers + 2] == [2, 1]
    assert rounded[ps : ps + 2] == [0, 0]


def test_a_task_below_its_minimum_gets_its_pods_first() -> None:
    """ps 0.45 and 0.55, workers 1.7 and 1.7 (the LP's rows hold): rounded down, no ps and
    2 workers. The workers' fractions are the larger, but the ps task needs its pod: one
    ps and one worker go up, not two workers."""
    enc = elastic(task_minimums=True)
    shape, ps, workers = spans(enc)
    values = np.zeros(len(enc.rows.low))
    values[enc.admitted[shape]] = 1.0
    values[[ps, ps + 1]] = [0.45, 0.55]
    values[[workers, workers + 1]] = [1.7, 1.7]
    rounded = rounded_for_gangs(enc, values)
    assert rounded[ps : ps + 2] == [0, 1]
    assert sum(rounded[workers : workers + 2]) == 3
    job = enc.problem.gangs[0]
    per_class = {c: sum(n for _, n in where) for c, where in decode_counts(enc, rounded).items()}
    assert job.tasks_met(per_class) and job.reaches(sum(per_class.values()))


def test_no_pod_is_put_back_beyond_the_queue_capability() -> None:
    """The queue may take 1 cpu: of gang a's two 1-cpu pods, one would fit it, the other
    not; a stays short, and keeps none of them (they would take room for nothing). The
    values are not an LP's (its capability row would not admit a): the rule is checked
    on its own."""
    enc = two_classes(capability_cpu=1)
    small, large = pair(enc, "a", "small"), pair(enc, "a", "large")
    rounded = rounded_for_gangs(enc, lp_values(enc, {"a": 1.0}, {small: 0.5, large: 0.5}))
    assert rounded[small] + rounded[large] == 0
    rounded = rounded_for_gangs(enc, lp_values(enc, {"a": 1.0}, {small: 1.0, large: 0.5}))
    assert (rounded[small], rounded[large]) == (1, 0)


def test_room_a_lone_short_gang_gives_back_goes_to_the_next() -> None:
    """The queue may take 3 cpu, of which gang b's rounded-down pods hold 2. Gang a (its
    pods 0.5 and 0.5) gets one of its two back, not the other: short, it gives that cpu
    back, and gang b's missing pod takes it."""
    enc = two_classes(capability_cpu=3)
    assert list(enc.admitted) == sorted(enc.admitted, key=lambda s: shape_of(enc, "a") != s)
    a_small, a_large = pair(enc, "a", "small"), pair(enc, "a", "large")
    b_small, b_large = pair(enc, "b", "small"), pair(enc, "b", "large")
    values = lp_values(
        enc, {"a": 1.0, "b": 1.0}, {a_small: 0.5, a_large: 0.5, b_small: 1.5, b_large: 1.5}
    )
    rounded = rounded_for_gangs(enc, values)
    assert (rounded[a_small], rounded[a_large]) == (0, 0)
    assert rounded[b_small] + rounded[b_large] == 3


def test_a_count_is_rounded_up_once_for_a_task_and_the_need_together() -> None:
    """A gang of 5: 1 ps and at least 3 of its 4 workers. The LP (its rows holding): the
    ps 1.0, workers 1.9, 1.9 and 0.2 on three classes of nodes; rounded down, 2 workers.
    The workers' task takes the first worker count back to 2; the gang's need, one more
    pod, takes the second, not the first again (3, above its LP value and its pair's
    cap of 2)."""
    pods = [pod(f"job-w{i}").req(cpu=1).gang("job").task("worker") for i in range(4)]
    pods.append(pod("job-ps").req(cpu="500m").gang("job").task("ps"))
    s = state(
        nodes=[
            node("n16").cap(cpu="2500m", memory="16Gi"),
            node("n32").cap(cpu=8, memory="32Gi"),
            node("n64").cap(cpu=8, memory="64Gi"),
        ],
        pods=pods,
        gangs=[gang("job", 5).task_minimums(ps=1, worker=3)],
    )
    _, enc = class_model(prepare(s))
    (shape,) = enc.admitted

    def count(pod_name: str, node_name: str) -> int:
        c = next(
            sc.index
            for sc in enc.shapes.classes
            if pod_name in enc.problem.classes[sc.members[0]].pods
        )
        n = next(i for i, x in enumerate(enc.problem.nodes) if x.name == node_name)
        return next(
            v for v in range(*enc.class_span[c]) if n in enc.bins[int(enc.pairs.bin[v])].nodes
        )

    ps = count("job-ps", "n16")
    workers = [count("job-w0", n) for n in ("n16", "n32", "n64")]
    values = np.zeros(len(enc.rows.low))
    values[enc.admitted[shape]] = 1.0
    values[ps] = 1.0
    values[workers] = [1.9, 1.9, 0.2]
    assert int(enc.pairs.cap[workers[0]]) == 2
    rounded = rounded_for_gangs(enc, values)
    assert [rounded[v] for v in workers] == [2, 2, 0]
    assert rounded[ps] == 1


def test_alike_gangs_keep_each_pod_put_back_though_the_last_stays_short() -> None:
    """Three alike gangs of two 1-cpu pods, admitted; the LP's counts 2.6, 2.7 and 0.7
    rounded down leave 4 pods, and the queue's capability lets one of the 2 missing
    back. Dealt in turn, 5 pods make two gangs whole where 4 made one: the pod stays."""
    s = state(
        nodes=[node(f"n{m}").cap(cpu=16, memory=f"{m}Gi") for m in (16, 32, 64)],
        pods=[pod(f"{g}-{i}").req(cpu=1).gang(g) for g in ("y1", "y2", "y3") for i in range(2)],
        gangs=[gang(g, 2).queue("q") for g in ("y1", "y2", "y3")],
        queues=[queue("q", 1).capability(cpu=5)],
    )
    _, enc = class_model(prepare(s))
    (shape,) = enc.admitted
    span = enc.shape_span(shape)
    assert len(span) == 3
    values = np.zeros(len(enc.rows.low))
    values[enc.admitted[shape]] = 3.0
    values[span] = [2.6, 2.7, 0.7]
    rounded = rounded_for_gangs(enc, values)
    assert sum(rounded[v] for v in span) == 5
    per_class = decode_counts(enc, rounded)
    whole = [
        g.name
        for g in enc.problem.gangs
        if sum(n for c in g.classes for _, n in per_class.get(c, [])) >= g.need
    ]
    assert len(whole) == 2


def alike_gangs() -> tuple[Encoding, int, int, int]:
    """Two alike gangs of a 1-cpu driver and two 2-cpu workers; their shape, and where its
    drivers' and its workers' counts start (two each)."""
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
    (d_start, d_end), (w_start, w_end) = enc.class_span[driver], enc.class_span[workers]
    assert (d_end - d_start, w_end - w_start) == (2, 2)  # each on both classes of nodes
    return enc, shape, d_start, w_start


def alike_rounded(
    admitted: float, drivers: list[float], workers: list[float]
) -> tuple[list[int], list[int]]:
    """``alike_gangs``' drivers and workers counts, rounded from these LP values."""
    enc, shape, d_start, w_start = alike_gangs()
    values = np.zeros(len(enc.rows.low))
    values[enc.admitted[shape]] = admitted
    values[[d_start, d_start + 1]] = drivers
    values[[w_start, w_start + 1]] = workers
    rounded = rounded_for_gangs(enc, values)
    return rounded[d_start : d_start + 2], rounded[w_start : w_start + 2]


def test_pods_of_a_gang_fraction_are_trimmed_before_the_missing_are_counted() -> None:
    """1.5 of the two gangs admitted by the LP, one by rounding, its rows all holding:
    workers 2.0 and 1.0 (3 of the 4 that 1.5 gangs have), drivers 0.7 and 0.8. Rounded
    down: 3 workers, no driver, as many pods as one gang needs; but one gang has only 2
    workers. The smaller worker count is trimmed, and the driver put back."""
    assert alike_rounded(1.5, [0.7, 0.8], [2.0, 1.0]) == ([0, 1], [2, 0])


def test_a_class_never_gets_more_pods_than_its_admitted_gangs_have() -> None:
    """1.5 of the two gangs admitted by the LP (its rows holding), one by rounding; its
    workers' counts, 1.9 and 1.1 rounded down, already hold the 2 it has, though their
    fraction is the largest: the missing pod is its driver."""
    assert alike_rounded(1.5, [0.7, 0.8], [1.9, 1.1]) == ([0, 1], [1, 1])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(0, 3), min_size=4, max_size=4),
    st.lists(st.sampled_from([0.0, 0.6, 1.0]), min_size=2, max_size=2),
    st.sampled_from([None, 2, 4]),
)
def test_rounded_counts_stay_within_every_rule_and_a_lone_gang_keeps_pods_only_whole(
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
        assert rounded[v] <= max(down[v], int(np.ceil(values[v])))
        if v >= len(pairs):
            assert rounded[v] == down[v]  # only counts change
    for s, var in enc.admitted.items():
        shape = enc.shapes.shapes[s]
        for c in shape.classes:
            start, end = enc.class_span[c]
            assert sum(rounded[start:end]) <= enc.shapes.classes[c].per_gang * rounded[var]
        span = enc.shape_span(s)
        if rounded[var] and any(rounded[v] > down[v] for v in span):
            assert sum(rounded[v] for v in span) == shape.need * rounded[var]  # made whole
    if capability is not None:
        demand = demand_matrix(enc)[pairs.cls]
        queue_of = queue_of_pair(enc)
        cpu = enc.problem.r("cpu")
        added = np.asarray(rounded[: len(pairs)]) - np.asarray(down[: len(pairs)])
        for q in enc.problem.queues:
            mine = queue_of == q.index
            if (added[mine] > 0).any():
                total = int((demand[mine, cpu] * np.asarray(rounded[: len(pairs)])[mine]).sum())
                assert total <= q.room()[cpu]
