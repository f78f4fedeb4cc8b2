"""Scoring PRE on runs outside its reference set, predicted as a user would predict them.

An outside-runs CSV (``#`` comment lines, then one row per run) gives each run's shape as its
``wattlab run`` command had it (``model``, ``precision``, ``batch_size``, ``stem``, ``epochs``,
``train_size``) and what was measured over its budget window (``duration_s``,
``energy_total_j``). ``predict_outside`` predicts each from its shape alone, as
``wattlab estimate`` does (``features.config_features``: samples = epochs x the training set's
full batches); ``summarise_outside`` gives MAPE, the signed median error and the 90 % interval's
coverage. Such runs are for validation only: nothing here fits.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.errors import DataError
from wattlab.estimate.features import config_features

SHAPE_COLUMNS = ("model", "precision", "batch_size", "stem", "epochs", "train_size")
MEASURED_COLUMNS = ("duration_s", "energy_total_j")
GPU_NAME = "NVIDIA H200"


def load_outside_runs(path: str | Path) -> pd.DataFrame:
    """The runs of an outside-runs CSV; DataError naming a missing column."""
    text = Path(path).read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    table = pd.read_csv(io.StringIO(body))
    missing = [c for c in (*SHAPE_COLUMNS, *MEASURED_COLUMNS) if c not in table]
    if missing:
        raise DataError(f"{path} lacks the column(s) {', '.join(missing)}.")
    return table


def outside_features(run: Any, gpu_name: str = GPU_NAME) -> pd.DataFrame:
    """The feature row ``wattlab estimate`` builds for one outside run's shape."""
    return config_features(
        model=str(run["model"]),
        gpus=int(run.get("gpus", 1) if not pd.isna(run.get("gpus", 1)) else 1),
        precision=str(run["precision"]),
        epochs=float(run["epochs"]),
        gpu_name=gpu_name,
        batch_size=int(run["batch_size"]),
        stem=str(run["stem"]),
        train_size=int(run["train_size"]),
    )


def _regime(notes: str) -> str:
    for part in notes.split("; "):
        if part.startswith("regime: "):
            return part.split()[1]
    return "unknown"


def _band(value: float, edges: tuple[float, ...]) -> str:
    lower = [e for e in edges if e <= value]
    upper = [e for e in edges if e > value]
    lo = f"{lower[-1]:g}" if lower else "<"
    hi = f"{upper[0]:g}" if upper else "+"
    return f"{lo}-{hi}"


def predict_outside(model: Any, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its shape, measured and predicted energy and time with PRE's interval,
    the signed errors (predicted / measured - 1) and whether the 90 % interval covered it. A
    ``gpu_name`` column names each run's GPU (default: the H200)."""
    rows = []
    for _, run in runs.iterrows():
        gpu = run.get("gpu_name")
        features = outside_features(run, GPU_NAME if gpu is None or pd.isna(gpu) else str(gpu))
        predicted = model.predict(features).iloc[0]
        measured_j = float(run["energy_total_j"])
        measured_s = float(run["duration_s"])
        rows.append(
            {
                **{c: run[c] for c in runs.columns if c not in MEASURED_COLUMNS},
                "samples": float(features["samples"].iloc[0]),
                "measured_j": measured_j,
                "measured_s": measured_s,
                "predicted_j": float(predicted["energy_j"]),
                "predicted_s": float(predicted["duration_s"]),
                "low_j": float(predicted["energy_low_j"]),
                "high_j": float(predicted["energy_high_j"]),
                "low_s": float(predicted["duration_low_s"]),
                "high_s": float(predicted["duration_high_s"]),
                "regime": _regime(str(predicted["notes"])),
                "notes": str(predicted["notes"]),
            }
        )
    table = pd.DataFrame(rows)
    table["energy_error"] = table["predicted_j"] / table["measured_j"] - 1
    table["time_error"] = table["predicted_s"] / table["measured_s"] - 1
    table["power_error"] = (1 + table["energy_error"]) / (1 + table["time_error"]) - 1
    table["covered"] = (table["low_j"] <= table["measured_j"]) & (
        table["measured_j"] <= table["high_j"]
    )
    table["time_covered"] = (table["low_s"] <= table["measured_s"]) & (
        table["measured_s"] <= table["high_s"]
    )
    table["epochs_band"] = [_band(float(e), (1, 3, 10, 16)) for e in table["epochs"]]
    table["batch_band"] = [_band(float(b), (64, 256, 768, 2048)) for b in table["batch_size"]]
    return table


def summarise_outside(table: pd.DataFrame) -> dict[str, Any]:
    """MAPE, signed median error and interval coverage of energy and time."""
    n = len(table)
    if n == 0:
        return {"n": 0}
    energy, time_ = table["energy_error"], table["time_error"]
    return {
        "n": n,
        "mape_percent": float(energy.abs().mean() * 100),
        "median_error_percent": float(energy.median() * 100),
        "time_mape_percent": float(time_.abs().mean() * 100),
        "time_median_error_percent": float(time_.median() * 100),
        "covered": int(table["covered"].sum()),
        "coverage_90": float(table["covered"].mean()),
        "time_covered": int(table["time_covered"].sum()),
        "time_coverage_90": float(table["time_covered"].mean()),
        # the interval's median width: (high - low) / estimate (where the table has them)
        **(
            {
                "median_width_percent": float(
                    ((table["high_j"] - table["low_j"]) / table["predicted_j"]).median() * 100
                ),
                "time_median_width_percent": float(
                    ((table["high_s"] - table["low_s"]) / table["predicted_s"]).median() * 100
                ),
            }
            if {"high_j", "low_j", "high_s", "low_s"} <= set(table.columns)
            else {}
        ),
        # the spread of the log error: what a protocol's disagreement is measured against
        "log_error_sd": float(np.log1p(energy).std(ddof=1)) if n > 1 else math.nan,
    }


def outside_breakdown(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """Runs, energy MAPE, signed median energy / time / power error and coverage per value of
    ``column``."""
    out = []
    for value, part in table.groupby(column, sort=True):
        out.append(
            {
                column: value,
                "runs": len(part),
                "MAPE %": round(float(part["energy_error"].abs().mean() * 100), 1),
                "energy median %": round(float(part["energy_error"].median() * 100), 1),
                "time median %": round(float(part["time_error"].median() * 100), 1),
                "power median %": round(float(part["power_error"].median() * 100), 1),
                "covered": f"{int(part['covered'].sum())}/{len(part)}",
            }
        )
    return pd.DataFrame(out)
