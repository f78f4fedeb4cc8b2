"""On a GPU machine: wattlab's trainer against a careful DataLoader loop, at EQUAL batch.

Workloads (32x32 CIFAR-shaped synthetic images, bf16 autocast):
  * ResNet-50, CIFAR stem (3x3 stride-1 first conv, no max-pool): compute-bound;
  * ResNet-50, imagenet stem (torchvision's): launch-bound at 32x32 (8x8 maps after the stem);
  * ResNet-18, CIFAR stem.
At batch 256, 512 and 1024 each, three loops with the SAME recipe (wattlab's recipe 2: SGD,
Nesterov, the batch-scaled peak rate, weight decay off for 1-D parameters, label smoothing
0.1, gradient-norm clipping, the same warm-up + cosine schedule) and the same augmentation
(random crop with 4 px reflect padding, horizontal flip, per-channel normalisation):
  * careful: a torch DataLoader (12 workers, pinned memory, persistent workers, augmentation
    on the CPU), cudnn.benchmark, channels_last, fused SGD;
  * wattlab eager: wattlab.train.loop.run_training (data and augmentation on the GPU);
  * wattlab + CUDA graphs (--cuda-graphs), and with --compile a torch.compile row.
Each row trains for about --seconds (its sample count comes from the careful loop's measured
rate) after a warm-up. Per row: images/s, GPU mJ/image (NVML energy counter through wattlab's
EnergyMonitor), mean GPU W, and model FLOP utilisation: 3 x forward FLOPs/sample x images/s
over the GPU's dense bf16 peak (wattlab/estimate/gpu_specs.csv). One table at the end; JSON to
$OUT/train_throughput.json (rewritten after every row). Read-only: changes no GPU setting.

    python bench/train_throughput.py                      # ~5 min on an H200
    python bench/train_throughput.py --device cpu --tiny  # seconds: a smoke test, no GPU
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table, write_json  # noqa: E402

WORKLOADS = (("resnet50", "cifar"), ("resnet50", "imagenet"), ("resnet18", "cifar"))
BATCHES = (256, 512, 1024)
PRECISION = "amp-bf16"


def energy_monitor(device: str) -> Any:
    from wattlab.meters.discover import discover_meters
    from wattlab.monitor import EnergyMonitor

    if device == "cuda":
        discovery = discover_meters(include_gpus=True, gpu_indices=[0], include_host=False)
    else:  # CPU smoke test: whatever the host offers (RAPL or the modelled estimate)
        discovery = discover_meters(include_gpus=False, include_host=True)
    return EnergyMonitor(discovery, interval_s=0.1).start()


def _config(model: str, stem: str, batch: int, samples: int, device: str, **extra: Any) -> Any:
    from wattlab.train.config import RunConfig

    return RunConfig(
        model=model,
        stem=stem,
        precision=PRECISION if device == "cuda" else "fp32",  # CPU bf16 is emulated: slow
        batch_size=batch,
        budget_samples=max(samples, batch),
        device=device,
        epoch_eval_samples=0,  # training only, as in the careful loop
        **extra,
    )


def careful_loop(data: Any, cfg: Any, seconds: float, workers: int, max_steps: int) -> dict:
    """The careful DataLoader loop with wattlab's recipe; trains about ``seconds``."""
    import torch
    from torch import nn
    from torchvision import transforms

    from wattlab.train import loop as wl
    from wattlab.train.data import channel_stats
    from wattlab.train.models import build_model
    from wattlab.train.recipe import lr_at, resolve, zero_init_residual

    device = torch.device(cfg.device)
    mean, std = channel_stats(data.train_x)
    tf = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4, padding_mode="reflect"),
            transforms.RandomHorizontalFlip(),
            transforms.Normalize((mean / 255).tolist(), (std / 255).tolist()),
        ]
    )

    class Images(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return int(data.train_y.shape[0])

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return tf(data.train_x[i].float().div_(255)), int(data.train_y[i])

    loader = torch.utils.data.DataLoader(
        Images(),
        batch_size=cfg.batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
        persistent_workers=workers > 0,
    )
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(cfg.seed)
    net = build_model(cfg.model, stem=cfg.stem, num_classes=10)
    recipe = resolve(cfg, net)
    if recipe.zero_init_residual:
        zero_init_residual(net)
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    net = net.to(device, memory_format=fmt)  # type: ignore[call-overload]
    opt = wl._make_optimizer(net, recipe, cfg.momentum, device)
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    params = [p for p in net.parameters() if p.requires_grad]
    total = max_steps

    def batches() -> Any:
        while True:
            yield from loader

    it = batches()
    step_no = [0]

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        x = x.to(device, non_blocking=True).contiguous(memory_format=fmt)
        y = y.to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = lr_at(step_no[0] % total, total, recipe)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = criterion(net(x), y)
        loss.backward()
        if recipe.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(params, recipe.clip_grad_norm, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_no[0] += 1

    net.train()
    for _ in range(
        min(20, max_steps)
    ):  # warm-up (the schedule restarts below): cuDNN autotuning, workers started
        step(*next(it))
    if device.type == "cuda":
        torch.cuda.synchronize()
    mon = energy_monitor(cfg.device)
    mon.begin_window("careful")
    steps, t0 = 0, time.perf_counter()
    while steps < max_steps and (time.perf_counter() - t0 < seconds or steps < 5):
        step(*next(it))
        steps += 1
    m = mon.end_window("careful")  # waits for the queued GPU work
    mon.stop()
    return _row(m, steps * cfg.batch_size)


def _row(m: Any, samples: int) -> dict:
    energy = m.gpu_energy_j if m.gpu_energy_j else m.total_energy_j
    return {
        "samples": samples,
        "duration_s": m.duration_s,
        "energy_j": energy,
        "energy_source": "gpu (NVML counter)" if m.gpu_energy_j else "host meters",
        "provenance": m.total_provenance.value,
    }


def wattlab_loop(data: Any, cfg: Any, profile: bool = False) -> dict:
    """wattlab's trainer; with ``profile``, torch.profiler records the budget window's kernels
    (the row's speed is then the profiled one: read the profile, not the speed)."""
    from wattlab.train.distributed import DistContext
    from wattlab.train.loop import run_training

    mon = energy_monitor(cfg.device)
    results: dict[str, Any] = {}
    prof: list[Any] = []

    class Windows:
        def begin(self, name: str, epoch: int | None = None) -> None:
            if name == "budget":
                if profile:
                    prof.append(start_profiler(cfg.device))
                mon.begin_window(name)

        def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
            if name == "budget":
                results[name] = mon.end_window(name)
                if prof:
                    prof[0].stop()

    import torch

    result = run_training(
        cfg, DistContext(device=torch.device(cfg.device)), Windows(), dataset=data
    )
    mon.stop()
    row = _row(results["budget"], result.samples)
    row["final_train_loss"] = result.train_loss
    if prof:
        row["kernel_classes"] = kernel_classes(prof[0], result.samples // cfg.batch_size)
    return row


# Kernel classes by name (CUDA kernel names of cuDNN, cuBLAS/CUTLASS, ATen and Triton), first
# match wins; "matrix" holds the convolutions and the linear layer: the FLOPs the MFU counts.
# Layout kernels come before "matrix" (cuDNN's nchwToNhwcKernel names cudnn and nhwc), and
# Triton's fused kernels (torch.compile) are batch norm when they hold one, else elementwise.
KERNEL_CLASSES = (
    ("optimizer", ("multi_tensor", "fused_sgd", "_fused_sgd", "foreach", "sgd_", "adam")),
    ("copy, layout", ("memcpy", "memset", "copy", "nchwtonhwc", "nhwctonchw", "transpose")),
    ("batch norm", ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "welford")),
    ("elementwise (relu, add, ...)", ("triton_",)),
    ("matrix (conv, linear)", ("conv", "gemm", "xmma", "cutlass", "cudnn", "implicit", "wgrad",
                               "dgrad", "sm90", "sm80", "winograd", "fft")),
    ("pooling, loss, reduce", ("pool", "reduce", "softmax", "nll", "cross_entropy", "norm")),
    ("elementwise (relu, add, ...)", ("elementwise", "vectorized", "relu", "add", "threshold")),
)  # fmt: skip


def start_profiler(device: str) -> Any:
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    p = torch.profiler.profile(activities=activities)
    p.start()
    return p


def classify_kernel(name: str) -> str:
    low = name.lower()
    for cls, needles in KERNEL_CLASSES:
        if any(n in low for n in needles):
            return cls
    return "other"


def kernel_classes(prof: Any, steps: int) -> dict[str, Any]:
    """GPU time per kernel class over the profiled window, per step; on the CPU the top-level
    operators' self time stands in (a smoke test of the path, not a GPU figure)."""
    # kernels only: a user annotation on the GPU timeline (e.g. "Optimizer.step#SGD.step")
    # spans kernels already counted (the 2026-12-05 profile counted 0.4-0.7 ms of them a step
    # under "other")
    cuda = [e for e in prof.events() if getattr(e, "device_type", None) is not None
            and str(e.device_type).endswith("CUDA")
            and not getattr(e, "is_user_annotation", False)]  # fmt: skip
    source = "CUDA kernels (torch.profiler)"
    if cuda:
        timed = [(e.name, float(e.device_time)) for e in cuda]  # microseconds
    else:  # operators' own device time (a GPU build without kernel events), else CPU time
        ops = prof.key_averages()
        timed = [(a.key, float(a.self_device_time_total)) for a in ops]
        if sum(t for _, t in timed) > 0:
            source = "operators' self GPU time (torch.profiler, no kernel events)"
        else:
            source = "CPU operators (no GPU)"
            timed = [(e.name, float(e.self_cpu_time_total)) for e in prof.events()
                     if e.cpu_parent is None]  # fmt: skip
    per_class: dict[str, float] = {}
    top: dict[str, float] = {}
    for name, us in timed:
        cls = classify_kernel(name)
        per_class[cls] = per_class.get(cls, 0.0) + us
        top[name] = top.get(name, 0.0) + us
    total_us = sum(per_class.values())
    steps = max(steps, 1)
    return {
        "source": source,
        "steps": steps,
        "busy_ms_per_step": total_us / 1e3 / steps,
        "classes_ms_per_step": {
            k: v / 1e3 / steps for k, v in sorted(per_class.items(), key=lambda kv: -kv[1])
        },  # fmt: skip
        "top_kernels_ms_per_step": {
            k[:120]: v / 1e3 / steps for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:15]
        },  # fmt: skip
    }


def model_flops(model: str, stem: str) -> float:
    from wattlab.train.models import build_model, forward_flops_per_sample

    return forward_flops_per_sample(build_model(model, stem=stem, num_classes=10), image_size=32)


def peak_bf16_flops(device: str) -> tuple[float | None, str]:
    if device != "cuda":
        return None, "no GPU"
    import torch

    from wattlab.errors import WattlabError
    from wattlab.estimate.specs import lookup_gpu, peak_flops

    name = torch.cuda.get_device_name(0)
    try:
        return peak_flops(lookup_gpu(name), PRECISION), name
    except WattlabError:
        return None, name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="a seconds-long smoke test")
    ap.add_argument("--seconds", type=float, default=8.0, help="training time per row")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--batches", type=int, nargs="*", default=list(BATCHES))
    ap.add_argument("--compile", action="store_true", help="add a torch.compile row")
    ap.add_argument(
        "--workloads", nargs="*", default=[f"{m}:{s}" for m, s in WORKLOADS],
        help="MODEL:STEM pairs (default: the three above)",
    )  # fmt: skip
    ap.add_argument(
        "--profile", action="store_true",
        help="after the rows: each loop of the first workload at its middle batch once more, "
        "with torch.profiler over the budget window: GPU time per step by kernel class",
    )  # fmt: skip
    args = ap.parse_args()
    from wattlab.train.config import RunConfig
    from wattlab.train.data import load_dataset

    workloads = tuple(tuple(w.split(":", 1)) for w in args.workloads)
    if any(len(w) != 2 for w in workloads):
        ap.error("--workloads takes MODEL:STEM pairs, e.g. resnet50:cifar")
    batches = args.batches
    train_samples = test_samples = None
    if args.tiny:
        workloads, batches, args.seconds, args.workers = (("resnet18", "imagenet"),), [32], 0.5, 0
        # the rows time training only; the trainer's closing evaluation of all 10 000 test
        # images was 2/3 of a tiny run's CPU (issue 39)
        train_samples, test_samples = 256, 64
    data = load_dataset(
        RunConfig(epochs=1, device="cpu", train_samples=train_samples, test_samples=test_samples)
    )
    peak, gpu = peak_bf16_flops(args.device)
    out: dict[str, Any] = {"gpu": gpu, "peak_bf16_flops": peak, "precision": PRECISION, "rows": []}
    rows = []
    for model, stem in workloads:
        fwd = model_flops(model, stem)
        for batch in batches:
            max_steps = 2 if args.tiny else 10**9
            base = _config(model, stem, batch, batch, args.device)
            careful = careful_loop(data, base, args.seconds, args.workers, max_steps)
            samples = (
                careful["samples"]
                if args.tiny
                else int(careful["samples"] / careful["duration_s"] * args.seconds)
            )
            variants: list[tuple[str, dict]] = [("wattlab eager", {})]
            if args.device == "cuda":
                variants.append(("wattlab --cuda-graphs", {"cuda_graphs": True}))
                if args.compile:
                    variants.append(("wattlab torch.compile", {"compile": True}))
            measured = [("careful DataLoader loop", careful)]
            for name, extra in variants:
                cfg = _config(model, stem, batch, samples, args.device, warmup_steps=20, **extra)
                measured.append((name, wattlab_loop(data, cfg)))
            careful_ips = careful["samples"] / careful["duration_s"]
            for name, r in measured:
                ips = r["samples"] / r["duration_s"]
                mfu = 3 * fwd * ips / peak if peak else None
                r.update(
                    workload=f"{model} {stem} stem",
                    batch_size=batch,
                    loop=name,
                    images_per_s=ips,
                    mj_per_image=r["energy_j"] / r["samples"] * 1e3,
                    mean_w=r["energy_j"] / r["duration_s"],
                    forward_flops_per_sample=fwd,
                    model_flop_utilisation=mfu,
                    speed_vs_careful=ips / careful_ips,
                )
                out["rows"].append(r)
                rows.append(
                    [f"{model} {stem}", batch, name, ips, r["mj_per_image"], r["mean_w"],
                     "n/a" if mfu is None else f"{mfu:.1%}", f"{ips / careful_ips:.2f}x"]
                )  # fmt: skip
                print(f"{model} {stem} bs{batch} {name}: {ips:,.0f} img/s", flush=True)
            write_json("train_throughput", out)
    print_table(
        f"Training throughput at equal batch, 32x32, {PRECISION}, {gpu}",
        ["workload", "batch", "loop", "images/s", "mJ/image", "mean W", "MFU", "vs careful"],
        rows,
    )
    if args.profile:
        out["profiles"] = profile_rows(data, workloads[0], batches, args, peak)
    path = write_json("train_throughput", out)
    print(f"\nraw: {path}")
    return 0


