"""Measurement: the energy of one window, per component, with its provenance, uncertainty,
CO2e and idle/dynamic split; ``combine_measurements`` sums the windows of several processes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from wattlab.meters.base import CPU, DRAM, GPU, RAM, Provenance, weakest
from wattlab.monitor.carbon import CarbonSettings, Co2e, joules_to_kwh, window_co2e
from wattlab.wording import EnergyParts


def component_kind(component: str) -> str:
    """'gpu' for 'gpu:0' and for a host-qualified 'node-a/gpu:0' (multi-node runs)."""
    return component.split(":", 1)[0].rsplit("/", 1)[-1]


@dataclass
class Measurement:
    """The energy of one window. Units are in the field names.

    ``energy_j`` holds every component (``gpu:0``, ``cpu:package-0``, ``dram:package-0``,
    ``psys:0``, ``cpu:estimated``, ``ram:estimated``); ``in_total`` says which of them add up to
    ``total_energy_j`` (a psys zone overlaps package + dram, so it is kept but not summed).
    """

    name: str
    started_at: str  # UTC ISO-8601
    duration_s: float
    energy_j: dict[str, float]
    provenance: dict[str, Provenance]
    uncertainty_j: dict[str, float]
    in_total: dict[str, bool]
    short_window: dict[str, bool] = field(default_factory=dict)
    samples: list[tuple[float, str, float]] = field(default_factory=list)  # (t_s, comp, W)
    idle_power_w: dict[str, float] = field(default_factory=dict)
    carbon: CarbonSettings = field(default_factory=CarbonSettings)
    start_offset_s: float = 0.0  # from the monitor's start
    # mean GPU utilisation (percent, 0-100) of each component that reports one, over the
    # sampler's utilisation readings inside the window, and how many readings that mean holds
    utilization_percent: dict[str, float] = field(default_factory=dict)
    utilization_readings: dict[str, int] = field(default_factory=dict)

    # --- totals -------------------------------------------------------------------------
    def _sum(self, kinds: tuple[str, ...]) -> float:
        return sum(
            e
            for c, e in self.energy_j.items()
            if self.in_total.get(c, True) and component_kind(c) in kinds
        )

    @property
    def total_energy_j(self) -> float:
        return sum(e for c, e in self.energy_j.items() if self.in_total.get(c, True))

    @property
    def gpu_energy_j(self) -> float:
        return self._sum((GPU,))

    @property
    def cpu_energy_j(self) -> float:
        return self._sum((CPU,))

    @property
    def dram_energy_j(self) -> float:
        """DRAM counters, or the RAM estimate where there is none."""
        return self._sum((DRAM, RAM))

    @property
    def other_energy_j(self) -> float:
        """Summed components that are none of GPU, CPU, DRAM/RAM (not a residual of the
        total, which would leave rounding noise of +-1e-15 J behind)."""
        return sum(
            e
            for c, e in self.energy_j.items()
            if self.in_total.get(c, True) and component_kind(c) not in (GPU, CPU, DRAM, RAM)
        )

    @property
    def total_provenance(self) -> Provenance:
        return weakest([p for c, p in self.provenance.items() if self.in_total.get(c, True)])

    def kind_provenance(self, kind: str) -> Provenance | None:
        kinds = (DRAM, RAM) if kind == DRAM else (kind,)
        found = [
            p
            for c, p in self.provenance.items()
            if component_kind(c) in kinds and self.in_total.get(c, True)
        ]
        return weakest(found) if found else None

    def energy_parts(self) -> EnergyParts:
        """The summed components by kind and provenance, for the words of provenance by share
        (:class:`wattlab.wording.EnergyParts`)."""
        return EnergyParts.of_components(
            (c, self.provenance.get(c), e)
            for c, e in self.energy_j.items()
            if self.in_total.get(c, True)
        )

    @property
    def total_uncertainty_j(self) -> float:
        """Root-sum-square of the components' uncertainties (independent meters)."""
        return math.sqrt(
            sum(u * u for c, u in self.uncertainty_j.items() if self.in_total.get(c, True))
        )

    @property
    def mean_power_w(self) -> float:
        return self.total_energy_j / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def co2e(self) -> Co2e:
        return window_co2e(self)

    @property
    def idle_energy_j(self) -> float | None:
        """Energy the machine would have used idling for this long (needs an idle baseline)."""
        if not self.idle_power_w:
            return None
        return sum(
            p * self.duration_s
            for c, p in self.idle_power_w.items()
            if self.in_total.get(c, True) and c in self.energy_j
        )

    @property
    def dynamic_energy_j(self) -> float | None:
        idle = self.idle_energy_j
        return None if idle is None else self.total_energy_j - idle

    @property
    def is_short(self) -> bool:
        return any(self.short_window.values())

    def to_dict(self, include_samples: bool = False) -> dict[str, Any]:
        energy: dict[str, Any] = {"total": self.total_energy_j}
        energy.update(self.energy_j)
        data: dict[str, Any] = {
            "name": self.name,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "energy_j": energy,
            "energy_by_kind_j": {
                "gpu": self.gpu_energy_j,
                "cpu": self.cpu_energy_j,
                "dram": self.dram_energy_j,
                "other": self.other_energy_j,
            },
            "energy_kwh": joules_to_kwh(self.total_energy_j),
            "provenance": {
                "total": self.total_provenance.value,
                **{c: p.value for c, p in self.provenance.items()},
            },
            "uncertainty_j": {"total": self.total_uncertainty_j, **self.uncertainty_j},
            "in_total": dict(self.in_total),
            "short_window": {c: s for c, s in self.short_window.items() if s},
            "mean_power_w": self.mean_power_w,
            "co2e_kg": self.co2e.to_dict(),
        }
        if self.idle_power_w:
            data["idle_power_w"] = dict(self.idle_power_w)
            data["idle_energy_j"] = self.idle_energy_j
            data["dynamic_energy_j"] = self.dynamic_energy_j
        if self.utilization_percent:
            data["utilization_percent"] = dict(self.utilization_percent)
            data["utilization_readings"] = dict(self.utilization_readings)
        if include_samples:
            data["samples"] = [{"t_s": t, "component": c, "power_w": p} for t, c, p in self.samples]
        return data

    def gpu_utilization(self) -> tuple[float | None, int, int]:
        """(mean, readings, GPUs): the mean of the GPUs' sampled utilisation over the window
        (percent; each GPU weighted by its readings), how many readings it holds and from how
        many GPUs. The mean is None when no GPU reported a reading inside the window."""
        gpus = [c for c in self.utilization_percent if component_kind(c) == "gpu"]
        readings = sum(self.utilization_readings.get(c, 0) for c in gpus)
        if not readings:
            return None, 0, 0
        weighted = sum(self.utilization_percent[c] * self.utilization_readings[c] for c in gpus)
        return weighted / readings, readings, len(gpus)


