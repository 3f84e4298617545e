"""The schedulers on tiny clusters whose best decision can be worked out by hand."""

from __future__ import annotations

import itertools
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import solver.candidates
import solver.cpsat
import solver.disaggregate
import solver.search
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import CPU, ClusterState
from solver.objective import score
from solver.problem import prepare
from solver.schedulers import SCHEDULERS, schedule
from solver.search import OPTIMAL_GAP
from solver.validate import check
from tests.builders import gang, node, pod, pods_of, queue, state
from tests.solver.encodings import model_price

FAST = SolverConfig(time_limit_s=5.0, deterministic=True)
CLASSES_ONLY = SolverConfig(time_limit_s=5.0, deterministic=True, max_node_level_pairs=0)


def solve(s: ClusterState, scheduler: str = "cpsat", config: SolverConfig = FAST) -> Decision:
    decision = schedule(s, scheduler, config)
    if scheduler != "greedy":
        assert check(s, decision) == [], decision
    return decision


def placed_per_gang(s: ClusterState, d: Decision) -> Counter[str]:
    gang_of = {p.name: p.gang_name() for p in s.pods}
    return Counter(gang_of[p] for p in d.placements)


def seed_deadlock() -> ClusterState:
    """The talk's picture: 3 nodes of 2 slots, jobs A and B of 6 pods arriving interleaved."""
    pods = [
        pod(f"{job}-{i}").req(cpu="500m").gang(job).created(2 * i + (job == "b"))
        for job in ("a", "b")
        for i in range(6)
    ]
    return state(
        nodes=[node(f"n{i}").cap(cpu=2, memory="4Gi", pods=2) for i in range(3)],
        pods=pods,
        gangs=[gang("a", 6).created(0), gang("b", 6).created(1)],
    )


def test_greedy_deadlocks_the_seed_scenario() -> None:
    s = seed_deadlock()
    d = solve(s, "greedy")
    assert placed_per_gang(s, d) == {"a": 3, "b": 3}
    kinds = Counter(v.kind for v in check(s, d))
    assert kinds == {"partial-gang": 2}
    assert d.admitted == ()


@pytest.mark.parametrize("scheduler", ["gang-greedy", "cpsat"])
@pytest.mark.parametrize("config", [FAST, CLASSES_ONLY], ids=["node-level", "node-classes"])
def test_gang_schedulers_place_one_whole_gang_in_the_seed_scenario(
    scheduler: str, config: SolverConfig
) -> None:
    s = seed_deadlock()
    d = solve(s, scheduler, config)
    # First come, first served: job a was created first, and the two are otherwise equal.
    assert placed_per_gang(s, d) == {"a": 6}
    assert d.admitted == ("a",)
    assert d.unschedulable["b"].startswith("0/6 pods fit (minMember 6)")
    assert "Too many pods" in d.unschedulable["b"]


def test_cpsat_proves_the_seed_optimum_and_reports_its_terms() -> None:
    d = solve(seed_deadlock())
    assert d.status is SolveStatus.OPTIMAL
    # Proven to the LP's tolerance (its bound is rounded up past it): a search that
    # meets it stops there.
    assert d.gap is not None and d.gap <= OPTIMAL_GAP
    assert d.objective == sum(d.terms.values())
    # The solver's own objective and the solver-free score agree to the unit.
    assert model_price(seed_deadlock(), d) == d.objective
    # The LP relaxation came first and bounds the decision.
    assert d.stages[0].name == "node-classes-lp"
    assert d.stages[0].bound is not None and d.stages[0].bound >= d.objective


