"""Judge `wattlab advise --probe` where nobody measured (issue 37, item 6): on this machine's GPU,
for ResNet-50 and models outside the reference set, measure every candidate (the ground truth)
in clean interleaved windows, run the probe in a fresh process, and score the probe's pick and
PRE's pick from every start and limit.

    python bench/probe_evaluate.py --out OUT                       # the defaults below
    python bench/probe_evaluate.py --models resnet50 vgg11_bn \\
        resnet9=bench/models/resnet9.py:resnet9 --batches 96 768 --out OUT
    python bench/probe_evaluate.py truth --model resnet50 --batch 96 --json T.json  # one truth

For each model and batch size (a "pair"):

1. **Probe.** ``wattlab advise ... --precision fp32 --allow precision --probe S --json`` in a
   fresh process (S = 30 by default: the probe's default length for any training of 10 minutes
   or more). Its ``--json`` holds its windows, rows, cost and PRE's rows before the probe.
2. **Truth.** A fresh process (``truth``) trains the model once and measures every precision
   in training-only windows of ``--truth-window-s`` (5 s), ``--truth-rounds`` (2) times each,
   interleaved in a fresh random order per round (``train.interleave``, the same kernels a run
   uses: cuDNN benchmark mode); a candidate's truth is the median per image, and its spread
   (max/min - 1 of its windows) is reported beside it.
3. **Scores.** From every start (the four precisions at the pair's batch size) and every limit
   (max slowdown 0, 5, 20 %, none): the probe's pick re-ranks the probe's measured windows with
   that start as the current configuration (``probe_rows.combined``: unmeasured candidates keep
   PRE's scaled prediction); PRE's pick ranks PRE's rows from that start with the advisor's
   minimum saving. Regret (true energy of the pick over the best true energy within the limit,
   minus 1) and violation (true time over the limit) from the truth. The probe ran once per
   pair, from fp32 (the start whose cuDNN autotuning costs most); every start is scored on its
   measured windows, which is what a probe from that start measures too (every candidate).
4. **Checks.** Candidates measured and windows each, the probe's seconds (set-up included),
   each measured row's energy per image against the truth, and the probe's cost as a share of a
   30-epoch CIFAR-10 training (1.5 M images) and of a 10-minute training of the advised
   configuration, by the truth.

Read-only on a lent GPU: no power-limit candidates (``--allow precision``). Writes
``OUT/probe-evaluate.json`` and prints the table; each pair's raw JSON is kept in OUT/raw/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WATTLAB = [sys.executable, "-m", "wattlab.cli"]
LIMITS = (0.0, 0.05, 0.20, None)
PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16")
DEFAULT_MODELS = (
    "resnet50",
    "resnet9=bench/models/resnet9.py:resnet9",
    "vgg11_bn",
    "googlenet",
    "shufflenet_v2_x1_0",
)
CIFAR_IMAGES_30_EPOCHS = 30 * 50_000
TEN_MINUTES_S = 600.0


def model_args(model: str) -> tuple[str, dict[str, str]]:
    """``name=FILE.py:FUNC`` (a factory) or a torchvision name -> (name, run fields)."""
    if "=" in model:
        name, factory = model.split("=", 1)
        return name, {"model_factory": factory}
    return model, {"model": model}


# ---- the truth (a fresh process per pair) ---------------------------------------------------


def measure_truth(
    fields: dict[str, str],
    batch: int,
    precisions: list[str],
    window_s: float,
    rounds: int,
    device: str,
    seed: int = 0,
) -> dict[str, Any]:
    """Every precision at ``batch`` in ``rounds`` interleaved windows of ``window_s``."""
    import torch

    from wattlab.monitor import EnergyMonitor
    from wattlab.train.config import RunConfig
    from wattlab.train.interleave import InterleavedTrainer, Shape

    cfg = RunConfig(
        **fields,
        device=device,
        batch_size=batch,
        epochs=1,
        train_samples=max(4 * batch, 2048),
        test_samples=256,
    )
    rng = random.Random(seed)
    results: dict[str, Any] = {}

    class Hooks:
        def begin(self, name: str, epoch: int | None = None) -> None:
            monitor.begin_window(name)

        def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
            results[name] = monitor.end_window(name)

    with EnergyMonitor(record_trace=False) as monitor:
        trainer = InterleavedTrainer(cfg, torch.device(device))
        shapes = [Shape(p, batch) for p in precisions if not (device == "cpu" and p == "amp-fp16")]
        setup = {s.precision: trainer.prepare(s).setup_s for s in shapes}
        windows: dict[str, list[dict[str, float]]] = {s.precision: [] for s in shapes}
        for r in range(rounds):
            order = list(shapes)
            rng.shuffle(order)
            for shape in order:
                name = f"truth:{shape.precision}:{r}"
                ran = trainer.window(shape, window_s, Hooks(), name)
                m = results.pop(name)
                windows[shape.precision].append(
                    {
                        "energy_per_image_j": m.total_energy_j / ran.images,
                        "time_per_image_s": m.duration_s / ran.images,
                        "duration_s": m.duration_s,
                        "gpu_share": m.gpu_energy_j / m.total_energy_j if m.total_energy_j else 0.0,
                    }
                )
    out: dict[str, Any] = {"setup_s": setup, "windows": windows, "median": {}}
    for precision, items in windows.items():
        e = [w["energy_per_image_j"] for w in items]
        t = [w["time_per_image_s"] for w in items]
        out["median"][precision] = {
            "energy_per_image_j": statistics.median(e),
            "time_per_image_s": statistics.median(t),
            "spread": max(e) / min(e) - 1.0,
        }
    return out


# ---- the probe (a fresh process per pair) -----------------------------------------------------


def probe_command(
    fields: dict[str, str], gpu_name: str, batch: int, seconds: float, target: Path
) -> list[str]:
    flag = "--model-factory" if "model_factory" in fields else "--model"
    value = fields.get("model_factory") or fields["model"]
    return [
        *WATTLAB, "advise", flag, value, "--gpu-name", gpu_name, "--epochs", "30",
        "--batch-size", str(batch), "--precision", "fp32", "--allow", "precision",
        "--probe", f"{seconds:g}", "--json", str(target),
    ]  # fmt: skip


# ---- scoring ----------------------------------------------------------------------------------


def _option(row: dict[str, Any], per_image: float = 1.0) -> Any:
    from wattlab.estimate.advise.ranking import Option, Setting

    setting = Setting(row["precision"], int(row["batch_size"]), 1)
    return Option(
        setting,
        row["energy_j"] * per_image,
        row["duration_s"] * per_image,
        row["energy_low_j"] * per_image,
        row["energy_high_j"] * per_image,
        row["duration_low_s"] * per_image,
        row["duration_high_s"] * per_image,
        source=str(row.get("source", "predicted")),
    )


def score(
    truth: dict[str, tuple[float, float]],
    probe_rows: list[dict[str, Any]],
    pre_rows: list[dict[str, Any]],
    batch: int,
) -> dict[str, list[dict[str, Any]]]:
    """The probe's and PRE's picks from every start and limit, scored on ``truth`` (precision ->
    (J, s) per image). ``probe_rows``: the probe's ranked rows (``--json``; measured ones have a
    source starting "measured"/"estimated"); ``pre_rows``: PRE's rows before the probe."""
    from wattlab.estimate.advise.advisor import MIN_PREDICTED_SAVING
    from wattlab.estimate.advise.evaluation import score_pick
    from wattlab.estimate.advise.probe_rows import combined
    from wattlab.estimate.advise.ranking import Limit, Setting, rank

    settings = [Setting(p, batch, 1) for p in truth]
    true = {s: truth[s.precision] for s in settings}
    measured = {
        o.setting: o
        for o in map(_option, probe_rows)
        if o.source.startswith(("measured", "estimated")) and o.setting in true
    }
    predicted = [o for o in map(_option, pre_rows) if o.setting in true]
    out: dict[str, list[dict[str, Any]]] = {"probe": [], "pre": []}
    for start in settings:
        if start not in measured or start not in {o.setting for o in predicted}:
            continue  # the same starts for both
        for slowdown in LIMITS:
            limit = Limit(max_slowdown=slowdown)
            picks = {
                "probe": combined(predicted, measured, start, limit)[0].setting,
                "pre": rank(predicted, start, limit, MIN_PREDICTED_SAVING)[0].setting,
            }
            for name, pick in picks.items():
                scored = score_pick(pick, start, settings, true, slowdown)
                out[name].append(
                    {
                        **scored,
                        "start": start.__dict__,
                        "pick": pick.__dict__,
                        "limit": "none" if slowdown is None else f"{slowdown:.0%}",
                    }
                )
    return out


