"""Weight tuning: a tiny scenario, a few seeded trials, storage shared and resumed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import IntDistribution
from optuna.trial import create_trial
from rich.console import Console

from adapter.settings import Settings
from adapter.sim.scenario import load_scenario, materialise
from benchmarks import suite
from benchmarks.plots import PNG_SIGNATURE
from benchmarks.tune import _worker, open_storage, run_study, tune
from benchmarks.tune_choice import holdout_scenario, holdout_workloads, recommend, verdict
from benchmarks.tune_output import paired_rows
from benchmarks.tune_trial import (
    DEFAULTS_ATTR,
    DONE,
    PER_DRAW_ATTR,
    SPACE,
    Budget,
    Score,
    TuneError,
    TuneSettings,
    draws,
    evaluate,
    evaluate_many,
    searched,
)
from solver.config import ObjectiveWeights

# Two queues 1:3 on 4 nodes of 4 GPUs, more work than fits: every trial is a real run
# with contention, and still takes a fraction of a second.
TINY = {
    "name": "tiny",
    "settings": {"cycle_s": 30, "seed": 0},
    "nodes": [{"name": "g", "count": 4, "allocatable": {"cpu": "16", "nvidia.com/gpu": 4}}],
    "queues": [{"name": "a", "weight": 1}, {"name": "b", "weight": 3}],
    "jobs": [
        {
            "name": "a2",
            "count": 6,
            "queue": "a",
            "duration_s": 600,
            "replicas": 2,
            "requests": {"cpu": "2", "nvidia.com/gpu": 2},
        },
        {
            "name": "b2",
            "count": 6,
            "queue": "b",
            "duration_s": 600,
            "replicas": 2,
            "requests": {"cpu": "2", "nvidia.com/gpu": 2},
        },
        {
            "name": "b1",
            "count": 4,
            "queue": "b",
            "submit_s": 60,
            "duration_s": 300,
            "replicas": 1,
            "requests": {"cpu": "1", "nvidia.com/gpu": 1},
        },
    ],
}
QUIET = Console(file=open("/dev/null", "w"), width=200)  # noqa: SIM115


def tiny(tmp_path: Path) -> str:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def settings(tmp_path: Path, **kw: object) -> TuneSettings:
    base: dict[str, object] = {
        "scenario": tiny(tmp_path),
        "trials": 3,
        "seed": 7,
        "out": tmp_path / "out",
        "time_limit_s": 0.5,
    }
    base.update(kw)
    return TuneSettings(**base)  # type: ignore[arg-type]


def complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Trials that ran to the end: complete, or pruned for leaving jobs unfinished."""
    return study.get_trials(states=DONE)


def test_a_study_yields_a_front_a_recommendation_and_files_that_load(tmp_path: Path) -> None:
    result = tune(settings(tmp_path), QUIET)
    assert result.trials >= 4  # the defaults, then 3 sampled
    assert result.front and result.recommended in result.front
    # The defaults are trial 0, with exactly the default weights.
    assert result.defaults is not None and result.defaults.number == 0
    defaults = ObjectiveWeights()
    # Every tiny job has priority 0: priority cannot change a decision, so it is not searched.
    assert result.defaults.params == {k: getattr(defaults, k) for k in SPACE if k != "priority"}
    stem = tmp_path / "out" / "gangsat-tiny"
    loaded = Settings.load(Path(f"{stem}-settings.yaml"))
    assert loaded.solver.weights == ObjectiveWeights(**result.recommended.params)
    configmap = yaml.safe_load(Path(f"{stem}-configmap.yaml").read_text())
    assert configmap["kind"] == "ConfigMap"
    assert Settings.from_yaml(configmap["data"]["gangsat.yaml"]) == loaded
    report = json.loads(Path(f"{stem}.json").read_text())
    assert report["recommended"]["number"] == result.recommended.number
    assert {"defaults", "recommended"} <= set(report["holdout"])
    assert Path(f"{stem}-pareto.png").read_bytes().startswith(PNG_SIGNATURE)
    text = Path(f"{stem}.md").read_text()
    assert "## Pareto front" in text
    # Nothing in the tiny scenario is random (no trace, no injected faults): one held-out
    # run, said so, not six identical ones whose zero spread made any gain look certain.
    assert len(report["holdout"]["defaults"]["per_draw"]) == 1
    assert "one run (nothing in it is random: no noise estimate)" in text


def test_a_resumed_study_continues_where_it_stopped(tmp_path: Path) -> None:
    first, url = run_study(settings(tmp_path, trials=2), QUIET)
    before = complete(first)
    again, url_again = run_study(settings(tmp_path, trials=2), QUIET)
    after = complete(again)
    assert url_again == url
    assert len(after) >= len(before) + 2
    assert {t.number for t in before} < {t.number for t in after}
    # The defaults are enqueued once, when the study is new.
    assert sum(1 for t in again.trials if t.user_attrs.get(DEFAULTS_ATTR)) == 1