def two_queues(
    weight_a: int, weight_b: int, pods_a: int, pods_b: int, gang_size: int = 1
) -> ClusterState:
    """8 one-core slots; queues a and b each with ``pods`` pods in gangs of ``gang_size``."""
    pods, gangs = [], []
    for q, count in (("a", pods_a), ("b", pods_b)):
        for g in range(count // gang_size):
            name = f"{q}{g}"
            gangs.append(gang(name, gang_size).queue(q).created(g))
            pods += pods_of(name, gang_size, cpu=1)
    return state(
        nodes=[node(f"n{i}").cap(cpu=2, memory="8Gi") for i in range(4)],
        pods=pods,
        gangs=gangs,
        queues=[queue("a", weight_a), queue("b", weight_b)],
    )


@pytest.mark.parametrize("gang_size", [1, 2])
@pytest.mark.parametrize("config", [FAST, CLASSES_ONLY], ids=["node-level", "node-classes"])
def test_backlogged_queues_split_the_cluster_by_weight(
    gang_size: int, config: SolverConfig
) -> None:
    s = two_queues(1, 3, pods_a=8, pods_b=8, gang_size=gang_size)
    d = solve(s, config=config)
    per_queue = Counter(name[0] for name in placed_per_gang(s, d).elements())
    assert per_queue == {"a": 2, "b": 6}


def test_a_queue_asking_less_than_its_share_gets_all_it_asks_and_the_rest_flows() -> None:
    s = two_queues(3, 1, pods_a=2, pods_b=8)
    d = solve(s)
    per_queue = Counter(name[0] for name in placed_per_gang(s, d).elements())
    assert per_queue == {"a": 2, "b": 6}


def queue_at_share_and_a_gang_that_does_not_fit(a_running: int) -> ClusterState:
    """8 one-core slots, queues a and b weighted 1:1 (4 cores deserved each, as both ask
    for more). a runs ``a_running`` one-core pods and has 4 more pending; b waits with a
    gang of 7 that the free cores cannot hold while a runs anything."""
    running = [
        pod(f"ra{i}").req(cpu=1).gang(f"ra{i}").on(f"n{i // 2}").build() for i in range(a_running)
    ]
    pending_a = [p for i in range(4) for p in pods_of(f"a{i}", 1, cpu=1)]
    return state(
        nodes=[node(f"n{i}").cap(cpu=2, memory="8Gi") for i in range(4)],
        pods=running + pending_a + pods_of("b", 7, cpu=1),
        gangs=[
            *[gang(f"ra{i}", 1).queue("a") for i in range(a_running)],
            *[gang(f"a{i}", 1).queue("a").created(i) for i in range(4)],
            gang("b", 7).queue("b").created(10),
        ],
        queues=[queue("a", 1), queue("b", 1)],
    )


def with_weights(config: SolverConfig, **weights: int) -> SolverConfig:
    return config.model_copy(update={"weights": config.weights.model_copy(update=weights)})


@pytest.mark.parametrize("config", [FAST, CLASSES_ONLY], ids=["node-level", "node-classes"])
@pytest.mark.parametrize(("overuse", "placed"), [(0, 4), (50, 4), (150, 0)])
def test_overuse_above_value_keeps_a_queue_at_its_share(
    config: SolverConfig, overuse: int, placed: int
) -> None:
    # a holds its 4 deserved cores. Each further core earns value 100 and costs `overuse`:
    # below 100 a still takes the idle cores (work-conserving), above it they stay free.
    s = queue_at_share_and_a_gang_that_does_not_fit(a_running=4)
    d = solve(s, config=with_weights(config, overuse=overuse))
    assert sum(placed_per_gang(s, d).values()) == placed
    assert d.objective == sum(d.terms.values())
    assert d.terms["overuse"] == (0 if placed == 0 else -overuse * placed * 10_000_000 // 8)


def test_overuse_lets_a_queue_below_its_share_fill_up_to_it_and_no_further() -> None:
    s = queue_at_share_and_a_gang_that_does_not_fit(a_running=2)
    config = with_weights(FAST, overuse=150)
    d = solve(s, config=config)
    assert sum(placed_per_gang(s, d).values()) == 2
    assert d.status is SolveStatus.OPTIMAL
    assert model_price(s, d, config.weights) == d.objective == sum(d.terms.values())


@pytest.mark.parametrize(("gang_start", "admitted"), [(0, {"big"}), (150, {"s1", "s2"})])
def test_gang_start_prefers_two_small_gangs_to_one_large(
    gang_start: int, admitted: set[str]
) -> None:
    # Three one-core nodes: the 3-pod gang earns 3 pods' value, the two 1-pod gangs 2.
    # A gang start is worth one average node (one pod here) per 100: at 150 the two small
    # gangs earn 2 + 3 = 5 against 3 + 1.5. Fairness off: one queue, so it only counts
    # room left empty.
    s = state(
        nodes=[node(f"n{i}").cap(cpu=1, memory="8Gi") for i in range(3)],
        pods=pods_of("big", 3, cpu=1) + pods_of("s1", 1, cpu=1) + pods_of("s2", 1, cpu=1),
        gangs=[gang("big", 3).created(0), gang("s1", 1).created(1), gang("s2", 1).created(2)],
    )
    config = with_weights(FAST, gang_start=gang_start, fairness=0)
    d = solve(s, config=config)
    assert set(d.admitted) == admitted
    assert d.terms["gang_start"] == gang_start * len(admitted) * (10_000_000 // 3)
    assert model_price(s, d, config.weights) == d.objective == sum(d.terms.values())


@pytest.mark.parametrize("scheduler", ["gang-greedy", "cpsat"])
def test_capability_is_a_hard_cap_even_with_idle_nodes(scheduler: str) -> None:
    s = state(
        nodes=[node(f"n{i}").cap(cpu=2, memory="8Gi") for i in range(4)],
        pods=pods_of("big", 4, cpu=1) + pods_of("small", 3, cpu=1),
        gangs=[gang("big", 4).queue("capped"), gang("small", 3).queue("capped").created(1)],
        queues=[queue("capped", 1).capability(cpu=3)],
    )
    d = solve(s, scheduler)
    assert placed_per_gang(s, d) == {"small": 3}
    assert "queue 'capped' at capability (cpu)" in d.unschedulable["big"]


@pytest.mark.parametrize("scheduler", ["gang-greedy", "cpsat"])
def test_higher_priority_gang_goes_first_even_when_younger_and_smaller(scheduler: str) -> None:
    s = state(
        nodes=[node(f"n{i}").cap(cpu=2, memory="8Gi") for i in range(2)],
        pods=pods_of("old-big", 4, cpu=1) + pods_of("urgent", 3, cpu=1),
        gangs=[gang("old-big", 4).created(0), gang("urgent", 3).priority(100).created(5)],
    )
    d = solve(s, scheduler)
    assert d.admitted == ("urgent",)
    assert placed_per_gang(s, d) == {"urgent": 3}


def test_priority_is_a_trade_that_a_much_larger_lower_gang_can_win_until_it_is_raised() -> None:
    """As ``ObjectiveWeights.priority`` says: one 3-cpu node, an urgent pod (a rank
    above) against a gang of three. At 400 the gang, three times its size, is worth more
    (the queue below its deserved share: value and fairness count per pod); against one
    of its own size urgent goes first; priority raised, it goes first against the gang."""
    big = pods_of("big", 3, cpu=1)
    urgent = pods_of("urgent", 1, cpu=1)
    gangs = [gang("big", 3).created(0), gang("urgent", 1).priority(100).created(5)]
    s = state(nodes=[node("n0").cap(cpu=3, memory="8Gi")], pods=big + urgent, gangs=gangs)
    assert solve(s).admitted == ("big",)
    alike = state(
        nodes=[node("n0").cap(cpu=1, memory="8Gi")],
        pods=pods_of("peer", 1, cpu=1) + urgent,
        gangs=[gang("peer", 1).created(0), gangs[1]],
    )
    assert solve(alike).admitted == ("urgent",)
    weights = FAST.weights.model_copy(update={"priority": 1000})
    strict = solve(s, config=FAST.model_copy(update={"weights": weights}))
    assert strict.admitted == ("urgent",)


def test_selectors_affinity_taints_and_gpus_steer_placement() -> None:
    s = state(
        nodes=[
            node("a100").cap(cpu=8, memory="32Gi", gpu=2).label(gpu="a100"),
            node("v100").cap(cpu=8, memory="32Gi", gpu=2).label(gpu="v100"),
            node("v100-tainted")
            .cap(cpu=8, memory="32Gi", gpu=4)
            .label(gpu="v100")
            .taint("dedicated", "ml", "NoSchedule"),
            node("cpu").cap(cpu=8, memory="32Gi"),
        ],
        pods=[
            *(pod(f"sel-{i}").req(cpu=1, gpu=1).gang("sel").selector(gpu="v100") for i in range(2)),
            *(
                pod(f"aff-{i}").req(cpu=1, gpu=1).gang("aff").affinity("gpu", "In", "a100")
                for i in range(2)
            ),
            *(
                pod(f"tol-{i}")
                .req(cpu=1, gpu=2)
                .gang("tol")
                .selector(gpu="v100")
                .tolerate("dedicated", "Equal", "ml", "NoSchedule")
                for i in range(2)
            ),
            pod("nogpu-0").req(cpu=1).gang("nogpu").affinity("gpu", "DoesNotExist"),
        ],
        gangs=[gang("sel", 2), gang("aff", 2), gang("tol", 2), gang("nogpu", 1)],
    )
    d = solve(s)
    assert set(d.admitted) == {"sel", "aff", "tol", "nogpu"}
    assert {d.placements[f"sel-{i}"] for i in range(2)} <= {"v100"}
    assert {d.placements[f"aff-{i}"] for i in range(2)} == {"a100"}
    assert {d.placements[f"tol-{i}"] for i in range(2)} == {"v100-tainted"}
    assert d.placements["nogpu-0"] == "cpu"


def test_a_gang_that_cannot_fit_says_how_many_pods_fit_and_why() -> None:
    s = state(
        nodes=[
            node("gpu").cap(cpu=8, memory="32Gi", gpu=1).label(gpu="t4"),
            node("cpu").cap(cpu=8, memory="32Gi"),
            node("other").cap(cpu=8, memory="32Gi", gpu=8).label(gpu="a100"),
        ],
        pods=[pod(f"w-{i}").req(cpu=1, gpu=1).gang("w").selector(gpu="t4") for i in range(2)],
        gangs=[gang("w", 2)],
    )
    d = solve(s)
    assert d.placements == {}
    reason = d.unschedulable["w"]
    assert reason.startswith("1/2 pods fit (minMember 2): ")
    assert "2 node(s) didn't match node selector" in reason
    assert "1 Insufficient nvidia.com/gpu" in reason


def test_elastic_members_beyond_min_member_fill_free_room() -> None:
    s = state(
        nodes=[node("n").cap(cpu=3, memory="8Gi")],
        pods=pods_of("elastic", 5, cpu=1),
        gangs=[gang("elastic", 2)],
    )
    d = solve(s)
    assert placed_per_gang(s, d) == {"elastic": 3}
    assert d.admitted == ("elastic",)


def test_partially_bound_gang_needs_only_the_missing_members() -> None:
    bound = [pod(f"g-{i}").req(cpu=1).gang("g").on("n0") for i in range(2)]
    pending = [pod(f"g-{i}").req(cpu=1).gang("g") for i in range(2, 4)]
    s = state(
        nodes=[node("n0").cap(cpu=2, memory="8Gi"), node("n1").cap(cpu=2, memory="8Gi")],
        pods=[*bound, *pending],
        gangs=[gang("g", 4)],
    )
    assert prepare(s).gangs[0].need == 2
    d = solve(s)
    assert d.placements == {"g-2": "n1", "g-3": "n1"}


def test_bad_references_become_reasons_not_crashes() -> None:
    s = state(
        nodes=[node("n").cap(cpu=4, memory="8Gi")],
        pods=[
            *pods_of("lost", 1, cpu=1),
            pod("orphan").req(cpu=1).gang("nowhere"),
            *pods_of("short", 2, cpu=1),
            *pods_of("ok", 1, cpu=1),
        ],
        gangs=[gang("lost", 1).queue("missing"), gang("short", 3), gang("ok", 1)],
    )
    for scheduler in SCHEDULERS:
        d = schedule(s, scheduler, FAST)
        assert d.unschedulable["lost"] == "queue 'missing' not found"
        assert d.unschedulable["short"].startswith("NotEnoughTasks")
        assert d.waiting_pods == {"orphan": "PodGroup 'nowhere' not found"}
        assert d.placements == {"ok-0": "n"}


@pytest.mark.parametrize("state_name", ["Closed", "Closing"])
def test_a_closed_queue_takes_no_new_pods_and_keeps_what_runs(state_name: str) -> None:
    """An admin drains a Volcano queue by closing it: its gangs not started wait, with the
    queue's state as their reason, a started one keeps its pods and gets no more, and
    what runs still counts as the queue's; other queues are scheduled as before."""
    s = state(
        nodes=[node("n").cap(cpu=8, memory="16Gi")],
        pods=[
            pod("old-0").req(cpu=1).gang("old").on("n"),
            pod("old-1").req(cpu=1).gang("old"),
            *pods_of("new", 2, cpu=1),
            *pods_of("ok", 2, cpu=1),
        ],
        gangs=[
            gang("old", 1).queue("drained"),
            gang("new", 2).queue("drained"),
            gang("ok", 2).queue("open"),
        ],
        queues=[queue("drained").state(state_name), queue("open")],
    )
    problem = prepare(s)
    drained = next(q for q in problem.queues if q.name == "drained")
    assert drained.used[problem.r(CPU)] == 1000
    for scheduler in SCHEDULERS:
        d = schedule(s, scheduler, FAST)
        assert d.placements == {"ok-0": "n", "ok-1": "n"}, scheduler
        why = f"queue 'drained' is {state_name}: it takes no new pods"
        assert d.unschedulable["new"] == why and d.unschedulable["old"] == why


def test_a_queue_in_any_other_state_is_open() -> None:
    """Volcano's Unknown (its controller lost track) is no admin's decision to drain."""
    s = state(
        nodes=[node("n").cap(cpu=8, memory="16Gi")],
        pods=pods_of("g", 2, cpu=1),
        gangs=[gang("g", 2).queue("q")],
        queues=[queue("q").state("Unknown")],
    )
    assert set(solve(s).placements) == {"g-0", "g-1"}


def test_packing_prefers_used_nodes_and_keeps_gpu_nodes_whole() -> None:
    s = state(
        nodes=[
            node("gpu").cap(cpu=8, memory="32Gi", gpu=8),
            node("cpu-empty").cap(cpu=8, memory="32Gi"),
            node("cpu-used").cap(cpu=8, memory="32Gi"),
        ],
        pods=[pod("running").req(cpu=1).gang("r").on("cpu-used"), *pods_of("web", 2, cpu=1)],
        gangs=[gang("r", 1), gang("web", 2)],
    )
    d = solve(s)
    assert d.placements == {"web-0": "cpu-used", "web-1": "cpu-used"}


@pytest.mark.parametrize("config", [FAST, CLASSES_ONLY], ids=["node-level", "node-classes"])
def test_a_node_running_only_daemonset_pods_counts_as_empty_for_packing(
    config: SolverConfig,
) -> None:
    # Every node runs DaemonSet pods; "cpu-used" also runs a job's pod. Packing fills it
    # rather than opening a node that runs nothing but its DaemonSets.
    nodes = [node(f"cpu-{i}").cap(cpu=8, memory="32Gi") for i in range(3)]
    daemons = [pod(f"ds-{i}").req(cpu="100m").on(f"cpu-{i}").build() for i in range(3)]
    daemons = [p.model_copy(update={"daemon": True}) for p in daemons]
    s = state(
        nodes=nodes,
        pods=[*daemons, pod("running").req(cpu=1).gang("r").on("cpu-1"), *pods_of("web", 2, cpu=1)],
        gangs=[gang("r", 1), gang("web", 2)],
    )
    assert prepare(s).empty.tolist() == [True, False, True]
    d = solve(s, config=config)
    assert d.placements == {"web-0": "cpu-1", "web-1": "cpu-1"}
    assert d.terms["packing"] == 0  # no node opened


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy"])
def test_a_pod_that_fits_is_placed_even_if_it_opens_a_node(scheduler: str) -> None:
    # Tiny and BestEffort pods are worth less than the default price of opening a node;
    # packing may choose where they go, never whether.
    s = state(
        nodes=[node(f"n{i}").cap(cpu=4, memory="8Gi") for i in range(3)],
        pods=[pod("tiny").req(cpu="10m"), pod("best-effort")],
    )
    d = solve(s, scheduler)
    assert set(d.placements) == {"tiny", "best-effort"}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_no_nodes_is_a_reason_not_a_crash(scheduler: str) -> None:
    d = schedule(state(pods=[pod("p").req(cpu=1)]), scheduler, FAST)
    assert d.placements == {}
    assert d.unschedulable["pod:p"].endswith("0/0 nodes are available")


@pytest.mark.parametrize("scheduler", ["cpsat", "gang-greedy", "greedy"])
def test_a_gang_waiting_for_a_gated_pod_is_left_untouched_until_the_gate_lifts(
    scheduler: str,
) -> None:
    gated = pod("job-2").req(cpu=1).gang("job").build().model_copy(update={"gates": ("kueue",)})
    s = state(
        nodes=[node("n0").cap(cpu=8, memory="8Gi")],
        pods=[*pods_of("job", 2, cpu=1), gated, pod("other").req(cpu=1)],
        gangs=[gang("job", 3), gang("other")],
    )
    waiting = schedule(s, scheduler, FAST)
    assert check(s, waiting) == []
    assert set(waiting.placements) == {"other"}  # none of the gang, gated or not
    assert waiting.waiting_pods["job-2"] == "scheduling gates: kueue"
    if scheduler != "greedy":
        assert waiting.unschedulable["job"].startswith("SchedulingGated: 1 pod(s)")
    lifted = s.model_copy(
        update={"pods": tuple(p.model_copy(update={"gates": ()}) for p in s.pods)}
    )
    assert {"job-0", "job-1", "job-2"} <= set(schedule(lifted, scheduler, FAST).placements)


def test_the_validator_refuses_to_bind_a_gated_pod() -> None:
    gated = pod("p").req(cpu=1).build().model_copy(update={"gates": ("g",)})
    s = state(nodes=[node("n0").cap(cpu=2)], pods=[gated])
    decision = Decision(scheduler="x", placements={"p": "n0"}, status=SolveStatus.GREEDY)
    assert [v.kind for v in check(s, decision)] == ["gated"]


def test_class_model_bound_is_never_below_the_decision() -> None:
    d = solve(two_queues(1, 3, 8, 8, gang_size=2), config=CLASSES_ONLY)
    assert [x.name for x in d.stages][:2] == ["node-classes-lp", "node-classes-lp-guided"]
    assert d.bound is not None and d.objective is not None
    assert d.bound >= d.objective
    for stage in d.stages:
        assert stage.bound is None or stage.bound >= d.objective, stage


def test_a_cycle_whose_preparation_took_its_time_limit_still_solves_its_small_model() -> None:
    """Preparing counts inside the time limit; when it used all of it (a 5,000-node
    snapshot on a loaded machine), a model solved in milliseconds is still solved:
    falling back to greedy there gave up 22% of the objective."""
    out_of_time = SolverConfig(time_limit_s=1e-6, max_node_level_pairs=0)
    d = solve(two_queues(1, 3, 8, 8, gang_size=2), config=out_of_time)
    assert d.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE), d.stages
    assert d.decided_by.startswith("node-classes"), d.decided_by
    assert d.bound is not None


@pytest.mark.parametrize("config", [FAST, CLASSES_ONLY], ids=["node-level", "node-classes"])
def test_a_node_holding_more_than_its_allocatable_lends_nothing_to_its_class(
    config: SolverConfig,
) -> None:
    # n0 runs 6 GPUs of its 4 (its device plugin came back with fewer): it has no GPU
    # room, but its cpu is free. n1 has 4 GPUs free. The gang of four 1-GPU pods fits on
    # n1 alone; the cpu-only pod may use n0. A class summing n0's -2 GPUs with n1's 4
    # would see 2 and reject the gang.
    s = state(
        nodes=[
            node(f"n{i}").cap(cpu=8, gpu=4).label({"kubernetes.io/hostname": f"n{i}"})
            for i in range(2)
        ],
        pods=[
            pod("old").req(cpu=1, gpu=6).on("n0"),
            *pods_of("train", 4, cpu=1, gpu=1),
            pod("web").req(cpu=6).gang("web"),
        ],
        gangs=[gang("train", 4), gang("web")],
    )
    d = solve(s, config=config)
    assert sorted(d.admitted) == ["train", "web"]
    assert {d.placements[f"train-{i}"] for i in range(4)} == {"n1"}
    assert d.placements["web"] == "n0"
    assert d.bound is not None and d.objective is not None and d.bound >= d.objective


def test_identical_gangs_are_admitted_oldest_first_across_a_shape() -> None:
    pods = [p for name in ("g3", "g1", "g2") for p in pods_of(name, 2, cpu=1)]
    s = state(
        nodes=[node("n").cap(cpu=4, memory="8Gi")],
        pods=pods,
        gangs=[gang("g3", 2).created(3), gang("g1", 2).created(1), gang("g2", 2).created(2)],
    )
    for config in (FAST, CLASSES_ONLY):
        assert set(solve(s, config=config).admitted) == {"g1", "g2"}


def test_same_seed_same_decision() -> None:
    s = two_queues(1, 2, 8, 8, gang_size=2)
    assert solve(s).placements == solve(s).placements


def test_deterministic_decisions_do_not_depend_on_the_wall_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nodes of four sizes: no node classes to aggregate, one node-level stage decides.
    s = state(
        nodes=[node(f"n{i}").cap(cpu=2 + i, memory="16Gi") for i in range(4)],
        pods=[p for g in range(6) for p in pods_of(f"g{g}", 2, cpu=1 + g % 3)],
        gangs=[gang(f"g{g}", 2).queue("ab"[g % 2]).created(g) for g in range(6)],
        queues=[queue("a", 1), queue("b", 2)],
    )
    config = SolverConfig(time_limit_s=0.5, deterministic=True)
    calm = solve(s, config=config)
    stages = [x.name for x in calm.stages]
    assert stages[0] == "node-level-lp" and "node-classes-lp" not in stages
    # A machine so loaded that each reading of the clock is a second after the last.
    ticks = itertools.count()
    clock = SimpleNamespace(perf_counter=lambda: next(ticks))
    for module in (solver.cpsat, solver.search, solver.disaggregate, solver.candidates):
        monkeypatch.setattr(module, "time", clock)
    loaded = solve(s, config=config)
    assert loaded.placements == calm.placements
    assert [x.name for x in loaded.stages] == stages
    # Counted in wall time, the same clock leaves no time to solve: the greedy fallback.
    wall = solve(s, config=config.model_copy(update={"deterministic": False}))
    assert wall.stages == () and wall.status is SolveStatus.FALLBACK


# -- properties ---------------------------------------------------------------------------


@st.composite
def small_clusters(draw: st.DrawFn) -> ClusterState:
    """Tiny clusters shaped like real ones: unique hostnames, a tainted pool, pods already
    running (at times more than a node's allocatable, as after a device plugin restart)."""
    n_nodes = draw(st.integers(1, 4))
    nodes, pods, gangs = [], [], []
    for i in range(n_nodes):
        b = (
            node(f"n{i}")
            .cap(
                cpu=draw(st.integers(1, 6)),
                # Nodes of one type report memory a few MiB apart, as real kubelets do.
                memory=f"{16 * 1024 - draw(st.integers(0, 64))}Mi",
                gpu=draw(st.sampled_from([0, 0, 2, 4])),
                pods=draw(st.integers(1, 6)),
            )
            .label({"zone": draw(st.sampled_from(["x", "y"])), "kubernetes.io/hostname": f"n{i}"})
        )
        if draw(st.booleans()) and draw(st.booleans()):
            b = b.taint("dedicated", "team", "NoSchedule")
        nodes.append(b)
        for j in range(draw(st.integers(0, 2))):
            running = pod(f"run-{i}-{j}").req(cpu=draw(st.integers(1, 3)))
            pods.append(running.req(gpu=draw(st.sampled_from([0, 0, 1, 3]))).on(f"n{i}"))
    queues = [queue(f"q{i}", draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 3)))]
    for g in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 4))
        name = f"g{g}"
        gangs.append(
            gang(name, draw(st.integers(1, size)))
            .queue(f"q{draw(st.integers(0, len(queues) - 1))}")
            .priority(draw(st.sampled_from([0, 0, 5])))
            .created(g)
        )
        cpu = draw(st.integers(1, 3))
        gpu = draw(st.sampled_from([0, 0, 1, 2]))
        zone = draw(st.sampled_from([None, "x", "y"]))
        tolerates = draw(st.booleans())
        for i in range(size):
            b = pod(f"{name}-{i}").req(cpu=cpu, gpu=gpu).gang(name).created(g)
            if zone:
                b = b.selector(zone=zone)
            if tolerates:
                b = b.tolerate("dedicated", "Exists")
            pods.append(b)
    return state(nodes=nodes, pods=pods, gangs=gangs, queues=queues)


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Weights under which leaving room empty can pay (overuse and node opening above value)
# and gang count counts.
RESTRAINED = with_weights(FAST, overuse=150, packing=60, gang_start=50)
WEIGHTINGS = pytest.mark.parametrize("config", [FAST, RESTRAINED], ids=["defaults", "restrained"])