def profile_rows(data: Any, workload: tuple[str, ...], batches: list[int], args: Any,
                 peak: float | None) -> list[dict]:  # fmt: skip
    """Where a step's GPU time goes: each wattlab loop once more under torch.profiler."""
    model, stem = workload
    batch = sorted(batches)[len(batches) // 2]
    steps = 4 if args.tiny else 60
    fwd = model_flops(model, stem)
    variants: list[tuple[str, dict]] = [("wattlab eager", {})]
    if args.device == "cuda":
        variants.append(("wattlab --cuda-graphs", {"cuda_graphs": True}))
        if args.compile:
            variants.append(("wattlab torch.compile", {"compile": True}))
    profiles = []
    for name, extra in variants:
        cfg = _config(model, stem, batch, steps * batch, args.device,
                      warmup_steps=2 if args.tiny else 20, **extra)  # fmt: skip
        r = wattlab_loop(data, cfg, profile=True)
        k = r["kernel_classes"]
        wall_ms = r["duration_s"] * 1e3 / k["steps"]
        matrix_ms = k["classes_ms_per_step"].get("matrix (conv, linear)")
        matrix_mfu = (3 * fwd * batch / (matrix_ms / 1e3) / peak) if peak and matrix_ms else None
        k.update(workload=f"{model} {stem} stem", batch_size=batch, loop=name,
                 wall_ms_per_step=wall_ms, gpu_busy_share=k["busy_ms_per_step"] / wall_ms,
                 matrix_kernel_flop_utilisation=matrix_mfu)  # fmt: skip
        profiles.append(k)
        rows = [[cls, ms, f"{ms / wall_ms:.1%}"] for cls, ms in k["classes_ms_per_step"].items()]
        rows.append(["(GPU idle or overlapped)", wall_ms - k["busy_ms_per_step"],
                     f"{1 - k['busy_ms_per_step'] / wall_ms:.1%}"])  # fmt: skip
        util = "n/a" if matrix_mfu is None else f"{matrix_mfu:.1%}"
        print_table(
            f"Where a step goes: {model} {stem} stem, batch {batch}, {name} ({k['source']}); "
            f"{wall_ms:.2f} ms a step (profiled); the matrix kernels at {util} of the bf16 peak",
            ["kernel class", "ms per step", "share of the step"],
            rows,
        )
    return profiles


if __name__ == "__main__":
    raise SystemExit(main())
