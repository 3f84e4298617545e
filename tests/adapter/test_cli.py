"""The ``gangsat`` command line, driven in process through typer's CliRunner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.testing import CliRunner

from adapter.cli import SchedulerName, app
from benchmarks.instances import seed_deadlock
from solver.decision import Decision
from solver.model import ClusterState
from solver.schedulers import SCHEDULERS
from solver.validate import check

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "seed-state.json"
GANGS = {"job-a", "job-b"}

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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


def test_example_state_is_the_seed_deadlock() -> None:
    assert ClusterState.model_validate_json(EXAMPLE.read_text()) == seed_deadlock()


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
    gang_aware = rest.split("Summary")[0]
    # Pod by pod, the interleaved pods split the 6 slots 3/3: both jobs stuck.
    assert "job-a: 3 pods on node-0, node-1, node-2; 3/6 bound (partial" in greedy
    assert "DEADLOCK" in greedy and "job-a 3/6 pods bound, job-b 3/6 pods bound" in greedy
    assert "started" not in greedy
    assert "DEADLOCK" not in gang_aware and "partial" not in gang_aware
    # gang-greedy and cpsat each run job-a whole, then job-b.
    assert gang_aware.count("job-a: 6 pods on node-0×2, node-1×2, node-2×2; 6/6 bound") == 2
    assert gang_aware.count("job-b finished") == 2
    summary = out.split("Summary: seed-deadlock")[1]
    rows = {line.split()[0]: line.split() for line in summary.splitlines() if line.strip()}
    assert rows["greedy"][1:3] == ["0/2", "1"]
    assert rows["gang-greedy"][1:4] == ["2/2", "0", "0"]
    assert rows["cpsat"][1:4] == ["2/2", "0", "0"]


def test_run_writes_summaries_and_takes_a_scenario_file(tmp_path: Path) -> None:
    scenario = {
        "name": "two-fit",
        "nodes": [{"name": "n", "count": 2, "allocatable": {"cpu": "4"}}],
        "jobs": [
            {"name": "j", "count": 2, "duration_s": 30, "replicas": 4, "requests": {"cpu": "1"}}
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    out = tmp_path / "out.json"
    result = invoke("run", "--scenario", str(path), "-s", "cpsat", "--json", str(out))
    assert result.exit_code == 0, result.output
    [summary] = json.loads(out.read_text())
    assert summary["scheduler"] == "cpsat"
    assert summary["finished_jobs"] == 2 and summary["makespan_s"] == 30
    assert "DEADLOCK" not in result.stdout


@pytest.mark.parametrize("where", ["missing/out.json", "."])
def test_run_refuses_a_json_path_it_cannot_write_before_running(tmp_path: Path, where: str) -> None:
    """Before, the whole simulation ran, then a traceback (FileNotFoundError)."""
    result = invoke("run", "-s", "gang-greedy", "--json", str(tmp_path / where))
    assert_bad_input(result, "not a file it may write in an existing directory")
    assert "Summary" not in result.stdout


def test_run_rejects_an_unknown_scenario() -> None:
    assert_bad_input(invoke("run", "--scenario", "no-such-scenario"), "no such file")


def test_run_names_the_bad_field_of_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps({"name": "x", "nodes": [{"name": "n", "count": 0, "allocatable": {}}]})
    )
    assert_bad_input(invoke("run", "--scenario", str(path)), 'nodes["n"].count: Input should be')


def test_run_rejects_a_negative_quantity(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps({"name": "x", "nodes": [{"name": "n", "allocatable": {"cpu": "-1"}}]})
    )
    assert_bad_input(invoke("run", "--scenario", str(path)), "cpu: '-1' is negative")


def test_run_rejects_an_unknown_scheduler() -> None:
    assert_bad_input(invoke("run", "-s", "fifo"), "unknown fifo")


def test_version() -> None:
    result = invoke("version")
    assert result.exit_code == 0
    assert result.stdout.startswith("gangsat ")


def test_a_simulated_run_honours_its_settings_file_and_refuses_a_bad_one(
    tmp_path: Path,
) -> None:
    assert_bad_input(invoke("run", "--settings", str(tmp_path / "absent.yaml")), "cannot read")
    bad = tmp_path / "bad.yaml"
    bad.write_text("solver:\n  weights:\n    fairness: -1\n")
    assert_bad_input(invoke("run", "--settings", str(bad)), "solver.weights.fairness")
    good = tmp_path / "good.yaml"
    good.write_text("solver:\n  time_limit_s: 0.5\n")
    out = tmp_path / "out.json"
    result = invoke("run", "--settings", str(good), "--scheduler", "cpsat", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())


@pytest.mark.parametrize(
    "flag",
    [
        ["--cycles", "1"],
        ["--scheduler-name", "x"],
        ["--metrics-port", "9090"],
        ["--metrics-port", "8080"],  # given, though it is the default
        ["--no-leader-elect"],
        ["--lease-name", "mine"],
        ["--sync-timeout", "5"],
        ["--log-format", "json"],
    ],
)
def test_a_simulated_run_refuses_what_only_a_real_cluster_reads(flag: list[str]) -> None:
    """Accepted and ignored before: --cycles 1 ran every cycle of the scenario, and
    --metrics-port served nothing."""
    result = invoke("run", "-s", "gang-greedy", *flag)
    assert_bad_input(result, "for a real cluster only")
    assert flag[0].replace("--no-", "--") in result.stderr


def test_solve_reads_the_settings_a_cluster_runs_with(tmp_path: Path) -> None:
    """Its schedulerNames (the pods of another name are left alone, and said so), and
    its solver; a bad file exits 2 with the field's name."""
    seed = str(EXAMPLES / "kube-batch-seed.yaml")
    other = tmp_path / "other.yaml"
    other.write_text("schedulerNames: [volcano]\nsolver:\n  time_limit_s: 0.5\n")
    result = invoke("solve", "--manifests", seed, "--settings", str(other))
    assert result.exit_code == 0, result.output
    assert Decision.model_validate_json(result.stdout).placements == {}
    assert "left to that scheduler" in result.stderr
    ours = invoke(
        "solve", "--manifests", seed, "--settings", str(other), "--scheduler-name", "gangsat"
    )
    assert len(Decision.model_validate_json(ours.stdout).placements) == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("solver:\n  weights:\n    fairness: -1\n")
    assert_bad_input(invoke("solve", "--manifests", seed, "--settings", str(bad)), "fairness")
    greedy = tmp_path / "greedy.yaml"
    greedy.write_text("scheduler: gang-greedy\n")
    chosen = invoke("solve", "--manifests", seed, "--settings", str(greedy))
    assert Decision.model_validate_json(chosen.stdout).scheduler == "gang-greedy"
    overridden = invoke("solve", "--manifests", seed, "--settings", str(greedy), "-s", "cpsat")
    assert Decision.model_validate_json(overridden.stdout).scheduler == "cpsat"


