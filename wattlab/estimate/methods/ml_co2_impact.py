"""ML CO2 Impact (Lacoste et al.): E = TDP x duration x GPUs, from the run's measured duration
(an oracle input) in ``estimate evaluate``, and from the expected duration before training."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from wattlab.estimate.baselines import Estimate, ml_co2_impact
from wattlab.estimate.methods import gpu_facts
from wattlab.estimate.methods.base import EstimationMethod, HeldOut, PlannedRun, StoredRuns

NAME = "ml-co2-impact"


def evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    return gpu_facts.each_gpu_run(
        stored,
        NAME,
        lambda run, gpu: ml_co2_impact(
            duration_s=gpu_facts.measured_duration(run),
            duration_note=" (measured duration)",
            **gpu,
        ),
    )


def predict(planned: PlannedRun) -> Estimate:
    duration_s, note = gpu_facts.expected_duration(planned)
    return ml_co2_impact(
        duration_s=duration_s,
        carbon=planned.carbon,
        duration_note=note,
        **gpu_facts.planned_gpu_args(planned),
    )


def how(settings: Mapping[str, Any]) -> str:
    return "ML CO2 Impact uses each run's measured duration and recorded maximum power limit"


METHOD = EstimationMethod(
    name=NAME,
    label="ML CO2 Impact",
    inputs=("oracle: the run's measured duration",),
    evaluate=evaluate,
    how=how,
    covers=lambda target: "gpu",  # TDP x duration: the GPUs only, whatever the target
    predict=predict,
)
