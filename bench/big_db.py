"""`report` and `export` on a big database: builds one, then times both and their peak RSS.

Builds a wattlab database of ``--runs`` runs (default 50 000) over ``--configs``
configurations (default 2 000: 25 repetitions each, and one run in 50 failed), with
``--windows-per-run`` windows (5: 250 000) and ``--trace-per-run`` trace rows (40: 2 000 000),
through the store's own schema, with executemany in one transaction (fast). Then it runs, each
in a fresh process (``python -m wattlab.cli``), ``report --json`` (the summary only),
``report --out`` (every table and figure) and ``export --out`` (CSV), and prints a table:
seconds and peak resident memory (the child's ``ru_maxrss``). Runs on CPU; touches no GPU.

    python bench/big_db.py --db /tmp/big.db --out bench-out        # the issue's sizes
    python bench/big_db.py --runs 5000 --configs 200 --db /tmp/small.db   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402

PRECISIONS = ("fp32", "amp-bf16", "tf32", "amp-fp16")
WINDOW_NAMES = ("warmup", "epoch", "epoch", "eval", "budget")


def config_of(k: int) -> dict[str, Any]:
    """Configuration ``k``: a distinct (model, gpus, precision, batch, power limit)."""
    model = ("resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16", "densenet121")[k % 5]
    precision = PRECISIONS[(k // 5) % 4]
    gpus = (1, 2, 4, 8)[(k // 20) % 4]
    batch = (64, 128, 256, 512, 1024)[(k // 80) % 5]
    limit = (None, 250.0, 300.0, 350.0, 400.0)[(k // 400) % 5]
    return {"model": model, "precision": precision, "gpus": gpus, "batch_size": batch,
            "power_limit_w": limit}  # fmt: skip


def run_row(run_id: int, k: int, rep: int, rng: random.Random) -> dict[str, Any]:
    c = config_of(k)
    limit = c["power_limit_w"]
    label = (
        f"{c['model']} {c['gpus']}xGPU {c['precision']}"
        + (f" {limit:g}W" if limit else "")
        + f" bs{c['batch_size']}"
    )
    failed = run_id % 50 == 0
    time_s = 100.0 * (1 + k % 7) / c["gpus"] * rng.uniform(0.98, 1.02)
    energy = 250.0 * time_s * c["gpus"] * rng.uniform(0.97, 1.03)
    parts = {
        f"gpu:{i}": {
            "energy_j": 0.8 * energy / c["gpus"],
            "provenance": "measured",
            "uncertainty_j": 1.0,
            "in_total": True,
        }
        for i in range(c["gpus"])
    }
    parts["cpu:package-0"] = {"energy_j": 0.15 * energy, "provenance": "measured"}
    parts["ram:estimated"] = {"energy_j": 0.05 * energy, "provenance": "estimated"}  # fmt: skip
    row: dict[str, Any] = {
        "id": run_id, "sweep": "big", "status": "failed" if failed else "ok",
        "error": "CUDA out of memory" if failed else None, "config_hash": f"c{k:05d}",
        "repetition": rep, "config_json": json.dumps({**c, "epochs": 1}), "label": label,
        "model": c["model"], "stem": "cifar", "dataset": "synthetic",
        "precision": c["precision"], "device": "cuda", "gpus": c["gpus"],
        "world_size": c["gpus"], "batch_size": c["batch_size"], "epochs": 1.0,
        "power_limit_w": limit or 700.0, "power_limit_requested_w": limit, "samples": 100000,
        "gpu_name": "NVIDIA H200", "cpu_model": "Intel Xeon", "hostname": "node1",
        "driver": "570.00", "started_at": "2026-12-04T00:00:00+00:00",
        "finished_at": "2026-12-04T00:10:00+00:00", "intensity_kg_per_kwh": 0.2, "pue": 1.0,
    }  # fmt: skip
    if not failed:
        row.update({
            "duration_s": time_s, "wall_s": time_s + 5, "energy_total_j": energy,
            "energy_gpu_j": 0.8 * energy, "energy_cpu_j": 0.15 * energy,
            "energy_dram_j": 0.05 * energy, "energy_other_j": 0.0,
            "energy_uncertainty_j": 0.01 * energy, "provenance": "estimated",
            "components_json": json.dumps(parts), "co2e_kg": energy / 3.6e6 * 0.2,
            "co2e_low_kg": energy / 3.6e6 * 0.1, "co2e_high_kg": energy / 3.6e6 * 0.3,
            "accuracy": 0.9,
        })  # fmt: skip
    return row


def build(db: Path, runs: int, configs: int, windows_per_run: int, trace_per_run: int) -> dict:
    """Create the database through the store (its schema), then fill it in one transaction."""
    from wattlab.experiment.db.store import open_store

    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    open_store(db).close()
    t0 = time.perf_counter()
    rng = random.Random(25)
    conn = sqlite3.connect(db, isolation_level=None)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    conn.execute("BEGIN")
    run_sql = f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    window_sql = (
        "INSERT INTO windows (run_id, name, epoch, start_s, duration_s, samples, "
        "energy_total_j, energy_gpu_j, mean_power_w, provenance, short_window) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)"
    )
    trace_sql = "INSERT INTO trace (run_id, t_s, component, power_w) VALUES (?, ?, ?, ?)"
    batch: list[dict[str, Any]] = []
    for run_id in range(1, runs + 1):
        k = (run_id - 1) % configs
        batch.append(run_row(run_id, k, (run_id - 1) // configs, rng))
        if len(batch) == 5000 or run_id == runs:
            conn.executemany(run_sql, ([r.get(c) for c in columns] for r in batch))
            conn.executemany(window_sql, _windows(batch, windows_per_run))
            conn.executemany(trace_sql, _trace(batch, trace_per_run))
            batch = []
    conn.execute(
        "INSERT INTO sweeps (name, spec_json, spec_hash, order_seed, created_at) "
        "VALUES ('big', '{}', 'h', 1, '2026-12-04T00:00:00+00:00')"
    )
    conn.execute("COMMIT")
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("runs", "windows", "trace")}  # fmt: skip
    conn.close()
    return {**counts, "build_s": time.perf_counter() - t0,
            "size_mib": db.stat().st_size / 2**20}  # fmt: skip


def _windows(batch: list[dict[str, Any]], per_run: int):
    for r in batch:
        d = r.get("duration_s") or 1.0
        for i in range(per_run):
            name = WINDOW_NAMES[i % len(WINDOW_NAMES)]
            e = (r.get("energy_total_j") or 1.0) / per_run
            yield (r["id"], name, i, i * d / per_run, d / per_run, 1000, e, 0.8 * e,
                   e / (d / per_run), "measured")  # fmt: skip


def _trace(batch: list[dict[str, Any]], per_run: int):
    for r in batch:
        for i in range(per_run):
            yield (r["id"], 0.5 * i, "gpu:0" if i % 2 == 0 else "cpu:package-0",
                   200.0 + (i % 13))  # fmt: skip


def timed(args: list[str], cwd: Path) -> dict[str, Any]:
    """Run ``python -m wattlab.cli ARGS`` in a fresh process; its seconds and peak RSS."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
        "print(r.returncode, time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "sys.stderr.write(r.stderr.decode()[-2000:])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, "-m", "wattlab.cli", *args],
        cwd=cwd, capture_output=True, text=True,
    )  # fmt: skip
    code, seconds, rss_kib = done.stdout.split()
    return {"command": "wattlab " + " ".join(args), "exit_code": int(code),
            "seconds": float(seconds), "peak_rss_mib": int(rss_kib) / 1024,
            "stderr_tail": done.stderr.strip()[-500:]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("big.db"))
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--configs", type=int, default=2_000)
    parser.add_argument("--windows-per-run", type=int, default=5)
    parser.add_argument("--trace-per-run", type=int, default=40)
    parser.add_argument("--work", type=Path, default=None, help="folder for the outputs")
    parser.add_argument(
        "--reuse", action="store_true", help="time an existing --db instead of building it"
    )
    args = parser.parse_args(argv)
    if args.reuse:
        conn = sqlite3.connect(args.db)
        built = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                 for t in ("runs", "windows", "trace")}  # fmt: skip
        conn.close()
        built.update(build_s=None, size_mib=args.db.stat().st_size / 2**20)
    else:
        built = build(args.db, args.runs, args.configs, args.windows_per_run, args.trace_per_run)
    print_table(
        f"built {args.db}",
        ["runs", "windows", "trace rows", "configurations", "MiB", "build s"],
        [[built["runs"], built["windows"], built["trace"], args.configs, built["size_mib"],
          built["build_s"]]],
    )  # fmt: skip
    work = args.work or args.db.with_suffix(".out")
    work.mkdir(parents=True, exist_ok=True)
    db = str(args.db.resolve())
    results = []
    for command in (
        ["report", "--db", db, "--json", str(work / "summary.json")],
        ["report", "--db", db, "--out", str(work / "report")],
        ["export", "--db", db, "--out", str(work / "export")],
    ):
        results.append(timed(command, work))
        r = results[-1]
        print(f"{r['command']}: exit {r['exit_code']}, {r['seconds']:.1f} s, "
              f"{r['peak_rss_mib']:.0f} MiB", flush=True)  # fmt: skip
    print_table(
        "report and export (fresh process each; peak RSS of that process)",
        ["command", "exit", "s", "peak RSS MiB"],
        [[r["command"].replace(db, "DB"), r["exit_code"], r["seconds"], r["peak_rss_mib"]]
         for r in results],
    )  # fmt: skip
    for r in results:
        if r["exit_code"] != 0:
            print(f"\n{r['command']} failed:\n{r['stderr_tail']}")
    path = write_json(
        "big_db",
        {
            "built": built,
            "args": {k: str(v) for k, v in vars(args).items()},
            "results": results,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
    )
    print(f"\nJSON: {path}")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
