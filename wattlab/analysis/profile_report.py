"""The report of an imported power-limit profile (``wattlab report --import-profile``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from wattlab.analysis import plots
from wattlab.analysis.profiles import describe_region
from wattlab.analysis.report_document import (
    Block,
    Bullets,
    Figure,
    Heading,
    ReportPaths,
    Table,
    criteria_text,
    fmt,
    pct,
)
from wattlab.analysis.report_files import prepare_out_dir, write_document


def write_profile_report(
    profile_df: pd.DataFrame,
    analysis: dict[str, Any],
    out_dir: str | Path,
    *,
    title: str | None = None,
) -> ReportPaths:
    """Report an imported power-limit profile (``load_zeus_profile`` + ``analyze_profile``):
    report.md, report.html, summary.json (the analysis) and the energy/time-vs-limit figure."""
    out = prepare_out_dir(out_dir)
    figure = plots.plot_profile(profile_df, analysis, out)
    source = Path(str(analysis.get("source") or "profile")).name
    title = title or f"wattlab power-limit profile: {source}"
    crit = analysis["criteria"]
    items = [
        f"Source: {source} ({analysis.get('gpus') or '?'} GPU(s), "
        f"{analysis.get('gpu_name') or 'unknown GPU'}"
        + (f", model {analysis['model']}" if analysis.get("model") else "")
        + ").",
        f"Energy provenance: {analysis.get('provenance') or 'unknown'} (GPU energy only; no CPU "
        "or DRAM energy, no CO2e: intensity and PUE are not applied).",
        f"Baseline: {analysis['baseline_w']:g} W. Operating region: {criteria_text(crit)}.",
    ]
    findings = [describe_region(analysis)]
    findings.append(
        "Pareto front (W): " + ", ".join(f"{w:g}" for w in analysis["pareto"]) + "; least energy "
        f"at {analysis['min_energy_w']:g} W, least time at {analysis['min_time_w']:g} W."
    )
    rows = [
        [
            f"{x['power_limit_w']:g}" + (" (baseline)" if x["is_baseline"] else ""),
            fmt(x["time_s"]),
            fmt(x["energy_j"]),
            pct(x["time_change"]),
            pct(x["energy_change"]),
            "★" if x["pareto"] else "",
            "✓" if x["operating_region"] else "",
        ]
        for x in analysis["limits"]
    ]
    blocks: list[Block] = [
        Bullets(items),
        Heading("Findings"),
        Bullets(findings),
        Heading("Power limits"),
        Table(
            [
                "Power limit (W)",
                "Time (s)",
                "Energy (J)",
                "Δ time",
                "Δ energy",
                "Pareto",
                "Region",
            ],
            rows,
            "Medians over the windows at each limit; Δ against the baseline limit.",
        ),
        Heading("Figure"),
        Figure(figure),
    ]
    return write_document(out, title, blocks, dict(analysis, title=title), [figure])
