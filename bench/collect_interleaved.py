"""Reference runs for PRE in interleaved windows: one warm process, each model built once
(issue 47). Replaces the old collector's one `wattlab run` per configuration on a new GPU.

    python bench/collect_interleaved.py --out OUT --seconds 520            # the default grid
    python bench/collect_interleaved.py --out OUT --models resnet18 --batches 8 16 \\
        --precisions fp32 amp-bf16 --device cpu --seconds 60                # a CPU smoke run
    python bench/collect_interleaved.py --out OUT2 --skip-from OUT/raw     # a second call

What it does, per model (in the order given; the default puts the reference set's seven
main models first):

1. **Set-up once.** ``train.interleave.InterleavedTrainer`` builds the model, its optimizer
   and the data on the device: the same ``TrainStep``, recipe and cuDNN benchmark mode as
   ``wattlab run``.
2. **Each configuration's own set-up** (``prepare``): real training steps until the step time
   is steady; the first of them is where cuDNN autotunes the new shape and dtype. Its wall time
   and its first step are recorded apart (``setup_s``, ``first_step_s``). Configurations are set
   up in priority order (every precision at the model's first batch size, then the next batch
   size) while the model's share of the call's seconds allows.
3. **Windows, interleaved.** ``--rounds`` rounds; in each, every configuration of the model
   once, in a fresh random order, one window of about ``--window-s`` (at least one step) between
   an ``EnergyMonitor`` window's begin and end (the monitor synchronises the device at both
   edges). A window holds training steps only: no evaluation, no data loading (the data sits on
   the device), no STEP marks.

Each model's time share is what is left of ``--seconds`` over the models left, so a model
whose autotuning is slow gets fewer configurations, never the call's end. Each model's raw JSON
is written as soon as it is done (OUT/raw/MODEL.json): a call cut at its limit keeps every model
finished before. ``bench/reference_from_windows.py`` turns the raw JSON into reference rows.

Wall-time accounting (printed at the end and kept in OUT/collect.json): the share of the
process's wall time inside measured windows, and where the rest went (start-up and imports,
model and data builds, the configurations' set-up, of which the first, autotuning step, and
the untimed step each window starts with).

Read-only on a lent GPU: no power limit, clock or other GPU setting is changed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PROCESS_START = time.monotonic()
ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("amp-bf16", "fp32", "tf32", "amp-fp16")
MAIN_MODELS = (
    "resnet50",
    "resnet18",
    "mobilenet_v2",
    "vgg16",
    "efficientnet_b0",
    "resnet34",
    "mobilenet_v3_small",
)
OTHER_MODELS = (
    "densenet121",
    "resnext50_32x4d",
    "convnext_tiny",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
    "vit_p4_d6_w256",
    "mobilenet_v3_large",
    "resnet101",
    "efficientnet_v2_s",
    "wide_resnet50_2",
    "vit_p8_d12_w384",
    "resnet152",
    "vit_p2_d4_w192",
)
MAIN_BATCHES = (256, 32, 2048)
OTHER_BATCHES = (128, 1024)
# A configuration whose step would take longer than this (s) is measured at the next batch size
# down instead: one window of a few steps says little, and its set-up would eat the model's
# share. The estimate is the H200 reference set's fastest amp-bf16 time per image of the model,
# times the precision's factor below, times H100_SLOWER (the H100's lower memory bandwidth).
MAX_STEP_S = 0.3
PRECISION_FACTOR = {"amp-bf16": 1.0, "amp-fp16": 1.0, "tf32": 1.8, "fp32": 5.5}
H100_SLOWER = 1.3
MIN_BATCH = 32


def reference_time_per_image_s() -> dict[str, float]:
    """Each model's fastest amp-bf16 time per image (s) in the shipped H200 reference set."""
    path = ROOT / "wattlab" / "data" / "h200-reference.csv"
    best: dict[str, float] = {}
    with path.open() as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        for row in rows:
            if row["precision"] != "amp-bf16" or row["status"] != "ok":
                continue
            per_image = float(row["duration_s"]) / float(row["samples"])
            model = row["model"]
            best[model] = min(best.get(model, math.inf), per_image)
    return best


