"""One row per configuration: medians of the measured columns with intervals of the median
(see :mod:`wattlab.analysis.intervals`), and each configuration's change against the
baseline (see :mod:`wattlab.analysis.baseline`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, SupportsFloat, SupportsIndex

import numpy as np
import pandas as pd

from wattlab.analysis.baseline import default_baseline, find_baseline
from wattlab.analysis.chance import classes_of_run
from wattlab.analysis.energy_shares import config_parts
from wattlab.analysis.intervals import CI_LEVEL, change_interval, median_interval, min_runs_for
from wattlab.analysis.runs_table import (
    CONFIG_COLUMNS,
    CONTEXT_COLUMNS,
    DERIVED,
    INT_COLUMNS,
    MEDIAN_ONLY,
    METRICS,
    REQUIRED_COLUMNS,
    check_columns,
    failed_runs,
    numeric,
    ok_runs,
    relative_change,
    weakest_provenance,
)
from wattlab.analysis.work_rates import config_rates
from wattlab.errors import DataError
from wattlab.train.config import PRECISIONS
from wattlab.wording import IntervalKind


def _per_run_frame(ok: pd.DataFrame) -> pd.DataFrame:
    """The ok runs with the derived per-run columns the summary needs."""
    frame = ok.copy()
    for col in METRICS + MEDIAN_ONLY:
        if col not in frame.columns and col not in DERIVED:
            frame[col] = np.nan
    samples = numeric(frame["samples"])
    for derived, column in zip(DERIVED, ("energy_total_j", "duration_s"), strict=True):
        with np.errstate(divide="ignore", invalid="ignore"):
            per_sample = numeric(frame[column]) / samples
        per_sample[~np.isfinite(per_sample)] = np.nan
        frame[derived] = per_sample
    return frame


def _sort_key(row: Mapping[str, object]) -> tuple:
    def num(value: object, missing: float) -> float:
        if not isinstance(value, (str, bytes, SupportsFloat, SupportsIndex)):
            return missing  # float() would raise TypeError
        try:
            out = float(value)
        except (TypeError, ValueError):
            return missing
        return missing if math.isnan(out) else out

    precision = row.get("precision")
    p_rank = PRECISIONS.index(precision) if precision in PRECISIONS else 99
    return (
        str(row.get("model") or ""),
        num(row.get("gpus"), 0.0),
        num(row.get("world_size"), 0.0),
        p_rank,
        str(precision or ""),
        -num(row.get("power_limit_requested_w"), math.inf),
        -num(row.get("power_limit_w"), math.inf),
        num(row.get("batch_size"), 0.0),
        str(row.get("label") or ""),
        str(row.get("config_hash") or ""),
    )


def summarize(
    runs: pd.DataFrame,
    baseline: Mapping[str, object] | None = None,
    level: float = CI_LEVEL,
) -> pd.DataFrame:
    """One row per configuration (index: ``config_hash``) of the ok runs in ``runs``.

    Columns: ``label``, ``n`` (ok runs), ``n_failed``; the configuration axes in
    ``CONFIG_COLUMNS`` (None where the table lacks the column); for every metric in
    ``METRICS`` its median under the metric's own name (``duration_s`` in s, ``energy_*_j`` in
    J, ``energy_per_sample_j`` in J/sample, ``duration_per_sample_s`` in s/sample, ``co2e_kg``
    in kg, ``accuracy`` as a fraction) and
    the interval of the median as ``<metric>_ci_low`` / ``<metric>_ci_high`` (NaN with a
    single run); ``ci_method`` (``order-statistic``, or ``range`` when there are too few runs
    for ``level``) and ``ci_coverage`` (the probability that the interval holds the median;
    see :mod:`wattlab.analysis.intervals`); medians of ``co2e_low_kg``, ``co2e_high_kg``,
    ``power_limit_w`` (in force, W), ``samples`` and ``test_size``; ``samples_low`` /
    ``samples_high`` (the fewest and most images of a run; NaN when a run lacks its count);
    ``provenance`` (by share over the
    configuration's runs: "93.1 % measured, 6.9 % estimated", one word only when it is all)
    and ``measured_share`` (0..1; NaN without per-component energies); ``time_change`` and
    ``energy_change`` against the baseline
    (fractions, negative = saving) with intervals (``*_ci_low`` / ``*_ci_high``,
    ``*_ci_coverage``), and per image ``time_change_per_image`` / ``energy_change_per_image``
    (changes of the per-image medians, no interval); ``is_baseline``; and context columns
    ``gpu_name``, ``cpu_model``, ``intensity_kg_per_kwh``, ``pue``.

    ``baseline`` is ``{column: value}`` matching exactly one configuration (see
    :func:`find_baseline`); None picks :func:`default_baseline`.
    """
    check_columns(runs, REQUIRED_COLUMNS, "runs")
    ok = ok_runs(runs)
    if ok.empty:
        raise DataError(
            f"there are no successful runs to summarise ({len(runs)} run(s) given, none with "
            "status 'ok')."
        )
    failed = failed_runs(runs)
    failed = failed[failed["status"].astype("object") == "failed"]  # not running, abandoned
    failed_counts = failed["config_hash"].astype("object").value_counts().to_dict()
    frame = _per_run_frame(ok)
    by_config = config_parts(ok) if "components_json" in ok.columns else {}
    rows: list[dict[str, Any]] = []
    per_config_values: dict[str, dict[str, np.ndarray]] = {}
    for config_hash, group in frame.groupby(frame["config_hash"].astype("object"), sort=False):
        first = group.iloc[0]
        row: dict[str, Any] = {"config_hash": config_hash, "label": str(first["label"])}
        row["n"] = len(group)
        row["n_failed"] = int(failed_counts.get(config_hash, 0))
        for col in CONFIG_COLUMNS + CONTEXT_COLUMNS:
            row[col] = _config_value(first.get(col), col)
        values: dict[str, np.ndarray] = {}
        for metric in METRICS:
            x = numeric(group[metric])
            values[metric] = x
            finite = x[~np.isnan(x)]
            row[metric] = float(np.median(finite)) if finite.size else math.nan
            interval = median_interval(x, level)
            row[f"{metric}_ci_low"], row[f"{metric}_ci_high"] = interval.low, interval.high
            if metric == "energy_total_j":
                row["ci_method"], row["ci_coverage"] = interval.method, interval.coverage
        for col in MEDIAN_ONLY:
            x = numeric(group[col])
            x = x[~np.isnan(x)]
            row[col] = float(np.median(x)) if x.size else math.nan
        # the images per run, fewest and most: "the same images" only when both are one number
        images = numeric(group["samples"])
        whole = images[np.isfinite(images) & (images > 0)]
        complete = whole.size == len(group)  # a run without its count makes the count unknown
        row["samples_low"] = float(whole.min()) if complete and whole.size else math.nan
        row["samples_high"] = float(whole.max()) if complete and whole.size else math.nan
        parts = by_config.get(str(config_hash))
        if parts is not None and parts.shares():  # by share, as the report says it
            row["provenance"], row["measured_share"] = parts.short(), parts.measured_share()
        else:
            prov = group["provenance"] if "provenance" in group.columns else [None] * len(group)
            row["provenance"], row["measured_share"] = weakest_provenance(list(prov)), math.nan
        row["classes"] = classes_of_run(first.get("dataset"), first.get("config_json"))
        row.update(config_rates(group))  # per sample, token, accuracy point; at the reference
        per_config_values[config_hash] = values
        rows.append(row)
    rows.sort(key=_sort_key)
    summary = pd.DataFrame(rows).set_index("config_hash", drop=False)
    summary.index.name = None
    base_hash = find_baseline(summary, baseline) if baseline else default_baseline(summary)
    summary["is_baseline"] = summary.index == base_hash
    base_row = summary.loc[base_hash]
    base_vals = per_config_values[base_hash]
    for name, metric in (("time_change", "duration_s"), ("energy_change", "energy_total_j")):
        changes, lows, highs, coverages = [], [], [], []
        for config_hash, row in summary.iterrows():
            changes.append(relative_change(row[metric], base_row[metric]))
            if config_hash == base_hash:
                interval = change_interval([], [])  # no interval against itself
            else:
                interval = change_interval(
                    per_config_values[config_hash][metric], base_vals[metric], level
                )
            lows.append(interval.low)
            highs.append(interval.high)
            coverages.append(interval.coverage)
        summary[name] = changes
        summary[f"{name}_ci_low"] = lows
        summary[f"{name}_ci_high"] = highs
        summary[f"{name}_ci_coverage"] = coverages
    # the same changes per image (medians of each run's value per image), for comparisons of
    # configurations whose runs saw different numbers of images
    for name, metric in (
        ("time_change_per_image", "duration_per_sample_s"),
        ("energy_change_per_image", "energy_per_sample_j"),
    ):
        summary[name] = [
            relative_change(row[metric], base_row[metric]) for _, row in summary.iterrows()
        ]
    return summary


def _config_value(value: object, column: str) -> object:
    """A configuration axis as stored in the summary: None when missing, whole numbers of the
    integer columns as int (a failed run's NULLs make the column float)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if (
        column in INT_COLUMNS
        and isinstance(value, (int, float, np.integer, np.floating))
        and float(value).is_integer()
    ):
        return int(value)
    return value


def short_configurations(summary: pd.DataFrame, level: float = CI_LEVEL) -> list[str]:
    """Labels of the configurations with fewer ok runs than a ``level`` interval of the median
    needs (6 for 95 %): their interval is the range, with less coverage, or none at all."""
    need = min_runs_for(level)
    return [str(row["label"]) for _, row in summary.iterrows() if int(row["n"]) < need]


def images_differ(summary: pd.DataFrame) -> bool:
    """Whether comparisons between configurations must be per image: every run recorded its
    image count, and the counts are not one number for every run."""
    if "samples_low" not in summary.columns or "samples_high" not in summary.columns:
        return False
    low = pd.to_numeric(summary["samples_low"], errors="coerce")
    high = pd.to_numeric(summary["samples_high"], errors="coerce")
    if low.isna().any() or high.isna().any():
        return False
    return bool((low != high).any() or low.nunique() > 1)


def interval_kind(row: Mapping[str, Any] | pd.Series) -> IntervalKind:
    """How a summary row's interval of the median was made: its runs, method and coverage."""
    coverage = row.get("ci_coverage")
    try:
        cov = float(coverage)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        cov = math.nan
    return IntervalKind(int(row["n"]), str(row.get("ci_method") or "none"), cov)
