"""Does accuracy tell configurations apart? Train a grid in-process and print the accuracies.

Synthetic task version 2 and recipe 2 (the defaults) against version 1 / recipe 1: budgets,
models, precisions and seeds, each run's final accuracy and its per-epoch accuracy on the
fixed subset. One GPU (or ``--device cpu --tiny`` for a smoke test). Prints one table and
writes ``accuracy_spread.json`` to ``$OUT`` (or ``--out``) after every run, so a cut run keeps
what it did.

    python bench/accuracy_spread.py --grid demo            # ~3 min on an H200
    python bench/accuracy_spread.py --grid unseen          # ConvNeXt-T, ResNet-101, ...
    python bench/accuracy_spread.py --grid demo reference --seeds 0  # + the reference models
    python bench/accuracy_spread.py --device cpu --tiny    # seconds, no GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from wattlab.train.config import RunConfig  # noqa: E402
from wattlab.train.data import load_dataset  # noqa: E402
from wattlab.train.distributed import DistContext  # noqa: E402
from wattlab.train.loop import run_training  # noqa: E402

DEMO_SAMPLES = 300_000  # the GPU demo's budget per run


def grid(name: str) -> list[dict[str, Any]]:
    base = {"model": "resnet18", "precision": "amp-bf16", "batch_size": 512}
    if name == "demo":  # budget, model, precision, seeds, and the old task for contrast
        rows = []
        for seed in (0, 1):
            for samples in (100_000, DEMO_SAMPLES, 900_000):
                rows.append({**base, "budget_samples": samples, "seed": seed})
            rows.append(
                {
                    **base,
                    "budget_samples": DEMO_SAMPLES,
                    "seed": seed,
                    "precision": "fp32",
                    "batch_size": 256,
                }
            )
            rows.append({**base, "budget_samples": DEMO_SAMPLES, "seed": seed, "model": "resnet50"})
            rows.append(
                {
                    **base,
                    "budget_samples": DEMO_SAMPLES,
                    "seed": seed,
                    "model": "mobilenet_v3_small",
                }
            )
        rows.append({**base, "budget_samples": DEMO_SAMPLES, "synthetic_version": 1, "recipe": 1})
        return rows
    if name == "unseen":  # models the old recipe left at chance
        return [
            {**base, "model": m, "budget_samples": DEMO_SAMPLES, "batch_size": b, "precision": p}
            for m, b, p in (
                ("convnext_tiny", 512, "amp-bf16"),
                ("resnet101", 512, "amp-bf16"),
                ("wide_resnet50_2", 512, "amp-bf16"),
                ("vgg16", 1024, "tf32"),
                ("vit_p4_d6_w256", 512, "amp-bf16"),
                ("densenet121", 512, "amp-bf16"),
                ("efficientnet_b0", 512, "amp-bf16"),
            )
        ]
    if name == "reference":  # the reference set's models that the demo grid leaves out
        return [
            {**base, "model": m, "budget_samples": DEMO_SAMPLES}
            for m in ("resnet34", "mobilenet_v2", "vgg16", "efficientnet_b0")
        ]
    raise SystemExit(f"unknown grid {name!r}; use demo, reference or unseen")


def tiny_grid() -> list[dict[str, Any]]:
    return [
        {
            "model": "mobilenet_v3_small",
            "batch_size": 64,
            "budget_samples": 512,
            "train_samples": 512,
            "test_samples": 256,
            "precision": "fp32",
            "warmup_steps": 0,
        }
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", nargs="+", default=["demo"], help="demo, reference, unseen")
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="only these seeds")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="a seconds-long CPU smoke test")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    device = torch.device(args.device)
    dist = DistContext(device=device)
    rows = tiny_grid() if args.tiny else [r for name in args.grid for r in grid(name)]
    if args.seeds is not None:
        rows = [r for r in rows if r.get("seed", 0) in args.seeds]
    out = Path(args.out) / "accuracy_spread.json"
    results: list[dict[str, Any]] = []
    for values in rows:
        cfg = RunConfig(device=args.device, **values)
        t0 = time.perf_counter()
        result = run_training(cfg, dist, dataset=load_dataset(cfg))
        row = {
            "config": {k: v for k, v in values.items()},
            "synthetic_version": cfg.synthetic_version,
            "recipe": cfg.recipe,
            "accuracy": result.accuracy,
            "epoch_accuracy": [e.eval_accuracy for e in result.per_epoch],
            "epochs": result.epochs_completed,
            "train_loss": result.train_loss,
            "wall_s": time.perf_counter() - t0,
            "images_per_s": result.samples / result.duration_s,
        }
        results.append(row)
        print(
            f"{cfg.label():40s} v{cfg.synthetic_version} r{cfg.recipe} seed {cfg.seed} "
            f"samples {result.samples:>7d} acc {result.accuracy:.3f} "
            f"({row['wall_s']:.0f} s, {row['images_per_s']:.0f} img/s) per epoch "
            + " ".join(f"{a:.2f}" for a in row["epoch_accuracy"] if a is not None),
            flush=True,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "device": str(device),
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
                    "runs": results,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
