"""The report of measured runs: per-configuration tables, the study's answer in sentences,
and figures, written as ``report.md`` and a self-contained ``report.html`` next to the PNG/SVG
figure files and ``summary.json``. The sections live in :mod:`report_sections`, the document
model in :mod:`report_document`, the renderers in :mod:`report_markdown` / :mod:`report_html`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from wattlab.analysis import plots
from wattlab.analysis import report_sections as sections
from wattlab.analysis.baseline import parse_baseline, spec_baseline
from wattlab.analysis.report_document import Block, Bullets, Figure, Heading, Para, ReportPaths
from wattlab.analysis.report_files import prepare_out_dir, write_document
from wattlab.analysis.runs_table import REQUIRED_COLUMNS, failed_runs, ok_runs, split_unusable
from wattlab.analysis.sample_noun import blocks_in_samples, in_samples, sample_noun
from wattlab.analysis.scaling import scaling_efficiency
from wattlab.analysis.scheduler_energy import scheduler_energy_blocks
from wattlab.analysis.summary import summarize
from wattlab.analysis.summary_json import summary_to_json
from wattlab.analysis.tradeoffs import (
    DEFAULT_MAX_PENALTY,
    DEFAULT_MIN_SAVING,
    DEFAULT_PARETO_AXES,
    operating_region,
    pareto_front_axes,
    power_limit_effects,
)
from wattlab.errors import DataError

__all__ = ["ReportPaths", "analyze_runs", "select_runs", "write_report"]


def select_runs(runs: pd.DataFrame, sweep: str | None) -> pd.DataFrame:
    """The runs of ``sweep`` (all runs when None); DataError when it has none."""
    missing = [c for c in REQUIRED_COLUMNS if c not in runs.columns]
    if missing:
        raise DataError(
            f"the runs table lacks the column(s) {', '.join(missing)}; "
            "it must have the columns of wattlab/experiment/db/schema.sql."
        )
    if sweep is None:
        if runs.empty:
            raise DataError("the database holds no runs yet; run `wattlab run` or `wattlab sweep`.")
        return runs
    if "sweep" not in runs.columns:
        raise DataError(f"cannot select sweep {sweep!r}: the runs table has no sweep column.")
    chosen = runs[runs["sweep"].astype("object") == sweep]
    if chosen.empty:
        present = sorted({str(s) for s in runs["sweep"].dropna()})
        listed = ", ".join(repr(s) for s in present) if present else "none"
        raise DataError(f"sweep {sweep!r} has no runs in this database; the sweeps are: {listed}.")
    return chosen


def _require_ok(runs: pd.DataFrame, sweep: str | None, left_out: list[dict[str, Any]]) -> None:
    if not ok_runs(runs).empty:
        return
    if left_out:
        where = f" in sweep {sweep!r}" if sweep else ""
        named = ", ".join(str(r["run_id"]) for r in left_out[:10])
        raise DataError(
            f"there are no usable runs to report{where}: the {len(left_out)} run(s) stored as "
            f"ok (ids {named}) have no finite energy or time ({left_out[0]['reason']})."
        )
    failed = failed_runs(runs)
    statuses = failed["status"].astype(str)
    failed = failed[statuses == "failed"]
    where = f" in sweep {sweep!r}" if sweep else ""
    first = ""
    if not failed.empty and "error" in failed.columns:
        errors = [str(e) for e in failed["error"] if isinstance(e, str) and e.strip()]
        if errors:
            first = f" (first error: {errors[0].strip().splitlines()[0][:300]})"
    n_failed = len(failed)
    if n_failed == len(runs):
        raise DataError(
            f"there are no successful runs to report{where}: all {len(runs)} run(s) failed{first}."
        )
    running = int((statuses == "running").sum())
    abandoned = int((statuses == "abandoned").sum())
    parts = []
    if running:
        parts.append(f"{running} still running")
    if abandoned:
        parts.append(f"{abandoned} abandoned (the process running it died before it finished)")
    if n_failed:
        parts.append(f"{n_failed} failed{first}")
    other = len(runs) - running - abandoned - n_failed
    if other:
        parts.append(f"{other} with another status")
    yet = " yet" if running else ""
    wait = "; report again when they have finished" if running else ""
    raise DataError(
        f"there are no successful runs to report{where}{yet}: of {len(runs)} run(s), "
        f"{', '.join(parts)}{wait}."
    )


def _coerce_baseline(baseline: Mapping[str, object] | str | None) -> Mapping[str, object] | None:
    if isinstance(baseline, str):
        return parse_baseline(baseline)
    return baseline


def analyze_runs(
    runs: pd.DataFrame,
    *,
    sweep: str | None = None,
    baseline: Mapping[str, object] | str | None = None,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    spec: Mapping[str, object] | None = None,
    windows: pd.DataFrame | None = None,
    target_accuracy: float | None = None,
    pareto_axes: tuple[str, ...] = DEFAULT_PARETO_AXES,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The summary table and the JSON summary (see ``summary_to_json``) of ``runs``, without
    writing anything: what ``wattlab report --json`` prints. ``baseline`` may be a dict or the
    ``KEY=VALUE,...`` text of ``--baseline``; without one, the sweep ``spec``'s ``baseline:``
    applies when it declares one, else the default. ``baseline.source`` says which."""
    runs, left_out = split_unusable(select_runs(runs, sweep))
    _require_ok(runs, sweep, left_out)
    chosen, source = _coerce_baseline(baseline), "--baseline"
    if chosen is None and spec is not None:
        hashes = set(runs["config_hash"].astype(str)) if "config_hash" in runs else set()
        chosen, source = spec_baseline(spec, hashes), "the sweep spec's baseline"
    if chosen is None:
        source = "default: the fewest GPUs, fp32, the highest power limit"
    summary = summarize(runs, chosen)
    data = summary_to_json(
        summary,
        runs,
        min_saving=min_saving,
        max_penalty=max_penalty,
        windows=windows,
        target_accuracy=target_accuracy,
        pareto_axes=pareto_axes,
    )
    data["baseline"]["source"] = source
    data["runs"]["left_out"] = left_out
    data["sweep"] = sweep
    data["sample_noun"] = sample_noun(runs)  # "image", or "sample" for a non-image task
    if data["sample_noun"] == "sample" and isinstance(data.get("finding"), dict):
        finding = data["finding"]
        if isinstance(finding.get("sentence"), str):
            finding["sentence"] = in_samples(finding["sentence"])
    return summary, data