def summary(scores: list[dict[str, Any]]) -> dict[str, Any]:
    from wattlab.estimate.advise.evaluation import summarise

    return summarise(scores)


def checks(
    truth: dict[str, tuple[float, float]], data: dict[str, Any], samples: float
) -> dict[str, Any]:
    """Windows per candidate, the probe's seconds, each measured row's energy per image
    against the truth, and the cost shares."""
    report = data.get("probe") or {}
    rows = data.get("rows", [])
    per_candidate: dict[str, int] = {}
    for w in report.get("window_rows", []):
        per_candidate[w["candidate"]] = per_candidate.get(w["candidate"], 0) + 1
    errors = {}
    for row in rows:
        if row["source"].startswith(("measured", "estimated")) and row["precision"] in truth:
            got = row["energy_j"] / samples
            errors[row["precision"]] = got / truth[row["precision"]][0] - 1.0
    first = rows[0] if rows else None
    shares: dict[str, float] = {}
    if first is not None and first["precision"] in truth and report:
        e_img, t_img = truth[first["precision"]]
        shares["of_30_epochs"] = report["energy_j"] / (e_img * CIFAR_IMAGES_30_EPOCHS)
        shares["of_10_minutes"] = report["energy_j"] / (e_img / t_img * TEN_MINUTES_S)
        shares["30_epochs_s"] = t_img * CIFAR_IMAGES_30_EPOCHS
    return {
        "windows": per_candidate,
        "measured": len(per_candidate),
        "probe_s": report.get("duration_s"),
        "setup_s": (report.get("setup_s") or 0.0)
        + sum((report.get("candidate_setup_s") or {}).values()),
        "energy_error": errors,
        "cost_share": shares,
        "advice": data.get("advice"),
    }


