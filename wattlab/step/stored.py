"""STEP replayed from the marks a run stored (``runs.step_marks_json``, kept by runs made with
``--project-after-fraction``): the same marks through the live projector, so the answer is what
the run printed, or would have printed, at a given fraction of its budget."""

from __future__ import annotations

import json
import numbers
from typing import Any

import pandas as pd

from wattlab.errors import DataError
from wattlab.step.marks import RateProjection, replay_marks

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
                "the run stored no step-level marks (runs made with --project-after-fraction "
                "keep them)"
            )
            continue
        samples = run.get("samples")
        if not (isinstance(samples, numbers.Real) and float(samples) > 0):  # numpy too; NaN not
            out[index] = "the run recorded no budget in samples"
            continue
        try:
            projection = replay_marks(
                marks["samples"], marks["time_s"], marks["energy_j"], int(float(samples)), fraction
            )
        except (DataError, ValueError) as error:
            out[index] = f"its stored marks cannot be replayed: {str(error).rstrip('.')}"
            continue
        out[index] = projection if projection.ok else str(projection.error)
    return out