def report_blocks(
    runs: pd.DataFrame,
    summary: pd.DataFrame,
    data: dict[str, Any],
    windows: pd.DataFrame | None,
    figures: list[plots.FigureFile],
    *,
    scheduler_jobs: pd.DataFrame | None = None,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
) -> list[Block]:
    """The report as document blocks, from the usable runs, their summary table and JSON
    summary (``analyze_runs``) and the figures drawn of them (none: the document without its
    figures, as the property tests build it)."""
    effects = power_limit_effects(summary, min_saving, max_penalty)
    scaling = scaling_efficiency(summary)
    blocks: list[Block] = [Para(data["finding"]["sentence"], lead=True)]
    blocks += sections.header_blocks(runs, summary, data, windows)
    blocks += [Heading("Findings"), Bullets(sections.findings(summary, data, effects, scaling))]
    blocks += [Heading("Configurations"), sections.config_table(summary, runs, data)]
    if not effects.empty:
        blocks += [Heading("Power-limit effect"), sections.effects_table(effects)]
    if data.get("advice") is not None:
        from wattlab.analysis.report_advice import advice_blocks

        blocks += advice_blocks(data["advice"])
    blocks += sections.energy_to_accuracy_blocks(data.get("energy_to_accuracy"))
    blocks += sections.phase_blocks(data.get("phase_times"))
    blocks.append(Heading("GPU scaling"))
    if scaling.empty:
        blocks.append(Para("No configurations differ only in their GPU count."))
    else:
        blocks.append(sections.scaling_table(scaling))
    blocks += [
        Heading("CodeCarbon vs wattlab"),
        *sections.codecarbon_blocks(data["codecarbon"]),
    ]
    blocks += scheduler_energy_blocks(runs, scheduler_jobs, windows, data)
    blocks.append(Heading("Figures"))
    blocks += [Figure(f) for f in figures]
    if not any(f.name == "power_traces" for f in figures):
        blocks.append(Para("Power traces: none recorded for these runs."))
    return blocks


