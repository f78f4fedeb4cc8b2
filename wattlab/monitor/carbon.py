"""Energy to CO2e: energy x PUE x carbon intensity, with a low/high sensitivity range.

Defaults are the reference study's: 0.20 kgCO2e/kWh (range 0.10-0.30) and PUE 1.0. The intensity
can instead come from where the user is (``--region FRA``: the yearly value of a shipped
per-country table, see ``wattlab/data/carbon_intensity_by_country.md`` for its source and licence)
or from a time-stamped trace (``--intensity-trace CSV``: the CO2e of a window integrates power
x intensity over the window's power trace). Whatever is used is carried with the result and
named by ``describe()``, so every printed CO2e says which intensity produced it.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
import os
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError, DataError, echo

J_PER_KWH = 3_600_000.0

DEFAULT_INTENSITY_KG_PER_KWH = 0.20
DEFAULT_INTENSITY_LOW_KG_PER_KWH = 0.10
DEFAULT_INTENSITY_HIGH_KG_PER_KWH = 0.30
DEFAULT_PUE = 1.0
DEFAULT_SOURCE = "default (reference study)"
REGION_TABLE = "carbon_intensity_by_country.csv"
# A user-given, regional or traced intensity keeps the study's +-50 % sensitivity band.
BAND_LOW, BAND_HIGH = 0.5, 1.5


def joules_to_kwh(energy_j: float) -> float:
    return energy_j / J_PER_KWH


def fmt_energy(energy_j: float) -> str:
    """An energy for people: J below 1 kJ, kJ below 1 kWh, kWh above."""
    if energy_j >= 3.6e6:
        return f"{joules_to_kwh(energy_j):.3f} kWh"
    if energy_j >= 1e3:
        return f"{energy_j / 1e3:.2f} kJ"
    return f"{energy_j:.1f} J"


@dataclass(frozen=True)
class CarbonSettings:
    """How energy becomes CO2e. Units: kgCO2e per kWh; PUE is a unitless factor >= 1."""

    intensity_kg_per_kwh: float = DEFAULT_INTENSITY_KG_PER_KWH
    intensity_low_kg_per_kwh: float = DEFAULT_INTENSITY_LOW_KG_PER_KWH
    intensity_high_kg_per_kwh: float = DEFAULT_INTENSITY_HIGH_KG_PER_KWH
    pue: float = DEFAULT_PUE
    source: str = DEFAULT_SOURCE  # which intensity this is, in words, for every output
    trace: IntensityTrace | None = None  # time-stamped intensity; resolved per window

    def __post_init__(self) -> None:
        if isinstance(self.trace, dict):  # coming back from to_dict() / JSON
            object.__setattr__(self, "trace", IntensityTrace.from_dict(self.trace))
        for name in (
            "intensity_kg_per_kwh",
            "intensity_low_kg_per_kwh",
            "intensity_high_kg_per_kwh",
        ):
            value = getattr(self, name)
            if not value >= 0:  # also rejects NaN
                raise ConfigError(
                    f"carbon intensity must be a number >= 0 kgCO2e/kWh, got {value}."
                )
        if not (self.intensity_low_kg_per_kwh <= self.intensity_high_kg_per_kwh):
            raise ConfigError(
                "the intensity range must be LOW:HIGH with LOW <= HIGH, got "
                f"{self.intensity_low_kg_per_kwh}:{self.intensity_high_kg_per_kwh}."
            )
        if not self.pue >= 1.0:
            raise ConfigError(f"PUE must be a number >= 1.0, got {self.pue}.")

    def describe(self) -> str:
        if self.trace is not None:
            return (
                f"intensity from {self.source} (energy-weighted over each window, "
                f"range x{BAND_LOW:g}-x{BAND_HIGH:g}), PUE {self.pue:g}"
            )
        return (
            f"intensity {self.intensity_kg_per_kwh:g} kgCO2e/kWh [{self.source}] "
            f"(range {self.intensity_low_kg_per_kwh:g}-{self.intensity_high_kg_per_kwh:g}), "
            f"PUE {self.pue:g}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Co2e:
    """CO2e of some energy at the chosen intensity and at both ends of the range. Units: kg."""

    value_kg: float
    low_kg: float
    high_kg: float
    settings: CarbonSettings

    def to_dict(self) -> dict[str, object]:
        return {
            "value": self.value_kg,
            "low": self.low_kg,
            "high": self.high_kg,
            "intensity_kg_per_kwh": self.settings.intensity_kg_per_kwh,
            "intensity_range_kg_per_kwh": [
                self.settings.intensity_low_kg_per_kwh,
                self.settings.intensity_high_kg_per_kwh,
            ],
            "pue": self.settings.pue,
            "intensity_source": self.settings.source,
        }


def co2e(energy_j: float, settings: CarbonSettings | None = None) -> Co2e:
    """CO2e of ``energy_j`` joules (IT energy; PUE adds the facility's share)."""
    settings = settings or CarbonSettings()
    facility_kwh = joules_to_kwh(energy_j) * settings.pue
    return Co2e(
        value_kg=facility_kwh * settings.intensity_kg_per_kwh,
        low_kg=facility_kwh * settings.intensity_low_kg_per_kwh,
        high_kg=facility_kwh * settings.intensity_high_kg_per_kwh,
        settings=settings,
    )


def parse_intensity_range(text: str) -> tuple[float, float]:
    """Parse ``LOW:HIGH`` (kgCO2e/kWh) as given to ``--intensity-range``."""
    parts = text.split(":")
    if len(parts) != 2:
        raise ConfigError(f"--intensity-range must be LOW:HIGH, e.g. 0.10:0.30, got {text!r}.")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise ConfigError(
            f"--intensity-range must be two numbers LOW:HIGH, e.g. 0.10:0.30, got {text!r}."
        ) from None
    return low, high


def settings_from_flags(
    intensity_kg_per_kwh: float | None = None,
    intensity_range: str | None = None,
    pue: float | None = None,
    region: str | None = None,
    intensity_trace: str | Path | None = None,
) -> CarbonSettings:
    """Build settings from CLI flags. A user-given, regional or traced intensity keeps the
    study's +-50 % band unless ``--intensity-range`` gives one, which must contain the value."""
    given = [
        flag
        for flag, value in (
            ("--carbon-intensity", intensity_kg_per_kwh),
            ("--region", region),
            ("--intensity-trace", intensity_trace),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise ConfigError(f"give only one of {' / '.join(given)}: each sets the intensity.")
    pue_value = DEFAULT_PUE if pue is None else pue
    if intensity_trace is not None:
        if intensity_range is not None:
            raise ConfigError(
                "--intensity-range cannot be combined with --intensity-trace; a traced "
                f"intensity keeps a x{BAND_LOW:g}-x{BAND_HIGH:g} band around its value."
            )
        trace = load_intensity_trace(intensity_trace)
        mean = trace.mean_value()
        return CarbonSettings(
            intensity_kg_per_kwh=mean,
            intensity_low_kg_per_kwh=mean * BAND_LOW,
            intensity_high_kg_per_kwh=mean * BAND_HIGH,
            pue=pue_value,
            source=trace.source,
            trace=trace,
        )
    source = DEFAULT_SOURCE
    if region is not None:
        intensity_kg_per_kwh, source = region_intensity(region)
    elif intensity_kg_per_kwh is not None:
        source = "--carbon-intensity"
    intensity = (
        DEFAULT_INTENSITY_KG_PER_KWH if intensity_kg_per_kwh is None else intensity_kg_per_kwh
    )
    if intensity_range is not None:
        low, high = parse_intensity_range(intensity_range)
    else:
        low = min(DEFAULT_INTENSITY_LOW_KG_PER_KWH, intensity)
        high = max(DEFAULT_INTENSITY_HIGH_KG_PER_KWH, intensity)
        if (
            intensity_kg_per_kwh is not None
            and intensity_kg_per_kwh != DEFAULT_INTENSITY_KG_PER_KWH
        ):
            # keep the study's +-50 % sensitivity around a user-given value
            low, high = intensity * BAND_LOW, intensity * BAND_HIGH
    if intensity_range is not None and not (low <= intensity <= high):
        flag = "--region" if region is not None else "--carbon-intensity"
        raise ConfigError(
            f"{flag} gives {intensity:g} kgCO2e/kWh, outside --intensity-range "
            f"{low:g}:{high:g}; give a range that contains it."
        )
    return CarbonSettings(
        intensity_kg_per_kwh=intensity,
        intensity_low_kg_per_kwh=low,
        intensity_high_kg_per_kwh=high,
        pue=pue_value,
        source=source,
    )


# --- intensity where the user is: a per-country table -----------------------------------------
@dataclass(frozen=True)
class RegionIntensity:
    iso3: str
    country: str
    year: int
    intensity_kg_per_kwh: float


def region_table() -> dict[str, RegionIntensity]:
    """The shipped yearly per-country intensities, by ISO 3166-1 alpha-3 code."""
    text = (resources.files("wattlab") / "data" / REGION_TABLE).read_text("utf-8")
    table = {}
    for row in csv.DictReader(io.StringIO(text)):
        entry = RegionIntensity(
            row["iso3"], row["country"], int(row["year"]), float(row["intensity_kg_per_kwh"])
        )
        table[entry.iso3] = entry
    return table


def region_intensity(region: str) -> tuple[float, str]:
    """(kgCO2e/kWh, a source line naming it) for an ISO 3166-1 alpha-3 country code."""
    code = str(region).strip().upper()
    table = region_table()
    entry = table.get(code)
    if entry is None:
        hint = " (use the three-letter code, e.g. FRA, USA, DEU)" if len(code) == 2 else ""
        raise ConfigError(
            f"--region {echo(region)} is not in the shipped table of {len(table)} ISO 3166-1 "
            f"alpha-3 country codes{hint}; give e.g. FRA, USA or DEU."
        )
    source = (
        f"region {entry.iso3} ({entry.country}, {entry.year} yearly mean; "
        "CodeCarbon energy-mix table, MIT)"
    )
    return entry.intensity_kg_per_kwh, source


# --- intensity over time: a trace -------------------------------------------------------------
@dataclass(frozen=True)
class IntensityTrace:
    """Time-stamped grid intensity. Value i holds from ``times_s[i]`` until ``times_s[i + 1]``;
    the last one for one median step. Units: UNIX seconds (UTC), kgCO2e/kWh."""

    times_s: tuple[float, ...]
    values_kg_per_kwh: tuple[float, ...]
    source: str = "intensity trace"
    step_s: float = field(default=3600.0)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IntensityTrace:
        return cls(
            times_s=tuple(float(t) for t in data["times_s"]),
            values_kg_per_kwh=tuple(float(v) for v in data["values_kg_per_kwh"]),
            source=str(data.get("source", "intensity trace")),
            step_s=float(data.get("step_s", 3600.0)),
        )

    @property
    def start_s(self) -> float:
        return self.times_s[0]

    @property
    def end_s(self) -> float:
        return self.times_s[-1] + self.step_s

    def mean_value(self) -> float:
        return sum(self.values_kg_per_kwh) / len(self.values_kg_per_kwh)

    def value_at(self, t_s: float) -> float:
        i = bisect.bisect_right(self.times_s, t_s) - 1
        return self.values_kg_per_kwh[max(i, 0)]

    def time_mean(self, start_s: float, end_s: float) -> float:
        """Time-weighted mean intensity over [start_s, end_s]."""
        if end_s <= start_s:
            return self.value_at(start_s)
        edges = [start_s, *(t for t in self.times_s if start_s < t < end_s), end_s]
        total = sum((b - a) * self.value_at(a) for a, b in pairwise(edges))
        return total / (end_s - start_s)

    def check_covers_now(self, now_s: float | None = None) -> None:
        """Before a live measurement: the trace must cover the present moment (whether it
        covers the whole run cannot be known before the run ends)."""
        import time

        now_s = time.time() if now_s is None else now_s
        if not self.start_s <= now_s < self.end_s:
            raise DataError(
                f"the {self.source} covers {_iso(self.start_s)} to {_iso(self.end_s)}, which "
                f"does not include now ({_iso(now_s)}); give a trace that covers the run."
            )

    def check_covers(self, start_s: float, end_s: float) -> None:
        if start_s < self.start_s or end_s > self.end_s:
            raise DataError(
                f"the {self.source} covers {_iso(self.start_s)} to {_iso(self.end_s)}, but the "
                f"window ran from {_iso(start_s)} to {_iso(end_s)}; give a trace that covers it."
            )


def _iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, timezone.utc).isoformat(timespec="seconds")


def _parse_time(text: str, path: str, line: int) -> float:
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise DataError(
            f"{path} line {line}: timestamp {text!r} is not ISO-8601 (e.g. 2026-12-02T16:00:00Z)."
        ) from None
    if stamp.tzinfo is None:  # documented: a time without a zone is UTC
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


TRACE_MAX_BYTES = 64 * 1024 * 1024  # ten years of 5-minute rows fit in ~40 MiB
TRACE_MAX_KG_PER_KWH = 3.0  # the dirtiest grids are near 1.2; above 3 is a unit mistake
TRACE_GAP_STEPS = 3  # a hole longer than this many median steps ...
TRACE_GAP_MIN_S = 6 * 3600.0  # ... and longer than 6 hours is refused, never bridged


def _read_trace_text(path: str | Path) -> str:
    """The text of a trace file: a regular file no larger than TRACE_MAX_BYTES (a device
    such as /dev/zero, a FIFO or a folder is refused at once, before any read)."""
    import stat

    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise DataError(f"cannot read the intensity trace {name}: {error.strerror}.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DataError(f"the intensity trace {name} is not a regular file; give a CSV file.")
        if st.st_size > TRACE_MAX_BYTES:
            raise DataError(
                f"the intensity trace {name} is {st.st_size / 2**20:.0f} MiB, more than the "
                f"{TRACE_MAX_BYTES // 2**20} MiB a trace may be."
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(TRACE_MAX_BYTES + 1)
    except OSError as error:
        raise DataError(f"cannot read the intensity trace {name}: {error.strerror}.") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"the intensity trace {name} is not UTF-8 text; give a CSV file.") from None


def load_intensity_trace(path: str | Path) -> IntensityTrace:
    """Read a CSV with a ``timestamp`` column (ISO-8601; no zone = UTC) and an
    ``intensity_kg_per_kwh`` (or ``intensity_g_per_kwh``) column, in time order.

    Refused in one sentence: anything but a regular file of at most 64 MiB, a value outside
    0..3 kgCO2e/kWh, and a hole between two rows longer than both 3 median steps and 6 hours
    (a hole is never bridged)."""
    name = str(path)
    text = _read_trace_text(path)
    reader = csv.DictReader(io.StringIO(text))
    columns = [c.strip() for c in (reader.fieldnames or [])]
    reader.fieldnames = columns
    if "intensity_kg_per_kwh" in columns:
        column, scale = "intensity_kg_per_kwh", 1.0
    elif "intensity_g_per_kwh" in columns:
        column, scale = "intensity_g_per_kwh", 1e-3
    else:
        column, scale = "", 1.0
    if "timestamp" not in columns or not column:
        raise DataError(
            f"the intensity trace {name} needs the columns timestamp and intensity_kg_per_kwh "
            f"(or intensity_g_per_kwh); it has {', '.join(columns) or 'none'}."
        )
    times: list[float] = []
    values: list[float] = []
    for line, row in enumerate(reader, start=2):
        t = _parse_time(row["timestamp"] or "", name, line)
        try:
            v = float(row[column]) * scale
        except (TypeError, ValueError):
            v = float("nan")
        if not (v >= 0 and math.isfinite(v)):
            raise DataError(
                f"{name} line {line}: {column} must be a number >= 0, got {row[column]!r}."
            )
        if v > TRACE_MAX_KG_PER_KWH:
            raise DataError(
                f"{name} line {line}: {column} {row[column]!r} is {v:g} kgCO2e/kWh, above the "
                f"{TRACE_MAX_KG_PER_KWH:g} kgCO2e/kWh of any real grid (a unit mistake?)."
            )
        if times and t <= times[-1]:
            raise DataError(
                f"{name} line {line}: timestamps must increase; {row['timestamp']} does not."
            )
        times.append(t)
        values.append(v)
    if not times:
        raise DataError(f"the intensity trace {name} has no rows.")
    steps = sorted(b - a for a, b in pairwise(times))
    step_s = steps[len(steps) // 2] if steps else 3600.0
    typical_s = steps[(len(steps) - 1) // 2] if steps else step_s  # the lower median
    tolerance_s = max(TRACE_GAP_STEPS * typical_s, TRACE_GAP_MIN_S)
    for a, b in pairwise(times):
        if b - a > tolerance_s:
            raise DataError(
                f"the intensity trace {name} has no rows from {_iso(a)} to {_iso(b)} "
                f"({(b - a) / 3600:g} h, more than the {tolerance_s / 3600:g} h allowed); "
                "fill the hole, wattlab does not bridge it."
            )
    return IntensityTrace(tuple(times), tuple(values), f"intensity trace {Path(path).name}", step_s)


def effective_intensity(
    trace: IntensityTrace,
    start_s: float,
    duration_s: float,
    power_samples: list[tuple[float, float]],
) -> float:
    """kgCO2e/kWh weighted by the energy used at each moment of a window.

    ``power_samples`` are (UNIX s, W of everything counted in the total). Between consecutive
    sample times the energy is (mean power) x (time) at the intensity in force then. With fewer
    than two samples (or no power) the time-weighted mean over the window is used.
    """
    end_s = start_s + duration_s
    trace.check_covers(start_s, end_s)
    weighted = 0.0
    energy = 0.0
    for (t0, p0), (t1, p1) in pairwise(power_samples):
        a, b = max(t0, start_s), min(t1, end_s)
        if b <= a:
            continue
        e = 0.5 * (p0 + p1) * (b - a)
        weighted += e * trace.time_mean(a, b)
        energy += e
    if energy <= 0:
        return trace.time_mean(start_s, end_s)
    return weighted / energy


def window_co2e(window: Any) -> Co2e:
    """CO2e of a Measurement (duck-typed: total_energy_j, carbon, started_at, duration_s,
    samples, start_offset_s, in_total). With a trace, the intensity is the window's energy-
    weighted one and the result's settings name it; otherwise the settings' fixed intensity."""
    settings: CarbonSettings = window.carbon
    if settings.trace is None:
        return co2e(window.total_energy_j, settings)
    start_s = _parse_time(window.started_at, "the window", 0)
    counted: dict[float, float] = {}
    for t_s, comp, power_w in window.samples:
        if window.in_total.get(comp, True):
            at = start_s + (t_s - window.start_offset_s)
            counted[at] = counted.get(at, 0.0) + power_w
    power = sorted(counted.items())
    intensity = effective_intensity(settings.trace, start_s, window.duration_s, power)
    resolved = replace(
        settings,
        intensity_kg_per_kwh=intensity,
        intensity_low_kg_per_kwh=intensity * BAND_LOW,
        intensity_high_kg_per_kwh=intensity * BAND_HIGH,
        source=f"{settings.trace.source}, energy-weighted over the window",
        trace=None,
    )
    return co2e(window.total_energy_j, resolved)
