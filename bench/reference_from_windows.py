"""Reference rows from ``bench/collect_interleaved.py``'s raw JSON (issue 47), and the check of
its windows against ``wattlab run``'s budget window.

    python bench/reference_from_windows.py rows RAW_DIR [RAW_DIR ...] --gpu-txt GPU.txt \\
        --csv wattlab/data/h100-reference.csv --header "# dates: ..." ...
    python bench/reference_from_windows.py check CHECK_DIR        # windows vs wattlab run

A configuration (model, precision, batch size) becomes one row of the reference CSV
(``wattlab.estimate.reference``): its windows summed (images, seconds, joules per component),
so its energy per image is the total over its rounds. ``epochs`` is the images trained in the
windows over the training set the trainer drew them from (a fraction: windows are not epochs),
``step_marks_json`` is empty (the windows make no STEP marks) and the per-epoch lists are
empty (STEP cannot be scored on these rows). The model's forward FLOPs and parameters are
counted on the CPU (``features.model_cost``), as ``wattlab run`` records them. A configuration
with fewer than ``--min-windows`` windows is left out and named.

``check`` reads the JSON of ``wattlab run --json`` and the collector's windows for the same
configurations (h100_collect.sh's ``check`` mode), and prints each one's energy and time per
image both ways and their difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def read_models(folders: list[Path]) -> list[dict[str, Any]]:
    """Every model JSON in the folders (a later folder's configurations after an earlier's)."""
    out = []
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            data = json.loads(path.read_text())
            if "windows" in data and "shapes" in data:  # not a `wattlab run --json` row
                data["_source"] = f"{folder.parent.name}/{folder.name}/{path.name}"
                out.append(data)
    return out


def gpu_facts(path: Path | None) -> dict[str, Any]:
    """name, uuid and power limit (W) from ``nvidia-smi --query-gpu=... --format=csv``."""
    if path is None:
        return {}
    lines = [line for line in path.read_text().splitlines() if "," in line]
    if len(lines) < 2:
        return {}
    header = [h.strip().split(" ")[0] for h in lines[0].split(",")]
    values = [v.strip() for v in lines[1].split(",")]
    row = dict(zip(header, values, strict=False))
    limit = row.get("power.limit", "").split(" ")[0]
    return {
        "gpu_name": row.get("name"),
        "gpu_uuid": row.get("uuid"),
        "power_limit_w": float(limit) if limit else None,
    }


def provenance_phrase(windows: list[dict[str, Any]]) -> str:
    """The configuration's provenance by share of its energy (measured, estimated)."""
    measured = 0.0
    total = 0.0
    for window in windows:
        for component, word in window["provenance"].items():
            kind = component.split(":", 1)[0]
            energy = {"gpu": window["gpu_energy_j"], "cpu": window["cpu_energy_j"]}.get(
                kind, window["dram_energy_j"] if kind in ("ram", "dram") else 0.0
            )
            total += energy
            measured += energy if word == "measured" else 0.0
    if total <= 0 or measured <= 0:
        return "estimated"
    share = measured / total
    return "measured" if share >= 0.9995 else f"{share:.1%} measured"


