"""The benchmark instance generators: reproducible, the sizes they promise, within capacity.

Pre-use tolerance: the generator aims at exactly ``round(0.35 * total GPUs)``; the test
accepts 35% +- 1 percentage point so a later change to the rounding does not break it,
while a real drift (e.g. a wrong target) still fails.
"""

from __future__ import annotations

import gc
import io
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from benchmarks import instances
from benchmarks import solver as bench
from solver.config import SolverConfig
from solver.model import CPU, GPU, MEMORY, PODS, ClusterState, Decision, SolveStatus
from solver.problem import prepare
from solver.schedulers import schedule

PRE_USE_TOLERANCE = 0.01


@pytest.fixture(scope="module")
def ref() -> ClusterState:
    return instances.reference(0)


@pytest.fixture(scope="module")
def big() -> ClusterState:
    return instances.large(0)


def _members(state: ClusterState) -> dict[str, list[str]]:
    members: dict[str, list[str]] = defaultdict(list)
    for pod in state.pods:
        members[pod.gang_name()].append(pod.name)
    return members


def _pending_gangs(state: ClusterState) -> set[str]:
    return {p.gang_name() for p in state.pending_pods()}


def test_same_seed_same_state() -> None:
    assert instances.reference(0) == instances.reference(0)
    assert instances.reference(7) == instances.reference(7)
    assert instances.large(3, nodes=300, pods=800) == instances.large(3, nodes=300, pods=800)
    assert instances.scheduler_perf(50, 10, ((2, 7),)) == instances.scheduler_perf(
        50, 10, ((2, 7),)
    )
    assert instances.seed_deadlock() == instances.seed_deadlock()


def test_different_seed_different_state() -> None:
    assert instances.reference(0) != instances.reference(1)
    assert instances.large(0, nodes=300, pods=800) != instances.large(1, nodes=300, pods=800)


def test_generators_leave_global_random_alone() -> None:
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    instances.reference(5)
    assert random.random() == expected


