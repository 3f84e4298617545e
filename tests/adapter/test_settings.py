"""The settings file operators mount from a ConfigMap."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from adapter.settings import Settings, SettingsError
from solver.config import ObjectiveWeights


def test_an_empty_file_means_the_defaults() -> None:
    assert Settings.from_yaml("") == Settings()


def test_round_trip_through_yaml_keeps_every_field() -> None:
    s = Settings(
        scheduler_names=("gangsat", "batch"),
        cycle_s=2.5,
        solver=Settings().solver.model_copy(
            update={"weights": ObjectiveWeights(fairness=900, packing=0), "time_limit_s": 0.5}
        ),
    )
    text = s.to_yaml()
    assert "schedulerNames:" in text and "cycleSeconds: 2.5" in text
    assert Settings.from_yaml(text) == s


def test_a_partial_file_overrides_only_what_it_names(tmp_path: Path) -> None:
    path = tmp_path / "gangsat.yaml"
    path.write_text("solver:\n  weights:\n    fairness: 1200\n")
    s = Settings.load(path)
    assert s.solver.weights.fairness == 1200
    assert s.solver.weights.value == ObjectiveWeights().value
    assert s.scheduler_names == ("gangsat",)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("solver:\n  weights:\n    fairness: -1\n", "solver.weights.fairness: Input should be"),
        ("cycleSeconds: 0\n", "cycleSeconds: Input should be greater than 0"),
        ("schedulerNames: []\n", "schedulerNames"),
        ("scheduler: fifo\n", "scheduler: Input should be"),
        ("surprise: 1\n", "surprise: Extra inputs are not permitted"),
        ("solver: [1, 2\n", "not YAML"),
        # Values that validated once and then broke every cycle (issue 13).
        ("solver:\n  seed: 2147483648\n", "solver.seed: Input should be less than"),
        ("solver:\n  weights:\n    value: 1000000000000\n", "solver.weights.value"),
        ("cycleSeconds: .inf\n", "cycleSeconds: Input should be"),
        ("solver:\n  time_limit_s: .inf\n", "solver.time_limit_s: Input should be"),
        ("schedulerNames: ['']\n", "schedulerNames[0]: String should have at least 1"),
        ("solver:\n  num_workers: 3000000000\n", "solver.num_workers: Input should be less"),
        # A key named twice: read last-wins, the first was silently dropped.
        ("cycleSeconds: 5\ncycleSeconds: 1\n", "key 'cycleSeconds' appears twice"),
    ],
)
def test_bad_settings_name_the_field(text: str, fragment: str) -> None:
    with pytest.raises(SettingsError, match=r"^gangsat\.yaml: ") as caught:
        Settings.from_yaml(text, "gangsat.yaml")
    assert fragment in str(caught.value)


def test_a_missing_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        Settings.load(tmp_path / "absent.yaml")


def test_a_file_that_is_not_utf8_is_a_settings_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"scheduler: cpsat\n# caf\xe9\n")
    with pytest.raises(SettingsError, match="not UTF-8"):
        Settings.load(path)


def test_the_scheduler_choices_are_the_registry() -> None:
    from typing import get_args

    from solver.schedulers import SCHEDULERS

    annotation = Settings.model_fields["scheduler"].annotation
    assert set(get_args(annotation)) == set(SCHEDULERS)


def test_kube_schedulers_name_among_ours_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """Where kube-scheduler runs (every managed cluster) it binds those pods too, one at a
    time: gangs may end bound in part. Warned, not refused: right on a cluster without it."""
    with caplog.at_level(logging.WARNING, logger="adapter.settings"):
        Settings.from_yaml("schedulerNames: [gangsat]")
        assert not caplog.records
        Settings.from_yaml("schedulerNames: [gangsat, default-scheduler]")
    (warning,) = caplog.records
    assert "default-scheduler" in warning.getMessage() and "in part" in warning.getMessage()