def judge_pair(
    name: str, fields: dict[str, str], batch: int, args: argparse.Namespace, raw: Path
) -> dict[str, Any]:
    target = raw / f"probe-{name}-bs{batch}.json"
    started = time.monotonic()
    cmd = probe_command(fields, args.gpu_name, batch, args.probe_s, target)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - started
    (raw / f"probe-{name}-bs{batch}.txt").write_text(done.stdout + done.stderr)
    print(f"probe {name} bs{batch}: exit {done.returncode} in {took:.0f} s", flush=True)
    truth_path = raw / f"truth-{name}-bs{batch}.json"
    truth_cmd = [
        sys.executable, str(Path(__file__).resolve()), "truth", "--model", json.dumps(fields),
        "--batch", str(batch), "--window-s", str(args.truth_window_s),
        "--rounds", str(args.truth_rounds), "--device", args.device, "--json", str(truth_path),
    ]  # fmt: skip
    earlier = Path(args.truth_from) / truth_path.name if args.truth_from else None
    if earlier is not None and earlier.exists():  # a truth measured by an earlier call
        truth_path.write_text(earlier.read_text())
        print(f"truth {name} bs{batch}: from {earlier}", flush=True)
    else:
        started = time.monotonic()
        t_done = subprocess.run(truth_cmd, cwd=ROOT)
        took = time.monotonic() - started
        print(f"truth {name} bs{batch}: exit {t_done.returncode} in {took:.0f} s", flush=True)
    if not (target.exists() and truth_path.exists()):
        return {"error": "the probe or the truth did not finish"}
    data = json.loads(target.read_text())
    truth_raw = json.loads(truth_path.read_text())
    truth = {
        p: (v["energy_per_image_j"], v["time_per_image_s"]) for p, v in truth_raw["median"].items()
    }
    pre_rows = (data.get("probe") or {}).get("pre_rows") or []
    samples = float(data.get("samples") or 1.0)
    per_image_rows = [{**r, **{k: r[k] / samples for k in _PER_RUN}} for r in data.get("rows", [])]
    per_image_pre = [{**r, **{k: r[k] / samples for k in _PER_RUN}} for r in pre_rows]
    scores = score(truth, per_image_rows, per_image_pre, batch)
    return {
        "truth": truth_raw,
        "checks": checks(truth, data, samples),
        "scores": scores,
        "probe": summary(scores["probe"]),
        "pre": summary(scores["pre"]),
    }


