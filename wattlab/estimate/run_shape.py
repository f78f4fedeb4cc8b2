"""What a run did besides training that costs host time per step: STEP's live step-level marks.

A run made with ``--project-after-fraction`` (``LiveMarks``) calls a mark every
``max(1, steps // MARKS_PER_BUDGET)`` optimizer steps; each mark reads every energy meter on the
host, inside the step loop (the GPU's energy counter alone costs milliseconds on an H200). A
run whose pace the CPU sets (launch-bound) is slower by that much per mark; a run the GPU
paces hides it behind the queued kernels. ``wattlab run`` makes no marks unless asked, so a
prediction for a plain run has none, while the shipped reference runs were all marked (one mark
per step for most of them). PRE reads the marks per step as a feature (``marks_per_step``) so
the cost is fitted as a term of its own instead of being folded into the per-layer and per-step
costs of every prediction (issue 38).
"""

from __future__ import annotations

import json
import math
from typing import Any

MARKS_PER_BUDGET = 200  # train.loop.MARKS_PER_BUDGET (a test ties them; torch is not imported)


def planned_marks_per_step(steps: int, marks: bool) -> float:
    """Marks per optimizer step of a run of ``steps`` steps, with or without live marks."""
    if not marks or steps <= 0:
        return 0.0
    every = max(1, steps // MARKS_PER_BUDGET)
    return (steps // every) / steps


def recorded_marks_per_step(step_marks_json: Any, samples: float, batch_size: float) -> float:
    """Marks per optimizer step of a stored run: its ``step_marks_json`` (the origin mark at 0
    samples is not a mark inside the loop); 0 when the run stored none."""
    if step_marks_json is None:
        return 0.0
    if isinstance(step_marks_json, float) and math.isnan(step_marks_json):
        return 0.0
    text = str(step_marks_json).strip()
    if not text:
        return 0.0
    try:
        marks = json.loads(text) if isinstance(step_marks_json, str) else step_marks_json
        count = max(0, len(marks["samples"]) - 1)
    except (ValueError, KeyError, TypeError):
        return 0.0
    steps = float(samples) / float(batch_size)
    return count / steps if steps > 0 else 0.0
