"""The FLOPs estimate (wattlab's own construction, not a published method): the duration from
3 x forward FLOPs x samples at an assumed share of the GPU's capped dense peak, x TDP x GPUs.
It reads nothing measured of the run it predicts: its FLOPs and budget."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from wattlab.estimate.baselines import Estimate, cannot_apply, flops_based
from wattlab.estimate.methods import gpu_facts
from wattlab.estimate.methods.base import (
    EstimationMethod,
    HeldOut,
    PlannedRun,
    StoredRuns,
    value_of,
)
from wattlab.train.factory_ref import is_factory

NAME = "flops"


def _stored(run: dict[str, Any], gpu: gpu_facts.GpuArgs, utilization: float) -> Estimate:
    from wattlab.estimate.features import DEFAULT_IMAGE_SIZE

    samples = value_of(run, "samples")
    precision = value_of(run, "precision")
    if samples is None or precision is None:
        return cannot_apply(NAME, "the run recorded no samples or precision")
    gflops = value_of(run, "model_gflops_per_sample")
    model = value_of(run, "model")
    if gflops is None and model is not None and is_factory(str(model)):
        return cannot_apply(  # counting its FLOPs would import (run) the file a database names
            NAME, f"the run's model is the factory {model}, which is not imported from a database"
        )
    return flops_based(
        samples=float(samples),
        precision=str(precision),
        forward_flops_per_sample=None if gflops is None else float(gflops) * 1e9,
        model=None if model is None else str(model),
        stem=str(value_of(run, "stem") or "cifar"),
        image_size=int(value_of(run, "image_size") or DEFAULT_IMAGE_SIZE),
        utilization=utilization,
        **gpu,
    )


def evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    utilization = float(stored.settings["flops_utilization"])
    return gpu_facts.each_gpu_run(stored, NAME, lambda run, gpu: _stored(run, gpu, utilization))


def predict(planned: PlannedRun) -> Estimate:
    estimate = flops_based(
        samples=planned.samples,
        precision=planned.precision,
        gpus=planned.gpus,
        gpu_name=planned.gpu_name,
        gpu_tdp_w=planned.gpu_tdp_w,
        forward_flops_per_sample=planned.forward_flops_per_sample,
        utilization=planned.flops_utilization,
        carbon=planned.carbon,
    )
    if estimate.ok:
        source = f"({planned.model}, {planned.cost_source})"
        estimate.notes = estimate.notes.replace("(recorded)", source)
    return estimate


def how(settings: Mapping[str, Any]) -> str:
    return (
        "the FLOPs estimate (wattlab's own construction) predicts its duration from 3 x "
        f"forward FLOPs at {settings.get('flops_utilization', 0.3):.0%} of the capped dense peak"
    )


METHOD = EstimationMethod(
    name=NAME,
    label="FLOPs-based",
    inputs=("nothing measured: the run's FLOPs and budget",),
    evaluate=evaluate,
    how=how,
    covers=lambda target: "gpu",  # duration x TDP: the GPUs only, whatever the target
    predict=predict,
)
