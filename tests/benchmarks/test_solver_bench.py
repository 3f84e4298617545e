"""The solver benchmark's runner (``python -m benchmarks.solver``): its rows, summaries
and JSON, the validator's findings and the exit status, ``--follow`` and
``--preemption``, and that it runs each scheduler as the scheduling loop does."""

from __future__ import annotations

import gc
import io
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from rich.console import Console

from benchmarks import instances, solver_tables
from benchmarks import solver as bench
from solver.config import SolverConfig
from solver.decision import Decision, SolveStatus
from solver.model import ClusterState
from solver.schedulers import schedule


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
    monkeypatch.setattr(solver_tables, "PODS_ONE_AT_A_TIME", frozenset({"cpsat", "gang-greedy"}))
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
    assert rows["overfull"]["refused"] and rows["overfull"]["findings"][0].startswith("capacity:")
    assert rows["gang-greedy"]["findings"] == []


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