def capped_batch(batch: int, precision: str, per_image_s: float | None) -> int:
    """``batch``, halved while the estimated step time is over MAX_STEP_S (not below
    MIN_BATCH); unchanged when the model has no reference time."""
    if per_image_s is None:
        return batch
    factor = PRECISION_FACTOR[precision] * H100_SLOWER * per_image_s
    while batch > MIN_BATCH and batch * factor > MAX_STEP_S:
        batch //= 2
    return batch


def plan_shapes(
    model: str,
    batches: list[int],
    precisions: list[str],
    per_image_s: float | None,
    done: set[tuple[str, str, int]],
) -> list[tuple[str, int]]:
    """(precision, batch) in priority order: every precision at the first batch size, then the
    next; capped batches (``capped_batch``), duplicates and ``done`` configurations left out."""
    out: list[tuple[str, int]] = []
    for batch in batches:
        for precision in precisions:
            shape = (precision, capped_batch(batch, precision, per_image_s))
            if shape not in out and (model, *shape) not in done:
                out.append(shape)
    return out


def done_configurations(folder: Path | None) -> set[tuple[str, str, int]]:
    """(model, precision, batch) measured in an earlier call's raw JSON."""
    out: set[tuple[str, str, int]] = set()
    if folder is None:
        return out
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        for window in data.get("windows", []):
            out.add((data["model"], window["precision"], int(window["batch_size"])))
    return out


def explicit_configs(configs: list[str]) -> list[tuple[str, list[tuple[str, int]]]]:
    """``MODEL:PRECISION:BATCH`` items grouped by model, in their order."""
    out: dict[str, list[tuple[str, int]]] = {}
    for item in configs:
        model, precision, batch = item.rsplit(":", 2)
        if precision not in PRECISIONS:
            raise SystemExit(f"collect_interleaved: unknown precision {precision!r} in {item!r}")
        out.setdefault(model, []).append((precision, int(batch)))
    return list(out.items())


