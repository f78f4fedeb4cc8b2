"""One method's estimate (``Estimate``), and the two ways to make one (``made``,
``cannot_apply``): the result every estimation method returns, at the bottom of estimate/.

Nothing here imports the method registry (``wattlab.estimate.methods``), which sits above it:
a method's label reaches an ``Estimate`` through ``LABELS``, filled by each
``methods.base.EstimationMethod`` as it is made (so the registry's labels are there once it is
imported, as they are wherever estimates are printed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wattlab.monitor.carbon import CarbonSettings, Co2e, co2e

# method name -> the label people read; written by methods.base.EstimationMethod
LABELS: dict[str, str] = {}


def register_label(name: str, label: str) -> None:
    """Say what method ``name`` is called in tables (``EstimationMethod`` calls it)."""
    LABELS[name] = label


@dataclass
class Estimate:
    """One method's estimate of a training budget. Units: J, s; co2e in kg.

    Exactly one of ``energy_j`` / ``error`` is set. ``energy_low_j``/``energy_high_j`` give an
    interval when the method has one (PRE, STEP). ``notes`` lists the assumptions made.
    """

    method: str
    energy_j: float | None = None
    duration_s: float | None = None
    co2e: Co2e | None = None
    error: str | None = None
    notes: str = ""
    energy_low_j: float | None = None
    energy_high_j: float | None = None
    provenance: str = "estimated"
    read_fraction: float | None = None  # share of the run's budget read before predicting

    @property
    def ok(self) -> bool:
        return self.error is None and self.energy_j is not None

    @property
    def label(self) -> str:
        """The method's label as its ``EstimationMethod`` registered it (every method of
        ``wattlab.estimate.methods`` does when the registry is imported); else its name."""
        return LABELS.get(self.method, self.method)

    def co2e_range_kg(self) -> tuple[float, float] | None:
        """Lowest and highest CO2e: the energy interval (if any) at the intensity range's ends."""
        if self.co2e is None or self.energy_j is None:
            return None
        settings = self.co2e.settings
        low_j = self.energy_low_j if self.energy_low_j is not None else self.energy_j
        high_j = self.energy_high_j if self.energy_high_j is not None else self.energy_j
        return co2e(low_j, settings).low_kg, co2e(high_j, settings).high_kg

    def to_dict(self) -> dict[str, Any]:
        co2e_range = self.co2e_range_kg()
        return {
            "method": self.method,
            "label": self.label,
            "energy_j": self.energy_j,
            "energy_low_j": self.energy_low_j,
            "energy_high_j": self.energy_high_j,
            "duration_s": self.duration_s,
            "co2e": self.co2e.to_dict() if self.co2e is not None else None,
            "co2e_range_kg": list(co2e_range) if co2e_range is not None else None,
            "provenance": self.provenance,
            "error": self.error,
            "notes": self.notes,
        }


def made(
    method: str,
    energy_j: float,
    duration_s: float | None,
    notes: str,
    carbon: CarbonSettings | None = None,
    *,
    energy_low_j: float | None = None,
    energy_high_j: float | None = None,
) -> Estimate:
    """An estimate that applied, with its CO2e at ``carbon``."""
    return Estimate(
        method=method,
        energy_j=float(energy_j),
        duration_s=None if duration_s is None else float(duration_s),
        co2e=co2e(float(energy_j), carbon),
        notes=notes,
        energy_low_j=energy_low_j,
        energy_high_j=energy_high_j,
    )


def cannot_apply(method: str, reason: str, notes: str = "") -> Estimate:
    """An estimate that could not be made; ``reason`` is one sentence."""
    reason = reason.strip()
    return Estimate(
        method=method, error=reason if reason.endswith(".") else reason + ".", notes=notes
    )
