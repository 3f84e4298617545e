"""Which trial the weight study recommends, and the held-out verdict on it: gains
against the defaults draw by draw, within the budget (``benchmarks.tune``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from optuna.trial import FrozenTrial

from adapter.sim.scenario import Scenario, Workload
from benchmarks.tune_trial import (
    NOISE_Z,
    OBJECTIVE_NAMES,
    PER_DRAW_ATTR,
    SIGNS,
    Budget,
    Score,
    TuneError,
    TuneSettings,
    draws,
    materialise_all,
    read_scenario,
    varies,
)


def _gains(trial: FrozenTrial, defaults: FrozenTrial) -> list[tuple[float, float]] | None:
    return paired_gains(trial.user_attrs.get(PER_DRAW_ATTR), defaults.user_attrs.get(PER_DRAW_ATTR))


def paired_gains(
    mine: Sequence[Sequence[float]] | None, base: Sequence[Sequence[float]] | None
) -> list[tuple[float, float]] | None:
    """Per objective, the paired mean gain over the base (positive = better) and its
    standard error over the draws; None without per-draw values for both."""
    if not mine or not base or len(mine) != len(base):
        return None
    out = []
    for k, sign in enumerate(SIGNS):
        diffs = [sign * (a[k] - b[k]) for a, b in zip(mine, base, strict=True)]
        mean = sum(diffs) / len(diffs)
        if len(diffs) > 1:
            var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
            se = math.sqrt(var / len(diffs))
        else:
            se = 0.0  # one draw: no noise estimate, the plain comparison stands
        out.append((mean, se))
    return out


def compare(
    mine: Sequence[float],
    base: Sequence[float],
    gains: Sequence[tuple[float, float]] | None,
    budget: Budget,
) -> tuple[list[str], list[str]]:
    """The objectives ``mine`` wins on (beyond NOISE_Z standard errors of the paired
    per-draw gains, when there are several draws) and those it loses beyond the budget."""
    limits = (base[0] * budget.tolerance, budget.fairness_tolerance, base[2] * budget.tolerance)
    better, worse = [], []
    for k, name in enumerate(OBJECTIVE_NAMES):
        gain = SIGNS[k] * (mine[k] - base[k])
        noise = NOISE_Z * gains[k][1] if gains else 0.0
        if gain > 0 and gain > noise:
            better.append(name)
        elif gain < -limits[k]:
            worse.append(name)
    return better, worse


def beats(trial: FrozenTrial, defaults: FrozenTrial, budget: Budget) -> bool:
    """The held-out verdict's test, on the tuning draws: a win beyond the noise and no
    loss beyond the budget."""
    gains = _gains(trial, defaults)
    if gains is None:
        return False
    better, worse = compare(trial.values, defaults.values, gains, budget)
    return bool(better) and not worse


def recommend(
    front: Sequence[FrozenTrial],
    max_fairness_error: float,
    defaults: FrozenTrial | None = None,
    budget: Budget | None = None,
) -> FrozenTrial:
    """Best utilisation within the share-error budget, then lowest JCT; else the fairest.

    With the defaults measured on the same draws, only trials that beat them beyond the
    draw-to-draw noise qualify; if none does, the defaults are the recommendation.
    """
    pool = list(front)
    if defaults is not None:
        budget = budget or Budget()
        pool = [t for t in front if t.number != defaults.number and beats(t, defaults, budget)]
        if not pool:
            return defaults
    within = [t for t in pool if t.values[1] <= max_fairness_error]
    if within:
        return max(within, key=lambda t: (t.values[0], -t.values[2], -t.number))
    return min(pool, key=lambda t: (t.values[1], -t.values[0], t.values[2], t.number))


def holdout_scenario(settings: TuneSettings) -> tuple[Scenario, str]:
    """The held-out workload and a line saying what it is."""
    if settings.holdout:
        return read_scenario(settings.holdout), f"scenario {settings.holdout}"
    scenario = read_scenario(settings.scenario)
    if scenario.trace is None:
        return scenario, "the tuning scenario itself (it has no trace to hold a slice out of)"
    trace = scenario.trace
    held = trace.model_copy(update={"first_job": trace.first_job + trace.jobs})
    return (
        scenario.model_copy(update={"trace": held}),
        f"trace jobs {held.first_job}..{held.first_job + held.jobs - 1} (the next slice)",
    )


def holdout_workloads(settings: TuneSettings) -> tuple[list[Workload], str]:
    """The held-out scenario in as many draws as a trial, none of them a tuning draw."""
    held, text = holdout_scenario(settings)
    # From draw settings.draws on: the trials used 0 .. settings.draws - 1.
    variants = draws(held, settings.draws, settings.holdout_draws)
    try:
        workloads = materialise_all(variants)
    except TuneError as e:
        raise TuneError(f"held-out workload ({text}): {e}") from None
    seeds = [v.trace.seed if v.trace is not None else v.settings.seed for v in variants]
    kind = "queue draw" if held.trace is not None else "simulator"
    if not varies(held):
        return workloads, f"{text}, one run (nothing in it is random: no noise estimate)"
    return workloads, f"{text}, {kind} seed(s) {', '.join(map(str, seeds))}"


def verdict(defaults: Score, recommended: Score, settings: TuneSettings) -> str:
    """Does the recommendation win on one objective without losing beyond the budget?

    A win must also exceed the draw-to-draw noise: with several held-out draws, the paired
    gain must be over NOISE_Z standard errors of the per-draw differences. A loss is
    judged on the means against the stated budget."""
    gains = paired_gains(recommended.per_draw, defaults.per_draw)
    better, worse = compare(recommended.values(), defaults.values(), gains, settings.budget())
    budget = (
        f"budget: utilisation and mean JCT within {settings.tolerance:.0%}, share error "
        f"within {settings.fairness_tolerance:.1%} points"
    )
    if gains and len(recommended.per_draw) > 1:
        budget += f"; a win must exceed {NOISE_Z:g} standard errors over the draws"
    if better and not worse:
        return f"recommended beats the defaults on {', '.join(better)} ({budget})"
    if worse:
        return f"recommended is worse than the defaults on {', '.join(worse)} ({budget})"
    return f"recommended does not beat the defaults on any objective ({budget})"
