"""``evaluate_methods``: check the runs and the settings, hand every chosen method the same
``StoredRuns``, record what the methods that do not learn predict (once, under protocol
``all``), let the protocols refit the ones that learn, and score each protocol."""

from __future__ import annotations

from typing import Any

import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.estimate import methods as registry
from wattlab.estimate.baselines import DEFAULT_FLOPS_UTILIZATION, cannot_apply
from wattlab.estimate.evaluate.protocols import (
    held_out_pass,
    parse_protocols,
    with_derived_columns,
)
from wattlab.estimate.evaluate.result import ONLINE, EvaluationResult, Rows
from wattlab.estimate.evaluate.scoring import protocol_table
from wattlab.estimate.methods.base import EstimationMethod, StoredRuns
from wattlab.estimate.pre import FAMILIES
from wattlab.estimate.targets import TARGETS
from wattlab.step import stored
from wattlab.step.paper import PAPER_STABLE_EPOCH, PAPER_WINDOW_EPOCHS


def evaluate_methods(
    runs_df: pd.DataFrame,
    windows_df: pd.DataFrame,
    *,
    traces_df: pd.DataFrame | None = None,
    target: str = "total",
    protocols: str | tuple[str, ...] | list[str] = ("loco",),
    step_method: str = "wattlab",
    project_after: int = 2,
    tolerance: float = 0.05,
    paper_stable_epoch: int | None = PAPER_STABLE_EPOCH,
    paper_window_epochs: int = PAPER_WINDOW_EPOCHS,
    flops_utilization: float = DEFAULT_FLOPS_UTILIZATION,
    pre_search_iter: int = 4,
    pre_families: tuple[str, ...] = FAMILIES,
    pre_min_configs: int = 4,
    target_column: str | None = None,
    marks_fraction: float = stored.DEFAULT_FRACTION,
    only: tuple[str, ...] | None = None,
) -> EvaluationResult:
    """Each method's prediction of each measured ok run's budget energy, and its errors.

    ``target``: "total", "gpu" or "paper" (see ``TARGETS``); ``target_column`` (the old
    spelling: "energy_total_j" / "energy_gpu_j") is accepted too. ``protocols``: any of "loco",
    "lomo", "lopo", "lofo", "lobo", "logo" or "all". ``step_method``: "wattlab", "paper", "marks" or
    "both". ``project_after`` and ``tolerance``: wattlab's STEP rule (window and stability
    tolerance). ``paper_stable_epoch`` (s; None: from FLUSS on the trace) and
    ``paper_window_epochs`` (w): the published rule. ``traces_df``: the ``trace`` table (run_id,
    t_s, component, power_w), for FLUSS. ``marks_fraction``: the share of the budget after which
    ``step-marks`` (the live step-level rule, ``wattlab.estimate.step_marks``) projects from the
    stored marks; its calibrated interval is fitted without the run's group under each protocol.
    ``only``: score just these of ``step_method``'s methods (PRE is fitted only when it is one).
    Units: J.
    """
    if not (isinstance(marks_fraction, (int, float)) and 0 < marks_fraction < 1):
        raise ConfigError(f"the marks fraction must be in (0, 1), got {marks_fraction!r}.")
    if target_column is not None:
        by_column = {cols[0]: name for name, (cols, _) in TARGETS.items() if len(cols) == 1}
        if target_column not in by_column:
            raise ConfigError(
                f"target_column must be one of {', '.join(by_column)}, got {target_column!r}."
            )
        target = by_column[target_column]
    if target not in TARGETS:
        raise ConfigError(f"the target must be one of {', '.join(TARGETS)}, got {target!r}.")
    chosen_protocols = parse_protocols(protocols)
    methods = registry.methods_for(step_method)
    if only is not None:
        unknown = [m for m in only if m not in methods]
        if unknown or not only:
            raise ConfigError(
                f"only must name methods of the STEP method {step_method!r}, got {list(only)!r}."
            )
        methods = tuple(m for m in methods if m in only)
    columns, target_text = TARGETS[target]
    missing = [c for c in columns if c not in runs_df]
    if missing:
        raise DataError(
            f"the runs table has no column {', '.join(missing)} for the target {target!r}."
        )
    id_column = "id" if "id" in runs_df else "run_id"
    if id_column not in runs_df:
        raise DataError("the runs table needs an 'id' (or 'run_id') column.")
    status = runs_df["status"] if "status" in runs_df else pd.Series("ok", index=runs_df.index)
    measured_all = (
        runs_df[list(columns)]
        .apply(pd.to_numeric, errors="coerce")
        .sum(axis=1, min_count=len(columns))
    )
    runs = with_derived_columns(runs_df[(status == "ok") & (measured_all > 0)])
    without_target = int(((status == "ok") & ~(measured_all > 0)).sum())
    if runs.empty:
        raise DataError(f"there are no ok runs with a measured {' + '.join(columns)} to evaluate.")
    if len(windows_df):
        needed = ("run_id", "name", "epoch", "duration_s")
        absent = [c for c in needed if c not in windows_df]
        if absent:
            raise DataError(f"the windows table lacks the columns {', '.join(absent)}.")
    epochs = windows_df[windows_df["name"] == "epoch"] if len(windows_df) else windows_df
    gpu_trace = None
    if traces_df is not None and len(traces_df):
        gpu_trace = traces_df[traces_df["component"].astype(str) == "gpu:0"]

    settings: dict[str, Any] = {
        "runs": int(len(runs)),
        "runs_without_target": without_target,
        "target": target,
        "target_columns": list(columns),
        "target_covers": target_text,
        "target_column": columns[0] if len(columns) == 1 else " + ".join(columns),
        "protocols": chosen_protocols,
        "step_method": step_method,
        "methods": list(methods),
        "step_window_epochs": project_after,
        "step_tolerance": tolerance,
        "marks_fraction": marks_fraction,
        "paper_stable_epoch": paper_stable_epoch,
        "paper_window_epochs": paper_window_epochs,
        "flops_utilization": flops_utilization,
        "pre_search_iter": pre_search_iter,
        "pre_families": list(pre_families),
        "measured_provenance": sorted(
            {str(p) for p in runs.get("provenance", pd.Series(dtype=object)).dropna()}
        ),
        "target_modelled_share": _modelled_share(runs, columns),
    }
    given = StoredRuns(
        runs=runs,
        epochs=epochs,
        gpu_trace=gpu_trace,
        target=target,
        columns=columns,
        measured=measured_all.loc[runs.index],
        id_column=id_column,
        settings={**settings, "pre_min_configs": pre_min_configs},
    )
    chosen = [registry.get(name) for name in methods]
    rows = Rows()
    _online_pass(given, [m for m in chosen if not m.learns], rows)
    learners = []
    for method in (m for m in chosen if m.learns):
        reason = method.refuses(target)
        if reason is None:
            learners.append(method)
            continue
        # it cannot predict this target at all: left out once, whatever the protocol
        for _, run in given.each():
            rows.record(run, run[id_column], ONLINE, cannot_apply(method.name, reason), 1.0)
    held_out_pass(given, learners, chosen_protocols, rows)

    predictions, excluded = rows.frames()
    tables = {
        protocol: protocol_table(predictions, excluded, protocol, methods)
        for protocol in chosen_protocols
    }
    metrics = {m: tables[chosen_protocols[0]]["methods"][m]["own"] for m in methods}
    return EvaluationResult(predictions, metrics, excluded, settings, tables)