def write_report(
    runs: pd.DataFrame,
    windows: pd.DataFrame | None,
    trace: pd.DataFrame | None,
    out_dir: str | Path,
    *,
    sweep: str | None = None,
    baseline: Mapping[str, object] | str | None = None,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    title: str | None = None,
    scheduler_jobs: pd.DataFrame | None = None,
    spec: Mapping[str, object] | None = None,
    advice: bool = False,
    target_accuracy: float | None = None,
    pareto_axes: tuple[str, ...] = DEFAULT_PARETO_AXES,
) -> ReportPaths:
    """Write report.md, report.html, summary.json and the figures (PNG + SVG) to ``out_dir``.

    ``runs``/``windows``/``trace`` are DataFrames with the columns of the schema's tables;
    ``sweep`` keeps one sweep's runs; ``baseline`` is ``{column: value}`` or ``KEY=VALUE,...``
    (default: fewest GPUs, fp32, highest power limit); ``min_saving``/``max_penalty`` are the
    operating region's fractions; ``scheduler_jobs`` (the store's table) adds SLURM's
    ConsumedEnergy beside ours where it was reported; ``spec`` (the sweep's stored spec) gives
    the baseline when ``baseline`` is None and it declares one; ``advice`` adds the "Advice"
    section (``report_advice``: PRE loaded or fitted once, then every listed configuration
    advised from one of its runs); ``target_accuracy`` is energy-to-accuracy's target (default:
    see :mod:`energy_to_accuracy`); ``pareto_axes`` the front's axes (energy, time, accuracy).
    Raises DataError when there is no ok
    run, ConfigError for a baseline that matches no single configuration or an unusable
    ``out_dir``.
    """
    summary, data = analyze_runs(
        runs,
        sweep=sweep,
        baseline=baseline,
        min_saving=min_saving,
        max_penalty=max_penalty,
        spec=spec,
        windows=windows,
        target_accuracy=target_accuracy,
        pareto_axes=pareto_axes,
    )
    runs, _ = split_unusable(select_runs(runs, sweep))
    if trace is not None and "id" in runs.columns and not trace.empty:
        ids = set(pd.to_numeric(runs["id"], errors="coerce").dropna().astype(int))
        trace = trace[pd.to_numeric(trace["run_id"], errors="coerce").isin(ids)]
    out = prepare_out_dir(out_dir)
    pareto = pareto_front_axes(summary, pareto_axes, per_image=data.get("pareto_per") == "image")
    region = operating_region(summary, min_saving, max_penalty)
    figures = plots.plot_run_figures(
        runs,
        trace,
        summary,
        out,
        pareto=pareto,
        region=region,
        windows=windows,
        per_image=data.get("pareto_per") == "image",
        noun=str(data.get("sample_noun") or "image"),
    )
    title = title or (f"wattlab report: sweep {sweep}" if sweep else "wattlab report")
    if advice:
        from wattlab.analysis.report_advice import advice_rows

        data["advice"] = advice_rows(runs, windows, trace, data)
    blocks = report_blocks(
        runs,
        summary,
        data,
        windows,
        figures,
        scheduler_jobs=scheduler_jobs,
        min_saving=min_saving,
        max_penalty=max_penalty,
    )
    if data.get("sample_noun") == "sample":
        blocks = blocks_in_samples(blocks)
    data["title"] = title
    data["generated_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    data["figures"] = [f.png.name for f in figures]
    return write_document(out, title, blocks, data, figures)
