"""What ``evaluate_methods`` returns: ``EvaluationResult`` (per-run predictions, per-protocol
metrics, what was left out and why), and ``Rows``, which collects the predictions as they are
made."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from wattlab.estimate import methods as registry
from wattlab.estimate.baselines import Estimate
from wattlab.estimate.methods.base import value_of
from wattlab.jsonio import jsonable

ONLINE = "all"  # the protocol column of predictions that do not depend on the protocol
PREDICTION_COLUMNS = [
    "run_id",
    "label",
    "config_hash",
    "model",
    "precision",
    "protocol",
    "method",
    "predicted_j",
    "measured_j",
    "low_j",
    "high_j",
    "error_percent",
    "read_fraction",
    "notes",
]
EXCLUDED_COLUMNS = ["run_id", "protocol", "method", "reason"]


@dataclass
class EvaluationResult:
    """Per-run predictions, per-protocol metrics and what was left out, with why.

    ``predictions``: run_id, label, config_hash, model, precision, protocol ("all" for methods
    that do not learn across runs, else the PRE protocol), method, predicted_j, measured_j,
    low_j, high_j, error_percent (signed), notes. ``protocols``: protocol -> {"label",
    "common_runs", "common_methods", "methods": method -> metrics on the common runs, with
    "own": metrics on every run the method handled}. ``metrics``: the first protocol's "own"
    metrics by method (n, rmse_j, mape_percent, mdape_percent, bias_percent, coverage_percent,
    interval_runs, excluded). ``excluded``: run_id, protocol, method, reason.
    """

    predictions: pd.DataFrame
    metrics: dict[str, dict[str, Any]]
    excluded: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    protocols: dict[str, dict[str, Any]] = field(default_factory=dict)
    # STEP rules at equal information (``equal_information.compare``): one row per fraction
    equal_information: list[dict[str, Any]] = field(default_factory=list)

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.settings.get("methods", registry.names()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``settings``, ``protocols`` (the common-run tables) and ``methods`` (each
        method's own-run metrics, exclusions and predictions under the first protocol)."""
        first = self.settings.get("protocols", ["loco"])[0]
        out: dict[str, Any] = {"settings": self.settings, "protocols": self.protocols}
        if self.equal_information:
            out["equal_information"] = self.equal_information
        out["methods"] = {}
        for method in self.methods:
            described = registry.get(method)
            metrics = dict(self.metrics.get(method, {}))
            metrics["label"] = described.label
            metrics["covers"] = described.covers(self.settings.get("target", "total"))
            metrics["inputs"] = list(described.inputs)
            metrics["oracle_inputs"] = described.oracle_inputs
            excluded = self.excluded[
                (self.excluded["method"] == method)
                & self.excluded["protocol"].isin([ONLINE, first])
            ]
            metrics["excluded_runs"] = [
                {"run_id": r.run_id, "reason": r.reason} for r in excluded.itertuples()
            ]
            rows = self.predictions[
                (self.predictions["method"] == method)
                & self.predictions["protocol"].isin([ONLINE, first])
            ]
            metrics["predictions"] = [
                {k: v for k, v in row.items() if k not in ("method", "protocol")}
                for row in rows.to_dict("records")
            ]
            out["methods"][method] = metrics
        return jsonable(out)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


@dataclass
class Rows:
    """The prediction rows and the exclusions, in the order they are recorded."""

    predictions: list[dict[str, Any]] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)

    def record(
        self, run: dict[str, Any], run_id: Any, protocol: str, e: Estimate, measured: float
    ) -> None:
        """One method's estimate of one run under ``protocol`` (ONLINE: under every one)."""
        if not e.ok:
            self.excluded.append(
                {"run_id": run_id, "protocol": protocol, "method": e.method, "reason": e.error}
            )
            return
        self.predictions.append(
            {
                "run_id": run_id,
                "label": value_of(run, "label"),
                "config_hash": value_of(run, "config_hash"),
                "model": value_of(run, "model"),
                "precision": value_of(run, "precision"),
                "protocol": protocol,
                "method": e.method,
                "predicted_j": e.energy_j,
                "measured_j": measured,
                "low_j": e.energy_low_j,
                "high_j": e.energy_high_j,
                "error_percent": (
                    None if e.energy_j is None else (e.energy_j - measured) / measured * 100.0
                ),
                "read_fraction": e.read_fraction,
                "notes": e.notes,
            }
        )

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(predictions, excluded) as tables."""
        return (
            pd.DataFrame(self.predictions, columns=PREDICTION_COLUMNS),
            pd.DataFrame(self.excluded, columns=EXCLUDED_COLUMNS),
        )


__all__ = ["ONLINE", "PREDICTION_COLUMNS", "EvaluationResult", "Rows"]
