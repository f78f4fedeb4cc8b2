"""On a GPU: what cuDNN's autotuning costs a run's warm-up, and what it buys in step time.

The reference runs' warm-up took a median 7.6 s (up to 26 s: fp32 ResNet-50 at batch 512;
24 s: MobileNet-V2 at bf16 and batch 128) against 8 s of budget, so it, not the worker's start,
decides how much of a collection call is measured. For each configuration and each setting this
times the first training step (the autotuning of every new convolution shape, forward and
backward) and the median of the steady steps after it:

- ``limit10``: ``torch.backends.cudnn.benchmark = True`` with PyTorch's default
  ``benchmark_limit`` (10 algorithms tried per shape) -- what wattlab's trainer does;
- ``limit3`` / ``limit1``: the same with 3 or 1 algorithms tried;
- ``off``: no autotuning (cuDNN's heuristics choose).

Each setting trains at its own batch size (``b``, ``b+4``, ``b+8``, ...), so every setting
meets shapes that no earlier one tuned, all in one process. Usage::

    python bench/autotune_cost.py --configs resnet50:fp32:512 mobilenet_v2:amp-bf16:128 \\
        --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

SETTINGS = ("limit10", "limit3", "limit1", "off")


def _apply(setting: str) -> None:
    import torch

    torch.backends.cudnn.benchmark = setting != "off"
    if setting.startswith("limit"):
        torch.backends.cudnn.benchmark_limit = int(setting.removeprefix("limit"))


def measure(model_name: str, precision: str, batch: int, setting: str, steps: int) -> dict:
    import torch
    from torch import nn

    from wattlab.train.loop import set_precision
    from wattlab.train.models import build_model

    device = torch.device("cuda")
    torch.manual_seed(0)
    net = build_model(model_name, stem="cifar", num_classes=10).to(
        device, memory_format=torch.channels_last
    )
    autocast, scaler = set_precision(precision, device)  # sets benchmark = True
    _apply(setting)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        with autocast():
            loss = criterion(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    steady_s = statistics.median(times)
    return {
        "model": model_name,
        "precision": precision,
        "batch_size": batch,
        "setting": setting,
        "first_step_s": first_s,
        "steady_step_s": steady_s,
        "autotune_s": max(0.0, first_s - steady_s),
        "images_per_s": batch / steady_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", required=True, help="MODEL:PRECISION:BATCH")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("autotune_cost: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    print(f"{'model':18s} {'precision':9s} {'batch':>5s} {'setting':8s} {'first s':>8s} "
          f"{'steady ms':>9s} {'img/s':>8s}", flush=True)  # fmt: skip
    for item in args.configs:
        model, precision, batch = item.split(":")
        for k, setting in enumerate(args.settings):
            row = measure(model, precision, int(batch) + 4 * k, setting, args.steps)
            torch.cuda.empty_cache()
            rows.append(row)
            print(f"{model:18s} {precision:9s} {row['batch_size']:5d} {setting:8s} "
                  f"{row['first_step_s']:8.2f} {1000 * row['steady_step_s']:9.2f} "
                  f"{row['images_per_s']:8.0f}", flush=True)  # fmt: skip
    if args.json:
        facts = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
        facts["gpu"] = torch.cuda.get_device_name(0)
        with open(args.json, "w") as f:
            json.dump({**facts, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
