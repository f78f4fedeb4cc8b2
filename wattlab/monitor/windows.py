"""The arithmetic of one energy window: what the meters read at each edge, and the energy,
provenance and uncertainty per component between the two edges.

A window's energy is the difference of two cumulative readings per meter. A window shorter than
a counter's update period is flagged and bridged with instantaneous power, never reported as
0 J.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wattlab.meters.base import Meter, Provenance


@dataclass
class EdgeReading:
    """Every meter read at one edge of a window, by component."""

    energy_j: dict[str, float]  # cumulative
    power_w: dict[str, float | None]  # None where the meter could not say
    sample_error_j: dict[str, float]  # a sampled meter's accumulated bracket error


@dataclass
class OpenWindow:
    name: str
    started_at: str  # UTC ISO-8601
    t0: float  # time.perf_counter() at the opening edge
    start: EdgeReading


@dataclass
class WindowEnergy:
    """Per component: the energy between two edges and how far to trust it."""

    energy_j: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Provenance] = field(default_factory=dict)
    uncertainty_j: dict[str, float] = field(default_factory=dict)
    in_total: dict[str, bool] = field(default_factory=dict)
    short_window: dict[str, bool] = field(default_factory=dict)


def read_edge(meters: list[Meter]) -> EdgeReading:
    energy: dict[str, float] = {}
    power: dict[str, float | None] = {}
    sample_error: dict[str, float] = {}
    for meter in meters:
        comp = meter.info.component
        energy[comp] = float(meter.energy_j())
        try:
            power[comp] = meter.power_w()
        except Exception:
            power[comp] = None
        err_fn = getattr(meter, "sample_error_j", None)
        sample_error[comp] = float(err_fn()) if callable(err_fn) else 0.0
    return EdgeReading(energy, power, sample_error)


def window_energy(
    meters: list[Meter],
    start: EdgeReading,
    end: EdgeReading,
    duration_s: float,
    interval_s: float,
) -> WindowEnergy:
    """The energy of each meter's component between two edges ``duration_s`` apart, for a
    sampler running every ``interval_s``."""
    out = WindowEnergy()
    for meter in meters:
        comp = meter.info.component
        info = meter.info
        delta_j = max(end.energy_j[comp] - start.energy_j.get(comp, end.energy_j[comp]), 0.0)
        p0, p1 = start.power_w.get(comp), end.power_w.get(comp)
        powers = [p for p in (p0, p1) if p is not None]
        inst_power_w = sum(powers) / len(powers) if powers else None
        provenance = info.provenance
        is_short = info.provenance == Provenance.MEASURED and duration_s < info.update_period_s
        if is_short and inst_power_w is not None:
            # The counter may not have ticked inside the window: bridge with power.
            delta_j = inst_power_w * duration_s
            provenance = Provenance.SAMPLED
        mean_power_w = delta_j / duration_s if duration_s > 0 else (inst_power_w or 0.0)
        if info.provenance == Provenance.MEASURED:
            # about one counter update period of power at each end of the window
            edge_w = (p0 if p0 is not None else mean_power_w) + (
                p1 if p1 is not None else mean_power_w
            )
            uncertainty = info.update_period_s * edge_w
            if is_short:
                uncertainty = max(uncertainty, delta_j)
        elif info.provenance == Provenance.SAMPLED:
            bracket = max(
                end.sample_error_j.get(comp, 0.0) - start.sample_error_j.get(comp, 0.0), 0.0
            )
            # plus half an interval of power at each end (the window edges fall between
            # samples)
            uncertainty = bracket + interval_s * mean_power_w
        else:
            uncertainty = meter.relative_uncertainty() * delta_j
        out.energy_j[comp] = delta_j
        out.provenance[comp] = provenance
        out.uncertainty_j[comp] = uncertainty
        out.in_total[comp] = bool(info.details.get("in_total", True))
        out.short_window[comp] = is_short
    return out


def mean_utilization(
    readings: list[tuple[float, str, float]],
) -> tuple[dict[str, float], dict[str, int]]:
    """Each component's mean utilisation (percent) over ``(t_s, component, percent)`` readings,
    and how many readings that mean holds."""
    by_component: dict[str, list[float]] = {}
    for _, comp, percent in readings:
        by_component.setdefault(comp, []).append(percent)
    return (
        {c: sum(v) / len(v) for c, v in by_component.items()},
        {c: len(v) for c, v in by_component.items()},
    )