def config_rows(
    models: list[dict[str, Any]], facts: dict[str, Any], min_windows: int, first_id: int = 1
) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per configuration (module docstring) and the sentences for those left out."""
    from wattlab.estimate.features import model_cost

    rows: list[dict[str, Any]] = []
    left_out: list[str] = []
    seen: set[tuple[str, str, int]] = set()
    for data in models:
        model = data["model"]
        groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for window in data["windows"]:
            groups.setdefault((window["precision"], int(window["batch_size"])), []).append(window)
        if not groups:
            continue
        cost = model_cost(model, stem=data["stem"], image_size=int(data["image_size"]))
        setups = {(s["precision"], int(s["batch_size"])): s for s in data["shapes"]}
        for (precision, batch), windows in groups.items():
            key = (model, precision, batch)
            if key in seen:
                left_out.append(f"{model} {precision} bs{batch}: measured again, first kept")
                continue
            if len(windows) < min_windows:
                left_out.append(
                    f"{model} {precision} bs{batch}: {len(windows)} window(s), fewer than "
                    f"{min_windows}"
                )
                continue
            seen.add(key)
            images = sum(w["images"] for w in windows)
            per_image = [w["energy_j"] / w["images"] for w in windows]
            gpu_name = data.get("gpu_name") or facts.get("gpu_name")
            digest = hashlib.sha256(
                f"{model}|{precision}|{batch}|{data['recipe']}|{gpu_name}|interleaved".encode()
            ).hexdigest()[:16]
            utilization = [
                v for w in windows for v in (w.get("utilization_percent") or {}).values()
            ]
            setup = setups.get((precision, batch), {})
            rows.append(
                {
                    "run_id": first_id + len(rows),
                    "sweep": f"interleaved:{data['_source']}",
                    "status": "ok",
                    "config_hash": digest,
                    "repetition": 0,
                    "label": f"{model} 1xGPU {precision} bs{batch}",
                    "model": model,
                    "stem": data["stem"],
                    "dataset": "synthetic",
                    "precision": precision,
                    "device": "cuda",
                    "gpus": 1,
                    "batch_size": batch,
                    "epochs": images / float(data["train_size"]),
                    "samples": images,
                    "power_limit_w": facts.get("power_limit_w"),
                    "gpu_name": gpu_name,
                    "gpu_tdp_w": facts.get("power_limit_w"),
                    "train_size": data["train_size"],
                    "test_size": 256,
                    "image_size": data["image_size"],
                    "duration_s": sum(w["duration_s"] for w in windows),
                    "energy_total_j": sum(w["energy_j"] for w in windows),
                    "energy_gpu_j": sum(w["gpu_energy_j"] for w in windows),
                    "energy_cpu_j": sum(w["cpu_energy_j"] for w in windows),
                    "energy_dram_j": sum(w["dram_energy_j"] for w in windows),
                    "energy_uncertainty_j": sum(w["uncertainty_j"] for w in windows),
                    "provenance": provenance_phrase(windows),
                    "gpu_utilization_percent": statistics.mean(utilization)
                    if utilization
                    else None,
                    "gpu_utilization_basis": f"sampled: NVML over {len(windows)} interleaved "
                    "windows",
                    "model_gflops_per_sample": cost.gflops_per_sample,
                    "params": cost.params,
                    "gpu_uuids": facts.get("gpu_uuid"),
                    "synthetic_version": data["synthetic_version"],
                    "recipe": data["recipe"],
                    # not reference columns: kept for the header's statistics
                    "_windows": len(windows),
                    "_spread": max(per_image) / min(per_image) - 1.0,
                    "_setup_s": setup.get("setup_s"),
                }
            )
    return rows, left_out


def write_rows(args: argparse.Namespace) -> int:
    from wattlab.estimate.reference import write_reference_csv

    models = read_models(args.raw)
    facts = gpu_facts(args.gpu_txt)
    rows, left_out = config_rows(models, facts, args.min_windows, args.first_id)
    if not rows:
        print("reference_from_windows: no configuration with enough windows", file=sys.stderr)
        return 2
    table = pd.DataFrame(rows)
    spreads = table["_spread"]
    header = [
        *args.header,
        f"# rows: {len(table)} configurations of {table['model'].nunique()} models, "
        f"precisions {'/'.join(sorted(table['precision'].unique()))}, batch sizes "
        f"{'/'.join(str(b) for b in sorted(table['batch_size'].unique()))}; "
        f"{int(table['_windows'].sum())} windows ({table['_windows'].min()}-"
        f"{table['_windows'].max()} a configuration); spread of a configuration's windows' energy "
        f"per image (max/min - 1): median {spreads.median():.1%}, p90 {spreads.quantile(0.9):.1%}",
    ]
    if left_out:
        header.append("# left out: " + "; ".join(left_out))
    empty = pd.DataFrame(columns=["run_id", "name", "epoch", "energy_total_j", "duration_s"])
    path = write_reference_csv(
        table.drop(columns=[c for c in table if c.startswith("_")]), empty, args.csv, header
    )
    print(f"wrote {path}: {len(table)} rows")
    for line in header[len(args.header) :]:
        print(line)
    return 0


def check(args: argparse.Namespace) -> int:
    """Collected windows against ``wattlab run``'s budget window (module docstring)."""
    folder: Path = args.check_dir
    collected = {}
    for data in read_models([folder]):
        for window in data["windows"]:
            key = (data["model"], window["precision"], int(window["batch_size"]))
            collected.setdefault(key, []).append(window)
    lines = []
    for path in sorted(folder.glob("run-*.json")):
        run = json.loads(path.read_text())  # `wattlab run --json`: the run's row
        key = (run["model"], run["precision"], int(run["batch_size"]))
        windows = collected.get(key)
        if not windows or run.get("status") != "ok":
            lines.append(f"{key}: {'no collected windows' if not windows else run.get('status')}")
            continue
        images = sum(w["images"] for w in windows)
        e_win = sum(w["energy_j"] for w in windows) / images
        t_win = sum(w["duration_s"] for w in windows) / images
        e_run = run["energy_total_j"] / run["samples"]
        t_run = run["duration_s"] / run["samples"]
        lines.append(
            f"{key[0]} {key[1]} bs{key[2]}: energy per image {e_win * 1e3:.3f} mJ in "
            f"{len(windows)} windows ({images} images) vs {e_run * 1e3:.3f} mJ in wattlab run's "
            f"budget window ({run['samples']} images, {run['duration_s']:.1f} s): "
            f"{e_win / e_run - 1:+.1%}; time per image {t_win * 1e6:.1f} vs {t_run * 1e6:.1f} us: "
            f"{t_win / t_run - 1:+.1%}"
        )
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rows = sub.add_parser("rows")
    rows.add_argument("raw", nargs="+", type=Path)
    rows.add_argument("--gpu-txt", type=Path, default=None)
    rows.add_argument("--csv", type=Path, required=True)
    rows.add_argument("--header", action="append", default=[])
    rows.add_argument("--min-windows", type=int, default=2)
    # the first row's run_id (the H200 set's ids are below 100 000)
    rows.add_argument("--first-id", type=int, default=100_001)
    checks = sub.add_parser("check")
    checks.add_argument("check_dir", type=Path)
    args = parser.parse_args(argv)
    return write_rows(args) if args.command == "rows" else check(args)


if __name__ == "__main__":
    sys.exit(main())
