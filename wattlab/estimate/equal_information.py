"""STEP rules at equal information: the published rule and the step-level (live) rule, each
reading the same share of every run's budget before it projects.

The published rule (``wattlab.step.paper``) reads epochs 1 .. s + w - 1; with s = 10 and w = 5
that is 14 of a 16-epoch run, while the step-level rule projects after 20 %. Compared at one
share, neither gets more of the run than the other: for a share f of a run of E epochs, the
published rule reads n = floor(f x E) epochs (at least 2) with a window of w = min(5, n - 1)
epochs ending at epoch n (s = n - w + 1, so the first epoch, the warm-up, is never in it), and
the step-level rule replays its stored marks up to n / E of the budget. Both are scored on the
runs both could handle. Runs are grouped by their epoch count, one row per share and count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.estimate.evaluate import evaluate_methods, score
from wattlab.step.paper import PAPER_WINDOW_EPOCHS

DEFAULT_FRACTIONS = (0.2, 0.5, 0.875)  # 0.875: the published rule's own 14 of 16 epochs
PUBLISHED = "step-paper"
STEP_LEVEL = "step-marks"


def published_settings(fraction: float, epochs: int) -> tuple[int, int, int]:
    """(epochs read n, first window epoch s, window w) of the published rule at ``fraction``
    of a run of ``epochs`` epochs."""
    if not 0 < fraction < 1:
        raise ConfigError(f"an equal-information share must be in (0, 1), got {fraction!r}.")
    n = max(2, math.floor(fraction * epochs + 1e-9))
    if n >= epochs:
        raise ConfigError(
            f"a share of {fraction:.0%} of {epochs} epochs leaves no epoch to project."
        )
    window = min(PAPER_WINDOW_EPOCHS, n - 1)
    return n, n - window + 1, window


def compare(
    runs_df: pd.DataFrame,
    windows_df: pd.DataFrame,
    *,
    target: str = "total",
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    traces_df: pd.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """One row per share and epoch count: the settings, the runs both rules handled and each
    rule's metrics on them (``score``'s dict; the step-level rule's is all None for a target
    other than ``total``, which its marks cannot project)."""
    if "epochs" not in runs_df:
        raise DataError("the runs table has no epochs column to share the budget by.")
    status = runs_df["status"] if "status" in runs_df else pd.Series("ok", index=runs_df.index)
    counts = pd.to_numeric(runs_df["epochs"], errors="coerce")
    # whole epochs only: both rules read a whole number of epochs (a run of 3.5 epochs has no
    # share of its budget they could both stop at)
    whole = counts.notna() & (counts == counts.round())
    ok = runs_df[(status == "ok") & (counts >= 3) & whole]
    rows = []
    for epochs in sorted({int(e) for e in pd.to_numeric(ok["epochs"]).dropna()}):
        group = ok[pd.to_numeric(ok["epochs"]) == epochs]
        for fraction in fractions:
            n, stable, window = published_settings(float(fraction), epochs)
            result = evaluate_methods(
                group,
                windows_df,
                traces_df=traces_df,
                target=target,
                protocols=("loco",),
                step_method="both",
                paper_stable_epoch=stable,
                paper_window_epochs=window,
                marks_fraction=n / epochs,
                only=(PUBLISHED, STEP_LEVEL),
            )
            predictions = result.predictions
            paper = predictions[predictions["method"] == PUBLISHED]
            marks = predictions[predictions["method"] == STEP_LEVEL]
            both = set(paper["run_id"]) & set(marks["run_id"]) if len(marks) else set()
            common = both if both else set(paper["run_id"])
            rows.append(
                {
                    "fraction": n / epochs,
                    "asked_fraction": float(fraction),
                    "epochs": epochs,
                    "epochs_read": n,
                    "stable_epoch": stable,
                    "window_epochs": window,
                    "target": target,
                    "runs": len(common),
                    "published": score(paper[paper["run_id"].isin(common)]),
                    "step_level": score(marks[marks["run_id"].isin(common)]),
                }
            )
    return rows


def parse_fractions(text: str) -> tuple[float, ...]:
    """``"0.2,0.5"`` -> (0.2, 0.5); ``"none"`` -> (); ConfigError in one sentence otherwise."""
    if text.strip().lower() == "none":
        return ()
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or any(not 0 < v < 1 for v in values):
        raise ConfigError(
            f"--equal-information must be shares in (0, 1) separated by commas, or none; got "
            f"{text!r}."
        )
    return values


__all__ = ["DEFAULT_FRACTIONS", "compare", "parse_fractions", "published_settings"]
