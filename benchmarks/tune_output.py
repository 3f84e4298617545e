"""What the weight study writes: its tables, the Pareto front's plot, the Markdown
report and the recommended settings as a file and a ConfigMap (``benchmarks.tune``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from adapter.settings import Settings
from benchmarks import plots, report
from benchmarks.tune_choice import (
    paired_gains,
)
from benchmarks.tune_trial import (
    DEFAULTS_ATTR,
    NOISE_Z,
    SIGNS,
    SPACE,
    Score,
    TuneResult,
    TuneSettings,
)
from solver.config import ObjectiveWeights, SolverConfig


def paired_rows(defaults: Score, recommended: Score) -> list[list[str]]:
    """Recommended minus defaults, draw by draw, and the mean with its standard error."""
    gains = paired_gains(recommended.per_draw, defaults.per_draw)
    if gains is None:
        return []

    def fmt(k: int, delta: float) -> str:
        if k == 2:
            return f"{delta / 3600:+.3f} h"
        return f"{delta * 100:+.2f} pt"

    rows = [
        [f"draw {i}", *(fmt(k, r[k] - d[k]) for k in range(3))]
        for i, (d, r) in enumerate(zip(defaults.per_draw, recommended.per_draw, strict=True))
    ]
    rows.append(
        [
            "mean ± s.e.",
            *(
                f"{fmt(k, SIGNS[k] * mean)} ± {fmt(k, se)[1:]}"
                for k, (mean, se) in enumerate(gains)
            ),
        ]
    )
    return rows


def settings_snippet(weights: ObjectiveWeights) -> str:
    return Settings(solver=SolverConfig(weights=weights)).to_yaml()


def configmap(snippet: str, name: str = "gangsat-settings") -> str:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "gangsat-system"},
        "data": {"gangsat.yaml": snippet},
    }
    return yaml.safe_dump(manifest, sort_keys=False)


def score_row(label: str, s: Score) -> list[str]:
    return [
        label,
        f"{s.utilisation:.2%}",
        f"{s.share_error:.2%}",
        report.duration(s.mean_jct_s),
        f"{s.finished}/{s.jobs}",
    ]


def front_rows(result: TuneResult) -> list[list[str]]:
    rows = []
    for t in sorted(result.front, key=lambda t: -t.values[0]):
        mark = []
        if t.number == result.recommended.number:
            mark.append("recommended")
        if t.user_attrs.get(DEFAULTS_ATTR):
            mark.append("defaults")
        rows.append(
            [
                str(t.number),
                f"{t.values[0]:.2%}",
                f"{t.values[1]:.2%}",
                report.duration(t.values[2]),
                *[str(t.params.get(k, "-")) for k in SPACE],
                ", ".join(mark),
            ]
        )
    return rows


FRONT_HEADERS = ("trial", "utilisation", "share error", "mean JCT", *SPACE, "")
SCORE_HEADERS = ("weights", "utilisation", "share error", "mean JCT", "finished")
PAIRED_HEADERS = ("", "utilisation", "share error", "mean JCT")


def plot_front(study: optuna.Study, result: TuneResult, path: Path) -> Path:
    fig, ax = plots.subplots(figsize=(8, 5))
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    front = {t.number for t in result.front}
    others = [t for t in done if t.number not in front]
    jct = [t.values[2] for t in done] or [0.0]
    lo, hi = min(jct), max(jct)
    kwargs: dict[str, Any] = {"cmap": "viridis", "vmin": lo, "vmax": hi if hi > lo else lo + 1}
    ax.scatter(
        [t.values[1] for t in others],
        [t.values[0] for t in others],
        c=[t.values[2] for t in others],
        marker="o",
        alpha=0.45,
        **kwargs,
    )
    points = ax.scatter(
        [t.values[1] for t in result.front],
        [t.values[0] for t in result.front],
        c=[t.values[2] for t in result.front],
        marker="D",
        edgecolors="black",
        **kwargs,
    )
    fig.colorbar(points, ax=ax, label="mean JCT (s)")
    for t, label in ((result.recommended, "recommended"), (result.defaults, "defaults")):
        if t is not None:
            ax.annotate(
                label, (t.values[1], t.values[0]), textcoords="offset points", xytext=(6, 6)
            )
    ax.set_xlabel("max share error (lower is fairer)")
    ax.set_ylabel("utilisation while backlogged")
    ax.set_title(f"{result.study}: {len(done)} trials, Pareto front as diamonds")
    ax.grid(alpha=0.3)
    return plots.save_figure(fig, path)


def markdown(result: TuneResult, settings: TuneSettings, snippet: str) -> str:
    lines = [
        f"# Weight tuning: {result.study}",
        "",
        f"{result.trials} complete trials on `{settings.scenario}`; objectives: "
        "utilisation while backlogged (max), max share error (min), mean JCT (min).",
        "",
        "## Pareto front",
        "",
        report.md_table(
            FRONT_HEADERS, front_rows(result), [True] * (len(FRONT_HEADERS) - 1) + [False]
        ),
        "",
        "Rule: among front trials that beat the defaults on some objective and lose on "
        f"none by more than {NOISE_Z:g} standard errors of the paired per-draw differences, "
        f"those with share error <= {settings.max_fairness_error:.1%}: the highest "
        "utilisation, then the lowest mean JCT (none within: the lowest share error). If no "
        "trial beats the defaults, the defaults are recommended.",
        "",
        f"## Held out: {result.holdout_source}",
        "",
        report.md_table(
            SCORE_HEADERS,
            [score_row(k, v) for k, v in result.holdout.items()],
            [False, True, True, True, True],
        ),
        "",
        *(
            [
                "Recommended minus defaults, draw by draw (pt = percentage points; for share "
                "error and JCT, negative is better):",
                "",
                report.md_table(
                    PAIRED_HEADERS,
                    result.paired,
                    [False, True, True, True],
                ),
                "",
            ]
            if len(result.paired) > 2
            else []
        ),
        f"**{result.verdict}**",
        "",
        "## Settings (paste into the ConfigMap's `gangsat.yaml`)",
        "",
        "```yaml",
        snippet.rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)
