"""Which share of the energy in a set of runs was measured, sampled or estimated, per
component kind (GPU, CPU, DRAM/RAM, other), read from each run's ``components_json``.

A component is ``"<kind>:<id>"`` (``gpu:0``, ``cpu:package-0``, ``dram:0``, ``ram:estimated``)
with its ``energy_j`` and ``provenance``; components kept out of the total (``in_total``
false, e.g. psys) are left out. A run without usable components counts as one ``total``
component with the run's own ``energy_total_j`` and ``provenance``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from wattlab.analysis.runs_table import as_float, ok_runs, parse_json_cell

KINDS = ("gpu", "cpu", "dram", "other", "total")
KIND_NAMES = {
    "gpu": "GPU",
    "cpu": "CPU",
    "dram": "DRAM/RAM",
    "other": "other",
    "total": "whole-run totals",
}
PROVENANCES = ("measured", "sampled", "estimated", "unknown")


def _kind(component: object) -> str:
    kind = str(component).split(":", 1)[0]
    kind = {"ram": "dram"}.get(kind, kind)
    return kind if kind in ("gpu", "cpu", "dram") else "other"


def _provenance(value: object) -> str:
    return value if isinstance(value, str) and value in PROVENANCES else "unknown"


def _run_parts(row: Mapping[str, Any]) -> list[tuple[str, str, float]]:
    """(kind, provenance, energy_j) of one run's components (a runs-table row or a dict)."""
    parts: list[tuple[str, str, float]] = []
    for name, info in (parse_json_cell(row.get("components_json")) or {}).items():
        if not isinstance(info, dict) or info.get("in_total") is False:
            continue
        energy_j = as_float(info.get("energy_j"), math.nan)
        if math.isfinite(energy_j) and energy_j >= 0:
            parts.append((_kind(name), _provenance(info.get("provenance")), energy_j))
    if parts:
        return parts
    total_j = as_float(row.get("energy_total_j"), math.nan)
    if math.isfinite(total_j) and total_j >= 0:
        return [("total", _provenance(row.get("provenance")), total_j)]
    return []


MEASURED_PROVENANCES = ("measured", "sampled")  # from a counter or from sampled power


def measured_share(rows: Iterable[Mapping[str, Any]]) -> float:
    """The share of these runs' energy that a counter or sampled power gave (0 when every
    figure was estimated, or there is no energy). ``rows``: runs-table rows or dicts."""
    parts = [p for row in rows for p in _run_parts(row)]
    total_j = sum(e for _, _, e in parts)
    measured_j = sum(e for _, prov, e in parts if prov in MEASURED_PROVENANCES)
    return measured_j / total_j if total_j > 0 else 0.0


def energy_shares(runs: pd.DataFrame) -> dict[str, Any]:
    """Shares (fractions of all energy of the ok runs) by provenance and by component kind.

    Returns ``total_j``; ``by_provenance`` ({provenance: share}); ``by_component``
    ({kind: {"energy_j", "share", "by_provenance": {provenance: share of all energy}}}).
    Shares are None when there is no energy at all."""
    sums: dict[tuple[str, str], float] = {}
    for _, row in ok_runs(runs).iterrows():
        for kind, prov, energy_j in _run_parts(row):
            sums[(kind, prov)] = sums.get((kind, prov), 0.0) + energy_j
    total_j = sum(sums.values())

    def share(x: float) -> float | None:
        return x / total_j if total_j > 0 else None

    by_provenance = {
        p: share(sum(v for (_, q), v in sums.items() if q == p))
        for p in PROVENANCES
        if any(q == p for _, q in sums)
    }
    by_component: dict[str, Any] = {}
    for kind in KINDS:
        mine = {p: v for (k, p), v in sums.items() if k == kind}
        if not mine:
            continue
        energy_j = sum(mine.values())
        by_component[kind] = {
            "energy_j": energy_j,
            "share": share(energy_j),
            "by_provenance": {p: share(v) for p, v in mine.items()},
        }
    return {"total_j": total_j, "by_provenance": by_provenance, "by_component": by_component}


def _pct(share: float) -> str:
    return f"{share * 100:.1f} %"


def describe_shares(shares: dict[str, Any]) -> str:
    """One sentence: which share of the energy was measured, sampled and estimated, and from
    which components, e.g. "96.0 % of the energy was measured (GPU 96.0 %); 4.0 % was
    estimated (CPU 3.0 %, DRAM/RAM 1.0 %)"."""
    parts = []
    for prov in PROVENANCES:
        total = shares["by_provenance"].get(prov)
        if total is None or total <= 0:
            continue
        comps = [
            f"{KIND_NAMES[k]} {_pct(c['by_provenance'][prov])}"
            for k, c in shares["by_component"].items()
            if (c["by_provenance"].get(prov) or 0) > 0
        ]
        verb = "of unknown origin" if prov == "unknown" else prov
        parts.append(f"{_pct(total)} was {verb} ({', '.join(comps)})")
    if not parts:
        return "no energy was recorded."
    return "of the energy in this report, " + "; ".join(parts) + "."
