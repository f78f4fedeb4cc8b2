"""Every estimation method scored against measured runs: one target, one set of runs, three
protocols (``evaluate_methods``, ``evaluation_markdown``, ``write_evaluation``).

- **Target** (``TARGETS``): the energy every method predicts *and* is measured against:
  ``total`` (every measured component), ``gpu`` (the GPUs), or ``paper`` (GPU + RAM, the
  reference paper's target). STEP projects the target's own per-epoch energies; PRE is fitted on
  the target; Green Algorithms drops its RAM term for ``gpu``. ML CO2 Impact and the FLOPs
  estimate model the GPU only, whatever the target (``covers`` says what each prediction
  includes).
- **Protocols** (``PROTOCOLS``): PRE, which learns from other runs, is fitted without the
  held-out run's configuration (``loco``), model (``lomo``), precision (``lopo``),
  architecture family (``lofo``: ``families.model_family`` of the model name) or batch size
  (``lobo``: every run at that batch size); so is the
  calibrated interval of step-level STEP (``step-marks``), whose point estimate does not learn.
  The other methods do not learn across runs, so their predictions are the same under every
  protocol, and they are scored on the same rows as PRE.
- **Common runs**: each protocol's headline metrics are over the runs that every method with
  at least one prediction could handle, and the count is reported. Each method's metrics over
  all the runs it could handle are kept beside them ("own").
- **STEP**: ``step_method`` "wattlab" (default: ``wattlab.step.epochs``' rule),
  "paper" (``wattlab.step.paper``: s and w as published), "marks" (the live
  step-level rule replayed from stored marks after ``marks_fraction`` of the budget,
  ``wattlab.estimate.step_marks``) or "both" (all of them). The epoch rules have their
  power-based twin, the paper's formula: window mean power of the target x the run's measured
  duration.

Metrics: RMSE (J), MAPE, median APE and mean signed error (bias) in %, and the coverage of the
stated interval (the share of runs with an interval whose measured value lies inside it).
Runs a method cannot handle are listed with the reason, never silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from wattlab.errors import ConfigError, DataError, WattlabError
from wattlab.estimate import step_marks
from wattlab.estimate.baselines import (
    DEFAULT_FLOPS_UTILIZATION,
    METHOD_LABELS,
    Estimate,
    cannot_apply,
    flops_based,
    green_algorithms,
    made,
    ml_co2_impact,
)
from wattlab.estimate.families import model_family
from wattlab.estimate.features import DEFAULT_IMAGE_SIZE
from wattlab.estimate.pre import FAMILIES, fit_pre, training_table
from wattlab.jsonio import jsonable
from wattlab.step import stored
from wattlab.step.epochs import StepProjector
from wattlab.step.paper import PAPER_STABLE_EPOCH, PAPER_WINDOW_EPOCHS, step_paper_project

EVALUATED_METHODS = (
    "ml-co2-impact",
    "green-algorithms",
    "flops",
    "step",
    "step-power",
    "step-marks",
    "step-paper",
    "step-paper-power",
    "pre",
)
TARGETS: dict[str, tuple[tuple[str, ...], str]] = {
    "total": (("energy_total_j",), "every measured component (GPU, CPU, RAM, ...)"),
    "gpu": (("energy_gpu_j",), "the GPUs only"),
    "paper": (
        ("energy_gpu_j", "energy_dram_j"),
        "GPU + RAM, the reference paper's target (RAM modelled where RAPL has no DRAM domain)",
    ),
}
PROTOCOLS = {
    "loco": ("config_hash", "leave one configuration out"),
    "lomo": ("model", "leave one model out"),
    "lopo": ("precision", "leave one precision out"),
    "lofo": ("family", "leave one architecture family out"),
    "lobo": ("batch_size", "leave one batch size out"),
}
# protocol columns the runs table does not store, derived from the columns it does
DERIVED_COLUMNS = {"family": ("model", model_family)}
STEP_METHODS = {
    "wattlab": ("step", "step-power"),
    "paper": ("step-paper", "step-paper-power"),
    "marks": ("step-marks",),
    "both": ("step", "step-power", "step-marks", "step-paper", "step-paper-power"),
}
ONLINE = "all"  # the protocol column of predictions that do not depend on the protocol
# What each method reads of the very run it predicts. "oracle" inputs are known only once the
# run has finished (its measured duration, its utilisation sampled over the budget): a method
# given them is not predicting from what was known before or during the run.
METHOD_INPUTS: dict[str, tuple[str, ...]] = {
    "ml-co2-impact": ("oracle: the run's measured duration",),
    "green-algorithms": (
        "oracle: the run's measured duration",
        "oracle: the run's measured GPU utilisation",
    ),
    "flops": ("nothing measured: the run's FLOPs and budget",),
    "step": ("its first epochs, until two are stable",),
    "step-power": ("its first epochs, until two are stable", "oracle: the run's measured duration"),
    "step-marks": ("its step-level marks up to the fraction read",),
    "step-paper": ("its epochs up to s + w - 1",),
    "step-paper-power": ("its epochs up to s + w - 1", "oracle: the run's measured duration"),
    "pre": ("nothing measured: other runs only",),
}


def oracle_inputs(method: str) -> list[str]:
    """The oracle inputs ``method`` is given (empty: none)."""
    return [i.removeprefix("oracle: ") for i in METHOD_INPUTS[method] if i.startswith("oracle: ")]


def methods_for(step_method: str) -> tuple[str, ...]:
    """The methods an evaluation with ``step_method`` scores, in table order."""
    if step_method not in STEP_METHODS:
        raise ConfigError(
            f"the STEP method must be one of {', '.join(STEP_METHODS)}, got {step_method!r}."
        )
    chosen = set(STEP_METHODS[step_method]) | {"ml-co2-impact", "green-algorithms", "flops", "pre"}
    return tuple(m for m in EVALUATED_METHODS if m in chosen)


def covers(method: str, target: str) -> str:
    """Which components ``method``'s prediction includes for ``target``."""
    if method in ("ml-co2-impact", "flops"):
        return "gpu"
    if method == "green-algorithms":
        return "gpu" if target == "gpu" else "gpu+ram"
    return {"total": "total", "gpu": "gpu", "paper": "gpu+ram"}[target]


