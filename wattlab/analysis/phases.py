"""Where a sweep's time went: the wall time of each phase of each run (launch, set-up, data,
warm-up, budget, eval, teardown), from the ``phase_*_s`` columns of the runs table.

The comparisons use the budget phase's energy, but it is not the only one measured: warm-up,
budget and evaluation each have an energy window, and the run window spans data loading to the
end of evaluation (all in the windows table; the energy statement heads with the run window).
Launch, the worker's own set-up before the run window and teardown are outside every window.
Runs of every status count (a failed run's time was spent too); a run without phase times is
left out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import numeric

PHASE_ENERGY_WORDS = (
    "The comparisons use the budget window's energy; warm-up, evaluation and the whole run "
    "(data loading to the end of evaluation) are measured too and stored in the windows table "
    "(`wattlab report --statement` states the whole run). Launch, the set-up before the run "
    "window and teardown fall outside every energy window."
)
PHASES = ("launch", "setup", "data", "warmup", "budget", "eval", "teardown")
PHASE_COLUMNS = tuple(f"phase_{p}_s" for p in PHASES)
PHASE_NAMES = {
    "launch": "launch (process start, imports)",
    "setup": "set-up (devices, meters, model)",
    "data": "data",
    "warmup": "warm-up",
    "budget": "budget (measured training)",
    "eval": "evaluation",
    "teardown": "teardown",
}


def phase_times(runs: pd.DataFrame) -> dict[str, Any] | None:
    """Per phase: ``total_s`` (summed over runs), ``share`` (of all phase time, a fraction) and
    ``median_s`` (per run); with ``runs`` (how many runs had phase times), ``total_s`` and
    ``budget_share`` (budget time / all phase time: the sweep's efficiency). None when the
    table has no phase column or no run has a phase time."""
    present = [c for c in PHASE_COLUMNS if c in runs.columns]
    if not present:
        return None
    table = pd.DataFrame({c: numeric(runs[c]) for c in present}, index=runs.index)
    table = table[table.notna().any(axis=1)]
    if table.empty:
        return None
    totals = {c: float(np.nansum(table[c].to_numpy())) for c in present}
    all_s = sum(totals.values())
    rows = []
    for phase, col in zip(PHASES, PHASE_COLUMNS, strict=True):
        if col not in present:
            continue
        values = table[col].to_numpy()
        values = values[~np.isnan(values)]
        rows.append(
            {
                "phase": phase,
                "total_s": totals[col],
                "share": totals[col] / all_s if all_s > 0 else math.nan,
                "median_s": float(np.median(values)) if values.size else math.nan,
            }
        )
    budget_s = totals.get("phase_budget_s", math.nan)
    return {
        "runs": int(len(table)),
        "total_s": all_s,
        "budget_share": budget_s / all_s if all_s > 0 else math.nan,
        "phases": rows,
    }
