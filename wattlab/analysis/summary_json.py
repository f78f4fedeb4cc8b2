"""The machine-readable summary of a set of runs: what ``wattlab report --json`` prints and
``summary.json`` holds (JSON-safe: NaN becomes null)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from wattlab.analysis.assumptions import assumptions_sentence
from wattlab.analysis.budget_windows import budget_windows
from wattlab.analysis.chance import summary_verdict
from wattlab.analysis.codecarbon_error import codecarbon_errors
from wattlab.analysis.energy_shares import config_parts, energy_parts, energy_shares
from wattlab.analysis.energy_to_accuracy import energy_to_accuracy
from wattlab.analysis.headline import finding
from wattlab.analysis.intervals import CI_LEVEL, min_runs_for
from wattlab.analysis.phases import phase_times
from wattlab.analysis.runs_table import (
    CONFIG_COLUMNS,
    failed_runs,
    intensity_range,
    ok_runs,
    weakest_provenance,
)
from wattlab.analysis.scaling import scaling_efficiency
from wattlab.analysis.summary import images_differ, interval_kind, short_configurations
from wattlab.analysis.tradeoffs import (
    DEFAULT_MAX_PENALTY,
    DEFAULT_MIN_SAVING,
    DEFAULT_PARETO_AXES,
    operating_region,
    pareto_front_axes,
    power_limit_effects,
    region_against_baseline,
)
from wattlab.analysis.work_rates import CONFIG_RATE_KEYS, reference_carbon
from wattlab.experiment.db.stored_run import StoredRun
from wattlab.jsonio import jsonable
from wattlab.wording import interval_words

REGION_REFERENCE = (
    "the same model, stem, dataset, device, GPU count, precision and batch size at its "
    "highest power limit"
)


def _config_record(
    row: pd.Series,
    pareto: set,
    region: set,
    vs_baseline: set,
    axes: Sequence[str],
    provenance_text: str | None,
) -> dict[str, Any]:
    return {
        "label": row["label"],
        "config_hash": row["config_hash"],
        "axes": {a: row.get(a) for a in axes if a in row.index},
        "n": row["n"],
        "n_failed": row.get("n_failed", 0),
        "time_s": row["duration_s"],
        "time_s_ci": [row["duration_s_ci_low"], row["duration_s_ci_high"]],
        "energy_j": row["energy_total_j"],
        "energy_j_ci": [row["energy_total_j_ci_low"], row["energy_total_j_ci_high"]],
        "ci_method": row.get("ci_method"),
        "ci_coverage": row.get("ci_coverage"),
        "energy_gpu_j": row.get("energy_gpu_j"),
        "energy_cpu_j": row.get("energy_cpu_j"),
        "energy_dram_j": row.get("energy_dram_j"),
        "energy_other_j": row.get("energy_other_j"),
        "energy_per_sample_j": row.get("energy_per_sample_j"),
        "energy_per_sample_j_ci": [
            row.get("energy_per_sample_j_ci_low"),
            row.get("energy_per_sample_j_ci_high"),
        ],
        **{key: row.get(key) for key in CONFIG_RATE_KEYS},
        "co2e_kg": row.get("co2e_kg"),
        "co2e_kg_ci": [row.get("co2e_kg_ci_low"), row.get("co2e_kg_ci_high")],
        "co2e_low_kg": row.get("co2e_low_kg"),
        "co2e_high_kg": row.get("co2e_high_kg"),
        "accuracy": row.get("accuracy"),
        "accuracy_ci": [row.get("accuracy_ci_low"), row.get("accuracy_ci_high")],
        "power_limit_w": row.get("power_limit_w"),
        "provenance": provenance_text or row.get("provenance"),
        "provenance_shares": provenance_text,
        "measured_share": row.get("measured_share"),
        "images_per_run": [row.get("samples_low"), row.get("samples_high")],
        "interval": interval_words(interval_kind(row)),
        "time_change": row.get("time_change"),
        "time_change_ci": [row.get("time_change_ci_low"), row.get("time_change_ci_high")],
        "energy_change": row.get("energy_change"),
        "energy_change_ci": [row.get("energy_change_ci_low"), row.get("energy_change_ci_high")],
        "time_change_per_image": row.get("time_change_per_image"),
        "energy_change_per_image": row.get("energy_change_per_image"),
        "change_ci_coverage": row.get("energy_change_ci_coverage"),
        "is_baseline": bool(row.get("is_baseline", False)),
        "pareto": row["config_hash"] in pareto,
        "operating_region": row["config_hash"] in region,
        "region_vs_baseline": row["config_hash"] in vs_baseline,
    }


def intervals_summary(summary: pd.DataFrame, level: float = CI_LEVEL) -> dict[str, Any]:
    """How the intervals were made: method; ``level``, the lowest coverage an interval given
    has (the level asked for, ``level_asked``, when every interval reaches it: a configuration
    of 3 runs gets the range, a 75 % interval); ``coverage_given``, every coverage given; the
    runs a ``level_asked`` interval of the median needs, and the configurations with fewer
    (their interval is the range, or none)."""
    short = short_configurations(summary, level)
    coverage = summary["ci_coverage"] if "ci_coverage" in summary else pd.Series(dtype=float)
    given = sorted({round(float(c), 6) for c in coverage.dropna() if float(c) > 0})
    return {
        "method": "order-statistic interval of the median (distribution-free)",
        "level": min([level, *given]),
        "level_asked": level,
        "coverage_given": given,
        "min_runs": min_runs_for(level),
        "short_configurations": short,
        "change_method": "spanned by the two medians' intervals; coverage = their product",
    }


def summary_to_json(
    summary: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    *,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    windows: pd.DataFrame | None = None,
    target_accuracy: float | None = None,
    pareto_axes: tuple[str, ...] = DEFAULT_PARETO_AXES,
) -> dict[str, Any]:
    """A machine-readable summary (JSON-safe: NaN becomes null). Keys:

    ``finding`` (:func:`wattlab.analysis.headline.finding`: the report's first sentence),
    ``configurations`` (one dict per configuration: ``label``, ``config_hash``, ``axes``, ``n``,
    ``time_s`` and ``energy_j`` medians with ``time_s_ci`` / ``energy_j_ci`` [low, high] and
    their ``ci_method`` / ``ci_coverage``, per-component energies, ``energy_per_sample_j``,
    ``co2e_kg`` with ``co2e_low_kg`` / ``co2e_high_kg``, the rates per unit of work
    (:func:`wattlab.analysis.work_rates.config_rates`: ``co2e_per_sample_kg``,
    ``energy_per_token_j``, ``co2e_per_token_kg``, ``energy_per_accuracy_point_j``,
    ``co2e_per_accuracy_point_kg``, ``co2e_at_reference_kg``), ``accuracy``, ``provenance`` (by
    share: "93.1 % measured, 6.9 % estimated"; one word only when it is all) and
    ``measured_share`` (0..1),
    ``time_change`` / ``energy_change`` against the baseline with intervals,
    ``is_baseline``, ``pareto``, ``operating_region`` (against its own highest power limit),
    ``region_vs_baseline``), ``baseline`` (label, config_hash, axes), ``pareto``,
    ``operating_region`` (labels, per group against the group's highest power limit),
    ``operating_region_vs_baseline`` (labels, against the one baseline), ``criteria``
    (min_saving, max_penalty, region_reference), ``intervals`` (see
    :func:`intervals_summary`), ``scaling``, ``power_limit_effects``, ``codecarbon``
    (:func:`codecarbon_errors`, or ``{"measured": false}`` without runs), ``provenance``
    (by share over all ok runs; without ``runs`` the weakest any configuration names) and
    ``measured_share`` (null without ``runs``), ``reference_carbon`` (the intensity and PUE of
    ``co2e_at_reference_kg``, with its source), and with ``runs``: ``runs`` (ok and failed counts,
    failures with their errors), ``hardware``, ``carbon``, ``energy_shares`` (see
    :mod:`wattlab.analysis.energy_shares`), ``estimate_assumptions`` (what the estimated part
    assumed, :mod:`wattlab.analysis.assumptions`; null when nothing was estimated),
    ``budget_windows`` (runs of a command sweep: how many marked their budget window, see
    :mod:`wattlab.analysis.budget_windows`; null for others) and ``phase_times`` (see
    :mod:`wattlab.analysis.phases`; null without phase columns), ``pareto_axes`` (the axes
    of the front: energy, time and optionally accuracy) and, with ``runs``,
    ``energy_to_accuracy`` (see :mod:`wattlab.analysis.energy_to_accuracy`; from ``windows``
    at ``target_accuracy``).
    """
    per_image = images_differ(summary)  # comparisons per image when image counts differ
    pareto = pareto_front_axes(summary, pareto_axes, per_image=per_image)
    region = operating_region(summary, min_saving, max_penalty)
    vs_baseline = region_against_baseline(summary, min_saving, max_penalty, per_image)
    axes = [c for c in (*CONFIG_COLUMNS, "power_limit_w") if c in summary.columns]
    base = summary[summary["is_baseline"]].iloc[0]
    parts = config_parts(runs) if runs is not None else {}
    all_parts = energy_parts(runs) if runs is not None else None  # summed once: every ok run
    out: dict[str, Any] = {
        "finding": finding(summary, with_accuracy="accuracy" in pareto_axes),
        "pareto_axes": list(pareto_axes),
        "configurations": [
            _config_record(
                row,
                set(pareto),
                set(region),
                set(vs_baseline),
                axes,
                parts[str(h)].short() if str(h) in parts else None,
            )
            for h, row in summary.iterrows()
        ],
        "baseline": {
            "label": base["label"],
            "config_hash": base["config_hash"],
            "axes": {a: base.get(a) for a in axes},
        },
        "pareto": [summary.loc[h, "label"] for h in pareto],
        "pareto_per": "image" if per_image else "run",
        "operating_region": [summary.loc[h, "label"] for h in region],
        "operating_region_vs_baseline": [summary.loc[h, "label"] for h in vs_baseline],
        "criteria": {
            "min_saving": min_saving,
            "max_penalty": max_penalty,
            "region_reference": REGION_REFERENCE,
        },
        "intervals": intervals_summary(summary),
        "scaling": scaling_efficiency(summary).to_dict(orient="records"),
        "power_limit_effects": power_limit_effects(summary, min_saving, max_penalty).to_dict(
            orient="records"
        ),
        "provenance": (
            all_parts.short()
            if all_parts is not None and all_parts.shares()
            else weakest_provenance(summary["provenance"])
        ),
        "measured_share": all_parts.measured_share() if all_parts is not None else None,
        "accuracy_vs_chance": summary_verdict(summary).to_dict(),
        "reference_carbon": reference_carbon(),
        "codecarbon": codecarbon_errors(runs, windows) if runs is not None else {"measured": False},
    }
    if runs is not None:
        failed = failed_runs(runs)
        status = failed["status"].astype("object")
        out["runs"] = {
            "ok": int(len(ok_runs(runs))),
            "failed": int((status == "failed").sum()),
            "failures": [
                {"run_id": r.id, "label": r.label, "repetition": r.repetition, "error": r.error}
                for r in StoredRun.from_frame(failed[status == "failed"])
            ],
        }
        for unfinished in ("running", "abandoned"):  # still running when read; process died
            if (status == unfinished).any():
                out["runs"][unfinished] = int((status == unfinished).sum())
        out["hardware"] = hardware(runs)
        out["energy_shares"] = energy_shares(runs)
        out["estimate_assumptions"] = assumptions_sentence(StoredRun.from_frame(ok_runs(runs)))
        out["budget_windows"] = budget_windows(runs)  # command runs: marked or whole process
        out["phase_times"] = phase_times(runs)
        out["energy_to_accuracy"] = energy_to_accuracy(runs, windows, target_accuracy)
        out["runs"]["left_out"] = []  # analyze_runs fills in the ok runs it left out
        rng = intensity_range(runs)
        ok = ok_runs(runs)
        out["carbon"] = {
            "intensity_kg_per_kwh": _unique(ok, "intensity_kg_per_kwh"),
            "intensity_range_kg_per_kwh": list(rng) if rng else None,
            "pue": _unique(ok, "pue"),
        }
    return jsonable(out)


def _unique(frame: pd.DataFrame, column: str) -> list:
    """Distinct non-missing values of a column, in first-seen order."""
    if column not in frame.columns:
        return []
    seen: list = []
    for value in frame[column]:
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        if value not in seen:
            seen.append(value)
    return seen


def hardware(runs: pd.DataFrame) -> dict[str, list]:
    """Distinct GPU names, CPU models, hosts and drivers over the ok runs."""
    ok = ok_runs(runs)
    return {
        "gpu_name": _unique(ok, "gpu_name"),
        "cpu_model": _unique(ok, "cpu_model"),
        "hostname": _unique(ok, "hostname"),
        "driver": _unique(ok, "driver"),
        "device": _unique(ok, "device"),
    }
