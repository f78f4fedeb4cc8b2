"""The runs table as analysis reads it: its column groups, row selectors and small readers.

Every analysis module takes plain pandas DataFrames whose columns are those of the ``runs``
table in ``wattlab/experiment/db/schema.sql`` (units are in the column names: ``duration_s`` in
seconds, ``energy_*_j`` in joules, ``co2e_*_kg`` in kilograms of CO2e). Nothing here reads a
database or draws a figure.

A *configuration* is the set of ``status == 'ok'`` rows that share a ``config_hash`` (shown
by its ``label``); a *change* is ``value / reference_value - 1`` of medians (a fraction;
negative = less time or less energy than the reference).
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, SupportsFloat, SupportsIndex

import numpy as np
import pandas as pd

from wattlab.errors import DataError
from wattlab.experiment.db.record import run_columns
from wattlab.meters.base import Provenance
from wattlab.wording import provenances_named

# Columns that describe a configuration (taken from the first run of each configuration).
CONFIG_COLUMNS = run_columns(
    "model",
    "stem",
    "dataset",
    "device",
    "gpus",
    "world_size",
    "precision",
    "batch_size",
    "power_limit_requested_w",
)
# Measured columns summarised by a median and an interval of the median (the derived
# per-image ones, DERIVED, are computed from each run's samples).
METRICS = (
    *run_columns(
        "duration_s",
        "energy_total_j",
        "energy_gpu_j",
        "energy_cpu_j",
        "energy_dram_j",
        "energy_other_j",
    ),
    "energy_per_sample_j",  # derived: energy_total_j / samples
    "duration_per_sample_s",  # derived: duration_s / samples
    *run_columns("co2e_kg", "accuracy"),
)
DERIVED = ("energy_per_sample_j", "duration_per_sample_s")
# Columns summarised by a median only.
MEDIAN_ONLY = run_columns(
    "co2e_low_kg", "co2e_high_kg", "power_limit_w", "samples", "wall_s", "epochs", "test_size"
)
# Facts about where and how a configuration was measured (its first run's value).
CONTEXT_COLUMNS = run_columns("gpu_name", "cpu_model", "intensity_kg_per_kwh", "pue")
REQUIRED_COLUMNS = run_columns("status", "config_hash", "label", "duration_s", "energy_total_j")

_PROVENANCE_RANK = {"measured": 0, "sampled": 1, "estimated": 2, "unknown": 3}
INT_COLUMNS = run_columns("gpus", "world_size", "batch_size")


def check_columns(runs: pd.DataFrame, required: Iterable[str], what: str) -> None:
    missing = [c for c in required if c not in runs.columns]
    if missing:
        raise DataError(
            f"the {what} table lacks the column(s) {', '.join(missing)}; "
            "it must have the columns of the runs table in wattlab/experiment/db/schema.sql."
        )


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` whose status is 'ok'."""
    check_columns(runs, ("status",), "runs")
    return runs[runs["status"].astype("object") == "ok"]