def test_solve_says_so_when_the_manifests_hold_no_node() -> None:
    """deploy/examples hold only PodGroups and pods: each gang read "0/0 nodes are
    available", and nothing said that the cluster's nodes were to be added."""
    deployed = EXAMPLES.parent / "deploy" / "examples" / "coscheduling.yaml"
    result = invoke("solve", "--manifests", str(deployed))
    assert result.exit_code == 0, result.output
    assert "no Node in the manifests" in result.stderr
    with_nodes = invoke("solve", "--manifests", str(EXAMPLES / "kube-batch-seed.yaml"))
    assert "no Node" not in with_nodes.stderr


def test_solve_refuses_standard_input_it_cannot_decode() -> None:
    """Read through the locale's decoding, the byte got through and the YAML parser failed
    with a traceback. A real process: the test runner's stdin decodes otherwise."""
    done = subprocess.run(
        [sys.executable, "-m", "adapter.cli", "solve", "--manifests", "-"],
        input=b"kind: Node\nmetadata: {name: \xff}\n",
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert b"Traceback" not in done.stderr and b"-: cannot read" in done.stderr


@pytest.mark.parametrize(
    ("scenario", "fragment"),
    [
        ('"settings": {"cycle_s": 1e-308}', "settings.cycle_s: Input should be greater"),
        ('"settings": {"bind_failure_rate": 0.999}', "settings.bind_failure_rate"),
        ('"jobs": [{"name": "j", "duration_s": Infinity, "replicas": 1}]', "finite number"),
        ('"jobs": [{"name": "j", "count": 1000000000, "duration_s": 1, "replicas": 1}]', "count"),
    ],
)
def test_a_scenario_that_would_never_end_is_refused(
    tmp_path: Path, scenario: str, fragment: str
) -> None:
    # Each once ran out of memory, overflowed or never finished (issue 13).
    path = tmp_path / "s.json"
    path.write_text('{"name": "x", ' + scenario + "}")
    assert_bad_input(invoke("run", "--scenario", str(path)), fragment)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('{"pods": [{"name": "p", "created_s": NaN}]}', "created_s: Input should be a finite"),
        ('{"gangs": [{"name": "g", "min_member": 1, "created_s": Infinity}]}', "finite"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_solve_refuses_what_no_state_holds(tmp_path: Path, body: str, fragment: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(body)
    assert_bad_input(invoke("solve", str(path)), fragment)


def test_run_prints_names_with_brackets_as_they_are(tmp_path: Path) -> None:
    # Rich markup in a job name or description ended the run with a MarkupError.
    scenario = {
        "name": "brackets",
        "description": "uses [/] and [bold] as text",
        "nodes": [{"name": "n", "count": 1, "allocatable": {"cpu": "4"}}],
        "jobs": [{"name": "train[gpu]", "duration_s": 30, "replicas": 2, "requests": {"cpu": "1"}}],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    result = invoke("run", "--scenario", str(path), "-s", "cpsat")
    assert result.exit_code == 0, result.output
    assert "uses [/] and [bold] as text" in result.stdout
    assert "train[gpu]" in result.stdout


def test_run_refuses_a_time_limit_of_zero_rather_than_ignoring_it() -> None:
    assert_bad_input(invoke("run", "--time-limit", "0", "-s", "cpsat"), "greater than 0")
