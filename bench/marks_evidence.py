"""Issue 38's evidence: the shipped reference runs made STEP's live marks (one energy-meter read
per mark, inside the step loop), the outside runs (plain ``wattlab run``) made none. Prints, per
model and precision of the outside runs, the reference runs' time per optimizer step beside
their marks per step, and the outside runs' time per step; then the launch-bound models'
step time against marks per step. Reads CSVs only; no fit.

    python bench/marks_evidence.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

OUTSIDE_CSV = Path(__file__).resolve().parent / "validation" / "h200-outside-runs.csv"
LAUNCH_BOUND = ("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0")


def main() -> None:
    from wattlab.estimate.outside import load_outside_runs
    from wattlab.estimate.reference import load_default_reference
    from wattlab.estimate.run_shape import recorded_marks_per_step

    runs, _ = load_default_reference()
    columns = (runs["step_marks_json"], runs["samples"], runs["batch_size"])
    runs = runs.assign(
        steps=runs["samples"] / runs["batch_size"],
        marks_per_step=[recorded_marks_per_step(m, s, b) for m, s, b in zip(*columns, strict=True)],
    )
    runs["step_ms"] = runs["duration_s"] / runs["steps"] * 1e3
    outside = load_outside_runs(OUTSIDE_CSV)
    outside["steps"] = outside["epochs"] * (outside["train_size"] // outside["batch_size"])
    outside["step_ms"] = outside["duration_s"] / outside["steps"] * 1e3
    marked = (runs["marks_per_step"] > 0).mean()
    print(
        f"reference runs with live marks: {marked:.0%} of {len(runs)}; marks per step "
        f"{runs['marks_per_step'].min():.2f}-{runs['marks_per_step'].max():.2f} (median "
        f"{runs['marks_per_step'].median():.2f}); outside runs: no marks (wattlab run's default)"
    )
    rows = []
    for (model, precision), part in outside.groupby(["model", "precision"]):
        ref = runs[(runs["model"] == model) & (runs["precision"] == precision)]
        ref_text = ", ".join(
            f"bs{int(b)}: {t:.1f} ms @ {m:.2f}"
            for b, t, m in ref.groupby("batch_size")[["step_ms", "marks_per_step"]]
            .median()
            .itertuples()
        )
        out_text = ", ".join(
            f"bs{int(b)}{'' if s == 'cifar' else ' ' + s}: {t:.1f} ms"
            for b, s, t in part[["batch_size", "stem", "step_ms"]].itertuples(index=False)
        )
        rows.append([model, precision, ref_text, out_text])
    print_table(
        "time per optimizer step: reference (median per batch, @ marks per step) / outside",
        ["model", "precision", "reference runs (marked)", "outside runs (no marks)"],
        rows,
    )
    launch = runs[runs["model"].isin(LAUNCH_BOUND) & runs["batch_size"].between(128, 512)]
    table = (
        launch.groupby(["model", "precision"])
        .agg(runs=("step_ms", "size"), marks_per_step=("marks_per_step", "median"),
             step_ms=("step_ms", "median"))
        .round(2)
        .reset_index()
    )  # fmt: skip
    print_table(
        "launch-bound models at batch 128-512 (the CPU sets the pace: step time ~ batch-free)",
        list(table.columns),
        table.values.tolist(),
    )


if __name__ == "__main__":
    main()
