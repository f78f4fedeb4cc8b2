"""Which physics term sets the pace of each reference run (issue 29): PRE's roofline time model
(``wattlab.estimate.roofline``) fitted on a reference CSV, each run labelled launch-bound (the
CPU launching the step's kernels), compute-bound, memory-bound or kernel-bound (the GPU's
arithmetic, activation traffic or per-kernel floor), with the share of its predicted time each
term would take alone. Runs on a CPU.

    python bench/pre_regimes.py                      # the shipped reference set
    python bench/pre_regimes.py --data my-reference.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="Reference CSV (default: the shipped one).")
    args = parser.parse_args()

    from wattlab.estimate.pre import make_rows, medians_of, training_table
    from wattlab.estimate.reference import default_reference_path, load_reference_csv
    from wattlab.estimate.roofline import MARK_S, Roofline

    path = Path(args.data) if args.data else default_reference_path()
    runs, _ = load_reference_csv(path)
    usable, features, _ = training_table(runs)
    table = features.reset_index(drop=True)
    rows = make_rows(table, medians_of(table))
    time_s = (usable["duration_s"] / usable["samples"]).to_numpy(dtype=float)
    model = Roofline.fit(rows.roofline_parts, rows.precision, rows.recipe, time_s)
    predicted = model.predict(rows.roofline_parts, rows.precision, rows.recipe)
    cpu, compute, memory, kernels = model.sides(rows.roofline_parts, rows.precision, rows.recipe)
    out = pd.DataFrame(
        {
            "model": table["model"].astype(str),
            "precision": table["precision"].astype(str),
            "batch_size": table["batch_size"].astype(int),
            "recipe": rows.recipe.astype(int),
            "regime": model.regime(rows.roofline_parts, rows.precision, rows.recipe),
            "launch_share": cpu / predicted,
            "compute_share": compute / predicted,
            "memory_share": memory / predicted,
            "kernel_share": kernels / predicted,
            "error_percent": (predicted / time_s - 1) * 100,
        }
    )
    coefficients = {
        "CPU launches, per nominal 15 us per layer (a)": {
            p: float(np.exp(model.log_a + model._deviation(model.dev_a, p)))
            for p in sorted(set(rows.precision))
        },
        "GPU arithmetic, per nominal peak time (c)": {
            p: float(np.exp(model.log_c + model._deviation(model.dev_c, p)))
            for p in sorted(set(rows.precision))
        },
        "attention products, per nominal peak time (t)": float(np.exp(model.log_t)),
        "activation traffic, per nominal bandwidth time (m)": float(np.exp(model.log_m)),
        "GPU kernel floor, per nominal launch time (g)": float(np.exp(model.log_g)),
        "once per step, ms (s)": float(np.exp(model.log_s)),
        "recipe 2's once-per-step work, ms (r)": float(np.exp(model.log_r)),
        "one live STEP mark, ms (k x 4 ms)": float(np.exp(model.log_k) * MARK_S * 1e3),
    }
    print(f"reference: {path} ({len(out)} runs); in-sample time MAPE "
          f"{out['error_percent'].abs().mean():.1f} %")  # fmt: skip
    for name, value in coefficients.items():
        text = (
            ", ".join(f"{p} {v:.3g}" for p, v in value.items())
            if isinstance(value, dict)
            else f"{value:.3g}"
        )
        print(f"  {name}: {text}")
    counts = out.groupby(["regime"]).size()
    rows_out = []
    for regime, n in counts.items():
        part = out[out["regime"] == regime]
        batches = ", ".join(str(b) for b in sorted(part["batch_size"].unique()))
        models = ", ".join(sorted(part["model"].unique()))
        rows_out.append([regime, int(n), batches, models])
    print_table("which term sets each run's pace", ["regime", "runs", "batch sizes", "models"],
                rows_out)  # fmt: skip
    by_batch = (
        out.assign(
            bucket=pd.cut(
                out["batch_size"], [0, 96, 512, 4096], labels=["32-96", "128-512", "768-2048"]
            )
        )  # fmt: skip
        .groupby(["bucket", "regime"], observed=True)
        .size()
        .unstack(fill_value=0)
    )
    print_table(
        "runs per regime by batch size",
        ["batch sizes", *by_batch.columns],
        [[str(i), *map(int, r)] for i, r in by_batch.iterrows()],
    )
    written = write_json(
        "pre_regimes",
        {"reference": str(path), "coefficients": coefficients, "runs": out.to_dict("records")},
    )
    print(f"wrote {written}")


if __name__ == "__main__":
    main()