@pytest.mark.parametrize("which", ["ref", "big"])
def test_gpu_nodes(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    assert len(state.nodes) == (200 if which == "ref" else 1000)
    types = Counter(n.labels["gpu-type"] for n in state.nodes)
    assert set(types) == {"a100", "v100", "t4"}
    assert max(types.values()) - min(types.values()) <= 1
    for node in state.nodes:
        assert node.allocatable[CPU] == 32_000
        assert node.allocatable[MEMORY] == 128 * 2**30
        assert node.allocatable[GPU] == 8
        assert node.allocatable[PODS] == 110
    assert [(q.name, q.weight) for q in state.queues] == [
        ("q1", 1),
        ("q2", 2),
        ("q3", 3),
        ("q4", 4),
    ]


@pytest.mark.parametrize("which", ["ref", "big"])
def test_pre_use_about_35_percent_and_within_capacity(
    which: str, request: pytest.FixtureRequest
) -> None:
    state: ClusterState = request.getfixturevalue(which)
    total_gpus = sum(n.allocatable[GPU] for n in state.nodes)
    bound = state.bound_pods()
    used = sum(p.requests[GPU] for p in bound)
    assert abs(used / total_gpus - 0.35) <= PRE_USE_TOLERANCE
    nodes = {n.name: n for n in state.nodes}
    load: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in bound:
        assert pod.node_name in nodes
        load[pod.node_name].update(pod.demand())
    for name, demand in load.items():
        for resource, quantity in demand.items():
            assert quantity <= nodes[name].allocatable[resource], (name, resource)
    # cpu and memory are proportional to GPUs
    assert sum(p.requests[CPU] for p in bound) == 4_000 * used
    assert sum(p.requests[MEMORY] for p in bound) == 16 * 2**30 * used


@pytest.mark.parametrize("which", ["ref", "big"])
def test_bound_pods_respect_their_selector(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    nodes = {n.name: n for n in state.nodes}
    for pod in state.bound_pods():
        assert pod.node_name is not None
        for key, value in pod.node_selector.items():
            assert nodes[pod.node_name].labels[key] == value


@pytest.mark.parametrize("which", ["ref", "big"])
def test_running_gangs_are_running(which: str, request: pytest.FixtureRequest) -> None:
    state: ClusterState = request.getfixturevalue(which)
    members = _members(state)
    pods = {p.name: p for p in state.pods}
    running = {p.gang_name() for p in state.bound_pods()}
    assert running.isdisjoint(_pending_gangs(state))
    for gang in state.gangs:
        if gang.name in running:
            assert gang.min_member == len(members[gang.name])
            assert all(pods[m].node_name is not None for m in members[gang.name])
    assert {g.queue for g in state.gangs if g.name in running} <= {"q1", "q2", "q3", "q4"}


def test_reference_pending_gangs(ref: ClusterState) -> None:
    pending = _pending_gangs(ref)
    assert len(pending) == 150
    members = _members(ref)
    pods = {p.name: p for p in ref.pods}
    gangs = [g for g in ref.gangs if g.name in pending]
    sizes = Counter(len(members[g.name]) for g in gangs)
    assert set(sizes) <= {1, 2, 4, 8, 16, 32}
    assert sizes[1] > sizes[2] > sizes[4] >= sizes[32]  # skewed towards small
    selected = 0
    for gang in gangs:
        spec = {pods[m].requests for m in members[gang.name]}
        assert len(spec) == 1  # all pods of a gang are alike
        (requests,) = spec
        gpus = requests[GPU]
        assert gpus in (1, 2, 4, 8)
        assert requests[CPU] == 4_000 * gpus
        assert requests[MEMORY] == 16 * 2**30 * gpus
        assert 1 <= gang.min_member <= len(members[gang.name])
        selected += bool(pods[members[gang.name][0]].node_selector)
    assert 0.35 <= selected / len(gangs) <= 0.65  # about half
    elastic = [g for g in gangs if g.min_member < len(members[g.name])]
    assert 0 < len(elastic) < len(gangs) / 2  # some, not most
    priorities = Counter(g.priority for g in gangs)
    assert set(priorities) == {0, 10}
    assert priorities[0] > priorities[10]
    created = [g.created_s for g in ref.gangs]
    assert created == sorted(created) and len(set(created)) == len(created)


def test_large_sizes(big: ClusterState) -> None:
    assert len(big.pending_pods()) == 5000
    members = _members(big)
    assert all(1 <= len(members[g]) <= 32 for g in _pending_gangs(big))
    for gang in big.gangs:
        assert gang.min_member <= len(members[gang.name])


def test_scheduler_perf_shapes() -> None:
    full = instances.scheduler_perf()
    assert len(full.nodes) == 5000
    assert len(full.pods) == 3000 and len(full.gangs) == 1000
    assert not full.bound_pods()
    assert [q.name for q in full.queues] == ["default"]
    node = full.nodes[0]
    assert (node.allocatable[CPU], node.allocatable[MEMORY], node.allocatable[PODS]) == (
        4_000,
        32 * 2**30,
        110,
    )
    pod = full.pods[0]
    assert (pod.requests[CPU], pod.requests[MEMORY]) == (100, 100 * 2**20)

    small = instances.scheduler_perf(500, 300, ((3, 100),))
    assert len(small.nodes) == 500
    members = _members(small)
    assert Counter(len(m) for m in members.values()) == {3: 300, 100: 3}
    for gang in small.gangs:
        assert gang.min_member == len(members[gang.name])
        assert gang.queue == "default"


def test_seed_deadlock() -> None:
    state = instances.seed_deadlock()
    slots = sum(min(n.allocatable[PODS], n.allocatable[CPU] // 1_000) for n in state.nodes)
    assert len(state.nodes) == 3 and slots == 6
    members = _members(state)
    assert sorted(members) == ["job-a", "job-b"]
    assert {g.name: g.min_member for g in state.gangs} == {"job-a": 6, "job-b": 6}
    assert all(len(m) == 6 for m in members.values())
    assert all(p.requests[CPU] == 1_000 and p.node_name is None for p in state.pods)
    assert [q.name for q in state.queues] == ["default"]


@pytest.mark.parametrize(
    "build",
    [
        lambda: instances.reference(0),
        lambda: instances.large(0, nodes=300, pods=800),
        lambda: instances.scheduler_perf(50, 10, ((2, 7),)),
        instances.seed_deadlock,
    ],
)
def test_prepare_accepts_every_gang(build: Callable[[], ClusterState]) -> None:
    problem = prepare(build())
    assert problem.invalid == {}
    assert problem.waiting_pods == {}


def test_benchmark_runner_with_fake_schedulers(tmp_path: Path) -> None:
    """The runner (not the real schedulers, written elsewhere) tabulates and writes JSON."""

    def fake(objective: int) -> bench.Scheduler:
        def schedule(state: ClusterState, config: SolverConfig) -> Decision:
            gang = state.gangs[0].name
            pods = [p for p in state.pods if p.gang == gang]
            return Decision(
                scheduler="fake",
                placements={p.name: state.nodes[i % 3].name for i, p in enumerate(pods)},
                admitted=(gang,),
                status=SolveStatus.GREEDY,
                objective=objective,
            )

        return schedule

    def broken(state: ClusterState, config: SolverConfig) -> Decision:
        raise RuntimeError("boom")

    out = tmp_path / "out.json"
    console = Console(record=True, width=200)
    code = bench.main(
        ["--instances", "deadlock", "--json", str(out)],
        schedulers={"gang-greedy": fake(50), "better": fake(100)},
        console=console,
    )
    assert code == 0
    payload = json.loads(out.read_text())
    rows = {r["scheduler"]: r for r in payload["results"]}
    assert rows["better"]["vs_baseline"] == 2.0
    assert rows["better"]["placed"] == 6 and rows["better"]["admitted"] == 1
    assert payload["instances"][0]["pending_pods"] == 12
    assert "prepare" in console.export_text()

    assert bench.main(["--instances", "deadlock"], {"x": broken}, Console(file=io.StringIO())) == 1
    assert bench.main(["--instances", "nope"], {"x": broken}, Console(file=io.StringIO())) == 2


def test_seeds_and_runs_are_summarised_per_instance_and_scheduler(tmp_path: Path) -> None:
    calls: list[int] = []

    def counted(state: ClusterState, config: SolverConfig) -> Decision:
        calls.append(config.seed)
        gang = state.gangs[0].name
        return Decision(
            scheduler="counted",
            placements={
                p.name: state.nodes[i % 3].name
                for i, p in enumerate(q for q in state.pods if q.gang == gang)
            },
            admitted=(gang,),
            status=SolveStatus.FEASIBLE,
            objective=100 + 10 * len(calls),
            bound=200,
            gap=0.5 - 0.05 * len(calls),
        )

    out = tmp_path / "out.json"
    console = Console(record=True, width=250)
    code = bench.main(
        ["--instances", "deadlock", "--seeds", "4,7", "--runs", "2", "--json", str(out)],
        schedulers={"counted": counted},
        console=console,
    )
    assert code == 0
    assert calls == [4, 4, 7, 7]  # each seed's instance solved twice, with that seed
    payload = json.loads(out.read_text())
    assert [(r["seed"], r["run"]) for r in payload["results"]] == [(4, 0), (4, 1), (7, 0), (7, 1)]
    assert payload["seeds"] == [4, 7] and payload["runs"] == 2
    text = console.export_text()
    assert "Over seeds and runs" in text
    summary = text[text.index("Over seeds and runs") :]
    assert "45.00%" in summary  # the worst of 45, 40, 35, 30%
    assert "37.50%" in summary  # their median
    assert bench.main(["--seeds", "1,x"], {"x": counted}, Console(file=io.StringIO())) == 2
    assert bench.main(["--runs", "0"], {"x": counted}, Console(file=io.StringIO())) == 2


def test_follow_binds_cpsats_decision_and_decides_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each follow-up decides the state the followed decision left (its pods bound), every
    scheduler on the same state; it stops once a decision binds nothing."""
    # These schedulers bind a pod or two of a gang at a time: partial gangs, by design.
    monkeypatch.setattr(bench, "PODS_ONE_AT_A_TIME", frozenset({"cpsat", "gang-greedy"}))
    seen: dict[str, list[int]] = defaultdict(list)

    def first_pending(name: str) -> bench.Scheduler:
        def schedule(state: ClusterState, config: SolverConfig) -> Decision:
            pending = sorted(p.name for p in state.pending_pods())
            seen[name].append(len(pending))
            # "cpsat" binds one pod a cycle; the other would bind two (never bound).
            take = pending[: 1 if name == "cpsat" else 2]
            running = Counter(p.node_name for p in state.pods if p.node_name is not None)
            room = [n.name for n in state.nodes for _ in range(2 - running[n.name])]
            return Decision(
                scheduler=name,
                placements=dict(zip(take, room, strict=False)),
                status=SolveStatus.GREEDY,
                objective=len(take),
            )

        return schedule

    out = tmp_path / "out.json"
    code = bench.main(
        ["--instances", "deadlock", "--follow", "2", "--json", str(out)],
        schedulers={"gang-greedy": first_pending("gang-greedy"), "cpsat": first_pending("cpsat")},
        console=Console(file=io.StringIO()),
    )
    assert code == 0
    assert seen == {"gang-greedy": [12, 11, 10], "cpsat": [12, 11, 10]}
    names = [(r["instance"], r["scheduler"]) for r in json.loads(out.read_text())["results"]]
    assert [n for n, s in names if s == "cpsat"] == ["deadlock", "deadlock+1", "deadlock+2"]

    def nothing(state: ClusterState, config: SolverConfig) -> Decision:
        seen["nothing"].append(len(state.pending_pods()))
        return Decision(scheduler="nothing", status=SolveStatus.GREEDY, objective=0)

    assert (
        bench.main(
            ["--instances", "deadlock", "--follow", "3"],
            {"cpsat": nothing},
            Console(file=io.StringIO()),
        )
        == 0
    )
    assert seen["nothing"] == [12]  # nothing bound: no follow-up
    assert bench.main(["--follow", "-1"], {"cpsat": nothing}, Console(file=io.StringIO())) == 2


def test_no_ratio_against_a_negative_baseline() -> None:
    def fixed(objective: int) -> bench.Scheduler:
        def schedule(state: ClusterState, config: SolverConfig) -> Decision:
            return Decision(scheduler="fixed", status=SolveStatus.GREEDY, objective=objective)

        return schedule

    rows = bench.run_instance(
        "deadlock",
        instances.seed_deadlock(),
        {"gang-greedy": fixed(-15), "other": fixed(-10)},
        SolverConfig(),
    )
    other = rows[1]
    assert other.vs_baseline is None
    assert other.minus_baseline == 5


def test_schedulers_run_as_the_loop_runs_them(tmp_path: Path) -> None:
    """Explanations deferred and timed apart; the instance frozen during the runs only;
    no automatic collection during a call, as during the loop's cycle."""
    seen: list[tuple[bool, int]] = []
    collecting: list[bool] = []
    explained: list[str] = []

    def loop_like(state: ClusterState, config: SolverConfig) -> Decision:
        seen.append((config.defer_explanations, gc.get_freeze_count()))
        collecting.append(gc.isenabled())
        decision = schedule(state, "gang-greedy", config)
        explain = decision._explain
        assert explain is not None  # deferred: left to the runner

        def recorded() -> dict[str, str]:
            explained.append("after the decision")
            return explain()

        decision._explain = recorded
        return decision

    out = tmp_path / "out.json"
    code = bench.main(
        ["--instances", "deadlock", "--json", str(out)],
        schedulers={"loop-like": loop_like},
        console=Console(file=io.StringIO()),
    )
    assert code == 0
    deferred, frozen = seen[0]
    assert deferred and frozen > 0  # the instance's objects were out of the collector's sight
    assert gc.get_freeze_count() == 0  # and are back in it once the runs are over
    assert collecting == [False] and gc.isenabled()  # collections resume after the call
    assert explained == ["after the decision"]
    row = json.loads(out.read_text())["results"][0]
    assert row["explain_s"] is not None and row["explain_s"] >= 0


def test_every_decision_is_validated_and_a_broken_rule_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The validator's findings are columns of each row; a decision that breaks a rule
    (here four pods of 1 core on a node of 2 cores) fails the run and names what it
    broke."""

    def overfull(state: ClusterState, config: SolverConfig) -> Decision:
        gang = [p for p in state.pods if p.gang == "job-a"]
        placements = {p.name: state.nodes[i % 2].name for i, p in enumerate(gang[:5])}
        placements[gang[5].name] = state.nodes[0].name
        return Decision(scheduler="overfull", placements=placements, status=SolveStatus.GREEDY)

    out = tmp_path / "out.json"
    code = bench.main(
        ["--instances", "deadlock", "--json", str(out)],
        schedulers={"gang-greedy": bench.load_schedulers()["gang-greedy"], "overfull": overfull},
        console=Console(file=io.StringIO()),
    )
    assert code == 1
    rows = {r["scheduler"]: r for r in json.loads(out.read_text())["results"]}
    assert (rows["gang-greedy"]["partial_gangs"], rows["gang-greedy"]["violations"]) == (0, 0)
    assert rows["overfull"]["partial_gangs"] == 0 and rows["overfull"]["violations"] > 0
    assert "deadlock seed 0 overfull: capacity:" in capsys.readouterr().err


def test_partial_gangs_fail_the_run_unless_the_scheduler_places_pods_one_at_a_time(
    tmp_path: Path,
) -> None:
    """greedy half-places both gangs of the seed scenario, as kube-scheduler would: shown,
    and no failure; the same decision from a scheduler that claims gangs fails the run."""
    greedy = bench.load_schedulers()["greedy"]
    for name, expected in (("greedy", 0), ("claims-gangs", 1)):
        out = tmp_path / f"{name}.json"
        console = Console(record=True, width=300)
        code = bench.main(
            ["--instances", "deadlock", "--seeds", "0,1", "--json", str(out)],
            schedulers={name: greedy},
            console=console,
        )
        assert code == expected
        rows = json.loads(out.read_text())["results"]
        assert [(r["partial_gangs"], r["violations"]) for r in rows] == [(2, 0), (2, 0)]
        assert [r["refused"] for r in rows] == [bool(expected)] * 2
        assert "refused" in console.export_text().split("Over seeds and runs")[1]


def test_preemption_is_asked_for_and_its_evictions_counted(tmp_path: Path) -> None:
    asked: list[bool] = []

    def recorded(state: ClusterState, config: SolverConfig) -> Decision:
        asked.append(config.preemption)
        return Decision(scheduler="recorded", status=SolveStatus.GREEDY, objective=0)

    out = tmp_path / "out.json"
    for flags in ([], ["--preemption"]):
        code = bench.main(
            ["--instances", "deadlock", "--json", str(out), *flags],
            schedulers={"recorded": recorded},
            console=Console(file=io.StringIO()),
        )
        assert code == 0
        assert json.loads(out.read_text())["preemption"] is bool(flags)
    assert asked == [False, True]

    decision = Decision(
        scheduler="preempting",
        status=SolveStatus.FEASIBLE,
        evictions={"old-0": "preempted for new", "old-1": "preempted for new"},
        nominated={"new-0": "node-1"},
    )
    row = bench.decision_row("x", "preempting", 1, decision, 0.1, violations=[])
    assert (row.evicted, row.nominated, row.refused()) == (2, 1, False)


def test_piped_output_prints_every_column_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Printed to a pipe (CI logs, tee), the table is wide enough for every column: a
    truncated objective reads as another number."""
    out = tmp_path / "out.json"
    schedulers = bench.load_schedulers()
    assert bench.main(["--instances", "deadlock", "--json", str(out)], schedulers) == 0
    printed = capsys.readouterr().out
    assert "…" not in printed
    for row in json.loads(out.read_text())["results"]:
        assert f"{row['objective']:,}" in printed