def _online_pass(given: StoredRuns, online: list[EstimationMethod], rows: Rows) -> None:
    """What the methods that do not learn across runs predict, recorded once under protocol
    ``all``, run by run."""
    made = {}
    for method in online:
        reason = method.refuses(given.target)
        made[method.name] = (
            {index: cannot_apply(method.name, reason) for index in given.runs.index}
            if reason is not None
            else method.evaluate(given, None)
        )
    for index, run in given.each():
        measured = float(given.measured.loc[index])
        for method in online:
            estimate = made[method.name].get(index) or cannot_apply(method.name, "not predicted")
            rows.record(run, run[given.id_column], ONLINE, estimate, measured)


def _modelled_share(runs: pd.DataFrame, columns: tuple[str, ...]) -> dict[str, Any] | None:
    """How much of the target is not GPU energy (CPU and RAM: modelled where no RAPL counter
    was read): the median and largest share over the runs, or None for the GPU target."""
    if columns == ("energy_gpu_j",) or "energy_gpu_j" not in runs:
        return None
    target = runs[list(columns)].apply(pd.to_numeric, errors="coerce").sum(axis=1)
    gpu = pd.to_numeric(runs["energy_gpu_j"], errors="coerce")
    share = ((target - gpu) / target).dropna()
    if share.empty:
        return None
    return {
        "median_percent": float(share.median() * 100),
        "max_percent": float(share.max() * 100),
        "runs": int(len(share)),
    }


__all__ = ["evaluate_methods"]
