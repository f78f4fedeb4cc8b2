"""The JSON that `wattlab run --json` and `wattlab sweep --json` write: a run's stored row with
the carbon intensity it was priced at, and a sweep's plan with one result per planned run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wattlab.experiment.db.record import RunOutcome as Outcome  # a training run's or a command's
from wattlab.experiment.sweep.plan import PlanEntry, SweepPlan


def run_result(row: Mapping[str, Any], intensity_source: str) -> dict[str, Any]:
    """One run's stored row and ``intensity_source``: which carbon intensity priced its CO2e."""
    return {**row, "intensity_source": intensity_source}


def sweep_results(outcomes: Iterable[tuple[PlanEntry, Outcome]]) -> list[dict[str, Any]]:
    """One entry per run that was started: its place in the plan, its run id, its status and
    error, and the exit code of a command sweep's run."""
    results = []
    for entry, outcome in outcomes:
        result: dict[str, Any] = {
            "order": entry.order,
            "label": entry.label,
            "repetition": entry.repetition,
            "run_id": outcome.run_id,
            "status": outcome.status,
        }
        if outcome.exit_code is not None:  # a command sweep's run
            result["exit_code"] = outcome.exit_code
        result["error"] = outcome.error
        results.append(result)
    return results


def sweep_result(plan: SweepPlan, outcomes: Iterable[tuple[PlanEntry, Outcome]]) -> dict[str, Any]:
    """The sweep's plan (``SweepPlan.to_dict``) with ``results``: what each started run came to."""
    data = plan.to_dict()
    data["results"] = sweep_results(outcomes)
    return data
