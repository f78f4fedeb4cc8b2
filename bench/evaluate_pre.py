"""PRE on held-out runs of a reference CSV: leave one configuration / model / architecture
family (``wattlab.estimate.families``) / precision / batch size out. Prints MAPE, RMSE and the
coverage of PRE's stated 90 % interval per protocol, and the per-group errors; writes them as
JSON (``$OUT`` or ``bench-out``). Runs on a CPU.

    python bench/evaluate_pre.py                         # the shipped reference data
    python bench/evaluate_pre.py --data my-reference.csv --protocols model precision

Targets (issue 29): on every protocol, energy MAPE <= 20 % and 90 % intervals covering
85-95 % of the held-out runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402

PROTOCOLS = ("configuration", "model", "family", "precision", "batch_size")


def held_out(runs: pd.DataFrame, protocol: str, search_iter: int) -> pd.DataFrame:
    """One row per held-out run: measured and predicted energy and time, interval, notes."""
    from wattlab.errors import DataError
    from wattlab.estimate.pre import fit_pre, model_families, training_table

    usable, features, _ = training_table(runs)
    if protocol == "family":
        groups = pd.Series(model_families(usable), index=usable.index).astype(str)
    else:
        key = {"configuration": "config_hash", "model": "model", "precision": "precision"}.get(
            protocol, "batch_size"
        )
        groups = usable[key].astype(str)
    rows = []
    for group in sorted(groups.unique()):
        test = groups.index[groups == group]
        try:
            model = fit_pre(usable.drop(index=test), search_iter=search_iter)
        except DataError as error:
            print(f"  {protocol}={group}: cannot fit without it ({error})", flush=True)
            continue
        predicted = model.predict(features.loc[test])
        for index, row in predicted.iterrows():
            run = usable.loc[index]
            rows.append(
                {
                    "protocol": protocol,
                    "group": group,
                    "run_id": int(run.get("id", run.get("run_id", index))),
                    "label": run.get("label"),
                    "measured_j": float(run["energy_total_j"]),
                    "predicted_j": float(row["energy_j"]),
                    "low_j": float(row["energy_low_j"]),
                    "high_j": float(row["energy_high_j"]),
                    "measured_s": float(run["duration_s"]),
                    "predicted_s": float(row["duration_s"]),
                    "interval_basis": row["interval_basis"],
                    "chosen": f"{model.time.family}/{model.power.family}",
                }
            )
    return pd.DataFrame(rows)


def summarise(table: pd.DataFrame) -> dict:
    from wattlab.estimate.evaluate import coverage_interval

    if table.empty:
        return {"n": 0}
    error = table["predicted_j"] / table["measured_j"] - 1
    covered = (table["low_j"] <= table["measured_j"]) & (table["measured_j"] <= table["high_j"])
    return {
        "n": len(table),
        "mape_percent": float(error.abs().mean() * 100),
        "bias_percent": float(error.mean() * 100),
        "rmse_kj": float(np.sqrt(((table["predicted_j"] - table["measured_j"]) ** 2).mean()) / 1e3),
        "time_mape_percent": float(
            (table["predicted_s"] / table["measured_s"] - 1).abs().mean() * 100
        ),
        "coverage_90": float(covered.mean()),
        # how far a coverage seen on this few runs can be trusted (Clopper-Pearson, 95 %)
        "coverage_90_ci": coverage_interval(int(covered.sum()), len(table)),
        "median_width": float((table["high_j"] / table["low_j"]).median()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=None, help="Reference CSV (default: the shipped one).")
    parser.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=PROTOCOLS)
    parser.add_argument("--search-iter", type=int, default=2)
    args = parser.parse_args()

    from wattlab.estimate.reference import (
        default_reference_path,
        load_reference_csv,
        read_reference_header,
    )

    path = Path(args.data) if args.data else default_reference_path()
    runs, _ = load_reference_csv(path)
    covers = [line for line in read_reference_header(path) if line.startswith("covers")]
    print(f"reference: {path} ({len(runs)} runs{'; ' + covers[0] if covers else ''})")
    results, summary, rows = [], {}, []
    for protocol in args.protocols:
        t0 = time.perf_counter()
        table = held_out(runs, protocol, args.search_iter)
        summary[protocol] = s = summarise(table)
        results.append(table)
        if s["n"]:
            rows.append(
                [
                    protocol,
                    s["n"],
                    f"{s['mape_percent']:.1f} %",
                    f"{s['bias_percent']:+.1f} %",
                    f"{s['rmse_kj']:.2f}",
                    f"{s['time_mape_percent']:.1f} %",
                    f"{s['coverage_90']:.0%} ({s['coverage_90_ci'][0]:.0%}-"
                    f"{s['coverage_90_ci'][1]:.0%})",
                    f"x{s['median_width']:.2f}",
                    f"{time.perf_counter() - t0:.0f}",
                ]
            )
    header = ["left out", "runs", "MAPE", "bias", "RMSE kJ", "time MAPE", "90% cover (95% CI)",
              "width", "s"]  # fmt: skip
    print_table("PRE on held-out runs (energy = predicted power x predicted time)", header, rows)
    every = pd.concat(results, ignore_index=True) if results else pd.DataFrame()
    if not every.empty:
        by_group = (
            every.assign(ape=(every["predicted_j"] / every["measured_j"] - 1).abs() * 100)
            .groupby(["protocol", "group"])["ape"]
            .mean()
            .round(1)
            .reset_index()
        )
        print_table(
            "MAPE per held-out group (%)",
            ["protocol", "group", "MAPE %"],
            by_group.values.tolist(),
        )
    print(
        "\ntargets (issue 29): on every protocol, energy MAPE <= 20 % and 90 % intervals "
        "covering 85-95 % of the held-out runs"
    )
    out = write_json(
        "evaluate_pre",
        {"reference": str(path), "summary": summary, "runs": every.to_dict("records")},
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
