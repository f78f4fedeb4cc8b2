"""The report's "Advice" section: for the baseline and for each configuration that is not on
the time-energy Pareto front, what ``wattlab advise`` would change (starting from one of its
stored runs, the one of median energy, with PRE corrected by what it measured), and the
predicted saving with its interval. The limit is "no slower than it ran" (max slowdown 0 %)
and the knobs are the advisor's defaults (batch size is left alone). Nothing is changed on any
GPU: the rows are predictions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from wattlab.analysis.report_document import Block, Heading, Para, Table, code
from wattlab.errors import WattlabError
from wattlab.experiment.db.stored_run import RunCol

MAX_SLOWDOWN_PERCENT = 0.0


def _median_run(runs: pd.DataFrame, config_hash: str) -> int | None:
    """The id of the config's ok run whose total energy is nearest its median."""
    same = runs[RunCol.CONFIG_HASH].astype(str) == config_hash
    mine = runs[same & (runs[RunCol.STATUS] == "ok")]
    energy = pd.to_numeric(mine.get(RunCol.ENERGY_TOTAL_J), errors="coerce").dropna()
    if energy.empty:
        return None
    nearest = (energy - energy.median()).abs().idxmin()
    return int(mine.loc[nearest, RunCol.ID])


def advice_rows(
    runs: pd.DataFrame,
    windows: pd.DataFrame | None,
    trace: pd.DataFrame | None,
    data: dict[str, Any],
    *,
    advise: Callable[..., Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per configuration to advise on (the baseline, those off the Pareto front):
    its label, why it is listed, and the advice or why there is none. ``advise``: the function
    that advises from a stored run (default ``wattlab.estimate.advise.advise_from_run`` with
    PRE fitted on the shipped reference, kept in the cache)."""
    if advise is None:
        from wattlab.estimate.advise import advise_from_run

        advise = advise_from_run
    windows = windows if windows is not None else pd.DataFrame(columns=["run_id", "name"])
    trace = trace if trace is not None else pd.DataFrame(columns=["run_id", "component", "t_s"])
    rows = []
    for config in data.get("configurations", []):
        if not (config.get("is_baseline") or not config.get("pareto")):
            continue
        role = "baseline" if config.get("is_baseline") else "off the Pareto front"
        row: dict[str, Any] = {"label": config.get("label"), "role": role}
        run_id = _median_run(runs, str(config.get("config_hash")))
        if run_id is None:
            rows.append({**row, "error": "no ok run with an energy to start from"})
            continue
        row["run_id"] = run_id
        try:
            advice = advise(runs, windows, trace, run_id, max_slowdown_percent=MAX_SLOWDOWN_PERCENT)
        except WattlabError as error:
            rows.append({**row, "error": " ".join(str(error).split()).rstrip(".")})
            continue
        best = advice.rows[0]
        rows.append(
            {
                **row,
                "change": best.changes,
                "saving": best.saving,
                "saving_low": best.saving_low,
                "saving_high": best.saving_high,
                "energy_j": best.energy_j,
                "duration_s": best.duration_s,
                "sentence": advice.sentence,
                "not_imported": getattr(advice, "not_imported", None),
            }
        )
    return rows


def advice_blocks(rows: list[dict[str, Any]]) -> list[Block]:
    """The section: a heading, what it is, and one table row per configuration."""
    blocks: list[Block] = [
        Heading("Advice"),
        Para(
            f"What {code('wattlab advise --db DB --run ID --max-slowdown 0')} would change for the "
            "baseline and for each configuration off the Pareto front, starting from its run "
            "of median energy (PRE corrected by what that run measured; power limits by the "
            "power-cap law without capping). Predictions, not measurements; no GPU setting "
            "was changed."
        ),
    ]
    if not rows:
        blocks.append(Para("Every configuration is on the Pareto front and none is the baseline."))
        return blocks
    table_rows = []
    for row in rows:
        if "error" in row:
            table_rows.append([str(row["label"]), row["role"], "n/a", "n/a", row["error"]])
            continue
        saving = (
            "none"
            if row["change"] == "no change"
            else f"{row['saving']:.1%} [{row['saving_low']:.1%} to {row['saving_high']:.1%}]"
        )
        change = "keep it" if row["change"] == "no change" else row["change"]
        if row.get("not_imported"):  # a factory the run names: not imported, so limits only
            change = f"{change} (only the power limit: {row['not_imported']})"
        table_rows.append(
            [str(row["label"]), row["role"], f"run {row['run_id']}", saving, change]
        )  # fmt: skip
    blocks.append(
        Table(
            ["Configuration", "Listed as", "Starts from", "Predicted saving [interval]", "Change"],
            table_rows,
            "Saving = 1 - predicted energy of the change / the run's measured energy, at the "
            "same images and no slower; the interval is PRE's 90 % interval (widened for the cap "
            "law where a power limit changes). A change predicted to save under 5 % is not "
            "advised (within PRE's error).",
        )
    )
    return blocks


__all__ = ["MAX_SLOWDOWN_PERCENT", "advice_blocks", "advice_rows"]
