"""Ranking configurations: the least energy within a time limit. Pure arithmetic on predicted
(or measured) energy and time; no model, no torch.

A configuration meets the limit when its (point) duration is at most the limit: the current
configuration's duration x (1 + max slowdown), or a deadline in seconds, or any duration when
there is no limit. Rows that meet it come first, least energy first; then the rest, fastest
first. The saving is against the current configuration: 1 - energy / current energy.

``min_saving``: a change predicted to save less than this share is within the predictions'
error (docs/advise.md gives the measured spread), so it does not lead: the current
configuration ranks above it. Every row is still listed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from wattlab.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    """One configuration the advisor may choose: what it changes. ``power_limit_w`` None: the
    GPU's default limit (uncapped)."""

    precision: str
    batch_size: int
    gpus: int
    power_limit_w: float | None = None
    cuda_graphs: bool = False  # each step replayed as one CUDA graph (measured by the probe)

    def describe(self) -> str:
        """The setting in words: "amp-bf16, batch 256, CUDA graphs, 1 GPU, 250 W"."""
        parts = [self.precision, f"batch {self.batch_size}"]
        if self.cuda_graphs:
            parts.append("CUDA graphs")
        parts.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        if self.power_limit_w is not None:
            parts.append(f"{self.power_limit_w:.0f} W")
        return ", ".join(parts)

    def changes_from(self, start: Setting) -> str:
        """What differs from ``start``, in words ("precision fp32 -> amp-bf16; ..."), or
        "no change"."""
        parts = []
        if self.precision != start.precision:
            parts.append(f"precision {start.precision} -> {self.precision}")
        if self.batch_size != start.batch_size:
            parts.append(f"batch size {start.batch_size} -> {self.batch_size}")
        if self.gpus != start.gpus:
            parts.append(f"GPUs {start.gpus} -> {self.gpus}")
        if self.cuda_graphs != start.cuda_graphs:
            parts.append("CUDA graphs " + ("on" if self.cuda_graphs else "off"))
        if self.power_limit_w != start.power_limit_w:
            before = "default" if start.power_limit_w is None else f"{start.power_limit_w:.0f} W"
            after = "default" if self.power_limit_w is None else f"{self.power_limit_w:.0f} W"
            parts.append(f"power limit {before} -> {after}")
        return "; ".join(parts) or "no change"


@dataclass(frozen=True)
class Option:
    """One ranked row. Units: J, s, kg CO2e; saving and slowdown are fractions against the
    current configuration (the one given)."""

    setting: Setting
    energy_j: float
    duration_s: float
    energy_low_j: float
    energy_high_j: float
    duration_low_s: float
    duration_high_s: float
    co2e_kg: float = math.nan
    co2e_low_kg: float = math.nan
    co2e_high_kg: float = math.nan
    source: str = "predicted"  # predicted | measured | predicted, corrected by run N
    notes: str = ""
    # filled in by rank()
    rank: int = 0
    is_current: bool = False
    meets_limit: bool = True
    saving: float = 0.0
    saving_low: float = 0.0
    saving_high: float = 0.0
    slowdown: float = 0.0
    changes: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def scaled(self, energy_ratio: float, time_ratio: float, source: str) -> Option:
        """This row with its energy and time (points and intervals) x the ratios, as ``source``
        (a stored run's correction of PRE, or the probe's measured/predicted)."""
        e, t = energy_ratio, time_ratio
        return replace(
            self,
            energy_j=self.energy_j * e,
            energy_low_j=self.energy_low_j * e,
            energy_high_j=self.energy_high_j * e,
            duration_s=self.duration_s * t,
            duration_low_s=self.duration_low_s * t,
            duration_high_s=self.duration_high_s * t,
            source=source,
        )

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("extra")
        row.update(row.pop("setting"))
        return row


