"""How far a configuration lies from PRE's reference set, and an interval that widens with it.

Distance is counted in octaves (factors of two) outside what the reference runs span:

- the batch size against the range the same model was measured at, else its architecture family,
  else every run (a new batch size for a model is an extrapolation even when other models ran at
  it: batch 768 sat inside the reference set's 32-2048, yet every model's measured range ended
  at 512, and PRE predicted it 2-3x too fast, issue 29);
- the model's counted cost (forward GFLOPs, parameters, activation MB and layers per image)
  against the reference runs' range of each.

The distance of a prediction is the largest of these. ``Widening`` turns distance into interval
width, calibrated on held-out runs: PRE holds out batch sizes, models and architecture families,
notes each held-out run's distance from the runs its fold was fitted on, fits the typical size
of a log error as ``base + slope x distance`` (both >= 0) and takes the conformal quantile of the
errors scaled by it. An interval at distance d is then ``+-quantile x (base + slope x d)``: the
width the held-out runs at that distance needed, growing where the data ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wattlab.estimate.families import model_family

DISTANCE_FEATURES = ("gflops_per_sample", "params", "activation_mb_per_sample", "layers")
_FEATURE_WORDS = {
    "gflops_per_sample": "forward GFLOPs per image",
    "params": "parameters",
    "activation_mb_per_sample": "activation MB per image",
    "layers": "layers",
}


def _octaves(value: float, low: float, high: float) -> float:
    if not (value > 0 and low > 0 and high > 0):
        return 0.0
    if value < low:
        return math.log2(low / value)
    if value > high:
        return math.log2(value / high)
    return 0.0


def _range(values: pd.Series) -> tuple[float, float]:
    finite = values.astype(float)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    if finite.empty:
        return (math.nan, math.nan)
    return (float(finite.min()), float(finite.max()))


@dataclass(frozen=True)
class Coverage:
    """What a set of feature rows spans: batch sizes per model, per family and overall, and the
    range of each DISTANCE_FEATURES column."""

    batch_by_model: dict[str, tuple[float, float]] = field(default_factory=dict)
    batch_by_family: dict[str, tuple[float, float]] = field(default_factory=dict)
    batch_all: tuple[float, float] = (math.nan, math.nan)
    features: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, table: pd.DataFrame) -> Coverage:
        models = table["model"].astype(object) if "model" in table else pd.Series(dtype=object)
        batch = table["batch_size"].astype(float)
        by_model = {str(m): _range(batch[models == m]) for m in models.dropna().unique() if str(m)}
        families = pd.Series(
            [model_family(None if pd.isna(m) else str(m)) for m in models], index=table.index
        )
        by_family = {str(f): _range(batch[families == f]) for f in families.unique()}
        features = {c: _range(table[c]) for c in DISTANCE_FEATURES if c in table}
        return cls(by_model, by_family, _range(batch), features)

    def batch_distance(self, model: str | None, batch: float) -> tuple[float, str]:
        """Octaves outside the batch sizes this model (else its family, else every run) was
        measured at, and the range it was measured against, in words."""
        if model is not None and model in self.batch_by_model:
            low, high = self.batch_by_model[model]
            scope = f"model {model!r}"
        else:
            family = model_family(model)
            if family in self.batch_by_family:
                low, high = self.batch_by_family[family]
                scope = f"the {family} family"
            else:
                low, high = self.batch_all
                scope = "the reference set"
        return _octaves(float(batch), low, high), f"{scope}'s measured {low:g}-{high:g}"

    def feature_distance(self, row: pd.Series) -> tuple[float, list[str]]:
        """Octaves outside the reference runs' range of the model's counted cost, and a phrase
        for each feature outside it."""
        worst, reasons = 0.0, []
        for column, (low, high) in self.features.items():
            value = row.get(column)
            if value is None or pd.isna(value):
                continue
            octaves = _octaves(float(value), low, high)
            if octaves > 0:
                worst = max(worst, octaves)
                reasons.append(
                    f"{_FEATURE_WORDS[column]} {float(value):.3g} outside the reference set's "
                    f"{low:.3g}-{high:.3g}"
                )
        return worst, reasons

    def distance(self, row: pd.Series) -> float:
        model = row.get("model")
        name = None if model is None or pd.isna(model) else str(model)
        batch, _ = self.batch_distance(name, float(row["batch_size"]))
        features, _ = self.feature_distance(row)
        return max(batch, features)

    def distances(self, table: pd.DataFrame) -> np.ndarray:
        return np.array([self.distance(row) for _, row in table.iterrows()], dtype=float)

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_by_model": {k: list(v) for k, v in self.batch_by_model.items()},
            "batch_by_family": {k: list(v) for k, v in self.batch_by_family.items()},
            "batch_all": list(self.batch_all),
            "features": {k: list(v) for k, v in self.features.items()},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Coverage:
        def pair(value: Any) -> tuple[float, float]:
            low, high = (float(v) for v in value)
            return (low, high)

        def table(value: Any) -> dict[str, tuple[float, float]]:
            return {str(k): pair(v) for k, v in dict(value).items()}

        features = table(doc["features"])
        if not set(features) <= set(DISTANCE_FEATURES):
            raise ValueError("coverage names an unknown feature")
        return cls(
            table(doc["batch_by_model"]),
            table(doc["batch_by_family"]),
            pair(doc["batch_all"]),
            features,
        )


@dataclass(frozen=True)
class Widening:
    """A log interval's half-width as a function of distance: quantile x (base + slope x d)."""

    base: float
    slope: float
    quantile: float
    n: int  # held-out runs it was calibrated on
    n_outside: int  # of them, runs at a distance > 0

    @classmethod
    def fit(cls, residuals: np.ndarray, distances: np.ndarray, interval: float) -> Widening:
        r = np.abs(np.asarray(residuals, dtype=float))
        d = np.asarray(distances, dtype=float)
        keep = np.isfinite(r) & np.isfinite(d)
        r, d = r[keep], d[keep]
        if r.size == 0:
            return cls(0.0, 0.0, 0.0, 0, 0)
        base = float(np.mean(r[d <= 0])) if np.any(d <= 0) else float(np.mean(r))
        slope = 0.0
        outside = d > 0
        if outside.sum() >= 3:
            # the extra error per octave, through the origin of the excess over base
            excess = r[outside] - base
            slope = max(0.0, float(np.sum(excess * d[outside]) / np.sum(d[outside] ** 2)))
        base = max(base, 1e-6)
        scores = r / (base + slope * d)
        n = scores.size
        rank = min(n, math.ceil((n + 1) * interval))
        quantile = float(np.sort(scores)[rank - 1])
        return cls(base, slope, quantile, int(n), int(outside.sum()))

    def half_width(self, distance: float) -> float:
        return self.quantile * (self.base + self.slope * max(0.0, distance))

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Widening:
        values = {k: float(doc[k]) for k in ("base", "slope", "quantile")}
        if not all(math.isfinite(v) and v >= 0 for v in values.values()):
            raise ValueError("widening numbers must be finite and >= 0")
        return cls(**values, n=int(doc["n"]), n_outside=int(doc["n_outside"]))
