"""Energy to CO2e: energy x PUE x carbon intensity, with a low/high sensitivity range.

Defaults are the reference study's: 0.20 kgCO2e/kWh (range 0.10-0.30) and PUE 1.0. Whatever is
used is carried with the result, so every printed CO2e can say which intensity produced it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from wattlab.errors import ConfigError

J_PER_KWH = 3_600_000.0

DEFAULT_INTENSITY_KG_PER_KWH = 0.20
DEFAULT_INTENSITY_LOW_KG_PER_KWH = 0.10
DEFAULT_INTENSITY_HIGH_KG_PER_KWH = 0.30
DEFAULT_PUE = 1.0


def joules_to_kwh(energy_j: float) -> float:
    return energy_j / J_PER_KWH


@dataclass(frozen=True)
class CarbonSettings:
    """How energy becomes CO2e. Units: kgCO2e per kWh; PUE is a unitless factor >= 1."""

    intensity_kg_per_kwh: float = DEFAULT_INTENSITY_KG_PER_KWH
    intensity_low_kg_per_kwh: float = DEFAULT_INTENSITY_LOW_KG_PER_KWH
    intensity_high_kg_per_kwh: float = DEFAULT_INTENSITY_HIGH_KG_PER_KWH
    pue: float = DEFAULT_PUE

    def __post_init__(self) -> None:
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
        return (
            f"intensity {self.intensity_kg_per_kwh:g} kgCO2e/kWh "
            f"(range {self.intensity_low_kg_per_kwh:g}-{self.intensity_high_kg_per_kwh:g}), "
            f"PUE {self.pue:g}"
        )

    def to_dict(self) -> dict[str, float]:
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
) -> CarbonSettings:
    """Build settings from CLI flags. An intensity outside the default range widens the range
    to include it, so the range always brackets the value."""
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
            low, high = intensity * 0.5, intensity * 1.5
    if intensity_range is not None and not (low <= intensity <= high):
        raise ConfigError(
            f"--carbon-intensity {intensity:g} lies outside --intensity-range {low:g}:{high:g}; "
            "give a range that contains it."
        )
    return CarbonSettings(
        intensity_kg_per_kwh=intensity,
        intensity_low_kg_per_kwh=low,
        intensity_high_kg_per_kwh=high,
        pue=DEFAULT_PUE if pue is None else pue,
    )
