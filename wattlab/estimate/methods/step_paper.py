"""STEP, the published rule (``wattlab.step.paper``: s and w as published, or s from FLUSS on the
run's GPU power trace), and its power-based twin: the window's mean power x the run's measured
duration (an oracle input)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from wattlab.errors import WattlabError
from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.estimate.methods.base import EstimationMethod, HeldOut, StepRule, StoredRuns
from wattlab.estimate.methods.epochs import EpochSeries, power_twin, twins

NAME, TWIN = "step-paper", "step-paper-power"
RULE = StepRule("paper", "FLUSS, s and w as published")


def project(
    run: dict[str, Any],
    series: EpochSeries,
    stable_epoch: int | None,
    window: int,
    trace: Any,
) -> tuple[Estimate, Estimate]:
    """The published rule and its power-based twin on one run's epochs (``trace``: the run's
    GPU power trace, for FLUSS, or None)."""
    from wattlab.step.paper import step_paper_project

    rows = series.rows
    epoch_end_s = None
    if "start_s" in rows and rows["start_s"].notna().all():
        epoch_end_s = (rows["start_s"] + rows["duration_s"]).to_numpy(dtype=float)
    trace_t = trace_p = None
    if trace is not None and len(trace) and epoch_end_s is not None:
        trace_t = trace["t_s"].to_numpy(dtype=float)
        trace_p = trace["power_w"].to_numpy(dtype=float)

    def neither(reason: str) -> tuple[Estimate, Estimate]:
        return cannot_apply(NAME, reason), cannot_apply(TWIN, reason)

    try:
        result = step_paper_project(
            series.energies_j,
            series.durations_s,
            series.total_epochs,
            stable_epoch=stable_epoch,
            window=window,
            trace_t_s=trace_t,
            trace_power_w=trace_p,
            epoch_end_s=epoch_end_s,
        )
    except WattlabError as error:
        return neither(str(error).rstrip("."))
    if not result.ok or result.energy_j is None or result.mean_power_w is None:
        return neither(result.error or "cannot apply")
    where = f"published rule: {result.notes}"
    step = made(
        NAME,
        result.energy_j,
        result.duration_s,
        where,
        energy_low_j=result.energy_low_j,
        energy_high_j=result.energy_high_j,
    )
    read = min(1.0, (int(result.stable_epoch or 0) + window - 1) / series.total_epochs)
    twin = power_twin(TWIN, run, float(result.mean_power_w), where)
    return replace(step, read_fraction=read), replace(twin, read_fraction=read)


def _both(stored: StoredRuns) -> dict[Hashable, tuple[Estimate, Estimate]]:
    stable = stored.settings["paper_stable_epoch"]
    window = stored.settings["paper_window_epochs"]
    return twins(
        stored,
        "step-paper",
        (NAME, TWIN),
        lambda run, series: project(
            run, series, stable, window, stored.run_trace(run[stored.id_column])
        ),
    )


def evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    return {index: pair[0] for index, pair in _both(stored).items()}


def evaluate_twin(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    return {index: pair[1] for index, pair in _both(stored).items()}


def how(settings: Mapping[str, Any]) -> str:
    stable = settings.get("paper_stable_epoch")
    return (
        f"STEP (published rule) projects from a window of w = "
        f"{settings.get('paper_window_epochs')} epochs starting at s = "
        f"{'the FLUSS stable epoch' if stable is None else stable}"
    )


def how_twin(settings: Mapping[str, Any]) -> str:
    return "its power-based twin is the window's mean power x the measured duration"


METHOD = EstimationMethod(
    name=NAME,
    label="STEP (published rule)",
    inputs=("its epochs up to s + w - 1",),
    evaluate=evaluate,
    how=how,
    step_rule=RULE,
    reads_trace=True,
)
POWER_TWIN = EstimationMethod(
    name=TWIN,
    label="STEP (published rule, power-based)",
    inputs=("its epochs up to s + w - 1", "oracle: the run's measured duration"),
    evaluate=evaluate_twin,
    how=how_twin,
    step_rule=RULE,
    reads_trace=True,
)
