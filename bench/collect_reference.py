"""On a GPU machine: measure the reference runs that PRE is trained on and STEP is judged by.

Several models x precisions x batch sizes, each a short fixed budget of --epochs full epochs of
the synthetic CIFAR-shaped set with per-epoch energy windows, run one after another in this
process (the data is generated once) through wattlab's own runner, stored in --db, then written
as the reference CSV (one row per run, per-epoch energies as lists). Read-only: no GPU setting
is changed (every run uses the default power limit).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "vgg16", "efficientnet_b0"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default="reference.db")
    parser.add_argument("--csv", default="h200-reference.csv")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--precisions", nargs="*", default=["fp32", "amp-bf16"])
    parser.add_argument("--batch-sizes", nargs="*", type=int, default=[256, 512])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--train-samples", type=int, default=None)
    parser.add_argument("--test-samples", type=int, default=None)
    parser.add_argument("--deadline-s", type=float, default=420.0)
    args = parser.parse_args()

    from wattlab.estimate.reference import write_reference_csv
    from wattlab.experiment.runner import run
    from wattlab.experiment.store import open_store
    from wattlab.experiment.worker import WorkerOptions
    from wattlab.train.config import RunConfig

    t_start = time.perf_counter()
    combos = list(itertools.product(args.models, args.precisions, args.batch_sizes))
    rows = []
    for model, precision, batch in combos:
        if time.perf_counter() - t_start > args.deadline_s:
            print(f"deadline reached; skipping {model} {precision} bs{batch}", flush=True)
            continue
        cfg = RunConfig(
            model=model,
            stem="cifar",
            precision=precision,
            batch_size=batch,
            epochs=args.epochs,
            device=args.device,
            train_samples=args.train_samples,
            test_samples=args.test_samples,
            sweep="reference",
        )
        opts = WorkerOptions(db_path=args.db, progress=False, sweep="reference")
        outcome = run(cfg, opts, subprocess_launch=False)
        rows.append([cfg.label(), outcome.status, outcome.run_id, outcome.error or ""])
        print(f"{cfg.label()}: {outcome.status} {outcome.error or ''}", flush=True)
    print_table("reference runs", ["configuration", "status", "run id", "error"], rows)
    with open_store(args.db) as store:
        runs = store.runs(status="ok")
        windows = store.windows()
    header = [
        "wattlab reference runs, measured on one NVIDIA H200 (the device machine of this project)",
        "with bench/collect_reference.py: synthetic CIFAR-shaped data "
        f"({args.train_samples or 50000} train images),",
        f"{args.epochs} epochs per run after 10 warm-up steps, default power limit (700 W),",
        "GPU energy from the NVML energy counter (measured); no RAPL on that VM, so CPU and RAM",
        "energy are estimated (TDP x utilisation, 0.3725 W/GB) and the total's provenance says so.",
        "Columns are those of wattlab's `runs` table; epoch_energy_j / epoch_duration_s list the",
        "per-epoch windows. One run per configuration.",
    ]
    write_reference_csv(runs, windows, args.csv, header)
    print(f"wrote {args.csv} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