def collect_model(
    model: str,
    shapes: list[tuple[str, int]],
    share_s: float,
    args: argparse.Namespace,
    monitor: Any,
    rng: random.Random,
    out: dict[str, Any],
) -> dict[str, Any]:
    """One model's set-ups and interleaved windows within ``share_s`` seconds (module
    docstring), filled into ``out`` as they come (a Ctrl-C keeps what was measured)."""
    import torch

    from wattlab.train.config import RunConfig
    from wattlab.train.interleave import InterleavedTrainer, Shape

    clock = time.monotonic
    started = clock()
    stop_at = started + share_s
    max_batch = max(b for _, b in shapes)
    fields: dict[str, Any] = {"model": model}
    if "=" in model:
        name, factory = model.split("=", 1)
        fields = {"model_factory": factory}
        model = name
    cfg = RunConfig(
        **fields,
        device=args.device,
        batch_size=max_batch,
        epochs=1,
        train_samples=max(2 * max_batch, args.train_samples),
        test_samples=256,
    )
    out.update(
        {
            "model": model,
            "fields": fields,
            "device": args.device,
            "recipe": cfg.recipe,
            "synthetic_version": cfg.synthetic_version,
            "stem": cfg.stem,
            "image_size": cfg.image_size,
            "train_size": cfg.train_samples,
            "share_s": share_s,
            "shapes": [],
            "windows": [],
            "skipped": [],
        }
    )
    results: dict[str, Any] = {}

    class Hooks:
        def begin(self, name: str, epoch: int | None = None) -> None:
            monitor.begin_window(name)

        def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
            results[name] = monitor.end_window(name)

    trainer = InterleavedTrainer(cfg, torch.device(args.device), clock=clock)
    out["build_s"] = trainer.setup_s
    ready: list[tuple[Any, float]] = []  # (Shape, step_s)
    for i, (precision, batch) in enumerate(shapes):
        shape = Shape(precision, batch)
        setups = [s["setup_s"] for s in out["shapes"] if "setup_s" in s]
        expected = statistics.median(setups) if setups else 0.0
        # keep ~half the share for the windows: rounds x (window + the untimed step)
        windows_need = args.rounds * sum(max(args.window_s, s) + s for _, s in ready)
        windows_need += args.rounds * (args.window_s + 0.05)  # this one's, at the least
        if ready and clock() + expected + windows_need > stop_at:
            out["skipped"] = [{"precision": p, "batch_size": b} for p, b in shapes[i:]]
            break
        try:
            prepared = trainer.prepare(shape, stop_at=stop_at - windows_need)
        except Exception as error:  # noqa: BLE001 - a configuration that cannot run is kept
            out["shapes"].append(
                {"precision": precision, "batch_size": batch, "error": str(error)[:300]}
            )
            if args.device == "cuda":
                torch.cuda.empty_cache()
            continue
        out["shapes"].append(
            {
                "precision": precision,
                "batch_size": batch,
                "setup_s": prepared.setup_s,
                "first_step_s": prepared.first_step_s,
                "warmup_steps": prepared.warmup_steps,
                "step_s": prepared.step_s,
            }
        )
        ready.append((shape, prepared.step_s))
        print(
            f"  {model} {precision} bs{batch}: set up in {prepared.setup_s:.2f} s (first step "
            f"{prepared.first_step_s:.2f} s, {prepared.warmup_steps} steps, "
            f"{prepared.step_s * 1e3:.3g} ms a step)",
            flush=True,
        )
    if ready:
        left = stop_at - clock()
        overhead = sum(s for _, s in ready) + 0.02 * len(ready)  # untimed steps, hooks
        window_s = (left / args.rounds - overhead) / len(ready)
        window_s = min(args.max_window_s, max(args.window_s, window_s))
        out["window_s"] = window_s
        for r in range(args.rounds):
            order = list(ready)
            rng.shuffle(order)
            for shape, _ in order:
                name = f"{model}:{shape.precision}:{shape.batch_size}:{r}"
                ran = trainer.window(shape, window_s, Hooks(), name)
                m = results.pop(name)
                out["windows"].append(
                    {
                        "precision": shape.precision,
                        "batch_size": shape.batch_size,
                        "round": r + 1,
                        "steps": ran.steps,
                        "images": ran.images,
                        "host_s": ran.duration_s,
                        "duration_s": m.duration_s,
                        "energy_j": m.total_energy_j,
                        "gpu_energy_j": m.gpu_energy_j,
                        "cpu_energy_j": m.cpu_energy_j,
                        "dram_energy_j": m.dram_energy_j,
                        "uncertainty_j": m.total_uncertainty_j,
                        "provenance": {
                            k: getattr(v, "value", str(v)) for k, v in m.provenance.items()
                        },
                        "utilization_percent": dict(m.utilization_percent),
                    }
                )
    out["wall_s"] = clock() - started
    del trainer
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return out


def accounting(models: list[dict[str, Any]], wall_s: float, start_s: float) -> dict[str, Any]:
    """Where the process's wall time went (module docstring)."""
    windows_s = sum(w["duration_s"] for m in models for w in m["windows"])
    setup_s = sum(s.get("setup_s", 0.0) for m in models for s in m["shapes"])
    first_s = sum(s.get("first_step_s", 0.0) for m in models for s in m["shapes"])
    build_s = sum(m.get("build_s", 0.0) for m in models)
    configurations = {
        (m["model"], w["precision"], w["batch_size"]) for m in models for w in m["windows"]
    }
    return {
        "wall_s": wall_s,
        "start_s": start_s,
        "windows_s": windows_s,
        "windows_share": windows_s / wall_s if wall_s else 0.0,
        "windows_share_after_autotuning": windows_s / (wall_s - first_s)
        if wall_s > first_s
        else 0.0,
        "build_s": build_s,
        "setup_s": setup_s,
        "first_steps_s": first_s,
        "other_s": wall_s - windows_s - setup_s - build_s - start_s,
        "configurations": len(configurations),
        "windows": sum(len(m["windows"]) for m in models),
    }


