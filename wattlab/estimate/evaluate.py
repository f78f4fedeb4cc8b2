"""Every estimation method side by side: for a configuration before it runs (``estimate_all``),
and against measured runs (``evaluate_methods``, ``write_evaluation``).

Evaluation follows the reference paper: for each measured ok run, each method predicts the
budget's total energy. ML CO2 Impact and Green Algorithms get the run's measured duration (as
the paper does); the FLOPs baseline predicts its own duration; STEP projects from the run's
epoch windows once ``project_after`` consecutive stable epochs are seen (its window), and its
power-based twin multiplies their mean power by the measured duration; PRE predicts each run
from a model fitted without any run of that run's configuration (leave one configuration out).
Runs a method cannot handle are listed with the reason, never silently dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.carbon import CarbonSettings
from wattlab.errors import ConfigError, DataError, WattlabError
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
from wattlab.estimate.features import (
    CIFAR_TRAIN_SIZE,
    DEFAULT_IMAGE_SIZE,
    default_samples,
    model_cost,
)
from wattlab.estimate.pre import FAMILIES, PreModel, fit_pre, training_table
from wattlab.estimate.specs import PRECISIONS, lookup_gpu
from wattlab.step_projection import StepProjector

EVALUATED_METHODS = ("ml-co2-impact", "green-algorithms", "flops", "step", "step-power", "pre")


# ---------------------------------------------------------------------------------------------
# Before a run: every method for one configuration


def _positive(name: str, value: Any, *, whole: bool = False) -> None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (number > 0 and math.isfinite(number)) or (whole and number != int(number)):
        kind = "a positive whole number" if whole else "a positive number"
        raise ConfigError(f"{name} must be {kind}, got {value!r}.")


def estimate_all(
    *,
    model: str,
    gpus: int,
    precision: str,
    epochs: float,
    gpu_name: str | None = None,
    batch_size: int = 256,
    stem: str = "cifar",
    image_size: int = DEFAULT_IMAGE_SIZE,
    train_size: int = CIFAR_TRAIN_SIZE,
    power_limit_w: float | None = None,
    duration_s: float | None = None,
    gpu_tdp_w: float | None = None,
    ram_gb: float | None = None,
    gpu_utilization_percent: float | None = None,
    runs_df: pd.DataFrame | None = None,
    pre_model: PreModel | None = None,
    flops_utilization: float = DEFAULT_FLOPS_UTILIZATION,
    carbon: CarbonSettings | None = None,
) -> list[Estimate]:
    """Every method's estimate for a configuration that has not run (what ``wattlab estimate``
    prints). Order: ML CO2 Impact, Green Algorithms, FLOPs, STEP, PRE.

    ``duration_s``: the expected training time; without it the duration baselines use PRE's
    predicted duration, else the FLOPs estimate's (their notes say which). ``runs_df``: measured
    runs to fit PRE on (or pass a fitted ``pre_model``). ``gpu_tdp_w`` overrides the table's TDP
    and lets an unlisted GPU through (FLOPs and PRE then say they cannot apply).
    Bad values (negative epochs, unknown GPU without --gpu-tdp, a model that cannot be built)
    raise ConfigError.
    """
    _positive("epochs", epochs)
    _positive("gpus", gpus, whole=True)
    _positive("batch_size", batch_size, whole=True)
    _positive("train_size", train_size, whole=True)
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    if duration_s is not None:
        _positive("duration_s", duration_s)
    if not gpu_name and gpu_tdp_w is None:
        raise ConfigError("give the GPU's name (--gpu-name) or its maximum power (--gpu-tdp W).")
    spec_name = None
    if gpu_name:
        try:
            spec_name = lookup_gpu(gpu_name).name
        except ConfigError:
            if gpu_tdp_w is None:
                raise
    cost = model_cost(model, stem=stem, image_size=image_size)
    samples = default_samples(epochs, train_size, batch_size)
    if samples <= 0:
        raise ConfigError(
            f"batch_size {batch_size} leaves no full batch in a training set of {train_size}."
        )

    pre = _pre_estimate(
        spec_name=spec_name,
        gpu_name=gpu_name,
        runs_df=runs_df,
        pre_model=pre_model,
        carbon=carbon,
        config={
            "model": model,
            "gpus": gpus,
            "precision": precision,
            "epochs": epochs,
            "gpu_name": spec_name or "",
            "batch_size": batch_size,
            "stem": stem,
            "image_size": image_size,
            "train_size": train_size,
            "power_limit_w": power_limit_w,
            "gpu_tdp_w": gpu_tdp_w,
            "gflops_per_sample": cost.gflops_per_sample,
            "params": cost.params,
            "samples": samples,
        },
    )
    flops = flops_based(
        samples=samples,
        precision=precision,
        gpus=gpus,
        gpu_name=gpu_name,
        gpu_tdp_w=gpu_tdp_w,
        forward_flops_per_sample=cost.forward_flops_per_sample,
        utilization=flops_utilization,
        carbon=carbon,
    )
    if flops.ok:
        flops.notes = flops.notes.replace("(recorded)", f"({model}, counted)")
    if duration_s is not None:
        used_duration, duration_note = float(duration_s), " (duration given)"
    elif pre.ok:
        used_duration, duration_note = pre.duration_s, " (duration predicted by PRE)"
    elif flops.ok:
        used_duration, duration_note = flops.duration_s, " (duration from the FLOPs estimate)"
    else:
        used_duration, duration_note = None, ""
    common = {"gpus": gpus, "gpu_tdp_w": gpu_tdp_w, "gpu_name": spec_name or gpu_name}
    return [
        ml_co2_impact(
            duration_s=used_duration, carbon=carbon, duration_note=duration_note, **common
        ),
        green_algorithms(
            duration_s=used_duration,
            gpu_utilization_percent=gpu_utilization_percent,
            ram_gb=ram_gb,
            carbon=carbon,
            duration_note=duration_note,
            **common,
        ),
        flops,
        cannot_apply(
            "step",
            "STEP projects from measured epochs, so it runs during training "
            "(wattlab run --project-after K), not before",
        ),
        pre,
    ]


def _pre_estimate(
    *,
    spec_name: str | None,
    gpu_name: str | None,
    runs_df: pd.DataFrame | None,
    pre_model: PreModel | None,
    carbon: CarbonSettings | None,
    config: dict[str, Any],
) -> Estimate:
    if spec_name is None:
        return cannot_apply(
            "pre", f"PRE needs the GPU's specs from the table, and {gpu_name!r} is not in it"
        )
    if pre_model is None:
        if runs_df is None:
            return cannot_apply(
                "pre", "PRE needs measured runs to learn from: give --db FILE or --data CSV"
            )
        try:
            pre_model = fit_pre(runs_df)
        except DataError as error:
            return cannot_apply("pre", str(error))
    prediction = pre_model.predict_config(**config)
    # the prediction's own notes say what it extrapolates (model, precision, batch, GPU transfer)
    notes = "; ".join(n for n in (prediction.notes, pre_model.describe()) if n)
    return made(
        "pre",
        prediction.energy_j,
        prediction.duration_s,
        notes,
        carbon,
        energy_low_j=prediction.energy_low_j,
        energy_high_j=prediction.energy_high_j,
    )


def format_estimates(estimates: list[Estimate]) -> str:
    """A plain-text table of estimates, one method per line, for the CLI to print."""
    lines = [
        f"{'method':<20} {'energy kJ':>10} {'interval kJ':>17} {'duration s':>11} "
        f"{'CO2e kg':>8} {'CO2e range kg':>15}  notes"
    ]
    for estimate in estimates:
        if not estimate.ok:
            lines.append(
                f"{estimate.label:<20} {'n/a':>10} {'':>17} {'':>11} {'':>8} {'':>15}  "
                f"cannot apply: {estimate.error}"
            )
            continue
        interval = ""
        if estimate.energy_low_j is not None and estimate.energy_high_j is not None:
            interval = f"{estimate.energy_low_j / 1e3:.1f}-{estimate.energy_high_j / 1e3:.1f}"
        low, high = estimate.co2e_range_kg() or (math.nan, math.nan)
        duration = f"{estimate.duration_s:.0f}" if estimate.duration_s is not None else ""
        lines.append(
            f"{estimate.label:<20} {estimate.energy_j / 1e3:>10.1f} {interval:>17} "
            f"{duration:>11} {estimate.co2e.value_kg:>8.3g} {f'{low:.3g}-{high:.3g}':>15}  "
            f"{estimate.notes}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Against measured runs


@dataclass
class EvaluationResult:
    """Per-run predictions, per-method error metrics and what was left out, with why.

    ``predictions``: run_id, label, config_hash, method, predicted_j, measured_j, low_j, high_j,
    error_percent (signed). ``metrics``: method -> n, rmse_j, mape_percent, mdape_percent,
    bias_percent, excluded. ``excluded``: run_id, method, reason.
    """

    predictions: pd.DataFrame
    metrics: dict[str, dict[str, Any]]
    excluded: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, keyed by method name (plus ``settings``)."""
        out: dict[str, Any] = {"settings": self.settings, "methods": {}}
        for method in EVALUATED_METHODS:
            metrics = dict(self.metrics.get(method, {}))
            excluded = self.excluded[self.excluded["method"] == method]
            metrics["label"] = METHOD_LABELS[method]
            metrics["excluded_runs"] = [
                {"run_id": _json_value(r.run_id), "reason": r.reason} for r in excluded.itertuples()
            ]
            rows = self.predictions[self.predictions["method"] == method]
            metrics["predictions"] = [
                {k: _json_value(v) for k, v in row.items() if k != "method"}
                for row in rows.to_dict("records")
            ]
            out["methods"][method] = metrics
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _json_value(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    return value


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


def _metrics(predicted: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    if predicted.size == 0:
        return {
            "n": 0,
            "rmse_j": None,
            "mape_percent": None,
            "mdape_percent": None,
            "bias_percent": None,
        }
    errors = predicted - measured
    percent = errors / measured * 100.0
    return {
        "n": int(predicted.size),
        "rmse_j": float(np.sqrt(np.mean(errors**2))),
        "mape_percent": float(np.mean(np.abs(percent))),
        "mdape_percent": float(np.median(np.abs(percent))),
        "bias_percent": float(np.mean(percent)),
    }


def _step_estimates(
    run: dict[str, Any], epochs_df: pd.DataFrame, window: int, tolerance: float
) -> tuple[Estimate, Estimate]:
    total_epochs = _get(run, "epochs")
    if total_epochs is None or not float(total_epochs) > 0:
        reason = "the run recorded no epoch count"
        return cannot_apply("step", reason), cannot_apply("step-power", reason)
    rows = epochs_df.sort_values("epoch")
    if len(rows) < window + 1 or float(total_epochs) < window + 1:
        reason = (
            f"the run has {len(rows)} measured epochs of {float(total_epochs):g}; STEP needs "
            f"more than its {window}-epoch window"
        )
        return cannot_apply("step", reason), cannot_apply("step-power", reason)
    projector = StepProjector(float(total_epochs), window=window, tolerance=tolerance)
    projection = None
    for energy_j, duration_s in zip(rows["energy_total_j"], rows["duration_s"], strict=True):
        try:
            projection = projector.add_epoch(float(energy_j), float(duration_s))
        except WattlabError as error:
            reason = str(error).rstrip(".")
            return cannot_apply("step", reason), cannot_apply("step-power", reason)
        if projection is not None:
            break
    if projection is None or not projection.ok:
        reason = projection.error if projection is not None else projector.result().error
        return cannot_apply("step", reason or "not stable"), cannot_apply(
            "step-power", reason or "not stable"
        )
    last_used = projection.stable_epoch + projection.window_epochs - 1
    if last_used >= float(total_epochs):
        reason = (
            f"the first stable window ends at epoch {last_used}, the run's last, so nothing is "
            "left to project"
        )
        return cannot_apply("step", reason), cannot_apply("step-power", reason)
    where = (
        f"stable from epoch {projection.stable_epoch}, window {projection.window_epochs} epochs, "
        f"projected after epoch {projection.epochs_seen} of {float(total_epochs):g}"
    )
    step = made(
        "step",
        projection.energy_j,
        projection.duration_s,
        where,
        energy_low_j=projection.energy_low_j,
        energy_high_j=projection.energy_high_j,
    )
    duration_s = _get(run, "duration_s")
    before_s = projection.duration_before_s or 0.0
    if duration_s is None or not float(duration_s) > before_s:
        power = cannot_apply("step-power", "the run has no measured duration")
    else:
        power_j = projection.energy_before_j + projection.mean_power_w * (
            float(duration_s) - before_s
        )
        power = made(
            "step-power",
            power_j,
            float(duration_s),
            f"{projection.mean_power_w:.0f} W window mean x measured duration; {where}",
        )
    return step, power


def _baseline_estimates(run: dict[str, Any], flops_utilization: float) -> list[Estimate]:
    if _get(run, "device") == "cpu":
        reason = "a CPU run: the GPU-based baselines do not apply"
        return [cannot_apply(m, reason) for m in ("ml-co2-impact", "green-algorithms", "flops")]
    gpu_name = _get(run, "gpu_name")
    gpu_tdp_w = _get(run, "gpu_tdp_w")
    gpus = int(_get(run, "gpus") or 1)
    duration_s = _get(run, "duration_s")
    common = {
        "gpus": gpus,
        "gpu_tdp_w": None if gpu_tdp_w is None else float(gpu_tdp_w),
        "gpu_name": None if gpu_name is None else str(gpu_name),
    }
    out = []
    calls = (
        (
            "ml-co2-impact",
            lambda: ml_co2_impact(
                duration_s=None if duration_s is None else float(duration_s),
                duration_note=" (measured duration)",
                **common,
            ),
        ),
        (
            "green-algorithms",
            lambda: green_algorithms(
                duration_s=None if duration_s is None else float(duration_s),
                gpu_utilization_percent=_get(run, "gpu_utilization_percent"),
                ram_gb=_get(run, "ram_gb"),
                duration_note=" (measured duration)",
                **common,
            ),
        ),
        ("flops", lambda: _flops_for_run(run, common, flops_utilization)),
    )
    for method, call in calls:
        try:
            out.append(call())
        except WattlabError as error:
            out.append(cannot_apply(method, str(error).rstrip(".")))
    return out


def _flops_for_run(run: dict[str, Any], common: dict[str, Any], utilization: float) -> Estimate:
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


def _pre_loco(
    runs: pd.DataFrame, search_iter: int, families: tuple[str, ...], min_configs: int
) -> tuple[dict[Any, Estimate], dict[Any, str]]:
    """Leave-one-configuration-out PRE predictions, by runs index."""
    estimates: dict[Any, Estimate] = {}
    excluded: dict[Any, str] = {}
    usable, features, left_out = training_table(runs)
    excluded.update({i: f"PRE has no features for it: {r}" for i, r in left_out.items()})
    if "config_hash" in usable and usable["config_hash"].notna().all():
        groups = usable["config_hash"].astype(str)
    else:
        groups = features.drop(columns=["feature_error"]).astype(str).agg("|".join, axis=1)
    for group in pd.unique(groups):
        held_out = groups.index[groups == group]
        try:
            model = fit_pre(
                usable.drop(index=held_out),
                search_iter=search_iter,
                families=families,
                min_configs=min_configs,
            )
        except DataError as error:
            for index in held_out:
                excluded[index] = f"{str(error).rstrip('.')} once its own configuration is held out"
            continue
        predicted = model.predict(features.loc[held_out])
        for index, row in predicted.iterrows():
            estimates[index] = made(
                "pre",
                row["energy_j"],
                row["duration_s"],
                f"fitted without this configuration; {model.describe()}",
                energy_low_j=row["energy_low_j"],
                energy_high_j=row["energy_high_j"],
            )
    return estimates, excluded


def evaluate_methods(
    runs_df: pd.DataFrame,
    windows_df: pd.DataFrame,
    *,
    project_after: int = 2,
    tolerance: float = 0.05,
    flops_utilization: float = DEFAULT_FLOPS_UTILIZATION,
    target_column: str = "energy_total_j",
    pre_search_iter: int = 4,
    pre_families: tuple[str, ...] = FAMILIES,
    pre_min_configs: int = 4,
) -> EvaluationResult:
    """Each method's prediction of each measured ok run's budget energy, and its errors.

    ``project_after``: the number of consecutive stable epochs STEP waits for (its window).
    ``target_column``: the measured energy to compare with (``energy_total_j``: every component;
    ``energy_gpu_j``: the GPUs only, closer to what the baselines model). Units: J.
    """
    if target_column not in runs_df:
        raise DataError(f"the runs table has no column {target_column!r} to evaluate against.")
    id_column = "id" if "id" in runs_df else "run_id"
    if id_column not in runs_df:
        raise DataError("the runs table needs an 'id' (or 'run_id') column.")
    status = runs_df["status"] if "status" in runs_df else pd.Series("ok", index=runs_df.index)
    target = pd.to_numeric(runs_df[target_column], errors="coerce")
    runs = runs_df[(status == "ok") & (target > 0)]
    if runs.empty:
        raise DataError(f"there are no ok runs with a measured {target_column} to evaluate.")
    if len(windows_df):
        needed = ("run_id", "name", "epoch", "duration_s", "energy_total_j")
        missing = [c for c in needed if c not in windows_df]
        if missing:
            raise DataError(f"the windows table lacks the columns {', '.join(missing)}.")
    epochs = windows_df[windows_df["name"] == "epoch"] if len(windows_df) else windows_df

    pre_estimates, pre_excluded = _pre_loco(
        runs, pre_search_iter, tuple(pre_families), pre_min_configs
    )
    prediction_rows: list[dict[str, Any]] = []
    excluded_rows: list[dict[str, Any]] = []
    for index, series in runs.iterrows():
        run = series.to_dict()
        run_id = run[id_column]
        measured = float(run[target_column])
        run_epochs = epochs[epochs["run_id"] == run_id] if len(epochs) else epochs
        estimates = _baseline_estimates(run, flops_utilization)
        if len(run_epochs):
            estimates.extend(_step_estimates(run, run_epochs, project_after, tolerance))
        else:
            reason = "the run has no epoch windows"
            estimates.extend([cannot_apply("step", reason), cannot_apply("step-power", reason)])
        if index in pre_estimates:
            estimates.append(pre_estimates[index])
        else:
            estimates.append(cannot_apply("pre", pre_excluded.get(index, "not predicted")))
        for estimate in estimates:
            if not estimate.ok:
                excluded_rows.append(
                    {"run_id": run_id, "method": estimate.method, "reason": estimate.error}
                )
                continue
            prediction_rows.append(
                {
                    "run_id": run_id,
                    "label": _get(run, "label"),
                    "config_hash": _get(run, "config_hash"),
                    "method": estimate.method,
                    "predicted_j": estimate.energy_j,
                    "measured_j": measured,
                    "low_j": estimate.energy_low_j,
                    "high_j": estimate.energy_high_j,
                    "error_percent": (estimate.energy_j - measured) / measured * 100.0,
                }
            )
    predictions = pd.DataFrame(
        prediction_rows,
        columns=[
            "run_id",
            "label",
            "config_hash",
            "method",
            "predicted_j",
            "measured_j",
            "low_j",
            "high_j",
            "error_percent",
        ],
    )
    excluded = pd.DataFrame(excluded_rows, columns=["run_id", "method", "reason"])
    metrics = {}
    for method in EVALUATED_METHODS:
        rows = predictions[predictions["method"] == method]
        metrics[method] = _metrics(
            rows["predicted_j"].to_numpy(dtype=float), rows["measured_j"].to_numpy(dtype=float)
        )
        metrics[method]["excluded"] = int((excluded["method"] == method).sum())
    provenances = sorted({str(p) for p in runs.get("provenance", pd.Series(dtype=object)).dropna()})
    settings = {
        "runs": int(len(runs)),
        "target_column": target_column,
        "measured_provenance": provenances,
        "step_window_epochs": project_after,
        "step_tolerance": tolerance,
        "flops_utilization": flops_utilization,
        "pre_search_iter": pre_search_iter,
        "pre_families": list(pre_families),
    }
    return EvaluationResult(predictions, metrics, excluded, settings)


def _kj(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e3:.2f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def evaluation_markdown(result: EvaluationResult) -> str:
    """The evaluation as a Markdown table with the settings and the exclusions."""
    settings = result.settings
    lines = [
        "# Energy estimation methods against measured runs",
        "",
        f"{settings.get('runs', '?')} measured ok runs; target `{settings.get('target_column')}` "
        f"(provenance: {', '.join(settings.get('measured_provenance') or ['unknown'])}).",
        "",
        "| method | n | RMSE (kJ) | MAPE | median APE | bias | excluded |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for method in EVALUATED_METHODS:
        m = result.metrics.get(method, {})
        lines.append(
            f"| {METHOD_LABELS[method]} | {m.get('n', 0)} | {_kj(m.get('rmse_j'))} | "
            f"{_pct(m.get('mape_percent'))} | {_pct(m.get('mdape_percent'))} | "
            f"{_pct(m.get('bias_percent'))} | {m.get('excluded', 0)} |"
        )
    lines += [
        "",
        "How: ML CO2 Impact and Green Algorithms use each run's measured duration and recorded "
        "TDP (NVML default power limit); the FLOPs baseline predicts its duration from 3 x "
        f"forward FLOPs at {settings.get('flops_utilization', 0.3):.0%} of the dense peak "
        "(an assumption); STEP projects once "
        f"{settings.get('step_window_epochs')} consecutive epochs are stable within "
        f"{settings.get('step_tolerance', 0.05):.0%}; STEP (power-based) multiplies that "
        "window's mean power by the measured duration; PRE is fitted without the run's own "
        "configuration (leave one configuration out). Bias is the mean signed error.",
    ]
    if len(result.excluded):
        lines += ["", "## Left out", "", "| method | runs | reason |", "| --- | ---: | --- |"]
        grouped = result.excluded.groupby(["method", "reason"], sort=False).size()
        for (method, reason), count in grouped.items():
            lines.append(f"| {METHOD_LABELS.get(method, method)} | {count} | {reason} |")
    return "\n".join(lines) + "\n"


def write_evaluation(result: EvaluationResult, out_dir: str | Path) -> dict[str, Path]:
    """Write evaluation.md, evaluation.json and predicted-vs-measured.png/.svg to ``out_dir``;
    returns the paths by kind ("markdown", "json", "png", "svg")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "evaluation.md",
        "json": out / "evaluation.json",
        "png": out / "predicted-vs-measured.png",
        "svg": out / "predicted-vs-measured.svg",
    }
    paths["markdown"].write_text(evaluation_markdown(result), encoding="utf-8")
    paths["json"].write_text(result.to_json() + "\n", encoding="utf-8")

    fig, ax = plt.subplots(figsize=(6.5, 6.0))
    predictions = result.predictions
    markers = dict(zip(EVALUATED_METHODS, "os^DvP", strict=True))
    if predictions.empty:
        ax.text(
            0.5, 0.5, "no predictions to plot", ha="center", va="center", transform=ax.transAxes
        )
    else:
        for method in EVALUATED_METHODS:
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
    ax.set_xlabel(f"measured energy, kJ ({result.settings.get('target_column')})")
    ax.set_ylabel("predicted energy, kJ (estimated)")
    ax.set_title("Energy estimates against measurements")
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=150)
    fig.savefig(paths["svg"])
    plt.close(fig)
    return paths


__all__ = [
    "EVALUATED_METHODS",
    "EvaluationResult",
    "estimate_all",
    "evaluate_methods",
    "evaluation_markdown",
    "format_estimates",
    "write_evaluation",
]
