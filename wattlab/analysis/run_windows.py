"""The whole of each run, from its stored ``run`` window, beside its budget window.

A built-in run's ``run`` window spans data loading, set-up, the untimed warm-up, the budget
window (the timed training every comparison is about) and the final evaluation; a command
run's is the whole process. The budget window alone under-states what a training used, so the
energy statement heads with the run windows and gives the budget beside them.

Each run's parts, in J: ``run_j`` (its ``run`` window; its budget when it stored none: a
callback's run stores its training window only), ``budget_j`` (``energy_total_j``),
``warmup_j`` and ``eval_j`` (those windows; 0 when absent), and ``rest_j`` (the run window less
the three: set-up, data loading and, for a command, its start). The run window's provenance by
share takes each component kind's provenance from the run's own budget components (the same
meters measure both windows).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from wattlab.analysis.energy_shares import run_parts
from wattlab.analysis.runs_table import as_float
from wattlab.experiment.db.stored_run import StoredRun
from wattlab.wording import EnergyParts, and_join, plural, share_text

RUN_WINDOW = "run"
# the windows table's per-kind columns, and the component kinds each holds
WINDOW_KIND_COLUMNS = {
    "energy_gpu_j": ("gpu",),
    "energy_cpu_j": ("cpu",),
    "energy_dram_j": ("dram", "ram"),
    "energy_other_j": ("other", "total"),
}


@dataclass(frozen=True)
class RunWhole:
    """One run's windows (J): see the module docstring. ``has_run_window`` is False when the
    run stored no ``run`` window (then ``run_j`` is its budget)."""

    run_id: int | None
    run_j: float
    budget_j: float
    warmup_j: float
    eval_j: float
    has_run_window: bool
    parts: EnergyParts

    @property
    def rest_j(self) -> float:
        return max(self.run_j - self.budget_j - self.warmup_j - self.eval_j, 0.0)


def _window_energy(rows: pd.DataFrame, name: str) -> float:
    if rows.empty or "name" not in rows.columns:
        return 0.0
    chosen = rows[rows["name"].astype("object") == name]
    values = [as_float(v, math.nan) for v in chosen.get("energy_total_j", [])]
    values = [v for v in values if math.isfinite(v) and v >= 0]
    return float(sum(values))


def _run_window_parts(row: pd.Series, budget: EnergyParts) -> EnergyParts:
    """The run window's energy by kind and provenance: each per-kind column split over the
    provenances the budget's components of those kinds had (in their proportions)."""
    sums: dict[tuple[str, str], float] = {}
    for column, kinds in WINDOW_KIND_COLUMNS.items():
        joules = as_float(row.get(column), math.nan)
        if not math.isfinite(joules) or joules <= 0:
            continue
        known = {key: v for key, v in budget.joules.items() if key[0] in kinds and v > 0}
        total = sum(known.values())
        if total <= 0:  # no budget component of that kind: its origin is not known
            key = (kinds[0], "unknown")
            sums[key] = sums.get(key, 0.0) + joules
            continue
        for key, value in known.items():
            sums[key] = sums.get(key, 0.0) + joules * value / total
    return EnergyParts(sums)


def run_wholes(runs: Iterable[StoredRun], windows: pd.DataFrame | None) -> list[RunWhole]:
    """Each run's :class:`RunWhole`, from ``windows`` (the store's windows table; None or empty
    when there are none)."""
    by_run: dict[int, pd.DataFrame] = {}
    if windows is not None and not windows.empty and "run_id" in windows.columns:
        ids = pd.to_numeric(windows["run_id"], errors="coerce")
        for run_id, group in windows.groupby(ids):
            by_run[int(run_id)] = group
    out = []
    for run in runs:
        budget_j = as_float(run.energy_total_j, 0.0)
        budget_parts = run_parts(run)
        rows = by_run.get(int(run.id), pd.DataFrame()) if run.id is not None else pd.DataFrame()
        whole = (
            rows[rows["name"].astype("object") == RUN_WINDOW] if not rows.empty else rows.iloc[0:0]
        )
        run_j = _window_energy(rows, RUN_WINDOW)
        if whole.empty or run_j <= 0:
            out.append(RunWhole(run.id, budget_j, budget_j, 0.0, 0.0, False, budget_parts))
            continue
        parts = _run_window_parts(whole.iloc[0], budget_parts)
        if abs(parts.total_j - run_j) > 1e-9 * max(run_j, 1.0):  # no per-kind split stored
            parts = EnergyParts({("total", "unknown"): run_j})
        out.append(
            RunWhole(
                run.id,
                run_j,
                budget_j,
                _window_energy(rows, "warmup"),
                _window_energy(rows, "eval"),
                True,
                parts,
            )
        )
    return out


def whole_parts(wholes: Sequence[RunWhole]) -> EnergyParts:
    total = EnergyParts()
    for whole in wholes:
        total = total + whole.parts
    return total


def holds_words(wholes: Sequence[RunWhole]) -> str:
    """What the run windows hold, as shares of their summed energy: "of the run windows' energy,
    the budget window (timed training) held 58.5 %, warm-up 17.6 %, evaluation 5.9 % and set-up,
    data loading and the rest 18.0 %"; with the runs that stored no run window counted (when
    some did); "" when none did."""
    with_window = [w for w in wholes if w.has_run_window]
    total = sum(w.run_j for w in with_window)
    pieces = []
    if with_window and total > 0:
        named = [
            ("the budget window (timed training) held", sum(w.budget_j for w in with_window)),
            ("warm-up", sum(w.warmup_j for w in with_window)),
            ("evaluation", sum(w.eval_j for w in with_window)),
            ("set-up, data loading and the rest", sum(w.rest_j for w in with_window)),
        ]
        shares = [f"{name} {share_text(j / total)}" for name, j in named if j > 0]
        pieces.append(f"of the run windows' energy, {and_join(shares)}")
    without = [w for w in wholes if not w.has_run_window]
    if without and with_window:  # with none, the headline already says it
        who = plural(len(without), "run")
        pieces.append(
            f"{who} stored no run window, so only {'its' if len(without) == 1 else 'their'} "
            "budget (training) window counts for "
            f"{'it' if len(without) == 1 else 'them'}"
        )
    return "; ".join(pieces)
