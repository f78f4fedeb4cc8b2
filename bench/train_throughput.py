"""On a GPU machine: wattlab's trainer against the typical torchvision training loop.

Both train ResNet-50 (imagenet stem, as in torchvision) on 32x32 CIFAR-shaped images with
bf16 autocast, for the same number of samples after a warm-up; GPU energy comes from the NVML
energy counter through EnergyMonitor.
  * typical: a CPU DataLoader (PIL images, RandomCrop(32, padding=4), RandomHorizontalFlip,
    ToTensor, Normalize; --workers processes, pinned memory), batch 256;
  * wattlab: wattlab.train.loop.run_training — data resident on the GPU, augmentation on the
    GPU, channels_last, no per-step host sync — batch 512 eager and with CUDA graphs (each
    step's forward+backward replayed as one graph), and any --extra-batch sizes.
The last epoch's training loss is printed per row: the graphed and eager loops train the same
model on the same data and must land close to each other.
Prints images/s and GPU mJ/image side by side and the ratios. Targets: >= 3x the typical loop's
throughput, <= 1/3 of its energy per image. Read-only: changes no GPU setting.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def gpu_monitor():
    from wattlab.meters.discover import discover_meters
    from wattlab.monitor import EnergyMonitor

    discovery = discover_meters(include_gpus=True, gpu_indices=[0], include_host=False)
    return EnergyMonitor(discovery, interval_s=0.1).start()


def typical_loop(images, labels, samples: int, batch_size: int, workers: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torchvision
    from PIL import Image
    from torchvision import transforms

    class Cifar(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.x = images.permute(0, 2, 3, 1).numpy()  # HWC uint8, like torchvision's CIFAR10
            self.y = labels.numpy()
            self.t = transforms.Compose(
                [
                    transforms.RandomCrop(32, padding=4),
                    transforms.RandomHorizontalFlip(),
                    transforms.ToTensor(),
                    transforms.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
                ]
            )

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int):
            return self.t(Image.fromarray(self.x[i])), int(self.y[i])

    loader = torch.utils.data.DataLoader(
        Cifar(),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=True,
        drop_last=True,
        persistent_workers=True,
    )
    model = torchvision.models.resnet50(num_classes=10).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)

    def batches():
        while True:
            yield from loader

    it = batches()

    def step(x, y):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(20):  # warm-up
        step(*next(it))
    torch.cuda.synchronize()
    mon = gpu_monitor()
    steps = samples // batch_size
    mon.begin_window("typical")
    for _ in range(steps):
        step(*next(it))
    m = mon.end_window("typical")
    mon.stop()
    n = steps * batch_size
    del np
    return {"samples": n, "duration_s": m.duration_s, "gpu_j": m.gpu_energy_j}


def wattlab_loop(
    samples: int, batch_size: int, compile_model: bool, cuda_graphs: bool = False
) -> dict:
    from wattlab.monitor import Measurement
    from wattlab.train.config import RunConfig
    from wattlab.train.distributed import init_distributed
    from wattlab.train.loop import run_training

    mon = gpu_monitor()
    results: dict[str, Measurement] = {}

    class Windows:
        def begin(self, name: str, epoch: int | None = None) -> None:
            if name == "budget":
                mon.begin_window(name)

        def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
            if name == "budget":
                results[name] = mon.end_window(name)

    cfg = RunConfig(
        model="resnet50",
        stem="imagenet",
        precision="amp-bf16",
        batch_size=batch_size,
        budget_samples=samples,
        warmup_steps=20,
        compile=compile_model,
        cuda_graphs=cuda_graphs,
        device="cuda",
    )
    result = run_training(cfg, init_distributed("cuda"), windows=Windows())
    mon.stop()
    m = results["budget"]
    return {
        "samples": result.samples,
        "duration_s": m.duration_s,
        "gpu_j": m.gpu_energy_j,
        "final_train_loss": result.train_loss,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=150_000)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--extra-batch", type=int, nargs="*", default=[1024])
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()

    from wattlab.train.config import RunConfig
    from wattlab.train.data import load_dataset

    data = load_dataset(RunConfig(epochs=1, device="cpu"))
    results = {}
    results["typical loop, DataLoader, bs256"] = typical_loop(
        data.train_x, data.train_y, args.samples, 256, args.workers
    )
    results["wattlab loop, bs512"] = wattlab_loop(args.samples, 512, False)
    results["wattlab loop, bs512, CUDA graphs"] = wattlab_loop(args.samples, 512, False, True)
    for bs in args.extra_batch:
        results[f"wattlab loop, bs{bs}"] = wattlab_loop(args.samples, bs, False)
    if args.compile:
        results["wattlab loop, bs512, torch.compile"] = wattlab_loop(args.samples, 512, True)

    base = results["typical loop, DataLoader, bs256"]
    base_ips = base["samples"] / base["duration_s"]
    base_mj = base["gpu_j"] / base["samples"] * 1e3
    rows = []
    for name, r in results.items():
        ips = r["samples"] / r["duration_s"]
        mj = r["gpu_j"] / r["samples"] * 1e3
        rows.append(
            [
                name,
                ips,
                mj,
                r["gpu_j"] / r["duration_s"],
                f"{ips / base_ips:.2f}x",
                f"{mj / base_mj:.2f}x",
                r.get("final_train_loss", float("nan")),
            ]
        )
        r.update(images_per_s=ips, gpu_mj_per_image=mj)
    print_table(
        f"Training throughput, ResNet-50 imagenet stem, 32x32, amp-bf16, {args.samples} samples",
        [
            "loop",
            "images/s",
            "GPU mJ/image",
            "GPU W",
            "speed vs typical",
            "energy vs typical",
            "last loss",
        ],
        rows,
    )
    write_json("train_throughput", results)


if __name__ == "__main__":
    main()
