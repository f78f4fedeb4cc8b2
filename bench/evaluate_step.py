"""STEP inside the first epoch, scored on stored runs: replay each run's step-level marks
(``step_marks_json``, stored by runs made with ``--project-after-fraction``) through the same
projector the run used live, at several fractions of the budget, and compare the projection
with the budget energy the run measured. Runs on a CPU.

    python bench/evaluate_step.py                               # the shipped reference data
    python bench/evaluate_step.py --data ref.csv --fractions 0.05 0.1 0.2 --tolerance 0.03
    python bench/evaluate_step.py --write-calibration wattlab/data/step-calibration.csv

Target (issue 11): |error| < 3 % after 20 % of the budget on >= 90 % of the runs. A run the
rule finds no steady window for counts as a miss (STEP says so instead of guessing). Where a
run also stored its live projection (``projected_energy_j``, made at ``--live-fraction``, 0.2 for
bench/collect_reference.py), the replay at that fraction must reproduce it: the "live = replay"
column checks that the stored marks are what the run used.

STEP's calibrated interval (``wattlab.step.calibration``) is judged here too: at each fraction,
split-conformal bounds on the relative error, and how often they hold for a model's (a
precision's) runs when fitted on the other models' (precisions') runs only. ``--write-calibration``
writes the bounds fitted on every run: the table a live run's interval comes from.

Last, whether a run's own unsteadiness up to the live fraction foretells its error: if it did,
an interval could be narrower for steady runs. Three measures of the marks the projection saw
(the band's width, the spread of time per sample over 8 chunks of the steady window, the spread
of time per sample from step to step), each ranked against |error| (Spearman's rho), with the
share within the tolerance in the steadiest and the least steady quarter of runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def score(
    runs, fractions: list[float], tolerance: float, live_fraction: float = 0.2
) -> tuple[list[dict], list[dict]]:
    """Per-run replays and one summary row per fraction."""
    from wattlab.step.marks import replay_marks
    from wattlab.step.stored import parse_marks

    per_run, summary = [], []
    usable = [(run, parse_marks(run.get("step_marks_json"))) for _, run in runs.iterrows()]
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
            band = None
            if projection.ok:
                band = bool(projection.energy_low_j <= measured <= projection.energy_high_j)
            per_run.append(
                {
                    "fraction": fraction,
                    "run_id": int(run["run_id"]),
                    "label": run.get("label"),
                    "model": run.get("model"),
                    "precision": run.get("precision"),
                    "error": error,
                    "band_covers": band,
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


def write_calibration(per_run: list[dict], args: argparse.Namespace, data: Path, runs) -> Path:
    """STEP's calibration table from every projected run, with a header saying how."""
    from wattlab.step.calibration import fit_step_calibration, write_step_calibration

    errors: dict[float, list[float]] = {}
    for r in per_run:
        if r["error"] is not None:
            errors.setdefault(r["fraction"], []).append(r["error"])
    gpus = sorted({str(g) for g in runs.get("gpu_name", []) if isinstance(g, str)})
    seconds = runs["duration_s"].astype(float)
    calibration = fit_step_calibration(
        errors,
        level=args.level,
        source=f"{len(runs)} {'/'.join(gpus) or 'reference'} runs of "
        f"{seconds.min():.0f}-{seconds.max():.0f} s ({Path(data).name})",
    )
    return write_step_calibration(
        calibration,
        args.write_calibration,
        [
            "made by: bench/evaluate_step.py --write-calibration (replays each run's stored "
            "step-level marks at each fraction)",
            "columns: fraction of the budget seen; runs projected there; split-conformal "
            "bounds on (projected - measured) / measured",
            "use: measured total in [E / (1 + error_high), E / (1 + error_low)] for a "
            "projection E made after at least that fraction",
        ],
    )


