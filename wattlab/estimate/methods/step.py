"""STEP, wattlab's rule (``wattlab.step.epochs``): project the budget once ``step_window_epochs``
consecutive epochs are stable within ``step_tolerance``; and its power-based twin, the paper's
formula: the window's mean power x the run's measured duration (an oracle input). STEP reads
the run's own epochs, so it runs during training, not before."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from wattlab.errors import WattlabError
from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.estimate.methods.base import (
    EstimationMethod,
    HeldOut,
    PlannedRun,
    StepRule,
    StoredRuns,
)
from wattlab.estimate.methods.epochs import EpochSeries, power_twin, twins

NAME, TWIN = "step", "step-power"
RULE = StepRule("wattlab", "epochs")


def project(
    run: dict[str, Any], series: EpochSeries, window: int, tolerance: float
) -> tuple[Estimate, Estimate]:
    """wattlab's rule and its power-based twin on one run's epochs."""
    from wattlab.step.epochs import StepProjector

    energies, durations, total_epochs = series.energies_j, series.durations_s, series.total_epochs

    def neither(reason: str) -> tuple[Estimate, Estimate]:
        return cannot_apply(NAME, reason), cannot_apply(TWIN, reason)

    if len(energies) < window + 1 or total_epochs < window + 1:
        return neither(
            f"the run has {len(energies)} measured epochs of {total_epochs:g}; STEP needs "
            f"more than its {window}-epoch window"
        )
    projector = StepProjector(total_epochs, window=window, tolerance=tolerance)
    projection = None
    for energy_j, duration_s in zip(energies, durations, strict=True):
        try:
            projection = projector.add_epoch(float(energy_j), float(duration_s))
        except WattlabError as error:
            return neither(str(error).rstrip("."))
        if projection is not None:
            break
    if (
        projection is None
        or not projection.ok
        or projection.stable_epoch is None
        or projection.energy_j is None
    ):
        said = projection.error if projection is not None else projector.result().error
        return neither(said or "not stable")
    first = projection.stable_epoch
    last_used = first + projection.window_epochs - 1
    if last_used >= total_epochs:
        return neither(
            f"the first stable window ends at epoch {last_used}, the run's last, so nothing is "
            "left to project"
        )
    where = (
        f"wattlab's rule: stable from epoch {first}, window {projection.window_epochs} epochs, "
        f"projected after epoch {projection.epochs_seen} of {total_epochs:g}"
    )
    step = made(
        NAME,
        projection.energy_j,
        projection.duration_s,
        where,
        energy_low_j=projection.energy_low_j,
        energy_high_j=projection.energy_high_j,
    )
    read = projection.epochs_seen / total_epochs
    window_power_w = float(
        energies[first - 1 : last_used].sum() / durations[first - 1 : last_used].sum()
    )
    twin = power_twin(TWIN, run, window_power_w, where)
    return replace(step, read_fraction=read), replace(twin, read_fraction=read)


def _both(stored: StoredRuns) -> dict[Hashable, tuple[Estimate, Estimate]]:
    window = stored.settings["step_window_epochs"]
    tolerance = stored.settings["step_tolerance"]
    return twins(
        stored, "step", (NAME, TWIN), lambda run, series: project(run, series, window, tolerance)
    )


def evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    return {index: pair[0] for index, pair in _both(stored).items()}


def evaluate_twin(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    return {index: pair[1] for index, pair in _both(stored).items()}


def predict(planned: PlannedRun) -> Estimate:
    return cannot_apply(
        NAME,
        "STEP projects from measured epochs, so it runs during training "
        "(wattlab run --project-after-fraction F or --project-after-epochs K), not before",
    )


def how(settings: Mapping[str, Any]) -> str:
    return (
        f"STEP (wattlab's rule) projects once {settings.get('step_window_epochs')} consecutive "
        f"epochs are stable within {settings.get('step_tolerance', 0.05):.0%}"
    )


def how_twin(settings: Mapping[str, Any]) -> str:
    return "its power-based twin is the window's mean power x the measured duration"


METHOD = EstimationMethod(
    name=NAME,
    label="STEP",
    inputs=("its first epochs, until two are stable",),
    evaluate=evaluate,
    how=how,
    step_rule=RULE,
    predict=predict,  # says why it cannot: it runs during training
)
POWER_TWIN = EstimationMethod(
    name=TWIN,
    label="STEP (power-based)",
    inputs=("its first epochs, until two are stable", "oracle: the run's measured duration"),
    evaluate=evaluate_twin,
    how=how_twin,
    step_rule=RULE,
)
