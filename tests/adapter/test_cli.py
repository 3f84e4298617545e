"""The ``gangsat`` command line, driven in process through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.testing import CliRunner

from adapter.cli import SchedulerName, app
from benchmarks.instances import seed_deadlock
from solver.model import ClusterState, Decision
from solver.schedulers import SCHEDULERS
from solver.validate import check

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "seed-state.json"
SCENARIO = ROOT / "adapter" / "scenarios" / "seed-deadlock.json"
GANGS = {"job-a", "job-b"}

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EXAMPLE.read_text())
    return data


def write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    return str(path)


def assert_bad_input(result: Any, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_scheduler_choices_are_the_registry() -> None:
    assert set(get_args(SchedulerName)) == set(SCHEDULERS)


def test_example_and_packaged_scenario_are_the_seed_deadlock() -> None:
    assert ClusterState.model_validate_json(EXAMPLE.read_text()) == seed_deadlock()
    assert SCENARIO.read_text() == EXAMPLE.read_text()


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_solve_prints_a_decision(scheduler: str) -> None:
    result = invoke("solve", str(EXAMPLE), "--scheduler", scheduler, "-t", "5", "--seed", "0")
    assert result.exit_code == 0, result.output
    decision = Decision.model_validate_json(result.stdout)
    assert decision.scheduler == scheduler
    state = seed_deadlock()
    if scheduler == "greedy":
        assert decision.admitted == ()
        assert {v.kind for v in check(state, decision)} == {"partial-gang"}
    else:
        assert len(decision.admitted) == 1
        assert set(decision.admitted) <= GANGS
        assert len(decision.placements) == 6
        assert check(state, decision) == []


def test_solve_names_the_bad_field(tmp_path: Path) -> None:
    data = example()
    data["nodes"][2]["allocatable"]["cpu"] = -1
    result = invoke("solve", write(tmp_path, data))
    assert_bad_input(result, 'nodes["node-2"].allocatable: ', "'cpu' is negative (-1)")


def test_solve_reports_every_bad_field_once(tmp_path: Path) -> None:
    data = example()
    del data["gangs"][0]["min_member"]
    data["pods"][0]["colour"] = "red"
    data["pods"][1]["tolerations"] = [{"key": "k", "effect": "Sometimes"}]
    data["nodes"][0]["name"] = ""
    result = invoke("solve", write(tmp_path, data))
    assert_bad_input(
        result,
        'gangs["job-a"].min_member: Field required',
        'pods["job-a-0"].colour: Extra inputs are not permitted',
        "nodes[0].name: ",
    )
    lines = result.stderr.splitlines()
    assert len(lines) == 4, lines
    effect = [line for line in lines if 'pods["job-b-0"].tolerations[0].effect' in line]
    assert len(effect) == 1 and "; or " in effect[0]


def test_solve_rejects_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"nodes": [')
    assert_bad_input(invoke("solve", str(path)), "invalid JSON at line 1")


@pytest.mark.parametrize("body", ["[]", "null"])
def test_solve_rejects_a_non_object(tmp_path: Path, body: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(body)
    assert_bad_input(invoke("solve", str(path)), "should be an object")


def test_solve_rejects_a_missing_file(tmp_path: Path) -> None:
    assert_bad_input(invoke("solve", str(tmp_path / "nope.json")), "no such file")


def test_solve_rejects_a_bad_option_value() -> None:
    assert_bad_input(invoke("solve", str(EXAMPLE), "--time-limit", "0"), "--time-limit: ")


def test_solve_rejects_an_unknown_scheduler() -> None:
    result = invoke("solve", str(EXAMPLE), "--scheduler", "fifo")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_schema_prints_both_models() -> None:
    result = invoke("schema")
    assert result.exit_code == 0, result.output
    schemas = json.loads(result.stdout)
    assert set(schemas) == {"state", "decision"}
    assert "nodes" in schemas["state"]["properties"]
    assert "placements" in schemas["decision"]["properties"]


@pytest.mark.parametrize(("which", "field"), [("state", "gangs"), ("decision", "admitted")])
def test_schema_prints_one_model(which: str, field: str) -> None:
    result = invoke("schema", which)
    assert result.exit_code == 0, result.output
    assert field in json.loads(result.stdout)["properties"]


def test_run_shows_the_deadlock_and_the_fix() -> None:
    result = invoke("run", "--time-limit", "5")
    assert result.exit_code == 0, result.output
    out = result.stdout
    greedy, rest = out.split("gang-greedy —", 1)
    assert "DEADLOCK: job-a has 3/6 pods bound and waits forever" in greedy
    assert "DEADLOCK: job-b has 3/6 pods bound and waits forever" in greedy
    assert "DEADLOCK" not in rest.split("Summary")[0]
    assert "node-0 (2/2 pods): " in greedy
    assert "admitted: none" in greedy
    assert rest.count("\n  admitted: job-") == 2
    assert "Summary: seed-deadlock" in out


def test_run_takes_a_state_file(tmp_path: Path) -> None:
    data = example()
    data["nodes"].append({"name": "node-3", "allocatable": {"cpu": 12000, "pods": 12}})
    result = invoke("run", "--scenario", write(tmp_path, data))
    assert result.exit_code == 0, result.output
    assert "DEADLOCK" not in result.stdout
    assert result.stdout.count("\n  admitted: job-a, job-b\n") == 3


def test_run_rejects_an_unknown_scenario() -> None:
    assert_bad_input(invoke("run", "--scenario", "no-such-scenario"), "no such file")


def test_version() -> None:
    result = invoke("version")
    assert result.exit_code == 0
    assert result.stdout.startswith("gangsat ")