@PROPERTY
@given(small_clusters())
def test_the_node_level_model_cuts_off_no_placement_gang_greedy_makes(s: ClusterState) -> None:
    """Every row of the node-level model (one node's rounded capacity rows too) holds for
    a valid decision: fixed at gang-greedy's, the model is feasible and prices it as the
    solver-free score does."""
    d = schedule(s, "gang-greedy", FAST)
    assert model_price(s, d) == d.objective


@PROPERTY
@given(small_clusters())
def test_validator_accepts_every_gang_aware_decision(s: ClusterState) -> None:
    for scheduler in ("cpsat", "gang-greedy"):
        d = schedule(s, scheduler, FAST)
        assert check(s, d) == [], (scheduler, d)


@WEIGHTINGS
@PROPERTY
@given(s=small_clusters())
def test_proven_optimum_is_never_below_gang_greedy(s: ClusterState, config: SolverConfig) -> None:
    exact = schedule(s, "cpsat", config)
    baseline = schedule(s, "gang-greedy", config)
    assert exact.objective is not None and baseline.objective is not None
    # A decision within the LP's tolerance of its bound stops the baseline early (as the
    # README says): it may then trail gang-greedy by that tolerance, no more (found by
    # hypothesis: 1 unit of 2.6e9, where the bound is read to 1e-6).
    assert exact.objective >= baseline.objective - OPTIMAL_GAP * abs(baseline.objective)
    if exact.status is SolveStatus.OPTIMAL:
        # Proven: by CP-SAT exactly, or by the LP to within its tolerance.
        assert exact.gap is not None and exact.gap <= 1e-6


