"""Energy to accuracy, as Zeus defines it: the energy a run had used when its validation
accuracy first reached a target.

Each wattlab run evaluates, after every epoch, the first N test images (a fixed subset,
``epoch_eval_samples``) in an ``epoch_eval`` window whose row holds the accuracy. A run's
energy to accuracy is the cumulative energy of its ``epoch`` and ``epoch_eval`` windows up to
and including the first epoch whose accuracy is at least the target (the evaluations count:
a training job that checks its accuracy pays for it); its time to accuracy is the same sum
of durations. A run that never reaches the target has none. A configuration's figure is the
median over its runs that reached the target, with how many did.

Without a given target, the target is 90 % of the highest per-epoch accuracy any of the runs
reached (said so in the result), so that a comparison exists on any data, but never below what
guessing reaches on the per-epoch subset (:mod:`wattlab.analysis.chance`): when no run's
accuracy is beyond chance there is no target and the result says "no configuration learned
beyond chance"; a given target at or below chance is kept and said to be so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.chance import Chance, chance_of
from wattlab.wording import chance_words

EPOCH_EVAL = "epoch_eval"
DEFAULT_TARGET_SHARE = 0.9  # of the best per-epoch accuracy, when no target is given


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce")


def epoch_curves(windows: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (run, epoch) with per-epoch accuracy: ``run_id``, ``epoch``, ``accuracy``,
    ``energy_j`` and ``duration_s`` (cumulative, training and evaluation windows up to and
    including that epoch). Empty when no window holds an accuracy."""
    columns = ["run_id", "epoch", "accuracy", "energy_j", "duration_s", "eval_images"]
    empty = pd.DataFrame(columns=columns)
    if windows is None or windows.empty or "accuracy" not in windows.columns:
        return empty
    w = windows[windows["name"].isin(["epoch", EPOCH_EVAL])].copy()
    w["run_id"] = _numeric(w, "run_id")
    w["epoch"] = _numeric(w, "epoch")
    w = w.dropna(subset=["run_id", "epoch"])
    if w.empty:
        return empty
    w["energy"] = _numeric(w, "energy_total_j")
    w["duration"] = _numeric(w, "duration_s")
    w["acc"] = _numeric(w, "accuracy").where(w["name"] == EPOCH_EVAL)
    w["images"] = _numeric(w, "samples").where(w["name"] == EPOCH_EVAL)
    per = w.groupby(["run_id", "epoch"], sort=True).agg(
        energy=("energy", lambda s: s.sum(min_count=1)),
        duration=("duration", lambda s: s.sum(min_count=1)),
        accuracy=("acc", "max"),
        eval_images=("images", "max"),
    )
    per = per.reset_index()
    per["energy_j"] = per.groupby("run_id")["energy"].cumsum()
    per["duration_s"] = per.groupby("run_id")["duration"].cumsum()
    per = per.dropna(subset=["accuracy"])
    return per[columns].reset_index(drop=True)


def run_energy_to_accuracy(curve: pd.DataFrame, target: float) -> dict[str, Any]:
    """One run's ``epoch``, ``energy_j`` and ``duration_s`` at the first epoch whose accuracy
    is at least ``target`` (``reached`` False and None values when none is); ``best`` is its
    highest per-epoch accuracy."""
    ordered = curve.sort_values("epoch")
    hit = ordered[ordered["accuracy"] >= target]
    best = float(ordered["accuracy"].max()) if len(ordered) else math.nan
    if hit.empty:
        return {"reached": False, "epoch": None, "energy_j": None, "duration_s": None, "best": best}
    first = hit.iloc[0]
    return {
        "reached": True,
        "epoch": int(first["epoch"]),
        "energy_j": float(first["energy_j"]),
        "duration_s": float(first["duration_s"]),
        "best": best,
    }