def test_two_worker_processes_share_one_study(tmp_path: Path) -> None:
    s = settings(tmp_path, trials=4, jobs=2)
    study, _ = run_study(s, QUIET)
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
    assert len(complete(study)) >= 5
    assert {t.user_attrs.get("worker") for t in complete(study)} <= {0, 1}


def test_a_second_machine_joins_through_the_storage_url(tmp_path: Path) -> None:
    # An RDB URL, as several machines would share; the "second machine" is a worker
    # started from nothing but the URL and the study name.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    s = settings(tmp_path, trials=2, storage=url)
    study, used = run_study(s, QUIET)
    assert used == url
    count = len(complete(study))
    _worker(5, s, study.study_name, url, count + 2, echo=False)
    joined = optuna.load_study(study_name=study.study_name, storage=open_storage(url))
    assert len(complete(joined)) >= count + 2
    assert any(t.user_attrs.get("worker") == 5 for t in complete(joined))


def _trial(number: int, util: float, err: float, jct: float) -> optuna.trial.FrozenTrial:
    t = create_trial(
        values=[util, err, jct],
        params={"fairness": 300},
        distributions={"fairness": IntDistribution(1, 3000, log=True)},
    )
    t.number = number
    return t


def test_recommend_takes_the_best_utilisation_within_the_fairness_budget() -> None:
    front = [
        _trial(0, 0.95, 0.030, 100.0),  # best utilisation, but over the 2% budget
        _trial(1, 0.93, 0.015, 120.0),
        _trial(2, 0.93, 0.010, 110.0),  # ties 1 on utilisation; lower JCT wins
        _trial(3, 0.90, 0.005, 90.0),
    ]
    assert recommend(front, 0.02).number == 2
    # Nothing within a 0.1% budget: the fairest.
    assert recommend(front, 0.001).number == 3


def test_verdict_needs_a_win_and_no_loss_beyond_the_budget(tmp_path: Path) -> None:
    s = settings(tmp_path)  # 1% on utilisation and JCT, 0.2 points on share error
    base = Score(0.90, 0.020, 1000.0, 10, 10)
    assert "beats the defaults on mean JCT" in verdict(base, Score(0.895, 0.021, 950.0, 10, 10), s)
    assert "worse than the defaults on utilisation" in verdict(
        base, Score(0.88, 0.010, 900.0, 10, 10), s
    )
    assert "worse than the defaults on share error" in verdict(
        base, Score(0.95, 0.025, 900.0, 10, 10), s
    )
    assert "does not beat" in verdict(base, base, s)


def _score(per_draw: Sequence[Sequence[float]]) -> Score:
    """The per-draw values and their means, as a Score of 10 jobs per draw, all finished."""
    mean = [sum(d[k] for d in per_draw) / len(per_draw) for k in range(3)]
    return Score(mean[0], mean[1], mean[2], 10, 10, tuple((d[0], d[1], d[2]) for d in per_draw))


def test_a_held_out_win_must_exceed_the_draw_to_draw_noise(tmp_path: Path) -> None:
    s = settings(tmp_path)
    base = _score([(0.90, 0.020, 1000.0), (0.92, 0.020, 1000.0), (0.91, 0.020, 1000.0)])
    # JCT 10 s better on every draw: a win; utilisation and share error equal.
    steady = _score([(0.90, 0.020, 990.0), (0.92, 0.020, 990.0), (0.91, 0.020, 990.0)])
    assert "beats the defaults on mean JCT" in verdict(base, steady, s)
    # The same mean gain, -40, +20, -10 s draw by draw: within the noise, no win.
    noisy = _score([(0.90, 0.020, 960.0), (0.92, 0.020, 1020.0), (0.91, 0.020, 990.0)])
    assert "does not beat" in verdict(base, noisy, s)
    rows = paired_rows(base, steady)
    assert [r[0] for r in rows] == ["draw 0", "draw 1", "draw 2", "mean ± s.e."]
    assert rows[-1][3] == "-0.003 h ± 0.000 h"


def test_only_weights_that_can_change_a_decision_are_searched(tmp_path: Path) -> None:
    one_level = [materialise(load_scenario(tiny(tmp_path)))]
    assert "priority" not in searched(one_level)
    mixed = json.loads(json.dumps(TINY))
    mixed["jobs"][0]["priority"] = 5
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(mixed))
    assert set(searched([materialise(load_scenario(str(path)))])) == set(SPACE)


def test_held_out_runs_spread_over_processes_score_as_in_one(tmp_path: Path) -> None:
    workloads = [materialise(s) for s in draws(load_scenario(tiny(tmp_path)), 0, 2)]
    candidates = [ObjectiveWeights(), ObjectiveWeights(gang_start=150)]
    assert evaluate_many(workloads, candidates, 0.5, jobs=2) == evaluate_many(
        workloads, candidates, 0.5, jobs=1
    )