# ---------------------------------------------------------------------------------------------
# Result


@dataclass
class EvaluationResult:
    """Per-run predictions, per-protocol metrics and what was left out, with why.

    ``predictions``: run_id, label, config_hash, model, precision, protocol ("all" for methods
    that do not learn across runs, else the PRE protocol), method, predicted_j, measured_j,
    low_j, high_j, error_percent (signed), notes. ``protocols``: protocol -> {"label",
    "common_runs", "common_methods", "methods": method -> metrics on the common runs, with
    "own": metrics on every run the method handled}. ``metrics``: the first protocol's "own"
    metrics by method (n, rmse_j, mape_percent, mdape_percent, bias_percent, coverage_percent,
    interval_runs, excluded). ``excluded``: run_id, protocol, method, reason.
    """

    predictions: pd.DataFrame
    metrics: dict[str, dict[str, Any]]
    excluded: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    protocols: dict[str, dict[str, Any]] = field(default_factory=dict)
    # STEP rules at equal information (``equal_information.compare``): one row per fraction
    equal_information: list[dict[str, Any]] = field(default_factory=list)

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.settings.get("methods", EVALUATED_METHODS))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``settings``, ``protocols`` (the common-run tables) and ``methods`` (each
        method's own-run metrics, exclusions and predictions under the first protocol)."""
        first = self.settings.get("protocols", ["loco"])[0]
        out: dict[str, Any] = {"settings": self.settings, "protocols": self.protocols}
        if self.equal_information:
            out["equal_information"] = self.equal_information
        out["methods"] = {}
        for method in self.methods:
            metrics = dict(self.metrics.get(method, {}))
            metrics["label"] = METHOD_LABELS[method]
            metrics["covers"] = covers(method, self.settings.get("target", "total"))
            metrics["inputs"] = list(METHOD_INPUTS[method])
            metrics["oracle_inputs"] = oracle_inputs(method)
            excluded = self.excluded[
                (self.excluded["method"] == method)
                & self.excluded["protocol"].isin([ONLINE, first])
            ]
            metrics["excluded_runs"] = [
                {"run_id": r.run_id, "reason": r.reason} for r in excluded.itertuples()
            ]
            rows = self.predictions[
                (self.predictions["method"] == method)
                & self.predictions["protocol"].isin([ONLINE, first])
            ]
            metrics["predictions"] = [
                {k: v for k, v in row.items() if k not in ("method", "protocol")}
                for row in rows.to_dict("records")
            ]
            out["methods"][method] = metrics
        return jsonable(out)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# ---------------------------------------------------------------------------------------------
# Scoring


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _get(run: dict[str, Any], name: str) -> Any:
    value = run.get(name)
    return None if _missing(value) else value


def score(rows: pd.DataFrame) -> dict[str, Any]:
    """Error metrics of prediction rows (predicted_j, measured_j, low_j, high_j). Units: J, %."""
    predicted = rows["predicted_j"].to_numpy(dtype=float)
    measured = rows["measured_j"].to_numpy(dtype=float)
    if predicted.size == 0:
        return {
            "n": 0,
            "rmse_j": None,
            "mape_percent": None,
            "mdape_percent": None,
            "bias_percent": None,
            "coverage_percent": None,
            "coverage_ci_percent": None,
            "interval_runs": 0,
            "median_read_percent": None,
        }
    read = (
        pd.to_numeric(rows["read_fraction"], errors="coerce").to_numpy(dtype=float)
        if "read_fraction" in rows
        else np.full(predicted.size, np.nan)
    )
    errors = predicted - measured
    percent = errors / measured * 100.0
    low = pd.to_numeric(rows["low_j"], errors="coerce").to_numpy(dtype=float)
    high = pd.to_numeric(rows["high_j"], errors="coerce").to_numpy(dtype=float)
    has = np.isfinite(low) & np.isfinite(high)
    inside = (low[has] <= measured[has]) & (measured[has] <= high[has])
    return {
        "n": int(predicted.size),
        "rmse_j": float(np.sqrt(np.mean(errors**2))),
        "mape_percent": float(np.mean(np.abs(percent))),
        "mdape_percent": float(np.median(np.abs(percent))),
        "bias_percent": float(np.mean(percent)),
        "coverage_percent": float(inside.mean() * 100.0) if has.any() else None,
        "coverage_ci_percent": (
            [100.0 * x for x in coverage_interval(int(inside.sum()), int(has.sum()))]
            if has.any()
            else None
        ),
        "interval_runs": int(has.sum()),
        "median_read_percent": (
            float(np.median(read[np.isfinite(read)]) * 100) if np.isfinite(read).any() else None
        ),
    }


def coverage_interval(covered: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    """The Clopper-Pearson interval (fractions) of an interval's true coverage, given that it
    covered ``covered`` of ``runs`` held-out runs: how far a coverage measured on few runs can be
    trusted. 13 of 13 gives (0.75, 1.0): it cannot tell a 90 % interval from a wider one."""
    from scipy.stats import beta

    if not 0 <= covered <= runs or runs <= 0:
        raise ValueError(f"need 0 <= covered <= runs and runs > 0, got {covered} of {runs}")
    tail = (1.0 - level) / 2.0
    low = 0.0 if covered == 0 else float(beta.ppf(tail, covered, runs - covered + 1))
    high = 1.0 if covered == runs else float(beta.ppf(1.0 - tail, covered + 1, runs - covered))
    return low, high


# ---------------------------------------------------------------------------------------------
# Per-run predictions


def _target_value(row: dict[str, Any] | pd.Series, columns: tuple[str, ...]) -> float | None:
    total = 0.0
    for column in columns:
        value = row.get(column) if isinstance(row, dict) else row.get(column, None)
        if value is None or _missing(value):
            return None
        total += float(value)
    return total


def _step_wattlab(
    run: dict[str, Any],
    energies: np.ndarray,
    durations: np.ndarray,
    total_epochs: float,
    window: int,
    tolerance: float,
) -> tuple[Estimate, Estimate]:
    if len(energies) < window + 1 or total_epochs < window + 1:
        reason = (
            f"the run has {len(energies)} measured epochs of {total_epochs:g}; STEP needs "
            f"more than its {window}-epoch window"
        )
        return cannot_apply("step", reason), cannot_apply("step-power", reason)
    projector = StepProjector(total_epochs, window=window, tolerance=tolerance)
    projection = None
    for energy_j, duration_s in zip(energies, durations, strict=True):
        try:
            projection = projector.add_epoch(float(energy_j), float(duration_s))
        except WattlabError as error:
            reason = str(error).rstrip(".")
            return cannot_apply("step", reason), cannot_apply("step-power", reason)
        if projection is not None:
            break
    if (
        projection is None
        or not projection.ok
        or projection.stable_epoch is None
        or projection.energy_j is None
    ):
        said = projection.error if projection is not None else projector.result().error
        reason = said or "not stable"
        return cannot_apply("step", reason), cannot_apply("step-power", reason)
    first = projection.stable_epoch
    last_used = first + projection.window_epochs - 1
    if last_used >= total_epochs:
        reason = (
            f"the first stable window ends at epoch {last_used}, the run's last, so nothing is "
            "left to project"
        )
        return cannot_apply("step", reason), cannot_apply("step-power", reason)
    where = (
        f"wattlab's rule: stable from epoch {first}, window {projection.window_epochs} epochs, "
        f"projected after epoch {projection.epochs_seen} of {total_epochs:g}"
    )
    step = made(
        "step",
        projection.energy_j,
        projection.duration_s,
        where,
        energy_low_j=projection.energy_low_j,
        energy_high_j=projection.energy_high_j,
    )
    read = projection.epochs_seen / total_epochs
    window_power_w = float(
        energies[first - 1 : last_used].sum() / durations[first - 1 : last_used].sum()
    )
    twin = _power_twin("step-power", run, window_power_w, where)
    return replace(step, read_fraction=read), replace(twin, read_fraction=read)


def _power_twin(method: str, run: dict[str, Any], window_power_w: float, where: str) -> Estimate:
    duration_s = _get(run, "duration_s")
    if duration_s is None or not float(duration_s) > 0:
        return cannot_apply(method, "the run has no measured duration")
    return made(
        method,
        window_power_w * float(duration_s),
        float(duration_s),
        f"window mean power {window_power_w:.0f} W x measured duration {float(duration_s):.0f} s "
        f"(the paper's formula); {where}",
    )


def _step_paper(
    run: dict[str, Any],
    energies: np.ndarray,
    durations: np.ndarray,
    total_epochs: float,
    stable_epoch: int | None,
    window: int,
    trace: pd.DataFrame | None,
    epoch_end_s: np.ndarray | None,
) -> tuple[Estimate, Estimate]:
    trace_t = trace_p = None
    if trace is not None and len(trace) and epoch_end_s is not None:
        trace_t = trace["t_s"].to_numpy(dtype=float)
        trace_p = trace["power_w"].to_numpy(dtype=float)
    try:
        result = step_paper_project(
            energies,
            durations,
            total_epochs,
            stable_epoch=stable_epoch,
            window=window,
            trace_t_s=trace_t,
            trace_power_w=trace_p,
            epoch_end_s=epoch_end_s,
        )
    except WattlabError as error:
        reason = str(error).rstrip(".")
        return cannot_apply("step-paper", reason), cannot_apply("step-paper-power", reason)
    if not result.ok or result.energy_j is None or result.mean_power_w is None:
        reason = result.error or "cannot apply"
        return cannot_apply("step-paper", reason), cannot_apply("step-paper-power", reason)
    where = f"published rule: {result.notes}"
    step = made(
        "step-paper",
        result.energy_j,
        result.duration_s,
        where,
        energy_low_j=result.energy_low_j,
        energy_high_j=result.energy_high_j,
    )
    read = min(1.0, (int(result.stable_epoch or 0) + window - 1) / total_epochs)
    twin = _power_twin("step-paper-power", run, float(result.mean_power_w), where)
    return replace(step, read_fraction=read), replace(twin, read_fraction=read)


def _step_estimates(
    run: dict[str, Any],
    epochs: pd.DataFrame,
    columns: tuple[str, ...],
    wanted: tuple[str, ...],
    settings: dict[str, Any],
    trace: pd.DataFrame | None,
) -> list[Estimate]:
    def none(reason: str) -> list[Estimate]:
        return [cannot_apply(m, reason) for m in wanted]

    if not wanted:
        return []
    total_epochs = _get(run, "epochs")
    if total_epochs is None or not float(total_epochs) > 0:
        return none("the run recorded no epoch count")
    if epochs.empty:
        return none("the run has no epoch windows")
    missing = [c for c in columns if c not in epochs]
    if missing:
        return none(f"its epoch windows lack {', '.join(missing)}, the target's per-epoch energy")
    rows = epochs.sort_values("epoch")
    values = rows[list(columns)].apply(pd.to_numeric, errors="coerce")
    if values.isna().any().any():
        return none(f"some of its epoch windows have no {' + '.join(columns)}")
    energies = values.sum(axis=1).to_numpy(dtype=float)
    durations = rows["duration_s"].to_numpy(dtype=float)
    out: list[Estimate] = []
    if "step" in wanted:
        out += _step_wattlab(
            run,
            energies,
            durations,
            float(total_epochs),
            settings["step_window_epochs"],
            settings["step_tolerance"],
        )
    if "step-paper" in wanted:
        ends = None
        if "start_s" in rows and rows["start_s"].notna().all():
            ends = (rows["start_s"] + rows["duration_s"]).to_numpy(dtype=float)
        out += _step_paper(
            run,
            energies,
            durations,
            float(total_epochs),
            settings["paper_stable_epoch"],
            settings["paper_window_epochs"],
            trace,
            ends,
        )
    return out


def _tdp_source(run: dict[str, Any]) -> tuple[float | None, str]:
    """The GPU's maximum power limit as the run recorded it, and what it is."""
    for column, source in (
        ("gpu_max_power_limit_w", "the run's recorded maximum power limit, as in the paper"),
        (
            "gpu_tdp_w",
            "the run's recorded NVML default power limit, which the paper's maximum power "
            "limit equals unless an administrator changed it",
        ),
    ):
        value = _get(run, column)
        if value is not None:
            return float(value), source
    return None, "spec table"


def _utilization(run: dict[str, Any]) -> tuple[float | None, str]:
    value = _get(run, "gpu_utilization_percent")
    basis = _get(run, "gpu_utilization_basis")
    if basis is None:
        basis = (
            "mean of NVML reads at epoch ends; the stored data has no utilisation sampled over "
            "the budget, which the paper averages every 0.5-1 s"
        )
    return value, str(basis)


class _GpuArgs(TypedDict):
    """What the GPU-based baselines are told about a run's GPUs."""

    gpus: int
    gpu_tdp_w: float | None
    gpu_name: str | None
    tdp_source: str | None


def _baseline_estimates(run: dict[str, Any], target: str, flops_utilization: float) -> list:
    methods = ("ml-co2-impact", "green-algorithms", "flops")
    if _get(run, "device") == "cpu":
        reason = "a CPU run: the GPU-based baselines do not apply"
        return [cannot_apply(m, reason) for m in methods]
    gpu_name = _get(run, "gpu_name")
    tdp_w, tdp_source = _tdp_source(run)
    gpus = int(_get(run, "gpus") or 1)
    duration_s = _get(run, "duration_s")
    duration_s = None if duration_s is None else float(duration_s)
    common: _GpuArgs = {
        "gpus": gpus,
        "gpu_tdp_w": tdp_w,
        "gpu_name": None if gpu_name is None else str(gpu_name),
        "tdp_source": tdp_source if tdp_w is not None else None,
    }
    utilization, basis = _utilization(run)
    calls = (
        lambda: ml_co2_impact(
            duration_s=duration_s, duration_note=" (measured duration)", **common
        ),
        lambda: green_algorithms(
            duration_s=duration_s,
            gpu_utilization_percent=utilization,
            utilization_basis=basis,
            ram_gb=_get(run, "ram_gb"),
            include_ram=target != "gpu",
            duration_note=" (measured duration)",
            **common,
        ),
        lambda: _flops_for_run(run, common, flops_utilization),
    )
    out = []
    for method, call in zip(methods, calls, strict=True):
        try:
            out.append(call())
        except WattlabError as error:
            out.append(cannot_apply(method, str(error).rstrip(".")))
    return out


def _flops_for_run(run: dict[str, Any], common: _GpuArgs, utilization: float) -> Estimate:
    samples = _get(run, "samples")
    precision = _get(run, "precision")
    if samples is None or precision is None:
        return cannot_apply("flops", "the run recorded no samples or precision")
    gflops = _get(run, "model_gflops_per_sample")
    model = _get(run, "model")
    return flops_based(
        samples=float(samples),
        precision=str(precision),
        forward_flops_per_sample=None if gflops is None else float(gflops) * 1e9,
        model=None if model is None else str(model),
        stem=str(_get(run, "stem") or "cifar"),
        image_size=int(_get(run, "image_size") or DEFAULT_IMAGE_SIZE),
        utilization=utilization,
        **common,
    )


def _pre_held_out(
    runs: pd.DataFrame,
    target_columns: tuple[str, ...],
    protocol: str,
    search_iter: int,
    families: tuple[str, ...],
    min_configs: int,
) -> tuple[dict[Any, Estimate], dict[Any, str]]:
    """PRE's prediction of each run from a model fitted without the run's group (its
    configuration, model or precision), by runs index. PRE is fitted on the target: the
    target's energy stands in for ``energy_total_j`` in the runs it learns from."""
    estimates: dict[Any, Estimate] = {}
    excluded: dict[Any, str] = {}
    learn = runs.copy()
    learn["energy_total_j"] = runs[list(target_columns)].apply(pd.to_numeric).sum(axis=1)
    try:
        usable, features, left_out = training_table(learn)
    except DataError as error:
        return estimates, {index: str(error).rstrip(".") for index in runs.index}
    excluded.update({i: f"PRE has no features for it: {r}" for i, r in left_out.items()})
    column, what = PROTOCOLS[protocol]
    if column in usable and usable[column].notna().all():
        groups = usable[column].astype(str)
    elif protocol == "loco":
        groups = features.drop(columns=["feature_error"]).astype(str).agg("|".join, axis=1)
    else:
        for index in usable.index:
            excluded[index] = f"the runs table has no {column} to {what} by"
        return estimates, excluded
    for group in pd.unique(groups):
        held_out = groups.index[groups == group]
        try:
            model = fit_pre(
                usable.drop(index=held_out),
                search_iter=search_iter,
                families=families,
                min_configs=min_configs,
            )
            predicted = model.predict(features.loc[held_out])
        except (DataError, ValueError) as error:
            for index in held_out:
                excluded[index] = (
                    f"{str(error).rstrip('.')} once its own {column} ({group}) is held out"
                )
            continue
        for index, row in predicted.iterrows():
            estimates[index] = made(
                "pre",
                row["energy_j"],
                row["duration_s"],
                "; ".join(
                    n for n in (f"fitted without this run's {column} ({what})", row["notes"]) if n
                )
                + f"; {model.describe()}",
                energy_low_j=row["energy_low_j"],
                energy_high_j=row["energy_high_j"],
            )
    return estimates, excluded


_PREDICTION_COLUMNS = [
    "run_id",
    "label",
    "config_hash",
    "model",
    "precision",
    "protocol",
    "method",
    "predicted_j",
    "measured_j",
    "low_j",
    "high_j",
    "error_percent",
    "read_fraction",
    "notes",
]


def _row(run: dict[str, Any], run_id: Any, protocol: str, e: Estimate, measured: float) -> dict:
    return {
        "run_id": run_id,
        "label": _get(run, "label"),
        "config_hash": _get(run, "config_hash"),
        "model": _get(run, "model"),
        "precision": _get(run, "precision"),
        "protocol": protocol,
        "method": e.method,
        "predicted_j": e.energy_j,
        "measured_j": measured,
        "low_j": e.energy_low_j,
        "high_j": e.energy_high_j,
        "error_percent": None if e.energy_j is None else (e.energy_j - measured) / measured * 100.0,
        "read_fraction": e.read_fraction,
        "notes": e.notes,
    }


def with_derived_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the protocol columns it lacks derived (``family`` from ``model``)."""
    added = {
        column: runs[source].map(derive)
        for column, (source, derive) in DERIVED_COLUMNS.items()
        if column not in runs and source in runs
    }
    return runs.assign(**added) if added else runs


def _parse_protocols(protocols: str | tuple[str, ...] | list[str]) -> list[str]:
    chosen = [protocols] if isinstance(protocols, str) else list(protocols)
    if chosen == ["all"]:
        return list(PROTOCOLS)
    bad = [p for p in chosen if p not in PROTOCOLS]
    if bad or not chosen:
        raise ConfigError(
            f"the protocol must be one of {', '.join(PROTOCOLS)} or all, got "
            f"{', '.join(map(repr, bad)) or 'none'}."
        )
    return chosen


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
    "lomo", "lopo", "lofo", or "all". ``step_method``: "wattlab", "paper" or "both".
    ``project_after`` and ``tolerance``: wattlab's STEP rule (window and stability tolerance).
    ``paper_stable_epoch`` (s; None: from FLUSS on the trace) and ``paper_window_epochs`` (w):
    the published rule. ``traces_df``: the ``trace`` table (run_id, t_s, component, power_w),
    for FLUSS. ``marks_fraction``: the share of the budget after which ``step-marks`` (the
    live step-level rule, ``wattlab.estimate.step_marks``) projects from the stored marks; its
    calibrated interval is fitted without the run's group under each protocol. ``only``:
    score just these of ``step_method``'s methods (PRE is fitted only when it is one). Units: J.
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
    chosen_protocols = _parse_protocols(protocols)
    methods = methods_for(step_method)
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
    step_wanted = tuple(m for m in methods if m.startswith("step") and m != "step-marks")
    prediction_rows: list[dict[str, Any]] = []
    excluded_rows: list[dict[str, Any]] = []

    def record(run: dict, run_id: Any, protocol: str, estimate: Estimate, measured: float) -> None:
        if estimate.ok:
            prediction_rows.append(_row(run, run_id, protocol, estimate, measured))
        else:
            excluded_rows.append(
                {
                    "run_id": run_id,
                    "protocol": protocol,
                    "method": estimate.method,
                    "reason": estimate.error,
                }
            )

    measured_by_index = measured_all.loc[runs.index]
    for index, series in runs.iterrows():
        run = series.to_dict()
        run_id = run[id_column]
        measured = float(measured_by_index.loc[index])
        run_epochs = epochs[epochs["run_id"] == run_id] if len(epochs) else epochs
        run_trace = None
        if gpu_trace is not None:
            run_trace = gpu_trace[gpu_trace["run_id"] == run_id]
        estimates = [
            e for e in _baseline_estimates(run, target, flops_utilization) if e.method in methods
        ]
        estimates += _step_estimates(run, run_epochs, columns, step_wanted, settings, run_trace)
        for estimate in estimates:
            record(run, run_id, ONLINE, estimate, measured)
    marks = None
    if "step-marks" in methods:
        if target == "total":
            marks = stored.replayed(runs, marks_fraction)
        else:
            reason = (
                "the step-level marks add up every meter in the run's total, so they project "
                "the target total only"
            )
            for _, series in runs.iterrows():
                record(
                    series.to_dict(),
                    series[id_column],
                    ONLINE,
                    cannot_apply("step-marks", reason),
                    1.0,
                )
    for protocol in chosen_protocols:
        if marks is not None:
            column, what = PROTOCOLS[protocol]
            groups = runs[column] if column in runs and runs[column].notna().all() else None
            held = step_marks.held_out_estimates(
                marks, measured_by_index, groups, f"its {column}" if groups is not None else "none"
            )
            for index, series in runs.iterrows():
                projection = marks.get(index)
                seen = getattr(projection, "fraction_seen", None)
                record(
                    series.to_dict(),
                    series[id_column],
                    protocol,
                    replace(held[index], read_fraction=seen),
                    float(measured_by_index.loc[index]),
                )
        if "pre" not in methods:
            continue
        pre, pre_excluded = _pre_held_out(
            runs, columns, protocol, pre_search_iter, tuple(pre_families), pre_min_configs
        )
        for index, series in runs.iterrows():
            run = series.to_dict()
            estimate = pre.get(index) or cannot_apply(
                "pre", pre_excluded.get(index, "not predicted")
            )
            record(run, run[id_column], protocol, estimate, float(measured_by_index.loc[index]))

    predictions = pd.DataFrame(prediction_rows, columns=_PREDICTION_COLUMNS)
    excluded = pd.DataFrame(excluded_rows, columns=["run_id", "protocol", "method", "reason"])
    tables = {
        protocol: _protocol_table(predictions, excluded, protocol, methods)
        for protocol in chosen_protocols
    }
    metrics = {m: tables[chosen_protocols[0]]["methods"][m]["own"] for m in methods}
    return EvaluationResult(predictions, metrics, excluded, settings, tables)


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


def _protocol_table(
    predictions: pd.DataFrame, excluded: pd.DataFrame, protocol: str, methods: tuple[str, ...]
) -> dict[str, Any]:
    rows = predictions[predictions["protocol"].isin([ONLINE, protocol])]
    by_method = {m: rows[rows["method"] == m] for m in methods}
    scored = [m for m in methods if len(by_method[m])]
    common: set[Any] | None = None
    for method in scored:
        ids = set(by_method[method]["run_id"])
        common = ids if common is None else common & ids
    common = common or set()
    out_methods = {}
    for method in methods:
        own = score(by_method[method])
        gone = excluded[
            (excluded["method"] == method) & excluded["protocol"].isin([ONLINE, protocol])
        ]
        own["excluded"] = int(len(gone))
        entry = score(by_method[method][by_method[method]["run_id"].isin(common)])
        entry["own"] = own
        out_methods[method] = entry
    return {
        "label": PROTOCOLS[protocol][1],
        "common_runs": len(common),
        "common_run_ids": sorted(common, key=str),
        "common_methods": scored,
        "unscored_methods": [m for m in methods if m not in scored],
        "methods": out_methods,
    }


# ---------------------------------------------------------------------------------------------
# Outputs


def _kj(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e3:.2f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def evaluation_markdown(result: EvaluationResult) -> str:
    """The evaluation as Markdown: one table per protocol on the common runs, the settings and
    the exclusions."""
    settings = result.settings
    target = settings.get("target", "total")
    lines = [
        "# Energy estimation methods against measured runs",
        "",
        f"{settings.get('runs', '?')} measured ok runs. Target `{target}`: "
        f"{settings.get('target_covers', '')} (`{' + '.join(settings.get('target_columns', []))}`"
        f"; provenance: {', '.join(settings.get('measured_provenance') or ['unknown'])}). "
        "Every method predicts this target, except where *covers* says less.",
    ]
    share = settings.get("target_modelled_share")
    if share:
        lines += [
            "",
            f"The target is not all GPU: a median {share['median_percent']:.1f} % (max "
            f"{share['max_percent']:.1f} %) of it is CPU and RAM energy, modelled where no RAPL "
            "counter was read; `--target gpu` scores the GPUs' counters alone.",
        ]
    for protocol, table in result.protocols.items():
        lines += [
            "",
            f"## {table['label']} ({protocol}): {table['common_runs']} common runs",
            "",
            "Metrics over the runs every scored method could handle; *own n* and *own MAPE* "
            "are over all the runs the method handled.",
            "",
            "| method | covers | n | RMSE (kJ) | MAPE | median APE | bias | interval coverage "
            "| own n | own MAPE | excluded | oracle inputs | budget read |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
            "| ---: |",
        ]
        for method in result.methods:
            m = table["methods"][method]
            own = m["own"]
            coverage = m.get("coverage_percent")
            ci = m.get("coverage_ci_percent")
            coverage_text = (
                "no interval"
                if coverage is None
                else f"{coverage:.0f} % of {m['interval_runs']}"
                + (f" (95 % CI {ci[0]:.0f}-{ci[1]:.0f} %)" if ci else "")
            )
            lines.append(
                f"| {METHOD_LABELS[method]} | {covers(method, target)} | {m['n']} | "
                f"{_kj(m['rmse_j'])} | {_pct(m['mape_percent'])} | {_pct(m['mdape_percent'])} | "
                f"{_pct(m['bias_percent'])} | {coverage_text} | {own['n']} | "
                f"{_pct(own['mape_percent'])} | {own['excluded']} | "
                f"{'; '.join(oracle_inputs(method)) or 'none'} | {_read(m)} |"
            )
        if table["unscored_methods"]:
            names = ", ".join(METHOD_LABELS[m] for m in table["unscored_methods"])
            lines += ["", f"Not in the common set (no run it could handle): {names}."]
    stable = settings.get("paper_stable_epoch")
    marks_fraction = settings.get("marks_fraction", stored.DEFAULT_FRACTION)
    lines += [
        "",
        "How: ML CO2 Impact and Green Algorithms use each run's measured duration and recorded "
        "maximum power limit; the FLOPs estimate (wattlab's own construction) predicts its "
        f"duration from 3 x forward FLOPs at {settings.get('flops_utilization', 0.3):.0%} of "
        "the capped dense peak; STEP (wattlab's rule) projects once "
        f"{settings.get('step_window_epochs')} consecutive epochs are stable within "
        f"{settings.get('step_tolerance', 0.05):.0%}; STEP (published rule) projects from a "
        f"window of w = {settings.get('paper_window_epochs')} epochs starting at s = "
        f"{'the FLUSS stable epoch' if stable is None else stable}; each power-based twin is "
        "the window's mean power x the measured duration; STEP (step-level marks) replays the "
        f"run's stored marks after {marks_fraction:.0%} of the budget, "
        "with a 90 % split-conformal interval from the other groups' errors; PRE is fitted "
        "without the held-out run's group. Bias is the mean signed error.",
    ]
    lines += [
        "",
        "*Oracle inputs* are measured on the very run being predicted and known only "
        "once it has finished; *budget read* is the median share of the run's budget a "
        "method read before predicting (0 % for methods that read none of it).",
    ]
    lines += equal_information_markdown(result.equal_information)
    if len(result.excluded):
        lines += [
            "",
            "## Left out",
            "",
            "| method | protocol | runs | reason |",
            "| --- | --- | ---: | --- |",
        ]
        grouped = result.excluded.groupby(["method", "protocol", "reason"], sort=False).size()
        for (method, protocol, reason), count in grouped.items():
            lines.append(
                f"| {METHOD_LABELS.get(method, method)} | {protocol} | {count} | {reason} |"
            )
    return "\n".join(lines) + "\n"


def _read(metrics: dict[str, Any]) -> str:
    value = metrics.get("median_read_percent")
    return "0 %" if value is None else f"{value:.0f} %"


def equal_information_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines of the equal-information comparison (none without rows)."""
    if not rows:
        return []
    lines = [
        "",
        "## STEP rules at equal information",
        "",
        "Each rule reads the same share of every run's budget: the published rule a window of w "
        "epochs ending at the last epoch read (s = n - w + 1, w = min(5, n - 1): the first epoch "
        "is never in the window), the step-level rule its marks up to the same share. Metrics "
        "over the runs both could handle.",
        "",
        "| share read | epochs read (of all) | published rule: s, w | runs | published MAPE "
        "| step-level MAPE | difference (points) |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        paper, marks = row["published"], row["step_level"]
        difference = (
            "n/a"
            if paper["mape_percent"] is None or marks["mape_percent"] is None
            else f"{marks['mape_percent'] - paper['mape_percent']:+.2f}"
        )
        lines.append(
            f"| {row['fraction']:.1%} | {row['epochs_read']} of {row['epochs']} | "
            f"s = {row['stable_epoch']}, w = {row['window_epochs']} | {row['runs']} | "
            f"{_pct(paper['mape_percent'])} | {_pct(marks['mape_percent'])} | {difference} |"
        )
    return lines


def write_evaluation(result: EvaluationResult, out_dir: str | Path) -> dict[str, Path]:
    """Write evaluation.md, evaluation.json and predicted-vs-measured.png/.svg to ``out_dir``
    (the first protocol's predictions); returns the paths by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wattlab.jsonio import refuse_links_in, write_atomic, write_text_atomic

    out = Path(out_dir)
    paths = {
        "markdown": out / "evaluation.md",
        "json": out / "evaluation.json",
        "png": out / "predicted-vs-measured.png",
        "svg": out / "predicted-vs-measured.svg",
    }
    refuse_links_in(out, [p.name for p in paths.values()], "evaluation")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(paths["markdown"], evaluation_markdown(result))
    write_text_atomic(paths["json"], result.to_json() + "\n")

    first = result.settings.get("protocols", ["loco"])[0]
    predictions = result.predictions[result.predictions["protocol"].isin([ONLINE, first])]
    fig, ax = plt.subplots(figsize=(6.5, 6.0))
    markers = dict(zip(EVALUATED_METHODS, "os^xDvP<>", strict=True))
    if predictions.empty:
        ax.text(
            0.5, 0.5, "no predictions to plot", ha="center", va="center", transform=ax.transAxes
        )
    else:
        for method in result.methods:
            rows = predictions[predictions["method"] == method]
            if rows.empty:
                continue
            rmse = result.metrics[method]["rmse_j"]
            ax.scatter(
                rows["measured_j"] / 1e3,
                rows["predicted_j"] / 1e3,
                marker=markers[method],
                alpha=0.75,
                label=f"{METHOD_LABELS[method]} (RMSE {rmse / 1e3:.1f} kJ, n={len(rows)})",
            )
        values = pd.concat([predictions["measured_j"], predictions["predicted_j"]]) / 1e3
        low, high = float(values.min()) * 0.8, float(values.max()) * 1.25
        ax.plot([low, high], [low, high], color="black", linewidth=1, label="predicted = measured")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlabel(f"measured energy, kJ (target {result.settings.get('target')})")
    ax.set_ylabel("predicted energy, kJ (estimated)")
    ax.set_title(f"Energy estimates against measurements ({first})")
    fig.tight_layout()
    write_atomic(paths["png"], lambda handle: fig.savefig(handle, format="png", dpi=150))
    write_atomic(paths["svg"], lambda handle: fig.savefig(handle, format="svg"))
    plt.close(fig)
    return paths


__all__ = [
    "EVALUATED_METHODS",
    "PROTOCOLS",
    "STEP_METHODS",
    "TARGETS",
    "EvaluationResult",
    "covers",
    "equal_information_markdown",
    "evaluate_methods",
    "evaluation_markdown",
    "methods_for",
    "oracle_inputs",
    "score",
    "write_evaluation",
]
