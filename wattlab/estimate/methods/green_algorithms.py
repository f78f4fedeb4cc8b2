"""Green Algorithms (Lannelongue et al.): E = (TDP x GPUs x utilisation + RAM_GB x 0.3725 W) x
duration, from the run's measured duration and utilisation (oracle inputs) in ``estimate
evaluate``, and from the expected duration before training. Its RAM term is left out for the
GPU-only target."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from wattlab.estimate.baselines import Estimate, green_algorithms
from wattlab.estimate.methods import gpu_facts
from wattlab.estimate.methods.base import (
    EstimationMethod,
    HeldOut,
    PlannedRun,
    StoredRuns,
    value_of,
)

NAME = "green-algorithms"


def utilization(run: dict[str, Any]) -> tuple[float | None, str]:
    """The run's mean GPU utilisation (%) and how it was obtained."""
    value = value_of(run, "gpu_utilization_percent")
    basis = value_of(run, "gpu_utilization_basis")
    if basis is None:
        basis = (
            "mean of NVML reads at epoch ends; the stored data has no utilisation sampled over "
            "the budget, which the paper averages every 0.5-1 s"
        )
    return value, str(basis)


def evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    def one(run: dict[str, Any], gpu: gpu_facts.GpuArgs) -> Estimate:
        percent, basis = utilization(run)
        return green_algorithms(
            duration_s=gpu_facts.measured_duration(run),
            gpu_utilization_percent=percent,
            utilization_basis=basis,
            ram_gb=value_of(run, "ram_gb"),
            include_ram=stored.target != "gpu",
            duration_note=" (measured duration)",
            **gpu,
        )

    return gpu_facts.each_gpu_run(stored, NAME, one)


def predict(planned: PlannedRun) -> Estimate:
    duration_s, note = gpu_facts.expected_duration(planned)
    return green_algorithms(
        duration_s=duration_s,
        gpu_utilization_percent=planned.gpu_utilization_percent,
        ram_gb=planned.ram_gb,
        carbon=planned.carbon,
        duration_note=note,
        **gpu_facts.planned_gpu_args(planned),
    )


def how(settings: Mapping[str, Any]) -> str:
    return (
        "Green Algorithms uses each run's measured duration, recorded maximum power limit, "
        "GPU utilisation and RAM size"
    )


METHOD = EstimationMethod(
    name=NAME,
    label="Green Algorithms",
    inputs=("oracle: the run's measured duration", "oracle: the run's measured GPU utilisation"),
    evaluate=evaluate,
    how=how,
    covers=lambda target: "gpu" if target == "gpu" else "gpu+ram",
    predict=predict,
)