def gpu_facts(device: str) -> dict[str, Any]:
    import platform

    import torch

    name = torch.cuda.get_device_name(0) if device == "cuda" else None
    return {"gpu_name": name, "host": platform.node()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", default=[*MAIN_MODELS, *OTHER_MODELS])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    parser.add_argument("--batches", nargs="+", type=int, default=None,
                        help="every model's batch sizes (default: 256 32 2048 for the seven "
                        "main models, 128 1024 for the others)")  # fmt: skip
    parser.add_argument("--configs", nargs="+", default=None, metavar="MODEL:PRECISION:BATCH",
                        help="exactly these configurations, in this order (instead of --models, "
                        "--precisions and --batches; no batch capped)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=520.0, help="the whole process's")
    parser.add_argument("--window-s", type=float, default=1.0, help="a window's least length")
    parser.add_argument("--max-window-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-from", type=Path, default=None,
                        help="an earlier call's OUT/raw: its configurations are not measured "
                        "again")  # fmt: skip
    args = parser.parse_args(argv)
    import torch

    from wattlab.monitor import EnergyMonitor

    if args.device == "cuda" and not torch.cuda.is_available():
        print("collect_interleaved: no CUDA GPU here; give --device cpu", file=sys.stderr)
        return 2
    raw = args.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    per_image = reference_time_per_image_s()
    done = done_configurations(args.skip_from)
    deadline = PROCESS_START + args.seconds
    models: list[dict[str, Any]] = []
    with EnergyMonitor(record_trace=False) as monitor:
        start_s = time.monotonic() - PROCESS_START
        facts = gpu_facts(args.device)
        print(f"collect: {facts} start-up {start_s:.1f} s", flush=True)
        plans = []
        for model, shapes in explicit_configs(args.configs or []):
            plans.append((model, model.split("=", 1)[0], shapes))
        for model in [] if args.configs else args.models:
            name = model.split("=", 1)[0]
            default = MAIN_BATCHES if name in MAIN_MODELS else OTHER_BATCHES
            batches = args.batches or list(default)
            shapes = plan_shapes(name, batches, args.precisions, per_image.get(name), done)
            if shapes:
                plans.append((model, name, shapes))
        for i, (model, name, shapes) in enumerate(plans):
            left = deadline - time.monotonic()
            if left < 5:
                print(f"collect: out of time before {name}", flush=True)
                break
            # the model's share of what is left: in proportion to its configurations
            share_s = left * len(shapes) / sum(len(p[2]) for p in plans[i:])
            print(f"collect: {name} ({len(shapes)} configurations, {share_s:.0f} s)", flush=True)
            result: dict[str, Any] = {"model": name, "shapes": [], "windows": []}
            interrupted = False
            try:
                collect_model(model, shapes, share_s, args, monitor, rng, result)
            except KeyboardInterrupt:  # the call's limit: keep what this model measured
                result["error"] = "interrupted"
                interrupted = True
            except Exception as error:  # noqa: BLE001 - one model's failure ends only it
                print(f"collect: {name} failed: {error}", flush=True)
                result["error"] = str(error)[:500]
            result.update(facts)
            result["torch"] = torch.__version__
            models.append(result)
            (raw / f"{name}.json").write_text(json.dumps(result, indent=1))
            if interrupted:
                print(f"collect: interrupted in {name}; its finished windows are kept", flush=True)
                break
    wall_s = time.monotonic() - PROCESS_START
    summary = accounting(models, wall_s, start_s)
    summary["argv"] = sys.argv
    summary["pid"] = os.getpid()
    (args.out / "collect.json").write_text(json.dumps(summary, indent=1))
    print(
        f"collect: {summary['configurations']} configurations, {summary['windows']} windows; "
        f"{summary['windows_s']:.0f} of {wall_s:.0f} s inside windows "
        f"({summary['windows_share']:.1%}; {summary['windows_share_after_autotuning']:.1%} of "
        f"the time outside the first, autotuning steps); start-up {start_s:.1f} s, builds "
        f"{summary['build_s']:.1f} s, set-ups {summary['setup_s']:.1f} s (first steps "
        f"{summary['first_steps_s']:.1f} s), other {summary['other_s']:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