def _subset_chance(ok: pd.DataFrame, curves: pd.DataFrame) -> Chance | None:
    """Chance on the per-epoch subset: the runs' one dataset and the fewest images an
    ``epoch_eval`` window held; None when either is unknown or the datasets differ."""
    datasets = {str(d) for d in ok["dataset"].dropna()} if "dataset" in ok.columns else set()
    images = pd.to_numeric(curves["eval_images"], errors="coerce").dropna()
    if len(datasets) != 1 or images.empty:
        return None
    return chance_of(next(iter(datasets)), int(images.min()))


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def energy_to_accuracy(
    runs: pd.DataFrame, windows: pd.DataFrame | None, target: float | None = None
) -> dict[str, Any]:
    """Per configuration (``config_hash``, ``label`` of the ok ``runs``): how many runs reached
    ``target``, the median energy, time and epoch at which they did. Keys: ``target_accuracy``,
    ``target_source`` ("given" or how it was chosen), ``configurations`` (list), ``sentence``
    (one line for the report), ``measured`` (False when no run has per-epoch accuracy)."""
    curves = epoch_curves(windows)
    ok = runs[runs["status"] == "ok"] if "status" in runs.columns else runs
    if "id" in ok.columns:
        ids = set(pd.to_numeric(ok["id"], errors="coerce").dropna().astype(int))
        curves = curves[curves["run_id"].astype(int).isin(ids)]
    if curves.empty:
        return {
            "measured": False,
            "target_accuracy": target,
            "target_source": "given" if target is not None else None,
            "configurations": [],
            "sentence": "No run recorded a per-epoch accuracy (epoch_eval_samples 0, or runs "
            "stored before it existed), so there is no energy to accuracy.",
        }
    chance = _subset_chance(ok, curves)
    best_seen = float(curves["accuracy"].max())
    if chance is not None and not chance.beyond(best_seen) and target is None:
        words = chance_words(
            best_seen,
            chance.chance,
            chance.threshold,
            chance.test_images,
            chance.alpha,
            what="best per-epoch accuracy",
        )
        return {
            "measured": True,
            "beyond_chance": False,
            "target_accuracy": None,
            "target_source": None,
            "configurations": [],
            "sentence": f"No energy to accuracy: {words} on the per-epoch subset.",
        }
    if target is None:
        target = round(DEFAULT_TARGET_SHARE * best_seen, 4)
        source = f"{DEFAULT_TARGET_SHARE * 100:.0f} % of the best per-epoch accuracy of these runs"
        if chance is not None and not chance.beyond(target):
            target = round(chance.threshold, 4)
            source = (
                f"the lowest accuracy beyond chance on the {chance.test_images:,}-image subset, "
                f"as 90 % of the best would be within chance"
            )
    else:
        source = "given"
        if chance is not None and not chance.beyond(target):
            source = (
                f"given; guessing reaches it with probability above {chance.alpha:.1%} on the "
                f"{chance.test_images:,}-image subset (beyond chance from "
                f"{chance.threshold:.1%})"
            )
    by_run = {int(r): c for r, c in curves.groupby("run_id")}
    configs: list[dict[str, Any]] = []
    for digest, group in ok.groupby("config_hash", sort=False):
        results = [
            run_energy_to_accuracy(by_run[int(i)], target)
            for i in pd.to_numeric(group["id"], errors="coerce").dropna().astype(int)
            if int(i) in by_run
        ]
        if not results:
            continue
        hit = [r for r in results if r["reached"]]
        configs.append(
            {
                "config_hash": digest,
                "label": str(group["label"].iloc[0]) if "label" in group.columns else digest,
                "runs": len(results),
                "reached": len(hit),
                "energy_j": _median([r["energy_j"] for r in hit]),
                "time_s": _median([r["duration_s"] for r in hit]),
                "epoch": _median([float(r["epoch"]) for r in hit]),
                "best_accuracy": _median([r["best"] for r in results]),
            }
        )
    reached = [c for c in configs if c["reached"]]
    if reached:
        best = min(reached, key=lambda c: c["energy_j"])
        sentence = (
            f"To reach accuracy {target:.3f} on the per-epoch subset ({source}), "
            f"{best['label']} used the least energy: {best['energy_j']:#.4g} J at epoch "
            f"{best['epoch']:g} (median of {best['reached']} of {best['runs']} run(s)); "
            f"{len(reached)} of {len(configs)} configuration(s) reached it."
        )
    else:
        sentence = (
            f"No configuration reached accuracy {target:.3f} on the per-epoch subset ({source})."
        )
    return {
        "measured": True,
        "beyond_chance": None if chance is None else chance.beyond(best_seen),
        "target_accuracy": target,
        "target_source": source,
        "configurations": configs,
        "sentence": sentence,
    }
