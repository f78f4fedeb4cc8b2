"""The estimates people use today, which the second reference paper shows miss badly.

- ML CO2 Impact: E = TDP x duration x GPUs.
- Green Algorithms: E = (TDP x GPUs x mean GPU utilisation + RAM_GB x 0.3725 W) x duration.
- FLOPs-based (wattlab's own construction, not a published method: the reference paper uses
  FLOPs only as a correlate of energy): duration = 3 x forward FLOPs x samples / (GPUs x
  rate x utilisation), E = duration x TDP x GPUs, where the rate is the precision's dense peak
  capped at ``PRECISION_SPEEDUP_CAP`` x the FP32 peak.

TDP is the GPU's maximum (default) power limit, per GPU, as NVML reports it (runs record it as
``gpu_tdp_w``); ``gpu_tdp_w`` overrides the spec table's value everywhere. Every function
returns an ``Estimate``: a number with the assumptions that made it in ``notes``, or ``error``
saying in one sentence why the method cannot apply (``estimate.estimates``, imported here
too). Bad values raise ConfigError.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from wattlab.errors import ConfigError, DataError
from wattlab.estimate.estimates import Estimate, cannot_apply, made
from wattlab.estimate.specs import GpuSpec, lookup_gpu, peak_flops
from wattlab.monitor.carbon import CarbonSettings

__all__ = ["Estimate", "cannot_apply", "made"]  # and the baselines below

RAM_W_PER_GB = 0.3725  # Green Algorithms' memory power, W per GB
TRAINING_FLOPS_FACTOR = 3.0  # forward + backward (about 2x forward) per sample
DEFAULT_FLOPS_UTILIZATION = 0.3  # assumed fraction of the dense peak rate actually achieved
# A reduced precision's dense peak is up to 14.8x the FP32 peak (H200 BF16), but measured
# training speed-ups are far smaller: NVIDIA's mixed-precision guide reports 1.5-3x for
# convnets, and wattlab's H200 reference runs measured 0.9x for mobilenet_v2 at 32x32
# (amp-bf16 against fp32, batch 256 and 512).
# The FLOPs estimate caps the precision's rate at this multiple of the FP32 rate.
PRECISION_SPEEDUP_CAP = 2.0


def _check_positive(name: str, value: float, *, whole: bool = False) -> None:
    ok = isinstance(value, numbers.Real) and math.isfinite(value) and value > 0
    if ok and whole:
        ok = float(value) == int(value)
    if not ok:
        kind = "a positive whole number" if whole else "a positive number"
        raise ConfigError(f"{name} must be {kind}, got {value!r}.")


def _present(value: float | None) -> float | None:
    """``value``, or None when it is missing: None or NaN (a NULL column in a runs table)."""
    if value is None or (isinstance(value, numbers.Real) and math.isnan(value)):
        return None
    return value


def resolve_tdp(
    gpu_tdp_w: float | None, gpu_name: str | None, source: str | None = None
) -> tuple[float, str]:
    """The per-GPU TDP (W) and where it came from: the override (``source`` says what it is,
    e.g. the run's recorded maximum power limit), else the spec table.

    Raises ConfigError when neither is usable (unknown name: close matches and --gpu-tdp).
    """
    if gpu_tdp_w is not None:
        _check_positive("gpu_tdp_w", gpu_tdp_w)
        return float(gpu_tdp_w), f"TDP {gpu_tdp_w:g} W per GPU ({source or 'given'})"
    if not gpu_name:
        from wattlab.estimate.specs import name_a_gpu

        raise ConfigError(f"give {name_a_gpu()}; or the GPU's maximum power with --gpu-tdp W.")
    spec = lookup_gpu(gpu_name)
    return spec.tdp_w, f"TDP {spec.tdp_w:g} W per GPU ({spec.name} datasheet)"


def _check_duration(duration_s: float | None) -> None:
    if duration_s is None:
        return
    if not (isinstance(duration_s, numbers.Real) and math.isfinite(duration_s)) or duration_s < 0:
        raise ConfigError(f"duration_s must be a number of seconds >= 0, got {duration_s!r}.")


def ml_co2_impact(
    *,
    duration_s: float | None,
    gpus: int = 1,
    gpu_tdp_w: float | None = None,
    gpu_name: str | None = None,
    carbon: CarbonSettings | None = None,
    duration_note: str = "",
    tdp_source: str | None = None,
) -> Estimate:
    """ML CO2 Impact calculator: E = TDP x duration x GPUs. Units: J. ``tdp_source`` says what
    ``gpu_tdp_w`` is (the paper uses the GPU's maximum power limit)."""
    method = "ml-co2-impact"
    _check_positive("gpus", gpus, whole=True)
    _check_duration(duration_s)
    tdp_w, tdp_note = resolve_tdp(gpu_tdp_w, gpu_name, tdp_source)
    if duration_s is None:
        return cannot_apply(method, "it needs the training duration (give --duration-s)")
    notes = f"{tdp_note}; {gpus} GPU(s) at full TDP for {duration_s:.0f} s{duration_note}"
    return made(method, tdp_w * duration_s * gpus, duration_s, notes, carbon)


def green_algorithms(
    *,
    duration_s: float | None,
    gpus: int = 1,
    gpu_tdp_w: float | None = None,
    gpu_name: str | None = None,
    gpu_utilization_percent: float | None = None,
    ram_gb: float | None = None,
    ram_w_per_gb: float = RAM_W_PER_GB,
    carbon: CarbonSettings | None = None,
    duration_note: str = "",
    tdp_source: str | None = None,
    utilization_basis: str = "sampled",
    include_ram: bool = True,
) -> Estimate:
    """Green Algorithms: E = (TDP x GPUs x utilisation + RAM_GB x 0.3725 W) x duration. Units: J.

    Utilisation is the mean GPU utilisation over the budget when known, else 100 % (said in
    notes); ``utilization_basis`` says how it was obtained (the paper averages samples taken
    every 0.5-1 s; see ``mean_sampled_utilization``). The memory term uses ``ram_gb`` (the
    host's installed memory in wattlab's runs table); when unknown, or with
    ``include_ram=False`` (a GPU-only target), it is left out and the notes say so. The CPU term
    of the original tool is not used (as in the reference paper); PUE enters through the CO2e
    settings. ``tdp_source`` says what ``gpu_tdp_w`` is (the paper: the maximum power limit).
    """
    method = "green-algorithms"
    _check_positive("gpus", gpus, whole=True)
    _check_duration(duration_s)
    tdp_w, tdp_note = resolve_tdp(gpu_tdp_w, gpu_name, tdp_source)
    if duration_s is None:
        return cannot_apply(method, "it needs the training duration (give --duration-s)")
    utilization_percent = _present(gpu_utilization_percent)
    if utilization_percent is None:
        utilization, util_note = 1.0, "GPU utilisation unknown, 100 % assumed"
    else:
        if not 0 <= utilization_percent <= 100:
            raise ConfigError(
                f"gpu_utilization_percent must be within 0-100, got {utilization_percent!r}."
            )
        utilization = utilization_percent / 100.0
        util_note = f"mean GPU utilisation {utilization_percent:.0f} % ({utilization_basis})"
    ram_size_gb = _present(ram_gb)
    if not include_ram:
        ram_w, ram_note = 0.0, "memory term left out (GPU-only target)"
    elif ram_size_gb is None:
        ram_w, ram_note = 0.0, "RAM size unknown, memory term left out"
    else:
        if not ram_size_gb >= 0:
            raise ConfigError(f"ram_gb must be a number >= 0, got {ram_size_gb!r}.")
        ram_w = ram_size_gb * ram_w_per_gb
        ram_note = f"{ram_size_gb:g} GB RAM x {ram_w_per_gb} W/GB = {ram_w:.1f} W"
    power_w = tdp_w * gpus * utilization + ram_w
    notes = f"{tdp_note}; {util_note}; {ram_note}; for {duration_s:.0f} s{duration_note}"
    return made(method, power_w * duration_s, duration_s, notes, carbon)


def flops_based(
    *,
    samples: float,
    precision: str,
    gpus: int = 1,
    gpu_name: str | None = None,
    gpu_tdp_w: float | None = None,
    forward_flops_per_sample: float | None = None,
    model: str | None = None,
    stem: str = "cifar",
    image_size: int = 32,
    utilization: float = DEFAULT_FLOPS_UTILIZATION,
    carbon: CarbonSettings | None = None,
    speedup_cap: float = PRECISION_SPEEDUP_CAP,
    tdp_source: str | None = None,
) -> Estimate:
    """FLOPs-based: E = (3 x forward FLOPs x samples) / (GPUs x rate x utilisation) x TDP x GPUs.

    wattlab's own construction: the reference paper uses FLOPs only as a correlate of energy,
    never as an estimator, and its notes say so. The rate is the precision's dense peak, capped
    at ``speedup_cap`` x the FP32 peak (peak ratios alone would credit BF16 on an H200 with
    14.8x less time and energy).

    Forward FLOPs per image come from ``forward_flops_per_sample`` (FLOP) or are counted on
    ``model`` with torch.utils.flop_counter (one forward pass); backward is taken as 2x forward.
    The peak is the spec table's dense rate at ``precision``; ``utilization`` (default 0.3) is
    an assumption, flagged in the notes. The duration is the method's own prediction. Units: J.
    """
    method = "flops"
    _check_positive("gpus", gpus, whole=True)
    _check_positive("samples", samples)
    if not (isinstance(utilization, numbers.Real) and 0 < utilization <= 1):
        raise ConfigError(f"the FLOPs utilisation must be in (0, 1], got {utilization!r}.")
    if not (isinstance(speedup_cap, numbers.Real) and speedup_cap >= 1):
        raise ConfigError(f"the precision speed-up cap must be a number >= 1, got {speedup_cap!r}.")
    spec: GpuSpec | None = None
    if gpu_name:
        try:
            spec = lookup_gpu(gpu_name)
        except ConfigError:
            if gpu_tdp_w is None:
                raise
    if spec is None:
        return cannot_apply(
            method,
            f"it needs the GPU's peak FLOP/s from the spec table, and {gpu_name!r} is not in it"
            if gpu_name
            else "it needs the GPU's peak FLOP/s, so give a --gpu-name from the spec table",
        )
    tdp_w, tdp_note = resolve_tdp(gpu_tdp_w, spec.name, tdp_source)
    if forward_flops_per_sample is None:
        if not model:
            return cannot_apply(method, "it needs the model (or its forward FLOPs per sample)")
        from wattlab.estimate.features import model_cost

        forward_flops_per_sample = model_cost(
            model, stem=stem, image_size=image_size
        ).forward_flops_per_sample
        flops_note = f"{model} forward {forward_flops_per_sample / 1e9:.3g} GFLOP/image (counted)"
    else:
        _check_positive("forward_flops_per_sample", forward_flops_per_sample)
        flops_note = f"forward {forward_flops_per_sample / 1e9:.3g} GFLOP/image (recorded)"
    peak = peak_flops(spec, precision)
    fp32_peak = spec.fp32_tflops * 1e12
    rate = min(peak, speedup_cap * fp32_peak)
    training_flops = TRAINING_FLOPS_FACTOR * forward_flops_per_sample * samples
    duration_s = training_flops / (gpus * rate * utilization)
    fallback = "" if spec.supports(precision) else f" (no {precision} path: FP32 rate)"
    capped = ""
    if rate < peak:
        capped = (
            f", capped at {speedup_cap:g}x the FP32 rate (its peak is {peak / fp32_peak:.1f}x; "
            "measured training speed-ups are far smaller)"
        )
    notes = (
        "wattlab's own construction, not a published method; "
        f"{flops_note}; training = 3 x forward x {samples:.0f} samples = "
        f"{training_flops:.3g} FLOP; "
        f"{gpus} GPU(s) at {rate / 1e12:g} TFLOP/s {precision}{fallback}{capped} x ASSUMED "
        f"{utilization:.0%} utilisation -> {duration_s:.0f} s; {tdp_note} for that duration"
    )
    return made(method, duration_s * tdp_w * gpus, duration_s, notes, carbon)


def mean_sampled_utilization(
    t_s: Sequence[float], utilization_percent: Sequence[float], start_s: float, end_s: float
) -> float:
    """Time-weighted mean of sampled GPU utilisation (%) over the window [start_s, end_s], as
    Green Algorithms' utilisation in the reference paper (samples every 0.5-1 s over the run).
    Each sample holds until the next one. Raises DataError when no sample falls in the window."""
    import numpy as np

    times = np.asarray(t_s, dtype=float)
    values = np.asarray(utilization_percent, dtype=float)
    if times.shape != values.shape or times.ndim != 1:
        raise DataError("utilisation samples need one time per value.")
    if not end_s > start_s:
        raise DataError(f"the window must end after it starts, got {start_s!r}-{end_s!r} s.")
    order = np.argsort(times, kind="stable")
    times, values = times[order], values[order]
    inside = (times >= start_s) & (times < end_s) & np.isfinite(values)
    if not inside.any():
        raise DataError(f"no utilisation sample falls in the window {start_s:g}-{end_s:g} s.")
    earlier = np.flatnonzero((times < start_s) & np.isfinite(values))
    points_t = times[inside]
    points_v = values[inside]
    if earlier.size:  # the last sample before the window holds at its start
        points_t = np.r_[start_s, points_t]
        points_v = np.r_[values[earlier[-1]], points_v]
    edges = np.r_[points_t, end_s]
    weights = np.diff(edges)
    return float(np.sum(weights * points_v) / np.sum(weights))
