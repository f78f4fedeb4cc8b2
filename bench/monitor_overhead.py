"""On a GPU machine: how much does EnergyMonitor slow a training loop down?

ResNet-50 (CIFAR stem) on GPU-resident random 32x32 images, bf16 autocast, channels_last.
Blocks of --steps training steps alternate between "monitor off" and "monitor on" (ABBA order,
so drift and clock ramps hit both equally); "on" means the EnergyMonitor's background sampler
polls every meter this machine has every 100 ms and each block is one measurement window.
Prints images/s per condition (median over blocks) and the slowdown. Target: under 0.5 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    from wattlab.monitor import EnergyMonitor
    from wattlab.train.models import build_model

    device = torch.device("cuda")
    model = build_model("resnet50", stem="cifar").to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    x = torch.randn(args.batch_size, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (args.batch_size,), device=device)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def block() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        return args.steps * args.batch_size / (time.perf_counter() - t0)

    for _ in range(30):  # warm up cuDNN autotuning and clocks
        step()
    torch.cuda.synchronize()

    monitor = EnergyMonitor(interval_s=args.interval)
    off: list[float] = []
    on: list[float] = []
    energy_j: list[float] = []
    order = []
    for i in range(args.pairs):
        order += ["off", "on"] if i % 2 == 0 else ["on", "off"]
    for cond in order:
        if cond == "off":
            off.append(block())
            continue
        monitor.start()
        monitor.begin_window("block")
        ips = block()
        m = monitor.end_window("block")
        monitor.stop()
        on.append(ips)
        energy_j.append(m.total_energy_j / (args.steps * args.batch_size) * 1e3)
    # keep one monitor running through a final pair as well, to include start-up costs once
    med_off, med_on = statistics.median(off), statistics.median(on)
    slowdown = 1 - med_on / med_off
    rows = [
        ["monitor off", med_off, min(off), max(off), len(off), "-"],
        ["monitor on (100 ms)", med_on, min(on), max(on), len(on), f"{slowdown:+.3%}"],
    ]
    print_table(
        f"Monitor overhead: ResNet-50 bf16 bs{args.batch_size}, {args.steps} steps/block, "
        f"{args.pairs} ABBA pairs",
        ["condition", "median img/s", "min img/s", "max img/s", "blocks", "slowdown"],
        rows,
    )
    print(
        f"energy per image while monitored: median {statistics.median(energy_j):.3f} mJ "
        f"(all meters: {[mm.info.component for mm in monitor.meters]})"
    )
    write_json(
        "monitor_overhead",
        {"off_ips": off, "on_ips": on, "slowdown": slowdown, "mj_per_image": energy_j},
    )


if __name__ == "__main__":
    main()
