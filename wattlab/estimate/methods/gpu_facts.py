"""What the GPU-based baselines (ML CO2 Impact, Green Algorithms, the FLOPs estimate) know of a
GPU: from a stored run, its recorded power limit and utilisation; before training, the GPU given
and the expected duration."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypedDict

from wattlab.errors import WattlabError
from wattlab.estimate.baselines import Estimate, cannot_apply
from wattlab.estimate.methods.base import PlannedRun, StoredRuns, value_of

CPU_RUN = "a CPU run: the GPU-based baselines do not apply"


class GpuArgs(TypedDict):
    """What the GPU-based baselines are told about a run's GPUs."""

    gpus: int
    gpu_tdp_w: float | None
    gpu_name: str | None
    tdp_source: str | None


def tdp_source(run: dict[str, Any]) -> tuple[float | None, str]:
    """The GPU's maximum power limit as the run recorded it, and what it is."""
    for column, source in (
        ("gpu_max_power_limit_w", "the run's recorded maximum power limit, as in the paper"),
        (
            "gpu_tdp_w",
            "the run's recorded NVML default power limit, which the paper's maximum power "
            "limit equals unless an administrator changed it",
        ),
    ):
        value = value_of(run, column)
        if value is not None:
            return float(value), source
    return None, "spec table"


def stored_gpu_args(run: dict[str, Any]) -> GpuArgs:
    """A stored run's GPUs as the baselines take them."""
    gpu_name = value_of(run, "gpu_name")
    tdp_w, source = tdp_source(run)
    return {
        "gpus": int(value_of(run, "gpus") or 1),
        "gpu_tdp_w": tdp_w,
        "gpu_name": None if gpu_name is None else str(gpu_name),
        "tdp_source": source if tdp_w is not None else None,
    }


def measured_duration(run: dict[str, Any]) -> float | None:
    """The run's measured duration (s), None when it has none."""
    duration_s = value_of(run, "duration_s")
    return None if duration_s is None else float(duration_s)


def each_gpu_run(
    stored: StoredRuns, method: str, estimate: Callable[[dict[str, Any], GpuArgs], Estimate]
) -> dict[Hashable, Estimate]:
    """``estimate(run, gpu_args)`` of each stored run, by runs index; a CPU run, or one whose
    values the baseline refuses (a WattlabError), gets ``cannot_apply`` and the reason."""
    out: dict[Hashable, Estimate] = {}
    for index, run in stored.each():
        if value_of(run, "device") == "cpu":
            out[index] = cannot_apply(method, CPU_RUN)
            continue
        try:
            out[index] = estimate(run, stored_gpu_args(run))
        except WattlabError as error:
            out[index] = cannot_apply(method, str(error).rstrip("."))
    return out


class PlannedGpuArgs(TypedDict):
    """The GPU arguments ML CO2 Impact and Green Algorithms take before training."""

    gpus: int
    gpu_tdp_w: float | None
    gpu_name: str | None


def planned_gpu_args(planned: PlannedRun) -> PlannedGpuArgs:
    """A planned run's GPUs as the duration baselines take them."""
    return {
        "gpus": planned.gpus,
        "gpu_tdp_w": planned.gpu_tdp_w,
        "gpu_name": planned.spec_name or planned.gpu_name,
    }


def expected_duration(planned: PlannedRun) -> tuple[float | None, str]:
    """The training time (s) the duration baselines assume before training, and a note saying
    where it comes from: the duration given, else PRE's predicted duration, else the FLOPs
    estimate's; (None, "") when there is none."""
    if planned.duration_s is not None:
        return float(planned.duration_s), " (duration given)"
    pre = planned.estimate_of("pre")
    if pre.ok:
        return pre.duration_s, " (duration predicted by PRE)"
    flops = planned.estimate_of("flops")
    if flops.ok:
        return flops.duration_s, " (duration from the FLOPs estimate)"
    return None, ""


__all__ = [
    "CPU_RUN",
    "GpuArgs",
    "PlannedGpuArgs",
    "each_gpu_run",
    "expected_duration",
    "measured_duration",
    "planned_gpu_args",
    "stored_gpu_args",
    "tdp_source",
]
