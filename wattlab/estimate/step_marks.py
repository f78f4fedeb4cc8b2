"""Step-level STEP in the method evaluation (``estimate evaluate``, method ``step-marks``).

Each run's stored step-level marks (``runs.step_marks_json``, kept by runs made with
``--project-after-fraction``) are replayed through the live projector
(``wattlab.step.stored.replayed``) at one fraction of the budget, so the point estimate
is what the run printed, or would have printed, at that fraction. Its interval is the calibrated
one a live run prints (``wattlab.step.calibration``), but fitted here without the run's group:
under "leave one model out" a run's interval comes from the errors of the other models' runs
only, so its coverage is judged where nobody calibrated. The point estimate does not learn, so
only the interval changes with the protocol.

The marks add up every meter in the run's total, so the method predicts ``energy_total_j`` and
is not applied to the other targets.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.step.calibration import DEFAULT_LEVEL, held_out_bounds
from wattlab.step.marks import RateProjection

METHOD = "step-marks"


def held_out_estimates(
    projections: dict[Any, RateProjection | str],
    measured: pd.Series,
    groups: pd.Series | None,
    group_text: str,
    *,
    level: float = DEFAULT_LEVEL,
) -> dict[Any, Estimate]:
    """Per runs index, the step-level estimate with a ``level`` interval whose conformal bounds
    come from the relative errors of the runs outside its group (``groups``, aligned with
    ``measured``; None: every run, the shipped-table view). A run whose group leaves too few
    other runs keeps its estimate without an interval, and says so."""
    errors = {
        index: (p.energy_j - float(measured.loc[index])) / float(measured.loc[index])
        for index, p in projections.items()
        if isinstance(p, RateProjection) and p.energy_j is not None
    }
    group_of = None if groups is None else {index: groups.loc[index] for index in errors}
    bounds_by_group = held_out_bounds(errors, group_of, level)
    out: dict[Any, Estimate] = {}
    for index, projection in projections.items():
        if not isinstance(projection, RateProjection):
            out[index] = cannot_apply(METHOD, projection)
            continue
        if projection.energy_j is None:  # a projection that did not project
            out[index] = cannot_apply(METHOD, str(projection.error))
            continue
        energy = float(projection.energy_j)
        group = "all" if groups is None else str(groups.loc[index])
        bounds = bounds_by_group[group]
        seen = projection.fraction_seen
        note = (
            f"step-level marks replayed after {seen:.0%} of the budget (the live rule); "
            f"{projection.describe()}"
        )
        if isinstance(bounds, str):
            out[index] = made(
                METHOD,
                energy,
                projection.duration_s,
                f"no interval: {bounds} with {group_text} held out; {note}",
            )
            continue
        low, high, runs = bounds
        out[index] = made(
            METHOD,
            energy,
            projection.duration_s,
            f"{level:.0%} interval from the errors of {runs} other runs' replays ({group_text} "
            f"held out); {note}",
            energy_low_j=energy / (1 + high) if 1 + high > 0 else math.nan,
            energy_high_j=energy / (1 + low),
        )
    return out
