"""Imported power-limit profiles: energy and time of the same work at several GPU power limits.

The input is a CSV shaped like Zeus's power-limit profiler output (``tests/profile_data`` in
github ml-energy/zeus): one row per measurement window, with the columns

* ``window_name``: ``__GlobalPowerLimitOptimizer_<W>``, the power limit in force (W);
* ``elapsed_time``: the window's duration (s), the same amount of work in every window;
* ``gpu<N>_energy``: energy of GPU N over the window (J, an NVML energy counter);
* ``start_time`` (optional, unused): the window's start on a monotonic clock (s).

Several windows at one limit are reduced to their medians.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import relative_change
from wattlab.analysis.tradeoffs import (
    DEFAULT_MAX_PENALTY,
    DEFAULT_MIN_SAVING,
    check_thresholds,
    in_region,
    pareto_front,
)
from wattlab.errors import ConfigError, DataError
from wattlab.jsonio import jsonable

WINDOW_PREFIX = "__GlobalPowerLimitOptimizer_"
_WINDOW_RE = re.compile(r"^__GlobalPowerLimitOptimizer_(\d+(?:\.\d+)?)$")
_GPU_COL_RE = re.compile(r"^gpu(\d+)_energy$")
# "<GPU>+<model>+gpu<indices>.csv", e.g. "A40+resnet50+gpu0,1,2,3.csv"
_NAME_RE = re.compile(r"^(?P<gpu>[^+]+)\+(?P<model>[^+]+)\+gpu(?P<idx>[\d,]+)$")


def load_zeus_profile(path: str | Path) -> pd.DataFrame:
    """Load a power-limit profile CSV into one row per power limit, highest limit first.

    Columns: ``power_limit_w`` (W), ``time_s`` (median window duration, s), ``energy_j``
    (median over windows of the energy summed over GPUs, J), ``gpu<N>_energy_j`` (median per
    GPU, J), ``gpus`` (GPU count) and ``windows`` (windows at that limit). ``attrs`` carries
    ``source`` (the path), ``provenance`` ('measured': NVML energy counters) and, when the file
    name follows ``<GPU>+<model>+gpu<indices>.csv``, ``gpu_name`` and ``model``.

    Raises DataError naming the file for a missing file, a missing column, a window name that
    is not ``__GlobalPowerLimitOptimizer_<W>``, or a value that is not a number >= 0.
    """
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise DataError(f"profile {name!r} does not exist or is not a file ({path}).")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"profile {name!r} is not a readable CSV: {first}.") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    gpu_cols = sorted(
        (c for c in raw.columns if _GPU_COL_RE.match(c)),
        key=lambda c: int(_GPU_COL_RE.match(c).group(1)),  # type: ignore[union-attr]
    )
    missing = [c for c in ("window_name", "elapsed_time") if c not in raw.columns]
    if not gpu_cols:
        missing.append("gpu<N>_energy")
    if missing:
        raise DataError(
            f"profile {name!r} lacks the column(s) {', '.join(missing)}; it needs window_name, "
            "elapsed_time and one gpu<N>_energy column per GPU."
        )
    if raw.empty:
        raise DataError(f"profile {name!r} has a header but no measurement rows.")
    limits: list[float] = []
    for line, window in enumerate(raw["window_name"], start=2):
        match = _WINDOW_RE.match(window.strip())
        if not match:
            raise DataError(
                f"profile {name!r} line {line}: window_name {window!r} is not "
                f"{WINDOW_PREFIX}<watts>."
            )
        limits.append(float(match.group(1)))
    frame = pd.DataFrame({"power_limit_w": limits})
    for col in ("elapsed_time", *gpu_cols):
        values = pd.to_numeric(raw[col].str.strip(), errors="coerce")
        bad = values.isna() | ~np.isfinite(values) | (values < 0)
        if col == "elapsed_time":
            bad |= values <= 0
        if bad.any():
            pos = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(
                f"profile {name!r} line {pos + 2}: {col} is {raw[col].iloc[pos]!r}, not a "
                f"number {'> 0' if col == 'elapsed_time' else '>= 0'}."
            )
        frame[col] = values.to_numpy(dtype="float64")
    frame["energy_j"] = frame[gpu_cols].sum(axis=1)
    rows: list[dict[str, Any]] = []
    for limit, group in frame.groupby("power_limit_w", sort=False):
        row: dict[str, Any] = {
            "power_limit_w": float(limit),
            "time_s": float(group["elapsed_time"].median()),
            "energy_j": float(group["energy_j"].median()),
        }
        for col in gpu_cols:
            row[f"{col}_j"] = float(group[col].median())
        row["gpus"] = len(gpu_cols)
        row["windows"] = len(group)
        rows.append(row)
    out = pd.DataFrame(rows).sort_values("power_limit_w", ascending=False, ignore_index=True)
    out.attrs["source"] = str(path)
    out.attrs["provenance"] = "measured"
    match = _NAME_RE.match(path.stem)
    if match:
        out.attrs["gpu_name"] = match.group("gpu")
        out.attrs["model"] = match.group("model")
    return out


def analyze_profile(
    df: pd.DataFrame,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    baseline_w: float | None = None,
) -> dict[str, Any]:
    """Change of time and energy against a baseline limit, the Pareto front and the operating
    region of a loaded profile (see :func:`load_zeus_profile`).

    The baseline is the highest limit unless ``baseline_w`` (W) names one present in the file.
    Returns a JSON-safe dict: ``source``, ``gpu_name``, ``model``, ``gpus``, ``provenance``,
    ``baseline_w``, ``criteria`` (min_saving, max_penalty), ``limits`` (one dict per limit,
    highest first: ``power_limit_w``, ``time_s``, ``energy_j``, ``time_change``,
    ``energy_change`` as fractions, negative = less; ``pareto``, ``operating_region``),
    ``pareto`` and ``operating_region`` (lists of limits in W), ``min_energy_w`` and
    ``min_time_w`` (the limits with the least energy and the least time).
    """
    check_thresholds(min_saving, max_penalty)
    for col in ("power_limit_w", "time_s", "energy_j"):
        if col not in df.columns:
            raise DataError(
                f"the profile table lacks the column {col!r}; load it with load_zeus_profile()."
            )
    if df.empty:
        raise DataError("the profile table has no rows.")
    df = df.sort_values("power_limit_w", ascending=False, ignore_index=True)
    present = [float(w) for w in df["power_limit_w"]]
    if baseline_w is None:
        base_w = max(present)
    else:
        matches = [w for w in present if abs(w - float(baseline_w)) <= 0.5]
        if not matches:
            listed = ", ".join(f"{w:g}" for w in present)
            raise ConfigError(
                f"--baseline-w {baseline_w:g} is not a power limit in this profile; "
                f"the limits present are {listed} W."
            )
        base_w = matches[0]
    base = df[df["power_limit_w"] == base_w].iloc[0]
    front = set(pareto_front(df, "time_s", "energy_j"))
    limits: list[dict[str, Any]] = []
    for idx, row in df.iterrows():
        tc = relative_change(row["time_s"], base["time_s"])
        ec = relative_change(row["energy_j"], base["energy_j"])
        limits.append(
            {
                "power_limit_w": float(row["power_limit_w"]),
                "time_s": float(row["time_s"]),
                "energy_j": float(row["energy_j"]),
                "time_change": tc,
                "energy_change": ec,
                "is_baseline": float(row["power_limit_w"]) == base_w,
                "pareto": idx in front,
                "operating_region": in_region(tc, ec, min_saving, max_penalty),
                "windows": int(row["windows"]) if "windows" in row.index else 1,
            }
        )
    energy = df["energy_j"].to_numpy(dtype="float64")
    time = df["time_s"].to_numpy(dtype="float64")
    out = {
        "source": df.attrs.get("source"),
        "gpu_name": df.attrs.get("gpu_name"),
        "model": df.attrs.get("model"),
        "gpus": int(df["gpus"].iloc[0]) if "gpus" in df.columns else None,
        "provenance": df.attrs.get("provenance", "measured"),
        "baseline_w": base_w,
        "criteria": {"min_saving": min_saving, "max_penalty": max_penalty},
        "limits": limits,
        "pareto": [x["power_limit_w"] for x in limits if x["pareto"]],
        "operating_region": [x["power_limit_w"] for x in limits if x["operating_region"]],
        "min_energy_w": float(df["power_limit_w"].iloc[int(np.nanargmin(energy))]),
        "min_time_w": float(df["power_limit_w"].iloc[int(np.nanargmin(time))]),
    }
    return jsonable(out)


def describe_region(analysis: dict[str, Any]) -> str:
    """One sentence on the operating region of :func:`analyze_profile`'s result."""
    region = [x for x in analysis["limits"] if x["operating_region"]]
    crit = analysis["criteria"]
    base = analysis["baseline_w"]
    if not region:
        return (
            f"No power limit saves at least {crit['min_saving'] * 100:.1f} % energy for at most "
            f"{crit['max_penalty'] * 100:.1f} % more time against {base:g} W."
        )
    watts = ", ".join(f"{x['power_limit_w']:g}" for x in region)
    savings = [-x["energy_change"] for x in region]
    penalties = [x["time_change"] for x in region]
    return (
        f"Operating region against {base:g} W: {watts} W, saving "
        f"{_span(min(savings), max(savings), '.1%')} energy for a time change of "
        f"{_span(min(penalties), max(penalties), '+.1%', ' to ')}."
    )


def _span(low: float, high: float, fmt: str, sep: str = "-") -> str:
    """``low-high`` in ``fmt``, or one value when both print the same."""
    a, b = format(low, fmt), format(high, fmt)
    return a if a == b else f"{a}{sep}{b}"
