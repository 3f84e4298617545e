"""The benchmark suite end to end on the seed-deadlock scenario: results.json, report.md
and the plots, through ``run_suite`` and through the ``gangsat-bench`` command line.

seed-deadlock is the smallest packaged scenario (3 nodes, 2 jobs of 6 pods): every
scheduler finishes it in milliseconds, and its outcome is known — the stock scheduler
deadlocks, both gang schedulers run both jobs whole.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from adapter.sim.measures import RunSummary
from adapter.sim.scenario import PhillyTrace, Scenario, load_scenario
from benchmarks import plots, report, suite

SCENARIO = "seed-deadlock"
SCHEDULERS = ("cpsat", "gang-greedy", "greedy")
PLOTS = ("utilisation", "shares", "jct-cdf")


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bench")
    settings = suite.SuiteSettings(
        scenarios=(SCENARIO,), schedulers=SCHEDULERS, out=directory, time_limit_s=1.0
    )
    result = suite.run_suite(settings, quiet())
    assert not result.errors
    assert [s.scheduler for s in result.summaries] == list(SCHEDULERS)
    assert len(result.runs) == len(SCHEDULERS)
    assert all(p.exists() for p in result.paths)
    return directory


def results(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "results.json").read_text())
    return data


def test_results_json_has_one_run_per_scheduler(out: Path) -> None:
    data = results(out)
    runs = {r["scheduler"]: RunSummary.model_validate(r) for r in data["runs"]}
    assert sorted(runs) == sorted(SCHEDULERS)
    assert all(r.scenario == SCENARIO for r in runs.values())
    assert runs["greedy"].deadlocks >= 1
    for gang_aware in ("cpsat", "gang-greedy"):
        assert runs[gang_aware].finished_jobs == runs[gang_aware].jobs == 2
        assert runs[gang_aware].partial_gangs == 0
        assert runs[gang_aware].deadlocks == 0


def test_results_json_says_how_it_was_made(out: Path) -> None:
    meta = results(out)["meta"]
    for key in ("date", "gangsat_version", "host_cores", "settings", "scenarios"):
        assert key in meta
    assert meta["complete"] is True
    assert meta["settings"]["time_limit_s"] == 1.0
    assert meta["settings"]["schedulers"] == list(SCHEDULERS)
    assert meta["scenarios"][SCENARIO]["jobs"] == 2


def test_results_json_compares_cpsat_with_gang_greedy(out: Path) -> None:
    (comparison,) = results(out)["comparisons"]
    assert comparison["scenario"] == SCENARIO
    # Both run the two jobs one after the other: nothing to choose between them here.
    assert comparison["utilisation_ratio"] == pytest.approx(1.0)
    assert comparison["jct_mean_ratio"] == pytest.approx(1.0)


def test_report_names_every_scheduler_and_defines_its_terms(out: Path) -> None:
    text = (out / "report.md").read_text()
    assert f"## {SCENARIO}" in text
    for scheduler in SCHEDULERS:
        assert f"| {scheduler} |" in text
    assert "## Glossary" in text
    for term in ("deadlocks", "partial gangs", "JCT", "Jain", "gap"):
        assert f"**{term}**" in text
    for plot in PLOTS:
        assert f"({SCENARIO}-{plot}.png)" in text


@pytest.mark.parametrize("plot", PLOTS)
def test_plots_are_png_files(out: Path, plot: str) -> None:
    path = out / f"{SCENARIO}-{plot}.png"
    assert path.read_bytes().startswith(plots.PNG_SIGNATURE)


def test_report_can_be_rebuilt_from_results_json(out: Path) -> None:
    data = results(out)
    summaries = [RunSummary.model_validate(r) for r in data["runs"]]
    plots = {SCENARIO: [out / f"{SCENARIO}-{p}.png" for p in PLOTS]}
    assert report.markdown(summaries, data["meta"], plots) == (out / "report.md").read_text()


def test_main_runs_the_suite_from_its_arguments(tmp_path: Path) -> None:
    printed = io.StringIO()
    args = ["--scenarios", SCENARIO, "--schedulers", "gang-greedy,greedy", "--out", str(tmp_path)]
    code = suite.main([*args, "--time-limit", "1", "--seed", "3"], Console(file=printed, width=200))
    assert code == 0
    data = results(tmp_path)
    assert [r["scheduler"] for r in data["runs"]] == ["gang-greedy", "greedy"]
    assert data["meta"]["settings"]["seed"] == 3
    assert f"{SCENARIO}: outcomes" in printed.getvalue()
    assert "gang-greedy" in printed.getvalue()


def test_a_missing_scenario_is_named_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["--scenarios", f"{SCENARIO},no-such-scenario", "--out", str(out), "--time-limit", "1"]
    assert suite.main(args, quiet()) == suite.EXIT_BAD_INPUT
    assert "no-such-scenario" in capsys.readouterr().err
    assert not out.exists()  # checked before the first run, not after it
    with pytest.raises(suite.SuiteError, match="no-such-scenario"):
        suite.run_suite(suite.SuiteSettings(scenarios=("no-such-scenario",), out=out), quiet())


def test_an_unknown_scheduler_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["--scenarios", SCENARIO, "--schedulers", "cpsat,fifo", "--out", str(tmp_path)]
    assert suite.main(args, quiet()) == suite.EXIT_BAD_INPUT
    assert "fifo" in capsys.readouterr().err


def test_quick_shortens_trace_scenarios_only() -> None:
    scenario = load_scenario(SCENARIO)
    assert suite._quick(scenario) is scenario
    traced = Scenario(name="trace", trace=PhillyTrace(jobs=200))
    quick = suite._quick(traced).trace
    assert quick is not None and quick.jobs == suite.QUICK_TRACE_JOBS
    settings = suite.SuiteSettings(quick=True)
    assert settings.solver().time_limit_s == suite.QUICK_TIME_LIMIT_S
    assert suite.SuiteSettings(quick=True, time_limit_s=2.0).solver().time_limit_s == 2.0


def test_pairs_read_comma_separated_sizes_and_refuse_anything_else() -> None:
    assert suite.pairs("1000x500, 4000 x 2500") == [(1000, 500), (4000, 2500)]
    for bad in ("1000", "1000x", "ax5", "-1x5", "1.5x2", "1000x500,"):
        with pytest.raises(argparse.ArgumentTypeError):
            suite.pairs(bad)


def test_without_the_bench_extra_gangsat_bench_says_what_to_install() -> None:
    import subprocess
    import sys

    # matplotlib blocked as if not installed (the image leaves the bench extra out).
    code = "import sys; sys.modules['matplotlib'] = None; from benchmarks.suite import main"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "pip install 'gangsat[bench]'" in done.stderr
    assert "Traceback" not in done.stderr
