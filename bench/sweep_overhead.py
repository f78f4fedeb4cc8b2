"""The run engine's overhead, OLD against NEW, on the same 8-run sweep.

Runs one sweep spec (ResNet-18 CIFAR stem on synthetic data, amp-bf16 and tf32 at batch 256 and
512, 2 repetitions = 8 runs, sequential order, no cool-down) with:
  * OLD: a checkout of commit d97312a (``--baseline-src DIR``; its CLI runs with PYTHONPATH=DIR):
    a torchrun process per run;
  * NEW: this checkout: a warm worker per sweep;
in the engine order given by ``--engines`` (default old,new,new,old: ABBA, so slow drift of the
machine does not favour one engine). For every sweep it prints:
  * median per-run overhead: wall time outside the budget window, from process start (the
    sweep's for the first run, the previous row's for the others) to the stored row;
  * sweep efficiency: summed budget-window time / the sweep's wall time;
  * energy per image of each configuration at its first and its last position in the sweep
    (runs must stay independent: the same configuration gives the same energy per image
    whether it runs first or last);
  * for NEW, the median wall time of each phase (launch, set-up, data, warm-up, budget, eval,
    teardown) from the rows.
Targets on the H200 (budgets >= 10 s): median overhead <= 4 s, efficiency >= 70 %.

``--small`` is a CPU smoke test of the bench itself (MobileNet-V3-small, tiny budgets).
Read-only for the GPU: changes no GPU setting. Writes JSON to ``--out``.

    python bench/sweep_overhead.py --baseline-src .baseline --out bench-out/sweep_overhead.json
    python bench/sweep_overhead.py --small --engines new --out /tmp/so.json   # CPU smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PHASES = ("launch", "setup", "data", "warmup", "budget", "eval", "teardown")


def spec_text(name: str, device: str, budget_samples: int, small: bool) -> str:
    if small:
        base = (
            "{model: mobilenet_v3_small, stem: imagenet, dataset: synthetic, device: cpu, "
            f"train_samples: 1024, test_samples: 256, budget_samples: {budget_samples}, "
            "warmup_steps: 3}"
        )
        grid = "{precision: [fp32, amp-bf16], batch_size: [64, 128]}"
    else:
        base = (
            "{model: resnet18, stem: cifar, dataset: synthetic, "
            f"device: {device}, budget_samples: {budget_samples}, warmup_steps: 10}}"
        )
        grid = "{precision: [amp-bf16, tf32], batch_size: [256, 512]}"
    return (
        f"name: {name}\nbase: {base}\ngrid: {grid}\nrepetitions: 2\norder: sequential\n"
        "warmup_runs: 0\ncooldown_s: 0\ncodecarbon: false\n"
    )


def _unix(iso: str | None) -> float | None:
    if not iso:
        return None
    return dt.datetime.fromisoformat(iso).timestamp()


def run_sweep(engine: str, src: Path, index: int, work: Path, args: argparse.Namespace) -> dict:
    name = f"overhead-{engine}-{index}"
    spec = work / f"{name}.yaml"
    spec.write_text(spec_text(name, args.device, args.budget_samples, args.small))
    db = work / f"{name}.db"
    # The engine's source first; what else is on the path (carried wheels) stays behind it.
    path = [str(src), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", "wattlab.cli", "sweep", str(spec), "--db", str(db)]
    print(f"[{engine} #{index}] {' '.join(command)}", flush=True)
    start_unix = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True)
    wall_s = time.perf_counter() - t0
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the {engine} sweep failed with exit code {done.returncode}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute("SELECT * FROM runs WHERE status = 'ok' ORDER BY id")]
    con.close()
    previous = start_unix
    runs = []
    for position, row in enumerate(rows, start=1):
        finished = _unix(row.get("finished_at")) or previous
        run_wall_s = finished - previous
        previous = finished
        samples = row.get("samples") or 0
        runs.append(
            {
                "position": position,
                "label": row["label"],
                "config_hash": row["config_hash"],
                "repetition": row["repetition"],
                "budget_s": row["duration_s"],
                "run_wall_s": run_wall_s,
                "overhead_s": run_wall_s - (row["duration_s"] or 0.0),
                "energy_per_image_j": row["energy_total_j"] / samples if samples else None,
                "gpu_energy_per_image_j": (row.get("energy_gpu_j") or 0.0) / samples
                if samples
                else None,
                "accuracy": row.get("accuracy"),
                "phases": {p: row.get(f"phase_{p}_s") for p in PHASES},
            }
        )
    budget_total_s = sum(r["budget_s"] or 0.0 for r in runs)
    return {
        "engine": engine,
        "index": index,
        "sweep_wall_s": wall_s,
        "runs": runs,
        "median_overhead_s": statistics.median(r["overhead_s"] for r in runs) if runs else None,
        "efficiency": budget_total_s / wall_s if wall_s > 0 else None,
        "budget_total_s": budget_total_s,
    }


def first_vs_last(result: dict) -> list[list[Any]]:
    by_config: dict[str, list[dict]] = {}
    for run in result["runs"]:
        by_config.setdefault(run["label"], []).append(run)
    rows = []
    for label, runs in by_config.items():
        first, last = runs[0], runs[-1]
        a, b = first["energy_per_image_j"], last["energy_per_image_j"]
        change = (b - a) / a if a and b is not None else None
        rows.append(
            [
                f"{result['engine']} #{result['index']}",
                label,
                first["position"],
                a,
                last["position"],
                b,
                f"{change:+.1%}" if change is not None else "",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", type=Path, help="checkout of d97312a (the OLD engine)")
    parser.add_argument("--engines", default="old,new,new,old", help="order, e.g. old,new,new,old")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    parser.add_argument("--small", action="store_true", help="a CPU smoke test of the bench")
    parser.add_argument("--budget-samples", type=int, default=None)
    parser.add_argument("--device", default=None, help="cuda | cpu (default: cuda if present)")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep databases here")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or any(e not in ("old", "new") for e in engines):
        parser.error(f"--engines takes old and new, comma-separated, got {args.engines!r}")
    baseline_ok = args.baseline_src is not None and (args.baseline_src / "wattlab").is_dir()
    if "old" in engines and not baseline_ok:
        parser.error("the OLD engine needs --baseline-src DIR, a checkout of d97312a")
    if args.device is None:
        args.device = "cpu" if args.small else _default_device()
    if args.budget_samples is None:
        # 524 288 images: >= 10 s at the fastest grid point (amp-bf16, batch 512: the 400 000
        # of the first measurement took 8 s there), as the targets assume
        args.budget_samples = 1024 if args.small else 524_288
    sources = {"new": REPO, "old": args.baseline_src.resolve() if args.baseline_src else None}
    results = []
    work_root = args.work_dir or Path(tempfile.mkdtemp(prefix="wattlab-overhead-"))
    work_root.mkdir(parents=True, exist_ok=True)
    for index, engine in enumerate(engines, start=1):
        results.append(run_sweep(engine, sources[engine], index, work_root, args))

    print_table(
        "Per sweep: median per-run overhead and sweep efficiency",
        ["sweep", "runs", "wall s", "budget s", "median overhead s", "efficiency"],
        [
            [
                f"{r['engine']} #{r['index']}",
                len(r["runs"]),
                r["sweep_wall_s"],
                r["budget_total_s"],
                r["median_overhead_s"],
                f"{r['efficiency']:.1%}",
            ]
            for r in results
        ],
    )
    summary = {}
    for engine in ("old", "new"):
        mine = [r for r in results if r["engine"] == engine]
        if mine:
            summary[engine] = {
                "median_overhead_s": statistics.median(
                    run["overhead_s"] for r in mine for run in r["runs"]
                ),
                "efficiency": sum(r["budget_total_s"] for r in mine)
                / sum(r["sweep_wall_s"] for r in mine),
            }
    print_table(
        "Engines (all their sweeps)",
        ["engine", "median overhead s", "efficiency"],
        [[e, s["median_overhead_s"], f"{s['efficiency']:.1%}"] for e, s in summary.items()],
    )
    if "old" in summary and "new" in summary and summary["new"]["median_overhead_s"] > 0:
        ratio = summary["old"]["median_overhead_s"] / summary["new"]["median_overhead_s"]
        summary["overhead_ratio_old_over_new"] = ratio
        print(f"\nper-run overhead: OLD / NEW = {ratio:.1f}x")
    print_table(
        "Energy per image (J) of each configuration, first and last position in its sweep",
        ["sweep", "configuration", "first pos", "J/image", "last pos", "J/image", "change"],
        [row for r in results for row in first_vs_last(r)],
    )
    new_runs = [run for r in results if r["engine"] == "new" for run in r["runs"]]
    if new_runs:
        phase_rows = []
        for phase in PHASES:
            values = [run["phases"][phase] for run in new_runs if run["phases"][phase] is not None]
            if values:
                phase_rows.append([phase, statistics.median(values), max(values)])
        print_table("NEW engine: wall time by phase (s)", ["phase", "median", "max"], phase_rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "small": args.small,
        "device": args.device,
        "budget_samples": args.budget_samples,
        "engines": engines,
        "summary": summary,
        "sweeps": results,
    }
    args.out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {args.out}")
    return 0


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


if __name__ == "__main__":
    sys.exit(main())