@dataclass(frozen=True)
class Limit:
    """The time limit: ``max_slowdown`` (a fraction over the current configuration's time),
    or ``deadline_s``, or neither (no limit)."""

    max_slowdown: float | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_slowdown is not None and self.deadline_s is not None:
            raise ConfigError("give --max-slowdown or --deadline-s, not both.")
        if self.max_slowdown is not None and not self.max_slowdown >= 0:
            raise ConfigError(f"the max slowdown must be >= 0, got {self.max_slowdown!r}.")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise ConfigError(
                f"the deadline must be a positive number of s, got {self.deadline_s!r}."
            )

    def seconds(self, current_duration_s: float) -> float:
        """The longest duration that meets the limit (inf without one)."""
        if self.deadline_s is not None:
            return self.deadline_s
        if self.max_slowdown is not None:
            return current_duration_s * (1.0 + self.max_slowdown)
        return math.inf

    def describe(self) -> str:
        if self.deadline_s is not None:
            return f"within {self.deadline_s:g} s"
        if self.max_slowdown is not None:
            return f"at most {self.max_slowdown * 100:g} % slower than now"
        return "with no time limit"


def rank(
    options: Sequence[Option], current: Setting, limit: Limit, min_saving: float = 0.0
) -> list[Option]:
    """``options`` ranked (see the module docstring), each with its saving, slowdown and what it
    changes against ``current``, which must be one of them.

    ConfigError when a deadline is below every option's duration: the sentence names the
    fastest option instead."""
    by_setting = {o.setting: o for o in options}
    if current not in by_setting:
        raise ConfigError("the current configuration is not among the options to rank.")
    base = by_setting[current]
    bound = limit.seconds(base.duration_s)
    ranked = []
    for option in options:
        ranked.append(
            replace(
                option,
                is_current=option.setting == current,
                meets_limit=bool(option.duration_s <= bound * (1 + 1e-12)),
                saving=1.0 - option.energy_j / base.energy_j,
                saving_low=1.0 - option.energy_high_j / base.energy_j,
                saving_high=1.0 - option.energy_low_j / base.energy_j,
                slowdown=option.duration_s / base.duration_s - 1.0,
                changes=option.setting.changes_from(current),
            )
        )
    meeting = sorted((o for o in ranked if o.meets_limit), key=lambda o: (o.energy_j, o.duration_s))
    if not meeting:
        fastest = min(ranked, key=lambda o: o.duration_s)
        raise ConfigError(
            f"no allowed configuration meets the deadline of {limit.deadline_s:g} s: the "
            f"fastest, {_describe(fastest, current)}, is predicted to take "
            f"{fastest.duration_s:.0f} s."
        )
    meeting.sort(key=lambda o: (o.energy_j, o.duration_s))
    worth = [o for o in meeting if o.is_current or o.saving >= min_saving]
    small = [o for o in meeting if not (o.is_current or o.saving >= min_saving)]
    if any(o.is_current for o in small + worth):
        meeting = worth + small
    rest = sorted((o for o in ranked if not o.meets_limit), key=lambda o: o.duration_s)
    return [replace(o, rank=i + 1) for i, o in enumerate([*meeting, *rest])]


def _describe(option: Option, current: Setting) -> str:
    change = option.setting.changes_from(current)
    return "the current configuration" if change == "no change" else change


def advice_sentence(ranked: Sequence[Option], limit: Limit, min_saving: float = 0.0) -> str:
    """The first row as one sentence."""
    best = ranked[0]
    if best.is_current or best.changes == "no change":
        enough = f"at least {min_saving:.0%} less" if min_saving > 0 else "less"
        return (
            f"Keep the current configuration: no allowed change is predicted to use {enough} "
            f"energy {limit.describe()}."
        )
    time = (
        f"{-best.slowdown:.0%} faster"
        if best.slowdown < 0
        else f"{best.slowdown:.0%} slower"
        if best.slowdown > 0
        else "as fast"
    )
    return (
        f"Change {best.changes}: {best.saving:.0%} less energy "
        f"({best.saving_low:.0%} to {best.saving_high:.0%}), {best.energy_j / 1e3:.3g} kJ "
        f"instead of {best.energy_j / (1 - best.saving) / 1e3:.3g} kJ, and {time} "
        f"({best.duration_s:.0f} s), {limit.describe()}."
    )


__all__ = ["Limit", "Option", "Setting", "advice_sentence", "rank"]
