"""Which share of the energy in a set of runs was measured, sampled or estimated, per
component kind (GPU, CPU, DRAM, RAM, other), read from each run's ``components_json``; the
words are :class:`wattlab.wording.EnergyParts`'.

A component is ``"<kind>:<id>"`` (``gpu:0``, ``cpu:package-0``, ``dram:0``, ``ram:estimated``,
``node-a/gpu:0`` on a multi-node run) with its ``energy_j`` and ``provenance``; components kept
out of the total (``in_total`` false, e.g. psys) are left out. A run without usable components
counts as one ``total`` component with the run's own ``energy_total_j`` and ``provenance``.
Each run is read as a typed :class:`~wattlab.experiment.db.stored_run.StoredRun`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from wattlab.analysis.runs_table import as_float, ok_runs
from wattlab.experiment.db.stored_run import StoredRun
from wattlab.wording import KIND_ORDER, PROVENANCES, EnergyParts


def run_parts(row: StoredRun | Mapping[str, Any]) -> EnergyParts:
    """One run's energy by kind and provenance (a stored run, a runs-table row or a dict)."""
    run = row if isinstance(row, StoredRun) else StoredRun.from_row(row)
    triples = []
    for name, info in (run.components_json or {}).items():
        if not isinstance(info, dict) or info.get("in_total") is False:
            continue
        energy_j = as_float(info.get("energy_j"), math.nan)
        if math.isfinite(energy_j) and energy_j >= 0:
            triples.append((name, info.get("provenance"), energy_j))
    total_j = run.energy_total_j
    if not triples and total_j is not None and math.isfinite(total_j) and total_j >= 0:
        triples.append(("total", run.provenance, total_j))
    return EnergyParts.of_components(triples)


def rows_parts(rows: Iterable[StoredRun | Mapping[str, Any]]) -> EnergyParts:
    """The summed parts of these runs (stored runs, runs-table rows or dicts)."""
    total = EnergyParts()
    for row in rows:
        total = total + run_parts(row)
    return total


def energy_parts(runs: pd.DataFrame) -> EnergyParts:
    """The summed parts of the ok runs of ``runs``."""
    return rows_parts(StoredRun.from_frame(ok_runs(runs)))


def measured_share(rows: Iterable[StoredRun | Mapping[str, Any]]) -> float:
    """The share of these runs' energy that a counter or sampled power gave (0 when every
    figure was estimated, or there is no energy). ``rows``: stored runs, runs-table rows or
    dicts."""
    return rows_parts(rows).measured_share()


def energy_shares(runs: pd.DataFrame) -> dict[str, Any]:
    """Shares (fractions of all energy of the ok runs) by provenance and by component kind.

    Returns ``total_j``; ``by_provenance`` ({provenance: share}); ``by_component``
    ({kind: {"energy_j", "share", "by_provenance": {provenance: share of all energy}}}, kinds
    gpu, cpu, dram, ram, other, total); ``sentence`` (the words, e.g. "96.2 % measured by GPU
    counters, 3.8 % estimated (CPU 3.1 %, RAM 0.7 %)"). Shares are None when there is no
    energy at all."""
    parts = energy_parts(runs)
    total_j = parts.total_j

    def share(x: float) -> float | None:
        return x / total_j if total_j > 0 else None

    present = {p for _, p in parts.joules}
    by_provenance = {p: share(parts.provenance_j(p)) for p in PROVENANCES if p in present}
    by_component: dict[str, Any] = {}
    for kind in KIND_ORDER:
        mine = {p: v for (k, p), v in parts.joules.items() if k == kind}
        if not mine:
            continue
        by_component[kind] = {
            "energy_j": sum(mine.values()),
            "share": share(sum(mine.values())),
            "by_provenance": {p: share(v) for p, v in mine.items()},
        }
    return {
        "total_j": total_j,
        "by_provenance": by_provenance,
        "by_component": by_component,
        "sentence": parts.phrase(detail=True),
    }


def describe_shares(shares: Mapping[str, Any]) -> str:
    """The sentence of :func:`energy_shares`' result (its ``sentence``; rebuilt from the shares
    of an older summary that lacks it)."""
    if shares.get("sentence"):
        return str(shares["sentence"])
    total_j = float(shares.get("total_j") or 0.0)
    joules = {
        (kind, prov): (share or 0.0) * total_j
        for kind, comp in (shares.get("by_component") or {}).items()
        for prov, share in comp["by_provenance"].items()
    }
    return EnergyParts(joules).phrase(detail=True)


def config_parts(runs: pd.DataFrame) -> dict[str, EnergyParts]:
    """Each configuration's summed parts over its ok runs, by ``config_hash``."""
    out: dict[str, EnergyParts] = {}
    for run in StoredRun.from_frame(ok_runs(runs)):
        key = str(run.config_hash)
        out[key] = out.get(key, EnergyParts()) + run_parts(run)
    return out