@WEIGHTINGS
@PROPERTY
@given(s=small_clusters())
def test_node_class_path_is_valid_and_bounded(s: ClusterState, config: SolverConfig) -> None:
    d = schedule(s, "cpsat", config.model_copy(update={"max_node_level_pairs": 0}))
    assert check(s, d) == []
    exact = schedule(s, "cpsat", config)
    if d.bound is not None and exact.status is SolveStatus.OPTIMAL:
        assert exact.objective is not None
        assert d.bound >= exact.objective


def with_unread_labels(s: ClusterState) -> ClusterState:
    """Every node labelled as kubelets and clouds label them; no pending pod reads these."""
    nodes = tuple(
        n.model_copy(
            update={
                "labels": {
                    **n.labels,
                    "kubernetes.io/os": "linux",
                    "node.kubernetes.io/instance-type": f"m5.{i}xlarge",
                    "topology.kubernetes.io/zone": f"zone-{i % 3}",
                    "example.com/instance-id": f"i-{i:08x}",
                }
            }
        )
        for i, n in enumerate(s.nodes)
    )
    return s.model_copy(update={"nodes": nodes})


@WEIGHTINGS
@PROPERTY
@given(s=small_clusters())
def test_labels_no_pending_pod_reads_change_nothing(s: ClusterState, config: SolverConfig) -> None:
    for path in (config, config.model_copy(update={"max_node_level_pairs": 0})):
        plain = schedule(s, "cpsat", path)
        labelled = schedule(with_unread_labels(s), "cpsat", path)
        assert labelled.placements == plain.placements
        assert labelled.objective == plain.objective and labelled.bound == plain.bound