def combine_measurements(parts: list[Measurement], name: str | None = None) -> Measurement:
    """Sum measurements of the same window taken by different processes (DDP ranks).

    Each process must meter distinct components (its own GPU; CPU/DRAM on one process per
    host), so a component appearing twice is an error rather than a silent double count.
    The duration is the longest of the parts.
    """
    if not parts:
        raise ValueError("no measurements to combine")
    energy: dict[str, float] = {}
    prov: dict[str, Provenance] = {}
    unc: dict[str, float] = {}
    in_total: dict[str, bool] = {}
    short: dict[str, bool] = {}
    idle: dict[str, float] = {}
    samples: list[tuple[float, str, float]] = []
    utilization: dict[str, float] = {}
    readings: dict[str, int] = {}
    for part in parts:
        for comp, value in part.energy_j.items():
            if comp in energy:
                raise ValueError(f"component {comp} was metered by two processes")
            energy[comp] = value
            prov[comp] = part.provenance[comp]
            unc[comp] = part.uncertainty_j.get(comp, 0.0)
            in_total[comp] = part.in_total.get(comp, True)
            short[comp] = part.short_window.get(comp, False)
        idle.update(part.idle_power_w)
        samples.extend(part.samples)
        utilization.update(part.utilization_percent)
        readings.update(part.utilization_readings)
    samples.sort()
    first = min(parts, key=lambda p: p.started_at)
    return Measurement(
        name=name or first.name,
        started_at=first.started_at,
        duration_s=max(p.duration_s for p in parts),
        energy_j=energy,
        provenance=prov,
        uncertainty_j=unc,
        in_total=in_total,
        short_window=short,
        samples=samples,
        idle_power_w=idle,
        carbon=first.carbon,
        start_offset_s=first.start_offset_s,
        utilization_percent=utilization,
        utilization_readings=readings,
    )
