"""STEP, Stable Training Epoch Projection: a run's total energy and time from its first stable
stretch. It sits below ``wattlab.experiment`` (the worker projects live), so it imports only
the measuring core's helpers, NumPy and pandas.

- ``epochs``: the epoch rule (the first stable epochs, projected to the budget) and its live
  projector;
- ``marks``: the step-level rule (a steady rate of samples, s and J inside the first epoch) and
  its live projector;
- ``stored``: the step-level rule replayed from a run's stored marks;
- ``calibration``: the conformal interval table of step-level projections;
- ``paper``: the published rule (FLUSS's stable point, fixed s and w);
- ``schedule``: when a run projects (after K epochs, or after a fraction of its budget).

Names are loaded on first use (PEP 562), so ``import wattlab.step`` imports no NumPy or pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "StepProjection": "epochs",
    "StepProjector": "epochs",
    "detect_stable_epoch": "epochs",
    "step_project": "epochs",
    "RateProjection": "marks",
    "MarkProjector": "marks",
    "steady_start": "marks",
    "project_from_marks": "marks",
    "replay_marks": "marks",
    "parse_marks": "stored",
    "replayed": "stored",
    "StepCalibration": "calibration",
    "conformal_bounds": "calibration",
    "fit_step_calibration": "calibration",
    "load_step_calibration": "calibration",
    "write_step_calibration": "calibration",
    "PaperStepResult": "paper",
    "step_paper_project": "paper",
    "fluss_stable_epoch": "paper",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'wattlab.step' has no attribute {name!r}")
    module = importlib.import_module(f"wattlab.step.{_EXPORTS[name]}")
    return getattr(module, name)
