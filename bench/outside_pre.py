"""PRE on the outside validation runs (``bench/validation/h200-outside-runs.csv``), predicted as
a user would with ``wattlab estimate``: the configuration only (model, precision, batch, stem,
epochs, training-set size), fitted on the shipped reference set. Prints each run's signed errors
(energy and time) beside its shape, the breakdown by shape, MAPE, signed median error and the
coverage of the 90 % interval. The validation runs are never fitted on.

    python bench/outside_pre.py                  # the shipped reference set
    python bench/outside_pre.py --data my.csv    # another reference CSV
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402

OUTSIDE_CSV = Path(__file__).resolve().parent / "validation" / "h200-outside-runs.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=None, help="Reference CSV (default: the shipped one).")
    parser.add_argument("--outside", default=None, help="Outside runs CSV (default: bench's).")
    args = parser.parse_args()

    from wattlab.estimate.outside import (
        load_outside_runs,
        outside_breakdown,
        predict_outside,
        summarise_outside,
    )
    from wattlab.estimate.pre import fit_pre
    from wattlab.estimate.reference import default_reference_path, load_reference_csv

    path = Path(args.data) if args.data else default_reference_path()
    runs, _ = load_reference_csv(path)
    outside = load_outside_runs(args.outside or OUTSIDE_CSV)
    model = fit_pre(runs)
    print(f"PRE fitted on {path} ({len(runs)} runs): {model.describe()}")
    table = predict_outside(model, outside)
    rows = [
        [
            r.set, r.model, r.precision, int(r.batch_size), r.stem, int(r.epochs),
            int(r.train_size), r.regime, f"{r.energy_error:+.0%}", f"{r.time_error:+.0%}",
            f"{r.power_error:+.0%}", "yes" if r.covered else "no",
        ]
        for r in table.itertuples()
    ]  # fmt: skip
    header = ["set", "model", "precision", "batch", "stem", "epochs", "train", "regime",
              "energy", "time", "power", "in 90%"]  # fmt: skip
    print_table("outside runs: signed error of PRE (predicted / measured - 1)", header, rows)
    for column in ("set", "precision", "stem", "regime", "epochs_band", "batch_band"):
        part = outside_breakdown(table, column)
        print_table(f"by {column}", list(part.columns), part.values.tolist())
    summary = summarise_outside(table)
    print(
        f"\noutside: {summary['n']} runs, energy MAPE {summary['mape_percent']:.1f} % (signed "
        f"median {summary['median_error_percent']:+.1f} %), time MAPE "
        f"{summary['time_mape_percent']:.1f} % (signed median "
        f"{summary['time_median_error_percent']:+.1f} %), 90 % interval covers "
        f"{summary['covered']}/{summary['n']} ({summary['coverage_90']:.0%}; time "
        f"{summary['time_covered']}/{summary['n']})"
    )
    out = write_json("outside_pre", {"summary": summary, "runs": table.to_dict("records")})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