@WEIGHTINGS
@PROPERTY
@given(s=small_clusters())
def test_score_of_a_decision_is_the_objective_it_reports(
    s: ClusterState, config: SolverConfig
) -> None:
    for scheduler in SCHEDULERS:
        d = schedule(s, scheduler, config)
        assert score(s, d, config.weights) == d.terms


def test_score_prices_a_partial_gang_at_nothing_but_its_cost() -> None:
    s = seed_deadlock()
    greedy_terms = score(s, solve(s, "greedy"), FAST.weights)
    gang_terms = score(s, solve(s, "gang-greedy"), FAST.weights)
    assert greedy_terms["value"] == 0  # six pods placed, no gang complete
    assert gang_terms["value"] > 0
    assert sum(gang_terms.values()) > sum(greedy_terms.values())


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_deferred_explanations_are_the_ones_given_at_once(scheduler: str) -> None:
    """Deferred, a decision holds only what ``prepare`` found wrong (a missing queue)
    until ``explained``; then the same reasons as a decision explained at once."""
    s = state(
        nodes=[node("n").cap(cpu=2, memory="8Gi")],
        pods=[*pods_of("lost", 1, cpu=1), *pods_of("big", 3, cpu=1), *pods_of("ok", 2, cpu=1)],
        gangs=[gang("lost", 1).queue("missing"), gang("big", 3), gang("ok", 2)],
    )
    at_once = schedule(s, scheduler, FAST)
    deferred = schedule(s, scheduler, FAST.model_copy(update={"defer_explanations": True}))
    assert not at_once.explanations_pending and deferred.explanations_pending
    assert deferred.unschedulable == {"lost": "queue 'missing' not found"}
    assert deferred.placements == at_once.placements
    explained = deferred.explained()
    assert explained.unschedulable == at_once.unschedulable
    assert set(explained.unschedulable) == {"lost", "big", "ok"} - set(explained.admitted)
    assert explained.unschedulable["lost"] == "queue 'missing' not found"
    assert not explained.explanations_pending and explained.explained() is explained


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize("defer", [False, True])
def test_an_admitted_gangs_pods_left_pending_are_explained_apart(
    scheduler: str, defer: bool
) -> None:
    """An elastic gang (minMember 2 of 3) with room for two is admitted, not unschedulable;
    why its third pod waits is ``left_over``'s, so that the pod can be told. With room for
    all three, nothing is left over."""
    config = FAST.model_copy(update={"defer_explanations": defer})
    for cpu, left in ((2, {"elastic"}), (3, set())):
        s = state(
            nodes=[node("n").cap(cpu=cpu, memory="8Gi")],
            pods=pods_of("elastic", 3, cpu=1),
            gangs=[gang("elastic", 2)],
        )
        explained = schedule(s, scheduler, config).explained()
        assert explained.admitted == ("elastic",) and explained.unschedulable == {}
        assert set(explained.left_over) == left
        if left:
            why = explained.left_over["elastic"]
            assert why == "2/3 pods fit (minMember 2): 1 Insufficient cpu"