def interval_check(per_run: list[dict], level: float) -> list[dict]:
    """Per fraction, STEP's calibrated interval (``wattlab.step.calibration``): its bounds
    fitted on every projected run, and its coverage where nobody calibrated, each model's runs
    scored by bounds fitted on the other models' runs; the band's coverage beside it."""
    from wattlab.estimate.evaluate import coverage_interval
    from wattlab.step.calibration import held_out_bounds

    rows = []
    for fraction in sorted({r["fraction"] for r in per_run}):
        scored = [r for r in per_run if r["fraction"] == fraction and r["error"] is not None]
        errors = {i: r["error"] for i, r in enumerate(scored)}
        pooled = held_out_bounds(errors, None, level)["all"]
        if isinstance(pooled, str):
            continue
        low, high, _ = pooled
        row = {"fraction": fraction, "runs": len(scored), "error_low": low, "error_high": high}
        for key in ("model", "precision"):
            groups = {i: r[key] for i, r in enumerate(scored)}
            bounds = held_out_bounds(errors, groups, level)
            judged = [(e, bounds[str(groups[i])]) for i, e in errors.items()]
            judged = [(e, b) for e, b in judged if not isinstance(b, str)]  # str: too few others
            covered = sum(b[0] <= e <= b[1] for e, b in judged)
            held = len(judged)
            ci = coverage_interval(covered, held) if held else (float("nan"), float("nan"))
            row[f"{key}_out_runs"] = held
            row[f"{key}_out_coverage"] = covered / held if held else float("nan")
            row[f"{key}_out_coverage_ci"] = list(ci)
        band = [r["band_covers"] for r in scored]
        row["band_coverage"] = sum(band) / len(band) if band else float("nan")
        rows.append(row)
    return rows


CHUNKS = 8  # pieces of the steady window for the chunk spread


def _spread(values: np.ndarray) -> float:
    """Coefficient of variation (population std / mean); NaN for fewer than 2 values."""
    return float(np.std(values) / np.mean(values)) if values.size >= 2 else float("nan")


def unsteadiness(marks: dict, projection) -> dict[str, float]:
    """How unsteady the marks a projection saw were (only those up to its samples seen):
    ``band`` (its band's width over the projection), ``chunk_spread`` (the coefficient of
    variation of time per sample over CHUNKS equal pieces of the steady window) and
    ``step_spread`` (the same from one mark to the next)."""
    s, t = np.asarray(marks["samples"], float), np.asarray(marks["time_s"], float)
    seen = (s <= projection.samples_seen) & (s >= projection.steady_from_samples)
    s, t = s[seen], t[seen]
    edges = np.unique(np.linspace(0, s.size - 1, CHUNKS + 1).astype(int))
    chunks = np.diff(t[edges]) / np.diff(s[edges]) if edges.size >= 2 else np.zeros(0)
    steps = np.diff(t) / np.diff(s) if s.size >= 2 else np.zeros(0)
    return {
        "band": (projection.energy_high_j - projection.energy_low_j) / projection.energy_j,
        "chunk_spread": _spread(chunks),
        "step_spread": _spread(steps),
    }


def rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman's rho (ties get their mean rank); NaN for fewer than 3 pairs."""
    import pandas as pd

    if len(x) < 3:
        return float("nan")
    return float(pd.Series(x).rank().corr(pd.Series(y).rank()))


def variability_check(runs, fraction: float, tolerance: float) -> list[dict]:
    """Per measure of unsteadiness: Spearman's rho with |error| after ``fraction``, and the share
    within ``tolerance`` in the steadiest and the least steady quarter of the runs."""
    from wattlab.step.marks import replay_marks
    from wattlab.step.stored import parse_marks

    rows = []
    for _, run in runs.iterrows():
        marks = parse_marks(run.get("step_marks_json"))
        if not marks:
            continue
        series = marks["samples"], marks["time_s"], marks["energy_j"]
        projection = replay_marks(*series, int(run["samples"]), fraction)
        if not projection.ok:
            continue
        error = abs(projection.relative_error(float(run["energy_total_j"])))
        rows.append({"error": error, **unsteadiness(marks, projection)})
    out = []
    for measure in ("band", "chunk_spread", "step_spread"):
        pairs = sorted((r[measure], r["error"]) for r in rows if r[measure] == r[measure])
        quarter = len(pairs) // 4
        steady, unsteady = pairs[:quarter], pairs[len(pairs) - quarter :]
        out.append(
            {
                "fraction": fraction,
                "measure": measure,
                "runs": len(pairs),
                "spearman_rho": rank_correlation([m for m, _ in pairs], [e for _, e in pairs]),
                "within_steadiest_quarter": _share(steady, tolerance),
                "within_least_steady_quarter": _share(unsteady, tolerance),
            }
        )
    return out