_PER_RUN = (
    "energy_j",
    "duration_s",
    "energy_low_j",
    "energy_high_j",
    "duration_low_s",
    "duration_high_s",
)


def print_table(result: dict[str, Any]) -> None:
    print("\npair | measured | windows | probe s | set-up s | max |energy err| | cost 30 ep | "
          "cost 10 min | probe regret med/p90 | PRE regret med/p90 | truth spread max")  # fmt: skip
    for key, pair in result["pairs"].items():
        if "error" in pair:
            print(f"{key} | {pair['error']}")
            continue
        c = pair["checks"]
        errs = [abs(v) for v in c["energy_error"].values()] or [math.nan]
        spread = max(v["spread"] for v in pair["truth"]["median"].values())
        wins = min(c["windows"].values()) if c["windows"] else 0
        share = c["cost_share"]
        print(
            f"{key} | {c['measured']} | min {wins} | {c['probe_s'] or math.nan:.1f} | "
            f"{c['setup_s']:.1f} | {max(errs):.1%} | {share.get('of_30_epochs', math.nan):.1%} | "
            f"{share.get('of_10_minutes', math.nan):.1%} | "
            f"{pair['probe'].get('median_regret', math.nan):.1%}/"
            f"{pair['probe'].get('p90_regret', math.nan):.1%} | "
            f"{pair['pre'].get('median_regret', math.nan):.1%}/"
            f"{pair['pre'].get('p90_regret', math.nan):.1%} | {spread:.1%}"
        )
    for who in ("probe", "pre"):
        s = result["all"][who]
        print(f"all {who}: {json.dumps(s, default=str)}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["truth"]:
        p = argparse.ArgumentParser()
        p.add_argument("truth")
        p.add_argument("--model", required=True, help="the run fields as JSON")
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--window-s", type=float, default=5.0)
        p.add_argument("--rounds", type=int, default=2)
        p.add_argument("--device", default="cuda")
        p.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
        p.add_argument("--json", required=True)
        a = p.parse_args(argv)
        result = measure_truth(
            json.loads(a.model), a.batch, a.precisions, a.window_s, a.rounds, a.device
        )
        Path(a.json).write_text(json.dumps(result, indent=1))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[96, 768])
    parser.add_argument("--truth-window-s", type=float, default=5.0)
    parser.add_argument("--truth-rounds", type=int, default=2)
    parser.add_argument("--probe-s", type=float, default=30.0)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--gpu-name", default=None, help="PRE's GPU (default: this machine's).")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    parser.add_argument("--truth-from", default=None, help="reuse truth-*.json found here")
    args = parser.parse_args(argv)
    out = Path(args.out)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    if args.gpu_name is None:
        import torch

        args.gpu_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "H200"
    result: dict[str, Any] = {"command": sys.argv, "gpu_name": args.gpu_name, "pairs": {}}
    path = out / "probe-evaluate.json"
    for model in args.models:
        name, fields = model_args(model)
        for batch in args.batches:
            result["pairs"][f"{name} bs{batch}"] = judge_pair(name, fields, batch, args, raw)
            everything = {
                k: [s for p in result["pairs"].values() for s in p.get("scores", {}).get(k, [])]
                for k in ("probe", "pre")
            }
            result["all"] = {k: summary(v) for k, v in everything.items()}
            path.write_text(json.dumps(result, indent=1, default=str))  # after every pair
    print_table(result)


if __name__ == "__main__":
    main()
