"""Every estimation method for a configuration before it runs: ``estimate_all`` (what
``wattlab estimate`` prints: each registered method that predicts before training, in the
registry's order) and ``format_estimates`` (its plain-text table). Scoring the methods against
measured runs lives in ``wattlab.estimate.evaluate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from wattlab.errors import ConfigError
from wattlab.estimate import methods as registry
from wattlab.estimate.baselines import DEFAULT_FLOPS_UTILIZATION, Estimate
from wattlab.estimate.features import (
    CIFAR_TRAIN_SIZE,
    DEFAULT_IMAGE_SIZE,
    default_samples,
    model_cost,
)
from wattlab.estimate.methods.base import PlannedRun
from wattlab.estimate.pre import PreModel
from wattlab.estimate.specs import lookup_gpu
from wattlab.monitor.carbon import CarbonSettings
from wattlab.train.config import PRECISIONS


def _positive(name: str, value: float, *, whole: bool = False) -> None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (number > 0 and math.isfinite(number)) or (whole and number != int(number)):
        kind = "a positive whole number" if whole else "a positive number"
        raise ConfigError(f"{name} must be {kind}, got {value!r}.")


def estimate_all(
    *,
    model: str | None = None,
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
    pre_fit: Callable[[], tuple[PreModel | None, str]] | None = None,
    flops_utilization: float = DEFAULT_FLOPS_UTILIZATION,
    carbon: CarbonSettings | None = None,
    model_factory: str | None = None,
) -> list[Estimate]:
    """Every method's estimate for a configuration that has not run (what ``wattlab estimate``
    prints): each method of ``wattlab.estimate.methods`` with a ``predict``, in the registry's
    order (ML CO2 Impact, Green Algorithms, FLOPs, STEP, PRE).

    ``duration_s``: the expected training time; without it the duration baselines use PRE's
    predicted duration, else the FLOPs estimate's (their notes say which). ``runs_df``: measured
    runs to fit PRE on, or a fitted ``pre_model``, or ``pre_fit``: called once the configuration
    has been checked, it returns the model, or None and why PRE cannot be fitted (for example
    ``pre_cache.fit_reference``, which keeps the fit on disk). ``gpu_tdp_w`` overrides
    the table's TDP and lets an unlisted GPU through (FLOPs and PRE then say they cannot apply).
    ``model``: any torchvision classification name; or give ``model_factory`` (``FILE.py:FUNC``
    or ``package.module:FUNC``, called as ``FUNC(num_classes=10)``) instead. The model's
    features are counted from the module at ``image_size``.
    Bad values (negative epochs, unknown GPU without --gpu-tdp, a model that cannot be built,
    a factory whose module does not give 10 logits) raise ConfigError.
    """
    model = _model_name(model, model_factory)
    _positive("epochs", epochs)
    _positive("gpus", gpus, whole=True)
    _positive("batch_size", batch_size, whole=True)
    _positive("train_size", train_size, whole=True)
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    if duration_s is not None:
        _positive("duration_s", duration_s)
    if not gpu_name and gpu_tdp_w is None:
        from wattlab.estimate.specs import name_a_gpu

        raise ConfigError(f"give {name_a_gpu()}; or the GPU's maximum power with --gpu-tdp W.")
    spec_name = None
    if gpu_name:
        try:
            spec_name = lookup_gpu(gpu_name).name
        except ConfigError:
            if gpu_tdp_w is None:
                raise
    _positive("image_size", image_size, whole=True)
    if ":" in model:  # a factory: the same checks as wattlab run makes before training
        from wattlab.train.models import check_model

        check_model(model, stem=stem, num_classes=10, image_size=int(image_size))
    cost = model_cost(model, stem=stem, image_size=image_size)
    samples = default_samples(epochs, train_size, batch_size)
    if samples <= 0:
        raise ConfigError(
            f"batch_size {batch_size} leaves no full batch in a training set of {train_size}."
        )

    planned = PlannedRun(
        model=model,
        gpus=gpus,
        precision=precision,
        epochs=epochs,
        batch_size=batch_size,
        stem=stem,
        image_size=image_size,
        train_size=train_size,
        samples=samples,
        gpu_name=gpu_name,
        spec_name=spec_name,
        gpu_tdp_w=gpu_tdp_w,
        power_limit_w=power_limit_w,
        duration_s=duration_s,
        ram_gb=ram_gb,
        gpu_utilization_percent=gpu_utilization_percent,
        forward_flops_per_sample=cost.forward_flops_per_sample,
        params=cost.params,
        flops_utilization=flops_utilization,
        carbon=carbon,
        runs_df=runs_df,
        pre_model=pre_model,
        pre_fit=pre_fit,
        cost_source=cost.source,
        method_of=registry.get,
    )
    return [planned.estimate_of(method.name) for method in registry.predicting()]


def _model_name(model: str | None, model_factory: str | None) -> str:
    """The name a configuration's model goes by: the torchvision name or the factory ref."""
    if model_factory is not None:
        if model is not None and model != model_factory:
            raise ConfigError("give --model or --model-factory, not both.")
        if ":" not in model_factory:
            raise ConfigError(
                f"--model-factory must be FILE.py:FUNC or package.module:FUNC, got "
                f"{model_factory!r}."
            )
        return model_factory
    if model is None:
        raise ConfigError("give a model: --model NAME or --model-factory FILE.py:FUNC.")
    return model


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
        # an estimate that applied has both (made() sets them)
        assert estimate.energy_j is not None and estimate.co2e is not None
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


__all__ = ["estimate_all", "format_estimates"]