def _share(pairs: list[tuple[float, float]], tolerance: float) -> float:
    return sum(e < tolerance for _, e in pairs) / len(pairs) if pairs else float("nan")


def _coverage_cell(check: dict, key: str) -> str:
    low, high = check[f"{key}_out_coverage_ci"]
    return f"{check[f'{key}_out_coverage']:.0%} ({low:.0%}-{high:.0%})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="A reference CSV (default: the shipped one).")
    parser.add_argument(
        "--fractions", nargs="+", type=float, default=[0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5]
    )
    parser.add_argument("--tolerance", type=float, default=0.03, help="|error| counted as a hit.")
    parser.add_argument(
        "--live-fraction", type=float, default=0.2, help="The runs' --project-after-fraction."
    )
    parser.add_argument("--level", type=float, default=0.9, help="The calibrated interval's level.")
    parser.add_argument(
        "--write-calibration",
        type=Path,
        default=None,
        help="Write STEP's calibration table here (wattlab/data/step-calibration.csv ships it).",
    )
    args = parser.parse_args(argv)
    if not 0 < args.level < 1:
        parser.error(f"--level must be in (0, 1), got {args.level}")
    if not all(0 < f < 1 for f in args.fractions):
        parser.error(f"--fractions must lie in (0, 1), got {args.fractions}")
    from wattlab.estimate.reference import default_reference_path, load_reference_csv

    path = args.data or default_reference_path()
    runs, _ = load_reference_csv(path)
    if "step_marks_json" not in runs or runs["step_marks_json"].isna().all():
        print(
            f"{path} holds no step-level marks (runs made with --project-after-fraction "
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
    checks = interval_check(per_run, args.level)
    print_table(
        f"STEP's calibrated {args.level:.0%} interval: bounds on (projected - measured) / "
        "measured from all runs; coverage with each model's (precision's) runs held out of the fit",
        ["after", "runs", "error bounds", "coverage, model held out (95% CI)",
         "precision held out", "band coverage"],
        [[f"{c['fraction']:.0%}", c["runs"], f"{c['error_low']:+.1%} .. {c['error_high']:+.1%}",
          _coverage_cell(c, "model"), _coverage_cell(c, "precision"),
          f"{c['band_coverage']:.0%}"] for c in checks],
    )  # fmt: skip
    variability = variability_check(runs, args.live_fraction, args.tolerance)
    print_table(
        f"Does a run's own unsteadiness up to {args.live_fraction:.0%} foretell its error? "
        f"(Spearman's rho with |error|; share within {args.tolerance:.0%} by quarter)",
        ["measure", "runs", "rho", "steadiest quarter", "least steady quarter"],
        [[v["measure"], v["runs"], f"{v['spearman_rho']:+.2f}",
          f"{v['within_steadiest_quarter']:.0%}", f"{v['within_least_steady_quarter']:.0%}"]
         for v in variability],
    )  # fmt: skip
    if args.write_calibration:
        written = write_calibration(per_run, args, path, runs)
        print(f"wrote {written}")
    out = write_json(
        "evaluate_step",
        {
            "data": str(path),
            "summary": summary,
            "interval": checks,
            "own_variability": variability,
            "runs": per_run,
        },
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
