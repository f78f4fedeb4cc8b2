"""Step-level STEP in the method evaluation (``estimate evaluate``, method ``step-marks``).

Each run's stored step-level marks (``runs.step_marks_json``, kept by runs made with
``--project-after`` a fraction) are replayed through the live projector
(``wattlab.step_projection.replay_marks``) at one fraction of the budget, so the point estimate
is what the run printed, or would have printed, at that fraction. Its interval is the calibrated
one a live run prints (``wattlab.step_calibration``), but fitted here without the run's group:
under "leave one model out" a run's interval comes from the errors of the other models' runs
only, so its coverage is judged where nobody calibrated. The point estimate does not learn, so
only the interval changes with the protocol.

The marks add up every meter in the run's total, so the method predicts ``energy_total_j`` and
is not applied to the other targets.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

import pandas as pd

from wattlab.errors import DataError
from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.step_calibration import DEFAULT_LEVEL, held_out_bounds
from wattlab.step_projection import RateProjection, replay_marks

METHOD = "step-marks"
DEFAULT_FRACTION = 0.2  # the issue's target fraction, and the reference runs' live one


def parse_marks(cell: Any) -> dict[str, list[float]] | None:
    """A run's ``step_marks_json`` as a dict of lists, or None when it holds no usable marks."""
    if isinstance(cell, dict):
        value = cell
    elif isinstance(cell, str) and cell.strip():
        try:
            value = json.loads(cell)
        except ValueError:
            return None
    else:
        return None
    keys = ("samples", "time_s", "energy_j")
    if not isinstance(value, dict) or not all(isinstance(value.get(k), list) for k in keys):
        return None
    return value if value["samples"] else None


def replayed(runs: pd.DataFrame, fraction: float) -> dict[Any, RateProjection | str]:
    """Per runs index: the projection its marks give after ``fraction`` of its budget, or one
    sentence saying why there is none."""
    out: dict[Any, RateProjection | str] = {}
    for index, run in runs.iterrows():
        marks = parse_marks(run.get("step_marks_json"))
        if marks is None:
            out[index] = (
                "the run stored no step-level marks (runs made with --project-after a fraction "
                "keep them)"
            )
            continue
        samples = run.get("samples")
        if not (isinstance(samples, numbers.Real) and samples > 0):  # numpy ints too; NaN not
            out[index] = "the run recorded no budget in samples"
            continue
        try:
            projection = replay_marks(
                marks["samples"], marks["time_s"], marks["energy_j"], int(samples), fraction
            )
        except (DataError, ValueError) as error:
            out[index] = f"its stored marks cannot be replayed: {str(error).rstrip('.')}"
            continue
        out[index] = projection if projection.ok else str(projection.error)
    return out


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
        if isinstance(p, RateProjection)
    }
    group_of = None if groups is None else {index: groups.loc[index] for index in errors}
    bounds_by_group = held_out_bounds(errors, group_of, level)
    out: dict[Any, Estimate] = {}
    for index, projection in projections.items():
        if not isinstance(projection, RateProjection):
            out[index] = cannot_apply(METHOD, projection)
            continue
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
                float(projection.energy_j),
                projection.duration_s,
                f"no interval: {bounds} with {group_text} held out; {note}",
            )
            continue
        low, high, runs = bounds
        energy = float(projection.energy_j)
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
