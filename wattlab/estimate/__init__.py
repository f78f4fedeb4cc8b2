"""Energy estimation: the usual baselines (ML CO2 Impact, Green Algorithms, FLOPs) and the
second reference paper's methods, STEP (project from stable epochs) and PRE (regression on
earlier runs), plus their evaluation against measured runs.

Names are loaded on first use (PEP 562), so ``import wattlab.estimate`` imports no pandas,
scikit-learn or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GpuSpec": "specs",
    "lookup_gpu": "specs",
    "peak_flops": "specs",
    "Estimate": "baselines",
    "ml_co2_impact": "baselines",
    "green_algorithms": "baselines",
    "flops_based": "baselines",
    "StepProjection": "wattlab.step.epochs",
    "StepProjector": "wattlab.step.epochs",
    "detect_stable_epoch": "wattlab.step.epochs",
    "step_project": "wattlab.step.epochs",
    "config_features": "features",
    "model_cost": "features",
    "run_features": "features",
    "PreModel": "pre",
    "PrePrediction": "pre",
    "fit_pre": "pre",
    "model_family": "families",
    "PaperStepResult": "wattlab.step.paper",
    "step_paper_project": "wattlab.step.paper",
    "fluss_stable_epoch": "wattlab.step.paper",
    "mean_sampled_utilization": "baselines",
    "EvaluationResult": "evaluate",
    "estimate_all": "predict",
    "evaluate_methods": "evaluate",
    "format_estimates": "predict",
    "write_evaluation": "evaluate",
    "default_reference_path": "reference",
    "load_default_reference": "reference",
    "load_reference_csv": "reference",
    "write_reference_csv": "reference",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'wattlab.estimate' has no attribute {name!r}")
    where = _EXPORTS[name]
    module = importlib.import_module(where if "." in where else f"wattlab.estimate.{where}")
    return getattr(module, name)
