"""Analysis and reports: turn measured runs into per-configuration tables with intervals,
change against a baseline, GPU scaling, the Pareto front, the operating region, CodeCarbon's
error, and Markdown/HTML reports with figures.

Submodules, one job each (pure functions on DataFrames unless said otherwise):

* ``runs_table``: the runs table's columns, row selectors and small readers;
* ``intervals``: order-statistic intervals of the median, with their coverage;
* ``baseline``: choosing the one configuration "against the baseline" compares with;
* ``summary``: one row per configuration (medians, intervals, change against the baseline);
* ``scaling``: GPU scaling; ``tradeoffs``: the Pareto front and the operating region;
* ``codecarbon_error``: CodeCarbon against the direct measurement;
* ``summary_json``: the machine-readable summary;
* ``energy_shares`` / ``phases``: which share of the energy was measured, where the time went;
* ``profiles``: imported power-limit profiles; ``plots``: figures (matplotlib, Agg canvas);
* ``report_document`` (blocks), ``report_markdown`` / ``report_html`` (renderers),
  ``report_files`` (writing), ``report_sections`` + ``report`` (the run report),
  ``profile_report`` (the profile report).

Nothing is imported until a name is first used, so ``import wattlab.analysis`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "summarize": "summary",
    "scaling_efficiency": "scaling",
    "pareto_front": "tradeoffs",
    "operating_region": "tradeoffs",
    "region_against_baseline": "tradeoffs",
    "power_limit_effects": "tradeoffs",
    "DEFAULT_MIN_SAVING": "tradeoffs",
    "DEFAULT_MAX_PENALTY": "tradeoffs",
    "codecarbon_errors": "codecarbon_error",
    "summary_to_json": "summary_json",
    "parse_baseline": "baseline",
    "median_interval": "intervals",
    "MIN_RUNS_FOR_95": "intervals",
    "load_zeus_profile": "profiles",
    "analyze_profile": "profiles",
    "write_report": "report",
    "analyze_runs": "report",
    "ReportPaths": "report_document",
    "write_profile_report": "profile_report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wattlab.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(f"wattlab.analysis.{module}"), name)
