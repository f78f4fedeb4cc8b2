"""STEP from step-level marks, the live rule: each run's stored marks
(``runs.step_marks_json``) replayed through the live projector after ``marks_fraction`` of its
budget (``wattlab.step.stored``). Its point estimate does not learn; its calibrated interval
does, so it is refitted per protocol from the other groups' errors
(``wattlab.estimate.step_marks``). The marks add up every meter, so it predicts the target
``total`` only."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from wattlab.estimate.baselines import Estimate
from wattlab.estimate.methods.base import EstimationMethod, HeldOut, StepRule, StoredRuns

NAME = "step-marks"
RULE = StepRule("marks", "step-level, the live rule, with a held-out calibrated interval")


def evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    from wattlab.estimate import step_marks
    from wattlab.step import stored as stored_marks

    fraction = stored.settings["marks_fraction"]
    marks = stored.once("step-marks", lambda: stored_marks.replayed(stored.runs, fraction))
    runs = stored.runs
    groups = None
    if held_out is not None and held_out.column in runs and runs[held_out.column].notna().all():
        groups = runs[held_out.column]
    column = held_out.column if held_out is not None else ""
    held = step_marks.held_out_estimates(
        marks, stored.measured, groups, f"its {column}" if groups is not None else "none"
    )
    return {
        index: replace(held[index], read_fraction=getattr(marks.get(index), "fraction_seen", None))
        for index in runs.index
    }


def refuses(target: str) -> str | None:
    if target == "total":
        return None
    return (
        "the step-level marks add up every meter in the run's total, so they project the "
        "target total only"
    )


def how(settings: Mapping[str, Any]) -> str:
    from wattlab.step.stored import DEFAULT_FRACTION

    fraction = settings.get("marks_fraction", DEFAULT_FRACTION)
    return (
        f"STEP (step-level marks) replays the run's stored marks after {fraction:.0%} of the "
        "budget, with a 90 % split-conformal interval from the other groups' errors"
    )


METHOD = EstimationMethod(
    name=NAME,
    label="STEP (step-level marks, live rule)",
    inputs=("its step-level marks up to the fraction read",),
    evaluate=evaluate,
    how=how,
    learns=True,  # its interval is calibrated on the other groups' runs
    refuses=refuses,
    step_rule=RULE,
)
