"""SLURM's own energy figure beside wattlab's: which number to believe, and by how much they differ.

Where the cluster accounts energy (``AcctGatherEnergyType``: RAPL, IPMI, GPU plugins), ``sacct``
reports ``ConsumedEnergy`` for each job; the SLURM executor stores it in
``scheduler_jobs.consumed_energy_j``. SLURM's figure covers the whole job on whole nodes (start-up,
data loading, evaluation, idle devices, whatever its plugin reads); wattlab's whole-run figure is
the ``run`` window of the same run (its ``budget`` total when that window is missing). The
difference is reported per run and as a median, never folded into wattlab's own totals.
"""

from __future__ import annotations

import statistics
from typing import Any

import pandas as pd

from wattlab.analysis.report_document import Block, Heading, Para, Table, pct
from wattlab.experiment.db.stored_run import RunCol, StoredRun


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN -> None


def scheduler_energy(
    runs: pd.DataFrame, jobs: pd.DataFrame | None, windows: pd.DataFrame | None = None
) -> dict[str, Any]:
    """Per run with a SLURM ConsumedEnergy: ours, SLURM's, and their relative difference.

    Returns ``{"n": runs compared, "median_rel_diff": (slurm - ours) / ours or None,
    "runs": [{run_id, label, job_id, wattlab_j, wattlab_window, slurm_j, rel_diff}]}``.
    """
    out: dict[str, Any] = {"n": 0, "median_rel_diff": None, "runs": []}
    if jobs is None or jobs.empty or runs.empty or RunCol.ID not in runs.columns:
        return out
    whole: dict[int, float] = {}
    if windows is not None and not windows.empty:
        for w in windows[windows["name"] == "run"].itertuples():
            value = _float(w.energy_total_j)
            if value is not None:
                whole[int(w.run_id)] = value
    by_id = {r.id: r for r in StoredRun.from_frame(runs) if r.id is not None}
    for job in jobs.to_dict("records"):
        slurm_j = _float(job.get("consumed_energy_j"))
        run = by_id.get(int(job["run_id"]))
        if slurm_j is None or run is None or not run.ok:
            continue
        run_id = int(job["run_id"])
        ours, window = (whole[run_id], "run") if run_id in whole else (None, "budget")
        if ours is None:
            ours = run.energy_total_j
        if not ours:
            continue
        out["runs"].append(
            {
                "run_id": run_id,
                "label": run.label,
                "job_id": job.get("job_id"),
                "wattlab_j": ours,
                "wattlab_window": window,
                "slurm_j": slurm_j,
                "rel_diff": (slurm_j - ours) / ours,
            }
        )
    out["n"] = len(out["runs"])
    if out["runs"]:
        out["median_rel_diff"] = statistics.median(r["rel_diff"] for r in out["runs"])
    return out


def scheduler_energy_line(info: dict[str, Any]) -> str:
    """One sentence for the report: how far SLURM's figure is from ours, and why they differ."""
    if not info.get("n"):
        return (
            "SLURM energy accounting: not reported for these runs (sacct gave no ConsumedEnergy)."
        )
    median = info["median_rel_diff"]
    side = "more" if median >= 0 else "less"
    return (
        f"SLURM's ConsumedEnergy is {abs(median):.1%} {side} than wattlab's whole-run energy "
        f"(median over {info['n']} run(s)); SLURM counts whole nodes over the whole job through "
        "its own plugin, wattlab the components it names, so use wattlab's figure to compare "
        "configurations and SLURM's for what the allocation drew."
    )


def scheduler_energy_blocks(
    runs: pd.DataFrame,
    jobs: pd.DataFrame | None,
    windows: pd.DataFrame | None,
    data: dict[str, Any],
) -> list[Block]:
    """The report's "SLURM accounting vs wattlab" section (a column and one line), only when
    some run was a SLURM job; also puts the comparison into ``data['scheduler_energy']``."""
    if jobs is None or jobs.empty:
        return []
    info = scheduler_energy(runs, jobs, windows)
    data["scheduler_energy"] = info
    blocks: list[Block] = [
        Heading("SLURM accounting vs wattlab"),
        Para(scheduler_energy_line(info)),
    ]
    if info["runs"]:
        rows = [
            [
                str(r["label"]),
                str(r["job_id"]),
                f"{r['wattlab_j'] / 1e3:.4g} kJ ({r['wattlab_window']} window)",
                f"{r['slurm_j'] / 1e3:.4g} kJ",
                pct(r["rel_diff"]),
            ]
            for r in info["runs"]
        ]
        headers = [
            "Configuration",
            "SLURM job",
            "wattlab",
            "SLURM ConsumedEnergy",
            "SLURM vs wattlab",
        ]
        blocks.append(
            Table(headers, rows, "SLURM vs wattlab = (SLURM - wattlab) / wattlab, per run.")
        )
    return blocks