def failed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` whose status is not 'ok'."""
    check_columns(runs, ("status",), "runs")
    return runs[runs["status"].astype("object") != "ok"]


# An ok run is usable only when these hold a finite number >= 0; one that does not (a NULL, NaN
# or infinite energy stored by a damaged writer) is named and left out of every statistic.
USABLE_COLUMNS = run_columns("energy_total_j", "duration_s")


def split_unusable(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """``runs`` without the ok runs whose energy or time is not a finite number >= 0, and
    those runs as ``{"run_id", "label", "reason"}`` (e.g. "energy_total_j is infinite")."""
    ok = runs["status"].astype("object") == "ok"
    bad = np.zeros(len(runs), dtype=bool)
    reasons: list[list[str]] = [[] for _ in range(len(runs))]
    for col in USABLE_COLUMNS:
        if col not in runs.columns:
            continue
        for i, value in enumerate(runs[col].tolist()):
            if not ok.iloc[i]:
                continue
            why = _unusable_reason(value)
            if why:
                bad[i] = True
                reasons[i].append(f"{col} is {why}")
    left_out = [
        {
            "run_id": _run_id(runs.iloc[i].get("id")),
            "label": str(runs.iloc[i].get("label")),
            "reason": "; ".join(reasons[i]),
        }
        for i in np.flatnonzero(bad)
    ]
    return runs[~bad], left_out


def _unusable_reason(value: object) -> str | None:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "NULL or NaN"  # pandas reads SQLite's NULL in a REAL column as NaN
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"not a number ({str(value)[:20]!r})"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "infinite"
    if x < 0:
        return "negative"
    return None


def _run_id(value: object) -> int | None:
    number = as_float(value, math.nan)
    return None if math.isnan(number) else int(number)


def numeric(series: pd.Series) -> np.ndarray:
    """A column as float64, non-numbers as NaN."""
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def weakest_provenance(values: Iterable[object]) -> str:
    """The weakest provenance any of several stored provenances names (a word, or a text by
    share: "93.1 % measured, 6.9 % estimated" names estimated); a missing or unknown one gives
    'unknown' (a number whose origin is unknown is never reported as measured). Only for a
    rule that needs one word; what people and files read is the provenance by share."""
    worst = "measured"
    seen = False
    for value in values:
        seen = True
        text = value.value if isinstance(value, Provenance) else value
        for word in provenances_named(text):
            if _PROVENANCE_RANK[word] > _PROVENANCE_RANK[worst]:
                worst = word
    return worst if seen else "unknown"


def relative_change(value: float | None, reference: float | None) -> float:
    """``value / reference - 1`` (a fraction); NaN when either is missing or reference is 0."""
    if value is None or reference is None:
        return math.nan
    value, reference = float(value), float(reference)
    if math.isnan(value) or math.isnan(reference) or reference == 0:
        return math.nan
    return value / reference - 1.0


def as_float(value: object, missing: float) -> float:
    """``value`` as a float; ``missing`` when it is absent, not a number or NaN."""
    if isinstance(value, float):  # the common case first: isinstance against the Protocols
        return missing if math.isnan(value) else float(value)  # below is ~15 us a call
    if not isinstance(value, (str, bytes, SupportsFloat, SupportsIndex)):
        return missing  # float() would raise TypeError
    try:
        out = float(value)
    except (TypeError, ValueError):
        return missing
    return missing if math.isnan(out) else out


def group_key(row: pd.Series, columns: Sequence[str]) -> tuple[Hashable, ...]:
    """The values of ``columns`` in ``row``, missing ones as None (a hashable group key)."""
    out: list[Hashable] = []
    for col in columns:
        value = row.get(col)
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            out.append(None)
        else:
            out.append(value)
    return tuple(out)


def parse_json_cell(cell: object) -> dict[str, Any] | None:
    """A JSON object stored in a cell (or a dict already); None when empty or not an object."""
    if isinstance(cell, dict):
        return cell
    if not isinstance(cell, str) or not cell.strip():
        return None
    try:
        out = json.loads(cell)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def intensity_range(runs: pd.DataFrame) -> tuple[float, float] | None:
    """The low/high carbon intensity (kgCO2e/kWh) behind ``co2e_low_kg``/``co2e_high_kg``,
    recovered as intensity x low/value (the table stores the CO2e, not the range)."""
    need = ("co2e_kg", "co2e_low_kg", "co2e_high_kg", "intensity_kg_per_kwh")
    if not all(c in runs.columns for c in need):
        return None
    ok = ok_runs(runs)
    value, low, high = (
        numeric(ok["co2e_kg"]),
        numeric(ok["co2e_low_kg"]),
        numeric(ok["co2e_high_kg"]),
    )
    intensity = numeric(ok["intensity_kg_per_kwh"])
    use = (value > 0) & ~np.isnan(low) & ~np.isnan(high) & ~np.isnan(intensity)
    if not use.any():
        return None
    lows = intensity[use] * low[use] / value[use]
    highs = intensity[use] * high[use] / value[use]
    return (float(np.median(lows)), float(np.median(highs)))
