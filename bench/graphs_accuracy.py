"""CUDA graphs vs eager: the same configuration trains to the same accuracy and BatchNorm
statistics, within run-to-run noise.

ResNet-18 and ResNet-50 (CIFAR stem, amp-bf16, batch 512, synthetic task 2, recipe 2), 3 seeds
each, eager and ``cuda_graphs=True``. Per model: each mode's accuracies (mean, spread), the
graphs-minus-eager difference against the seed-to-seed spread, and for each BatchNorm layer
the relative difference ``|a - b| / |b|`` of running_mean and running_var between the graphed
and the eager run of the SAME seed, beside the same figure between two eager seeds (the
noise floor). Prints a table; writes ``graphs_accuracy.json`` and a log to ``$OUT``.
About 2-3 minutes on an H200. ``--device cpu --tiny`` runs eager only (graphs need CUDA), as a
smoke test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table, write_json  # noqa: E402

SEEDS = (0, 1, 2)
BUDGET = {"resnet18": 300_000, "resnet50": 150_000}


def train(model: str, stem: str, seed: int, graphs: bool, device: str, tiny: bool) -> dict:
    import torch

    from wattlab.train.config import RunConfig
    from wattlab.train.data import load_dataset
    from wattlab.train.distributed import DistContext
    from wattlab.train.loop import run_training
    from wattlab.train.models import build_model

    extra: dict[str, Any] = {}
    if tiny:
        extra = {"train_samples": 256, "test_samples": 128, "batch_size": 32,
                 "budget_samples": 64, "precision": "fp32", "warmup_steps": 0}  # fmt: skip
    values = {"model": model, "stem": stem, "precision": "amp-bf16", "batch_size": 512,
              "budget_samples": BUDGET.get(model, 150_000), "seed": seed, "device": device,
              "cuda_graphs": graphs, **extra}  # fmt: skip
    cfg = RunConfig(**values)
    torch.manual_seed(seed)  # the model is built here so that its statistics can be read
    net = build_model(model, stem=stem, num_classes=10)
    result = run_training(
        cfg, DistContext(device=torch.device(device)), dataset=load_dataset(cfg), model=net
    )
    stats = {
        name: (m.running_mean.detach().float().cpu(), m.running_var.detach().float().cpu())
        for name, m in net.named_modules()
        if isinstance(m, torch.nn.BatchNorm2d) and m.running_mean is not None
    }
    return {"accuracy": result.accuracy, "train_loss": result.train_loss, "bn": stats}


def rel_diff(a: Any, b: Any) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def bn_differences(x: dict, y: dict) -> dict[str, float]:
    """Median and max over layers of the relative running_mean / running_var difference."""
    means = [rel_diff(x[k][0], y[k][0]) for k in y]
    variances = [rel_diff(x[k][1], y[k][1]) for k in y]
    return {
        "mean_median": statistics.median(means),
        "mean_max": max(means),
        "var_median": statistics.median(variances),
        "var_max": max(variances),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument(
        "--models", nargs="+", default=["resnet18:cifar", "resnet50:cifar"],
        help="MODEL:STEM pairs (default: resnet18:cifar resnet50:cifar)",
    )  # fmt: skip
    args = ap.parse_args()
    pairs = [tuple(m.split(":", 1)) for m in args.models]
    if any(len(p) != 2 for p in pairs):
        ap.error("--models takes MODEL:STEM pairs, e.g. resnet50:cifar")
    models = [("resnet18", "imagenet")] if args.tiny else pairs
    seeds = SEEDS[:2] if args.tiny else SEEDS
    modes = [False, True] if args.device == "cuda" else [False]
    out: dict[str, Any] = {"models": {}}
    rows = []
    log: list[str] = []
    for model, stem in models:
        runs = {g: [train(model, stem, s, g, args.device, args.tiny) for s in seeds] for g in modes}
        eager = [r["accuracy"] for r in runs[False]]
        entry: dict[str, Any] = {"eager_accuracy": eager}
        noise = bn_differences(runs[False][1]["bn"], runs[False][0]["bn"])
        entry["bn_eager_seed0_vs_seed1"] = noise
        sd = statistics.stdev(eager) if len(eager) > 1 else float("nan")
        rows.append([model, "eager", f"{statistics.mean(eager):.4f}", f"{sd:.4f}",
                     f"{noise['mean_median']:.3g}", f"{noise['var_median']:.3g}"])  # fmt: skip
        if True in runs:
            graphed = [r["accuracy"] for r in runs[True]]
            same_seed = [
                bn_differences(g["bn"], e["bn"])
                for g, e in zip(runs[True], runs[False], strict=True)
            ]
            entry.update(
                graphs_accuracy=graphed,
                accuracy_difference=statistics.mean(graphed) - statistics.mean(eager),
                eager_seed_sd=sd,
                bn_graphs_vs_eager_same_seed=same_seed,
            )
            gsd = statistics.stdev(graphed) if len(graphed) > 1 else float("nan")
            bn_mean = statistics.median(d["mean_median"] for d in same_seed)
            bn_var = statistics.median(d["var_median"] for d in same_seed)
            rows.append([model, "cuda graphs", f"{statistics.mean(graphed):.4f}", f"{gsd:.4f}",
                         f"{bn_mean:.3g}", f"{bn_var:.3g}"])  # fmt: skip
        out["models"][model] = entry
        line = f"{model}: {entry}"
        log.append(line)
        print(line, flush=True)
        write_json("graphs_accuracy", out)
    print_table(
        "CUDA graphs vs eager (BN columns: eager row = seed 0 vs seed 1, graphs row = graphs vs "
        "eager of the same seed; median over layers of the relative difference)",
        ["model", "mode", "accuracy (mean)", "sd over seeds", "BN running_mean", "BN running_var"],
        rows,
    )
    path = write_json("graphs_accuracy", out)
    path.with_suffix(".log").write_text("\n".join(log) + "\n")
    print(f"\nraw: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
