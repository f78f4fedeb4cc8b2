"""The report's first sentence: the finding, with its numbers, computed from the summary.

It compares the configuration that used the least energy per image with the baseline (or,
when the baseline itself used the least, with the configuration that used the most): how many
times less energy it used, and how many times faster it was. "For the same images" is said
only when every run of both configurations saw the same number of images; otherwise the
comparison is per image and states both image counts (the words: :mod:`wattlab.wording`).
When the two configurations' intervals of energy per image overlap, it says the difference
may be noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import as_float, numeric
from wattlab.wording import (
    ImageCounts,
    energy_comparison,
    same_images,
    time_comparison,
)

# Ratios within this of 1 are reported as "about the same".
_SAME = 0.01


def _per_image(summary: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str]:
    """Energy and time per image (the medians of each run's energy and time over its images)
    when every run of every configuration recorded its image count, else per run."""
    low = numeric(summary["samples_low"]) if "samples_low" in summary else np.zeros(len(summary))
    if np.all(np.isfinite(low) & (low > 0)) and "energy_per_sample_j" in summary:
        per_e = numeric(summary["energy_per_sample_j"])
        per_t = numeric(summary["duration_per_sample_s"])
        return per_e, per_t, "image"
    return numeric(summary["energy_total_j"]), numeric(summary["duration_s"]), "run"


def image_counts(row: pd.Series) -> ImageCounts:
    """A summary row's images per run, fewest and most (None when not recorded)."""
    low = as_float(row.get("samples_low"), math.nan)
    high = as_float(row.get("samples_high"), math.nan)
    if not (math.isfinite(low) and math.isfinite(high)):
        return ImageCounts(None, None)
    return ImageCounts(int(round(low)), int(round(high)))


def _accuracy_clause(summary: pd.DataFrame, best: int, ref: int) -> tuple[str, float, float]:
    """ "; accuracy 0.853 vs 0.871" for the two compared rows, or "" when either lacks one."""
    if "accuracy" not in summary.columns:
        return "", math.nan, math.nan
    acc = numeric(summary["accuracy"])
    a, b = float(acc[best]), float(acc[ref])
    if not (math.isfinite(a) and math.isfinite(b)):
        return "", a, b
    return f"; accuracy {a:.3f} vs {b:.3f}", a, b


def finding(summary: pd.DataFrame, *, with_accuracy: bool = False) -> dict[str, Any]:
    """The finding as data and as one sentence: ``sentence``, ``best`` and ``reference``
    (labels), ``energy_ratio`` (reference energy / best energy per image, > 1 = best used
    less), ``speedup`` (reference time / best time per image), ``per`` ("image", or "run"
    without image counts) and ``overlap`` (whether the energy intervals overlap; None when
    one has no interval). ``with_accuracy`` (accuracy is a Pareto axis) names the two
    configurations' median accuracies in the sentence and as ``accuracy`` [best, reference]."""
    energy, time, per = _per_image(summary)
    labels = [str(x) for x in summary["label"]]
    usable = np.flatnonzero(np.isfinite(energy) & (energy > 0) & np.isfinite(time) & (time > 0))
    if usable.size == 0:
        return {"sentence": "No configuration has both an energy and a time to compare."}
    best = int(usable[np.argmin(energy[usable])])
    if usable.size == 1:
        row = summary.iloc[best]
        rate = 1.0 / time[best] if per == "image" else math.nan
        speed = f", {rate:,.0f} images/s" if per == "image" else ""
        return {
            "sentence": f"One configuration, {labels[best]}: {energy[best]:#.4g} J per {per}"
            f"{speed}, over {int(row['n'])} run(s).",
            "best": labels[best],
        }
    is_base = summary["is_baseline"].to_numpy(dtype=bool)
    if is_base[best] or not is_base[usable].any():
        ref = int(usable[np.argmax(energy[usable])])
    else:
        ref = int(np.flatnonzero(is_base)[0])
    energy_ratio = energy[ref] / energy[best]
    speedup = time[ref] / time[best]
    overlap = _intervals_overlap(summary.iloc[best], summary.iloc[ref], per)
    who = ("The baseline " if is_base[best] else "") + labels[best]
    than = ("the baseline " if is_base[ref] else "") + labels[ref]
    counts_best, counts_ref = image_counts(summary.iloc[best]), image_counts(summary.iloc[ref])
    same = same_images(counts_best, counts_ref)
    if energy_ratio < 1 + _SAME:
        basis = "per image" if per == "image" else "per run"
        sentence = (
            f"No configuration used clearly less energy {basis} than another: {who} and "
            f"{than} differ by {(energy_ratio - 1) * 100:.1f} %"
        )
        if per == "image" and not same:
            sentence += f" ({counts_best.text()} vs {counts_ref.text()} images per run)"
    else:
        sentence = energy_comparison(
            who,
            than,
            energy_ratio,
            counts_best if per == "image" else ImageCounts(None, None),
            counts_ref if per == "image" else ImageCounts(None, None),
            (float(energy[best]), float(energy[ref])),
            f"J per {per}",
        )
        sentence += time_comparison(speedup, per_image=per == "image" and not same, same=_SAME)
    accuracy: list[float] | None = None
    if with_accuracy:
        clause, acc_best, acc_ref = _accuracy_clause(summary, best, ref)
        sentence += clause
        accuracy = [acc_best, acc_ref]
    if overlap is None:
        sentence += "; a configuration with a single run has no interval to tell this from noise."
    elif overlap:
        sentence += "; their intervals overlap, so the difference may be noise."
    else:
        sentence += "."
    return {
        "sentence": sentence,
        "best": labels[best],
        "reference": labels[ref],
        "energy_ratio": float(energy_ratio),
        "speedup": float(speedup),
        "per": per,
        "same_images": bool(per == "image" and same),
        "images_per_run": [counts_best.text(), counts_ref.text()],
        "overlap": overlap,
        **({"accuracy": accuracy} if accuracy is not None else {}),
    }


def _intervals_overlap(best: pd.Series, ref: pd.Series, per: str) -> bool | None:
    """Whether the two energy intervals overlap (None when either has none)."""
    col = "energy_per_sample_j" if per == "image" else "energy_total_j"
    b_hi = as_float(best.get(f"{col}_ci_high"), math.nan)
    r_lo = as_float(ref.get(f"{col}_ci_low"), math.nan)
    if math.isnan(b_hi) or math.isnan(r_lo):
        return None
    return b_hi >= r_lo
