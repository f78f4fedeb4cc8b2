"""Judge `wattlab advise --probe` where nobody measured (issue 30, item 5): on this machine's GPU,
for models outside the reference set, measure every candidate (the ground truth), run the probe
in fresh processes, and score the probe's pick and PRE's pick from every start and limit.

    python bench/probe_evaluate.py --out OUT                          # the defaults below
    python bench/probe_evaluate.py --models vgg11_bn googlenet \\
        resnet9=bench/models/resnet9.py:resnet9 --batches 96 768 --probe-s 45 --out OUT

1. **Ground truth.** One trainer sweep per model (``truth-<model>``) over precision x batch
   size, each point a timed window of ``--truth-window-s`` after its warm-up steps, twice; the
   per-image energy and time of a point are the medians over its runs. Per-image figures scale
   to any image count, so they stand for the advice's images.
2. **Probes.** For each model and batch size, ``wattlab advise ... --allow precision --probe
   S`` in a fresh process, starting from fp32 at that batch (``--json`` kept). The knob judged
   is precision (with CUDA graphs' twins, which the truth leaves out, so they are not scored):
   ``--allow batch`` would add the reference set's batch sizes, which the truth does not hold.
3. **Scores.** For every start (each truth point a probe measured) and every limit (max
   slowdown 0, 5, 20 %, none), among the precisions at the start's batch size: the probe's
   pick is the first of its measured rows ranked from that start (``ranking.rank`` with the
   probe's minimum saving); PRE's pick is the first of PRE's predictions of the same
   candidates ranked from that start (with the advisor's minimum saving). Each pick's regret
   (its true energy over the best true energy within the limit, minus 1) and violation (its
   true time over the limit) come from the ground truth (``advise.evaluation.score_pick``).
   Side by side: median and p90 regret, violation rate.
4. **Cost.** Each probe's own measured energy and time, as a share of a 30-epoch CIFAR-10
   training (50 000 images) of its start configuration, by the ground truth.

Read-only on a lent GPU: no power-limit candidates (``--allow`` never names power-limit). Writes
``OUT/probe-evaluate.json`` and prints the table; raw probe JSONs are kept in OUT/probes/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WATTLAB = [sys.executable, "-m", "wattlab.cli"]
LIMITS = (0.0, 0.05, 0.20, None)
PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16")
DEFAULT_MODELS = ("resnet9=bench/models/resnet9.py:resnet9", "vgg11_bn", "googlenet")
CIFAR_IMAGES_30_EPOCHS = 30 * 50_000


def model_args(model: str) -> tuple[str, dict[str, str]]:
    """``name=FILE.py:FUNC`` (a factory) or a torchvision name -> (name, run fields)."""
    if "=" in model:
        name, factory = model.split("=", 1)
        return name, {"model_factory": factory}
    return model, {"model": model}


def truth_spec(
    model: str,
    fields: dict[str, str],
    precisions: list[str],
    batches: list[int],
    window_s: float,
    device: str,
    repetitions: int = 2,
) -> dict[str, Any]:
    return {
        "name": f"truth-{model}",
        "base": {
            **fields,
            "device": device,
            "budget_s": window_s,
            "warmup_steps": 10,
            "epoch_eval_samples": 0,
            "train_samples": max(4 * max(batches), 4096),
            "test_samples": min(batches),
        },
        "grid": {"precision": precisions, "batch_size": batches},
        "repetitions": repetitions,
        "order": "random",
        "warmup_runs": 0,
        "cooldown_s": 0,
    }


def run_truth(spec: dict[str, Any], db: Path, out: Path) -> None:
    import yaml

    path = out / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run([*WATTLAB, "sweep", str(path), "--db", str(db)], cwd=ROOT)
    print(f"{spec['name']}: exit {done.returncode}", flush=True)


def truth_table(db: Path, model: str) -> dict[tuple[str, int], tuple[float, float]]:
    """(precision, batch) -> (J per image, s per image): medians of the truth sweep's ok runs."""
    import sqlite3

    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT precision, batch_size, energy_total_j / samples, duration_s / samples FROM runs "
        "WHERE sweep = ? AND status = 'ok' AND samples > 0",
        (f"truth-{model}",),
    ).fetchall()
    con.close()
    by: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for precision, batch, e, t in rows:
        by.setdefault((str(precision), int(batch)), []).append((float(e), float(t)))
    return {
        k: (float(np.median([e for e, _ in v])), float(np.median([t for _, t in v])))
        for k, v in by.items()
    }