def test_the_philly_holdout_is_the_next_slice_with_another_queue_draw(tmp_path: Path) -> None:
    held, text = holdout_scenario(TuneSettings(scenario="philly", out=tmp_path))
    trace = load_scenario("philly").trace
    assert trace is not None and held.trace is not None
    assert held.trace.first_job == trace.first_job + trace.jobs
    assert held.trace.jobs == trace.jobs
    assert "next slice" in text
    # Its draws are none of the trials': with 2 draws per trial, seeds base+2 and base+3.
    _, label = holdout_workloads(
        TuneSettings(scenario="philly", out=tmp_path, draws=2, holdout_draws=2)
    )
    assert label.endswith(f"queue draw seed(s) {trace.seed + 2}, {trace.seed + 3}")


def test_gangsat_bench_tune_command(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    code = suite.main(
        ["tune", tiny(tmp_path), "--trials", "2", "--out", str(out), "--time-limit", "0.5"],
        QUIET,
    )
    assert code == 0
    assert (out / "gangsat-tiny-settings.yaml").exists()
    assert suite.main(["tune", "no-such-scenario", "--out", str(out)], QUIET) == 2


@pytest.mark.parametrize("bad", ["--trials=0", "--jobs=0", "--timeout=-1"])
def test_bad_tune_options_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SystemExit) as caught:
        suite.main(["tune", tiny(tmp_path), bad], QUIET)
    assert caught.value.code == 2


def test_a_bad_holdout_fails_before_any_trial_runs(tmp_path: Path) -> None:
    s = settings(tmp_path, holdout=str(tmp_path / "absent.json"))
    with pytest.raises(TuneError, match=r"absent\.json"):
        run_study(s, QUIET)
    assert not (tmp_path / "out" / "gangsat-tiny.journal").exists()  # no study was started


def test_draws_vary_the_queue_draw_of_a_trace_and_the_seed_otherwise(tmp_path: Path) -> None:
    philly = load_scenario("philly")
    assert philly.trace is not None
    seeds = [s.trace.seed for s in draws(philly, 3, 2) if s.trace is not None]
    assert seeds == [philly.trace.seed + 3, philly.trace.seed + 4]
    plain = load_scenario(tiny(tmp_path))
    faulty = plain.model_copy(
        update={"settings": plain.settings.model_copy(update={"bind_failure_rate": 0.1})}
    )
    assert [s.settings.seed for s in draws(faulty, 0, 3)] == [0, 1, 2]
    # Without a trace or faults the seed changes nothing: one draw, and more is refused.
    assert [s.settings.seed for s in draws(plain, 0, 3)] == [0]
    with pytest.raises(TuneError, match="would be identical"):
        run_study(settings(tmp_path, draws=3), QUIET)


def test_a_trial_averages_its_draws(tmp_path: Path) -> None:
    # The same workload twice: the average equals one run, jobs are summed.
    workloads = [materialise(load_scenario(tiny(tmp_path)))] * 2
    one = evaluate(workloads[:1], ObjectiveWeights(), 0.5)
    two = evaluate(workloads, ObjectiveWeights(), 0.5)
    assert two.jobs == 2 * one.jobs and two.finished == 2 * one.finished
    assert two.utilisation == pytest.approx(one.utilisation)
    assert two.mean_jct_s == pytest.approx(one.mean_jct_s)


def _measured(number: int, per_draw: list[list[float]]) -> optuna.trial.FrozenTrial:
    t = _trial(number, *_score(per_draw).values())
    t.set_user_attr(PER_DRAW_ATTR, per_draw)
    return t


def test_only_gains_beyond_the_draw_to_draw_noise_are_recommended() -> None:
    defaults = _measured(0, [[0.90, 0.020, 100.0], [0.92, 0.030, 110.0], [0.91, 0.025, 105.0]])
    # +1 point of utilisation on every draw, the rest equal: a gain with no noise.
    steady = _measured(1, [[0.91, 0.020, 100.0], [0.93, 0.030, 110.0], [0.92, 0.025, 105.0]])
    # The same +1 point on average, but +5, -4, +2 draw by draw: within the noise.
    noisy = _measured(2, [[0.95, 0.020, 100.0], [0.88, 0.030, 110.0], [0.93, 0.025, 105.0]])
    # +2 points of utilisation, but 1 point more share error on every draw: a loss.
    trade = _measured(3, [[0.92, 0.030, 100.0], [0.94, 0.040, 110.0], [0.93, 0.035, 105.0]])
    assert recommend([steady, noisy, trade], 0.05, defaults).number == 1
    # +1 point of utilisation on every draw for 0.5% longer JCTs, within the 1% budget.
    within = _measured(4, [[0.91, 0.020, 100.5], [0.93, 0.030, 110.55], [0.92, 0.025, 105.5]])
    assert recommend([within], 0.05, defaults).number == 4
    assert recommend([within], 0.05, defaults, Budget(tolerance=0.001)).number == 0
    # Nothing beats the defaults beyond the noise: they stand.
    assert recommend([noisy, trade], 0.05, defaults).number == 0
