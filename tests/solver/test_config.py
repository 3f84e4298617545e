"""What a decision keeps of its cycle's limit (``SolverConfig.after``)."""

from __future__ import annotations

import pytest

from solver.config import MIN_DECISION_SHARE, SolverConfig


@pytest.mark.parametrize(
    ("spent_s", "left_s"),
    [(0.0, 2.0), (-1.0, 2.0), (0.5, 1.5), (1.0, 1.0), (1.5, 1.0), (10.0, 1.0)],
)
def test_a_decision_gets_what_its_cycle_left_of_the_limit_and_at_least_half(
    spent_s: float, left_s: float
) -> None:
    config = SolverConfig(time_limit_s=2.0, seed=3)
    after = config.after(spent_s)
    assert after.time_limit_s == pytest.approx(left_s)
    assert after.time_limit_s >= MIN_DECISION_SHARE * config.time_limit_s
    assert after.model_copy(update={"time_limit_s": 2.0}) == config  # nothing else moves


def test_a_deterministic_decision_keeps_its_limit() -> None:
    # Its limit counts deterministic time: the snapshot's wall time must not change it.
    config = SolverConfig(time_limit_s=2.0, deterministic=True)
    assert config.after(1.5) is config