def run_probe(
    model: str,
    fields: dict[str, str],
    gpu_name: str,
    batch: int,
    seconds: float,
    db: Path,
    out: Path,
) -> Path:
    target = out / "probes" / f"{model}-bs{batch}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    flag = "--model-factory" if "model_factory" in fields else "--model"
    value = fields.get("model_factory") or fields["model"]
    cmd = [
        *WATTLAB,
        "advise",
        flag,
        value,
        "--gpu-name",
        gpu_name,
        "--epochs",
        "30",
        "--batch-size",
        str(batch),
        "--precision",
        "fp32",
        "--allow",
        "precision",
        "--probe",
        f"{seconds:g}",
        "--db",
        str(db),
        "--json",
        str(target),
    ]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT)
    print(
        f"probe {model} bs{batch}: exit {done.returncode} in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return target


def score(
    truth: dict[tuple[str, int], tuple[float, float]],
    probe_rows: list[dict[str, Any]],
    pre_rows: dict[tuple[str, int], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """The probe's and PRE's picks from every start a probe measured, at every limit, scored
    on the truth (see the module). ``probe_rows``: the measured rows of the probes (dicts as
    ``--json`` writes them); ``pre_rows``: PRE's prediction per (precision, batch)."""
    from wattlab.estimate.advise.advisor import MIN_PREDICTED_SAVING
    from wattlab.estimate.advise.evaluation import score_pick
    from wattlab.estimate.advise.probe import MIN_MEASURED_SAVING
    from wattlab.estimate.advise.ranking import Limit, Option, Setting, rank

    def option(row: dict[str, Any]) -> Option:
        setting = Setting(row["precision"], int(row["batch_size"]), 1)
        return Option(
            setting,
            row["energy_j"],
            row["duration_s"],
            row["energy_low_j"],
            row["energy_high_j"],
            row["duration_low_s"],
            row["duration_high_s"],
        )

    settings = [Setting(p, b, 1) for p, b in truth]
    true = {s: truth[(s.precision, s.batch_size)] for s in settings}
    measured = {}
    for row in probe_rows:
        if (row["precision"], int(row["batch_size"])) in truth and not row.get("cuda_graphs"):
            measured[Setting(row["precision"], int(row["batch_size"]), 1)] = option(row)
    predicted = {
        s: option(pre_rows[(s.precision, s.batch_size)])
        for s in settings
        if (s.precision, s.batch_size) in pre_rows
    }
    out: dict[str, list[dict[str, Any]]] = {"probe": [], "pre": []}
    for start in settings:
        for slowdown in LIMITS:
            limit = Limit(max_slowdown=slowdown)
            for name, rows, floor in (
                ("probe", measured, MIN_MEASURED_SAVING),
                ("pre", predicted, MIN_PREDICTED_SAVING),
            ):
                if start not in rows or start not in measured:  # the same starts for both
                    continue
                # the knob is precision: the candidates are the start's batch size's
                same = [s for s in settings if s.batch_size == start.batch_size]
                options = [o for s, o in rows.items() if s.batch_size == start.batch_size]
                pick = rank(options, start, limit, floor)[0].setting
                scored = score_pick(pick, start, same, true, slowdown)  # best of all of them
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--batches", nargs="+", type=int, default=[96, 768])
    parser.add_argument("--truth-window-s", type=float, default=6.0)
    parser.add_argument("--truth-repetitions", type=int, default=2)
    parser.add_argument("--probe-s", type=float, default=45.0)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--gpu-name", default=None, help="PRE's GPU (default: this machine's).")
    parser.add_argument("--db", default=None, help="default OUT/probe-evaluate.db")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    parser.add_argument("--skip-truth", action="store_true", help="reuse the truth in --db")
    args = parser.parse_args()
    if os.environ.get("WATTLAB_FORBID_POWER_LIMITS") != "1":
        print("note: power limits are never probed here (--allow precision)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db = Path(args.db or out / "probe-evaluate.db")
    gpu_name = args.gpu_name
    if gpu_name is None:
        import torch

        gpu_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "H200"
    result: dict[str, Any] = {"command": sys.argv, "gpu_name": gpu_name, "models": {}}
    for model in args.models:
        name, fields = model_args(model)
        if not args.skip_truth:
            spec = truth_spec(
                name,
                fields,
                args.precisions,
                args.batches,
                args.truth_window_s,
                args.device,
                args.truth_repetitions,
            )
            run_truth(spec, db, out)
        truth = truth_table(db, name)
        probes, pre_rows, costs = [], {}, []
        for batch in args.batches:
            path = run_probe(name, fields, gpu_name, batch, args.probe_s, db, out)
            if not path.exists():
                continue
            data = json.loads(path.read_text())
            probes += [r for r in data["rows"] if r["source"].startswith(("measured", "estimated"))]
            start = truth.get(("fp32", batch))
            report = data.get("probe") or {}
            if start is not None and report:
                training_j = start[0] * CIFAR_IMAGES_30_EPOCHS
                costs.append(
                    {
                        "batch": batch,
                        "probe_j": report["energy_j"],
                        "probe_s": report["duration_s"],
                        "training_j": training_j,
                        "share": report["energy_j"] / training_j,
                    }
                )
        pre_rows = _pre_rows(name, fields, gpu_name, truth)
        scores = score(truth, probes, pre_rows)
        result["models"][name] = {
            "truth": {f"{p} bs{b}": v for (p, b), v in truth.items()},
            "scores": scores,
            "probe": summary(scores["probe"]),
            "pre": summary(scores["pre"]),
            "cost": costs,
        }
    everything = {
        k: [s for m in result["models"].values() for s in m["scores"][k]] for k in ("probe", "pre")
    }
    result["all"] = {k: summary(v) for k, v in everything.items()}
    (out / "probe-evaluate.json").write_text(json.dumps(result, indent=1, default=str))
    print_table(result)


def _pre_rows(
    name: str,
    fields: dict[str, str],
    gpu_name: str,
    truth: dict[tuple[str, int], tuple[float, float]],
) -> dict[tuple[str, int], dict[str, Any]]:
    """PRE's prediction (per image x 1) of every truth point."""
    from wattlab.estimate import pre_cache

    pre, _ = pre_cache.fit_reference(None)
    out = {}
    for precision, batch in truth:
        p = pre.predict_config(
            model=fields.get("model_factory") or fields["model"],
            gpus=1,
            epochs=1.0,
            gpu_name=gpu_name,
            stem="cifar",
            image_size=32,
            train_size=50_000,
            samples=1.0,
            precision=precision,
            batch_size=batch,
        )
        out[(precision, batch)] = {
            "precision": precision,
            "batch_size": batch,
            "energy_j": p.energy_j,
            "duration_s": p.duration_s,
            "energy_low_j": p.energy_low_j,
            "energy_high_j": p.energy_high_j,
            "duration_low_s": p.duration_low_s,
            "duration_high_s": p.duration_high_s,
        }
    return out


def _pct(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1%}"


def print_table(result: dict[str, Any]) -> None:
    print(
        "| model | method | cases | median regret | p90 regret | violations "
        "| probe cost (share of 30 epochs) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for name, m in [*result["models"].items(), ("all", {**result["all"], "cost": []})]:
        costs = ", ".join(
            f"bs{c['batch']}: {c['probe_s']:.0f} s, {c['share']:.1%}" for c in m.get("cost", [])
        )
        for method in ("probe", "pre"):
            s = m[method] if name != "all" else result["all"][method]
            if not s.get("n"):
                print(
                    f"| {name} | {method} | 0 | - | - | - | {costs if method == 'probe' else ''} |"
                )
                continue
            regret = f"{_pct(s['median_regret'])} | {_pct(s['p90_regret'])}"
            print(
                f"| {name} | {method} | {s['n']} | {regret} "
                f"| {_pct(s['violation_rate'])} | {costs if method == 'probe' else ''} |"
            )


if __name__ == "__main__":
    main()
