"""Scoring predictions against measured runs: ``score`` (RMSE, MAPE, median APE, bias, interval
coverage and its Clopper-Pearson interval, ``coverage_interval``) and ``protocol_table``: one
protocol's metrics on the runs every scored method could handle, each method's own beside them.
Units: J, %."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from wattlab.estimate.evaluate.protocols import PROTOCOLS
from wattlab.estimate.evaluate.result import ONLINE


def score(rows: pd.DataFrame) -> dict[str, Any]:
    """Error metrics of prediction rows (predicted_j, measured_j, low_j, high_j): RMSE, MAPE,
    median APE, bias, the interval's coverage (with its Clopper-Pearson interval) and its median
    width ((high - low) / predicted). Units: J, %."""
    predicted = rows["predicted_j"].to_numpy(dtype=float)
    measured = rows["measured_j"].to_numpy(dtype=float)
    if predicted.size == 0:
        return {
            "n": 0,
            "rmse_j": None,
            "mape_percent": None,
            "mdape_percent": None,
            "bias_percent": None,
            "coverage_percent": None,
            "coverage_ci_percent": None,
            "interval_runs": 0,
            "median_width_percent": None,
            "median_read_percent": None,
        }
    read = (
        pd.to_numeric(rows["read_fraction"], errors="coerce").to_numpy(dtype=float)
        if "read_fraction" in rows
        else np.full(predicted.size, np.nan)
    )
    errors = predicted - measured
    percent = errors / measured * 100.0
    low = pd.to_numeric(rows["low_j"], errors="coerce").to_numpy(dtype=float)
    high = pd.to_numeric(rows["high_j"], errors="coerce").to_numpy(dtype=float)
    has = np.isfinite(low) & np.isfinite(high)
    inside = (low[has] <= measured[has]) & (measured[has] <= high[has])
    return {
        "n": int(predicted.size),
        "rmse_j": float(np.sqrt(np.mean(errors**2))),
        "mape_percent": float(np.mean(np.abs(percent))),
        "mdape_percent": float(np.median(np.abs(percent))),
        "bias_percent": float(np.mean(percent)),
        "coverage_percent": float(inside.mean() * 100.0) if has.any() else None,
        "coverage_ci_percent": (
            [100.0 * x for x in coverage_interval(int(inside.sum()), int(has.sum()))]
            if has.any()
            else None
        ),
        "interval_runs": int(has.sum()),
        # how much the interval says: (high - low) / the estimate, the median over the runs
        "median_width_percent": (
            float(np.median((high[has] - low[has]) / predicted[has]) * 100) if has.any() else None
        ),
        "median_read_percent": (
            float(np.median(read[np.isfinite(read)]) * 100) if np.isfinite(read).any() else None
        ),
    }


def coverage_interval(covered: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    """The Clopper-Pearson interval (fractions) of an interval's true coverage, given that it
    covered ``covered`` of ``runs`` held-out runs: how far a coverage measured on few runs can be
    trusted. 13 of 13 gives (0.75, 1.0): it cannot tell a 90 % interval from a wider one."""
    from scipy.stats import beta

    if not 0 <= covered <= runs or runs <= 0:
        raise ValueError(f"need 0 <= covered <= runs and runs > 0, got {covered} of {runs}")
    tail = (1.0 - level) / 2.0
    low = 0.0 if covered == 0 else float(beta.ppf(tail, covered, runs - covered + 1))
    high = 1.0 if covered == runs else float(beta.ppf(1.0 - tail, covered + 1, runs - covered))
    return low, high


def protocol_table(
    predictions: pd.DataFrame, excluded: pd.DataFrame, protocol: str, methods: tuple[str, ...]
) -> dict[str, Any]:
    """``protocol``'s metrics of ``methods``: over the runs every method with a prediction
    could handle (``common_runs``), each method's "own" metrics over all it handled beside."""
    rows = predictions[predictions["protocol"].isin([ONLINE, protocol])]
    by_method = {m: rows[rows["method"] == m] for m in methods}
    scored = [m for m in methods if len(by_method[m])]
    common: set[Any] | None = None
    for method in scored:
        ids = set(by_method[method]["run_id"])
        common = ids if common is None else common & ids
    common = common or set()
    out_methods = {}
    for method in methods:
        own = score(by_method[method])
        gone = excluded[
            (excluded["method"] == method) & excluded["protocol"].isin([ONLINE, protocol])
        ]
        own["excluded"] = int(len(gone))
        entry = score(by_method[method][by_method[method]["run_id"].isin(common)])
        entry["own"] = own
        out_methods[method] = entry
    return {
        "label": PROTOCOLS[protocol][1],
        "common_runs": len(common),
        "common_run_ids": sorted(common, key=str),
        "common_methods": scored,
        "unscored_methods": [m for m in methods if m not in scored],
        "methods": out_methods,
    }


__all__ = ["coverage_interval", "protocol_table", "score"]
