"""The meter boundary: what every source of joules provides, in plain units.

A meter is one *component* (one GPU, one RAPL zone, the CPU estimate, ...). It exposes a
cumulative energy in joules that only ever grows, so a window's energy is the difference of two
readings. Hardware quirks (NVML's millijoules, RAPL's microjoules and wraparound, power-only GPUs)
are handled inside the adapter; nothing outside ``wattlab.meters`` sees them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class Provenance(str, enum.Enum):
    """Where a number came from, strongest first."""

    MEASURED = "measured"  # a hardware energy counter
    SAMPLED = "sampled"  # power readings integrated over time
    ESTIMATED = "estimated"  # a model (TDP x utilisation, watts per GB, ...)

    @property
    def rank(self) -> int:
        return {"measured": 0, "sampled": 1, "estimated": 2}[self.value]


def weakest(provenances: list[Provenance] | tuple[Provenance, ...]) -> Provenance:
    """The weakest provenance of the parts: a total is only as good as its worst part."""
    if not provenances:
        return Provenance.MEASURED
    return max(provenances, key=lambda p: p.rank)


# Component kinds. A component name is "<kind>:<id>", e.g. "gpu:0", "cpu:package-0", "dram:0".
GPU = "gpu"
CPU = "cpu"
DRAM = "dram"
PSYS = "psys"
RAM = "ram"  # estimated memory power (no DRAM counter)
KINDS = (GPU, CPU, DRAM, PSYS, RAM)


@dataclass(frozen=True)
class MeterInfo:
    """Static facts about a meter, for `wattlab devices` and run records."""

    component: str  # "gpu:0", "cpu:package-0", "dram:package-0", "cpu:estimated", ...
    kind: str  # one of KINDS
    provenance: Provenance
    source: str  # "nvml", "rapl", "model"
    description: str  # human-readable: GPU name, zone path, model used
    update_period_s: float  # how often the underlying value changes (counter or sampler)
    details: dict[str, object] = field(default_factory=dict)  # name, uuid, limits, tdp_w, ...


@runtime_checkable
class Meter(Protocol):
    """One source of joules. Every method is cheap and safe to call from a sampler thread."""

    info: MeterInfo

    def energy_j(self) -> float:
        """Cumulative energy since the meter was opened. Units: J. Never decreases."""
        ...

    def power_w(self) -> float | None:
        """Instantaneous (or most recent) power. Units: W. None when it cannot be read."""
        ...

    def poll(self) -> None:
        """Called by the background sampler every interval: track wraps, integrate power."""
        ...

    def relative_uncertainty(self) -> float:
        """The meter's stated relative error of energy (0.0 for counters: their error is
        the update period at each end, which the monitor adds). Unitless fraction."""
        ...

    def close(self) -> None:
        """Release the handle (NVML shutdown, stop threads). Idempotent."""
        ...


@dataclass(frozen=True)
class MeterProblem:
    """A meter that could not be opened: what, why, and what replaced it."""

    component: str  # what was looked for: "gpu", "rapl", "rapl:package-0", ...
    reason: str  # one sentence: why it is missing
    fix: str  # one sentence: how to get it
    fallback: str  # what wattlab uses instead ("estimated CPU power (TDP model)", "none")


@dataclass
class Discovery:
    """The result of looking for meters on this machine."""

    meters: list[Meter]
    problems: list[MeterProblem]

    def close(self) -> None:
        for meter in self.meters:
            meter.close()
