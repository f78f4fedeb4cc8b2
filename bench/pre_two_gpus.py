"""PRE on the shipped reference set of two GPUs (issue 47), on a CPU: the fit, each held-out
protocol's |log error| quantiles per GPU, the outside H200 runs (never fitted on), leave one GPU
out (fit on one GPU's runs, predict the other's through the transfer), and a ResNet-50 30-epoch
prediction for GPUs in and outside the set. Energy and time, the 90 % interval's coverage and
its median width ((high - low) / estimate) side by side.

    python bench/pre_two_gpus.py > docs/measured/pre-two-gpus-DATE.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OUTSIDE_CSV = Path(__file__).resolve().parent / "validation" / "h200-outside-runs.csv"
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA L4")


def scored(predicted: pd.DataFrame, energy_j: np.ndarray, duration_s: np.ndarray) -> str:
    """MAPE, signed median error, coverage and median width of energy, then of time."""
    parts = []
    for name, measured, (p, lo, hi) in (
        ("energy", energy_j, ("energy_j", "energy_low_j", "energy_high_j")),
        ("time", duration_s, ("duration_s", "duration_low_s", "duration_high_s")),
    ):
        pred = predicted[p].to_numpy(dtype=float)
        low, high = predicted[lo].to_numpy(dtype=float), predicted[hi].to_numpy(dtype=float)
        error = pred / measured - 1
        covered = (low <= measured) & (measured <= high)
        parts.append(
            f"{name}: MAPE {np.mean(np.abs(error)) * 100:.1f} %, signed median "
            f"{np.median(error) * 100:+.1f} %, 90 % interval covers {covered.sum()}/"
            f"{len(covered)} ({covered.mean():.0%}), median width "
            f"{np.median((high - low) / pred) * 100:.0f} %"
        )
    return "; ".join(parts)


def main() -> None:
    from wattlab.estimate.features import config_features
    from wattlab.estimate.outside import load_outside_runs, outside_features
    from wattlab.estimate.pre import fit_pre, training_table
    from wattlab.estimate.reference import load_default_reference

    runs, _ = load_default_reference()
    print("reference runs:", runs["gpu_name"].value_counts().to_dict())
    started = time.perf_counter()
    model = fit_pre(runs)
    print(f"fit in {time.perf_counter() - started:.0f} s: {model.describe()}")
    used, features, _ = training_table(runs)
    gpus = features["gpu_name"].to_numpy()
    print("\nheld-out |log error| 90 % quantiles (the intervals' stuff), energy / time:")
    for protocol, parts in model.residuals.items():
        cells = []
        for gpu in sorted(set(gpus)):
            mask = gpus == gpu
            e, t = (np.quantile(np.abs(parts[k][mask]), 0.9) for k in ("energy", "time"))
            cells.append(f"{gpu} {e:.3f} / {t:.3f} (n {mask.sum()})")
        print(f"  {protocol}: " + "; ".join(cells))
    outside = load_outside_runs(OUTSIDE_CSV)
    predicted = pd.concat([model.predict(outside_features(r)) for _, r in outside.iterrows()])
    print(
        f"\nOUTSIDE H200 runs ({len(outside)}, never fitted on): "
        + scored(predicted, outside["energy_total_j"].to_numpy(), outside["duration_s"].to_numpy())
    )
    print("\nleave one GPU out (fit on the other GPU's runs; every prediction a transfer):")
    for gpu in sorted(runs["gpu_name"].unique()):
        held = runs[runs["gpu_name"] == gpu]
        fold = fit_pre(runs[runs["gpu_name"] != gpu])
        held_used, held_features, _ = training_table(held)
        print(
            f"  {gpu}: "
            + scored(
                fold.predict(held_features),
                held_used["energy_total_j"].to_numpy(dtype=float),
                held_used["duration_s"].to_numpy(dtype=float),
            )
        )
    print("\nResNet-50, amp-bf16, batch 256, 30 epochs of CIFAR-10 (kJ, 90 % interval):")
    for gpu in GPUS:
        row = config_features(
            model="resnet50", gpus=1, precision="amp-bf16", epochs=30, gpu_name=gpu, batch_size=256
        )
        p = model.predict(row).iloc[0]
        width = (p.energy_high_j - p.energy_low_j) / p.energy_j * 100
        print(
            f"  {gpu}: {p.energy_j / 1e3:.1f} [{p.energy_low_j / 1e3:.1f}-"
            f"{p.energy_high_j / 1e3:.1f}], width {width:.0f} %; "
            + p.notes.split("; interval from ")[-1]
        )


if __name__ == "__main__":
    main()
