"""Analysis and reports: turn measured runs into per-configuration tables with CIs, change
against a baseline, GPU scaling, the Pareto front, the operating region, CodeCarbon's error,
and Markdown/HTML reports with figures.

Submodules: ``stats`` (pure functions on DataFrames), ``profiles`` (imported power-limit
profiles), ``plots`` (matplotlib, Agg canvas), ``report`` (report.md/report.html/summary.json).
Nothing is imported until a name is first used, so ``import wattlab.analysis`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "summarize": "stats",
    "scaling_efficiency": "stats",
    "pareto_front": "stats",
    "operating_region": "stats",
    "power_limit_effects": "stats",
    "codecarbon_errors": "stats",
    "summary_to_json": "stats",
    "parse_baseline": "stats",
    "bootstrap_ci": "stats",
    "DEFAULT_MIN_SAVING": "stats",
    "DEFAULT_MAX_PENALTY": "stats",
    "load_zeus_profile": "profiles",
    "analyze_profile": "profiles",
    "write_report": "report",
    "write_profile_report": "report",
    "analyze_runs": "report",
    "ReportPaths": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wattlab.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(f"wattlab.analysis.{module}"), name)
