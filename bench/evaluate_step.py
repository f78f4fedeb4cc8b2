"""STEP inside the first epoch, scored on stored runs: replay each run's step-level marks
(``step_marks_json``, stored by runs made with ``--project-after`` a fraction) through the same
projector the run used live, at several fractions of the budget, and compare the projection
with the budget energy the run measured. Runs on a CPU.

    python bench/evaluate_step.py                               # the shipped reference data
    python bench/evaluate_step.py --data ref.csv --fractions 0.05 0.1 0.2 --tolerance 0.03

Target (issue 11): |error| < 3 % after 20 % of the budget on >= 90 % of the runs. A run the
rule finds no steady window for counts as a miss (STEP says so instead of guessing). Where a
run also stored its live projection (``projected_energy_j``, made at ``--live-fraction``, 0.2 for
bench/collect_reference.py), the replay at that fraction must reproduce it: the "live = replay"
column checks that the stored marks are what the run used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def marks_of(cell: object) -> dict | None:
    if isinstance(cell, dict):
        return cell
    if isinstance(cell, str) and cell.strip():
        try:
            value = json.loads(cell)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def score(
    runs, fractions: list[float], tolerance: float, live_fraction: float = 0.2
) -> tuple[list[dict], list[dict]]:
    """Per-run replays and one summary row per fraction."""
    from wattlab.step_projection import replay_marks

    per_run, summary = [], []
    usable = [(run, marks_of(run.get("step_marks_json"))) for _, run in runs.iterrows()]
    usable = [(run, marks) for run, marks in usable if marks and marks.get("samples")]
    for fraction in fractions:
        errors, misses, live_checks = [], 0, []
        for run, marks in usable:
            projection = replay_marks(
                marks["samples"], marks["time_s"], marks["energy_j"], int(run["samples"]), fraction
            )
            measured = float(run["energy_total_j"])
            error = projection.relative_error(measured)
            if error is None:
                misses += 1
            else:
                errors.append(error)
            live = run.get("projected_energy_j")
            at_live = abs(fraction - live_fraction) < 1e-12  # the fraction the run projected at
            if at_live and projection.ok and live == live and live is not None:  # NaN-free
                live_checks.append(abs(projection.energy_j - float(live)) <= 1e-6 * abs(live))
            per_run.append(
                {
                    "fraction": fraction,
                    "run_id": int(run["run_id"]),
                    "label": run.get("label"),
                    "error": error,
                    "status": projection.status,
                    "note": projection.error or projection.describe(),
                }
            )
        n = len(usable)
        within = sum(abs(e) < tolerance for e in errors)
        summary.append(
            {
                "fraction": fraction,
                "runs": n,
                "projected": len(errors),
                "not_steady": misses,
                "within": within,
                "within_share": within / n if n else float("nan"),
                "median_abs_error": float(np.median(np.abs(errors))) if errors else float("nan"),
                "worst_error": max(errors, key=abs) if errors else float("nan"),
                "live_equals_replay": f"{sum(live_checks)}/{len(live_checks)}"
                if live_checks
                else "n/a",
            }
        )
    return per_run, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="A reference CSV (default: the shipped one).")
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.1, 0.2, 0.3])
    parser.add_argument("--tolerance", type=float, default=0.03, help="|error| counted as a hit.")
    parser.add_argument(
        "--live-fraction", type=float, default=0.2, help="The runs' --project-after fraction."
    )
    args = parser.parse_args(argv)
    from wattlab.estimate.reference import default_reference_path, load_reference_csv

    path = args.data or default_reference_path()
    runs, _ = load_reference_csv(path)
    if "step_marks_json" not in runs or runs["step_marks_json"].isna().all():
        print(
            f"{path} holds no step-level marks (runs made with --project-after a fraction "
            "store them, schema version 3); nothing to replay."
        )
        return 2
    per_run, summary = score(runs, args.fractions, args.tolerance, args.live_fraction)
    print_table(
        f"STEP from step-level marks, replayed on {path}: |error| < {args.tolerance:.0%}",
        ["after", "runs", "projected", "not steady", f"within {args.tolerance:.0%}", "share",
         "median |error|", "worst", "live = replay"],
        [[f"{s['fraction']:.0%}", s["runs"], s["projected"], s["not_steady"], s["within"],
          f"{s['within_share']:.0%}", f"{s['median_abs_error']:.2%}", f"{s['worst_error']:+.2%}",
          s["live_equals_replay"]] for s in summary],
    )  # fmt: skip
    worst = sorted(
        (r for r in per_run if r["error"] is None or abs(r["error"]) >= args.tolerance),
        key=lambda r: (r["fraction"], -(abs(r["error"]) if r["error"] is not None else 9)),
    )
    if worst:
        print_table(
            "misses",
            ["after", "run", "label", "error", "why"],
            [[f"{r['fraction']:.0%}", r["run_id"], r["label"],
              "none" if r["error"] is None else f"{r['error']:+.2%}", r["note"][:90]]
             for r in worst],
        )  # fmt: skip
    out = write_json("evaluate_step", {"data": str(path), "summary": summary, "runs": per_run})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
