"""Per-GPU scores of `bench/evaluate_pre.py`'s JSON: each protocol's held-out runs split by the
GPU they ran on (energy and time MAPE, signed median, 90 % interval coverage, median width).

    python bench/per_gpu_scores.py $OUT/evaluate_pre.json
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(path: str) -> None:
    with open(path) as handle:
        runs = json.load(handle)["runs"]
    keys = sorted({(r["protocol"], r["gpu_name"]) for r in runs})
    for protocol, gpu in keys:
        rows = [r for r in runs if r["protocol"] == protocol and r["gpu_name"] == gpu]
        cells = []
        for what, unit in (("energy", "j"), ("time", "s")):
            measured = np.array([r[f"measured_{unit}"] for r in rows], dtype=float)
            pred = np.array([r[f"predicted_{unit}"] for r in rows], dtype=float)
            low = np.array([r[f"low_{unit}"] for r in rows], dtype=float)
            high = np.array([r[f"high_{unit}"] for r in rows], dtype=float)
            error = pred / measured - 1
            covered = (low <= measured) & (measured <= high)
            cells.append(
                f"{what} MAPE {np.mean(np.abs(error)) * 100:.1f} %, "
                f"median {np.median(error) * 100:+.1f} %, "
                f"covers {covered.sum()}/{len(rows)} ({covered.mean():.0%}), "
                f"median width {np.median((high - low) / pred) * 100:.0f} %"
            )
        print(f"{protocol} held out, {gpu}: " + "; ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
