"""Rates per unit of work (issue 51): the energy and CO2e per training sample, per token of a
text model, per point of test accuracy, and the CO2e at a stated reference intensity beside the
local one, as GSF's SCI for AI and the proposals for standard ML energy metrics ask.

**The work.** ``samples`` is what each run trained in its budget window (all ranks), ``tokens``
what the Hugging Face callback counted (the attention mask's ones, else the ``input_ids``
elements), ``accuracy`` the test accuracy as a fraction (a point is one percentage point). A unit
is stated only when every run of the subject recorded it: one run without its count makes the
count unknown, and the missing unit is named with why, never filled in.

**The subject** is the statement's (:mod:`wattlab.analysis.statement`): one run (its values), one
configuration (the median energy over the median work), or a selection of several
configurations (the energy of all its runs over all their work; no accuracy, as each
configuration has its own). ``summary.json`` gives the same rates per configuration over its
budget windows (:func:`config_rates`: the median of each run's rate; per accuracy point the
median energy over the median accuracy).

**The reference intensity** is wattlab's default, 0.20 kgCO2e/kWh at PUE 1.0, the reference
study's assumed value (``wattlab.monitor.carbon``); it is not a measured grid's, and wattlab's
carbon data hold no world average. It is stated so that two statements priced at different
local grids can be compared on one intensity."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import numeric
from wattlab.experiment.db.stored_run import RunCol
from wattlab.monitor.carbon import DEFAULT_INTENSITY_KG_PER_KWH, J_PER_KWH

REFERENCE_INTENSITY_KG_PER_KWH = DEFAULT_INTENSITY_KG_PER_KWH
REFERENCE_PUE = 1.0
REFERENCE_SOURCE = (
    "wattlab's reference intensity: its default, the reference study's assumed value, "
    "not a measured grid's"
)
UNITS = ("sample", "token", "accuracy_point")
NO_TOKENS = (
    "the runs did not record tokens (the Hugging Face callback counts them when the batches "
    "carry input_ids or an attention mask)"
)


def reference_co2e_kg(energy_j: float) -> float:
    """The CO2e of ``energy_j`` at the reference intensity and PUE (kg)."""
    return energy_j / J_PER_KWH * REFERENCE_PUE * REFERENCE_INTENSITY_KG_PER_KWH


def reference_carbon() -> dict[str, Any]:
    return {
        "intensity_kg_per_kwh": REFERENCE_INTENSITY_KG_PER_KWH,
        "pue": REFERENCE_PUE,
        "source": REFERENCE_SOURCE,
    }


@dataclass(frozen=True)
class Rate:
    """One unit's rate: how much work (``amount``: samples, tokens, or accuracy points), and
    the energy (J), the CO2e at the local intensity and at the reference one (kg) per unit."""

    unit: str
    amount: float
    energy_j: float
    co2e_kg: float
    co2e_at_reference_kg: float

    def facts(self) -> dict[str, Any]:
        return {
            "amount": self.amount,
            "energy_j": self.energy_j,
            "co2e_kg": self.co2e_kg,
            "co2e_at_reference_kg": self.co2e_at_reference_kg,
        }


def _complete(ok: pd.DataFrame, column: str) -> np.ndarray | None:
    """The column's values when every run holds a finite positive one, else None."""
    if column not in ok.columns or ok.empty:
        return None
    x = numeric(ok[column])
    if not (np.isfinite(x) & (x > 0)).all():
        return None
    return x


def subject_work(ok: pd.DataFrame, scope: str) -> tuple[dict[str, float], dict[str, str]]:
    """(the subject's work by unit, why each missing unit is missing). ``scope``: "run",
    "configuration" or "selection", as the statement's subject."""
    work: dict[str, float] = {}
    missing: dict[str, str] = {}
    for unit, column, why in (
        ("sample", RunCol.SAMPLES, "the runs did not record the samples they trained"),
        ("token", RunCol.TOKENS, NO_TOKENS),
    ):
        x = _complete(ok, column)
        if x is None:
            missing[unit] = why
            continue
        work[unit] = float(x.sum()) if scope == "selection" else float(np.median(x))
    if scope == "selection":
        missing["accuracy_point"] = (
            "the selection holds several configurations, each with its own accuracy"
        )
    else:
        acc = _complete(ok, RunCol.ACCURACY)
        if acc is None:
            missing["accuracy_point"] = "the runs did not record a test accuracy above 0"
        else:
            work["accuracy_point"] = float(np.median(acc)) * 100.0
    return work, missing


def rates(energy_j: float, co2e_kg: float, work: dict[str, float]) -> list[Rate]:
    """Each unit's rate of the subject's ``energy_j`` and ``co2e_kg`` (at the local
    intensity), in UNITS' order."""
    reference = reference_co2e_kg(energy_j)
    return [
        Rate(unit, work[unit], energy_j / work[unit], co2e_kg / work[unit], reference / work[unit])
        for unit in UNITS
        if unit in work and work[unit] > 0
    ]


# --------------------------------------------------------------------------- words


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits as a plain decimal (no exponent); the one rule
    the statement and the rates write numbers with."""
    if not math.isfinite(value):
        return "n/a"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


def fmt_rate_energy(energy_j: float) -> str:
    """A small energy for people: three significant digits in J below 1 kJ, else kJ or kWh."""
    if energy_j >= 3.6e6:
        return f"{significant(energy_j / J_PER_KWH)} kWh"
    if energy_j >= 1e3:
        return f"{significant(energy_j / 1e3)} kJ"
    return f"{significant(energy_j)} J"


def fmt_rate_co2e(kg: float) -> str:
    """A small CO2e for people: µg, mg, g or kg, three significant digits."""
    grams = kg * 1e3
    if grams >= 1e3:
        return f"{significant(kg)} kg"
    if grams >= 1:
        return f"{significant(grams)} g"
    if grams >= 1e-3:
        return f"{significant(grams * 1e3)} mg"
    return f"{significant(grams * 1e6)} µg"


_WORK_WORDS = {"sample": "training sample", "token": "training token"}


def rates_sentence(found: list[Rate], window_words: str) -> str:
    """ "Per unit of work (the whole run's energy): 1.23 J and 68.3 µg CO2e per training sample
    (50 000); ...", or "" when no unit is known."""
    if not found:
        return ""
    clauses = []
    for rate in found:
        each = f"{fmt_rate_energy(rate.energy_j)} per "
        if math.isfinite(rate.co2e_kg):
            each = f"{fmt_rate_energy(rate.energy_j)} and {fmt_rate_co2e(rate.co2e_kg)} CO2e per "
        if rate.unit == "accuracy_point":
            clauses.append(f"{each}point of test accuracy ({rate.amount:.1f} % accuracy)")
        else:
            count = f"{rate.amount:,.0f}".replace(",", " ")
            clauses.append(f"{each}{_WORK_WORDS[rate.unit]} ({count})")
    return f"Per unit of work ({window_words}): {'; '.join(clauses)}."


def is_reference(intensity_kg_per_kwh: float, pue: float) -> bool:
    return math.isclose(intensity_kg_per_kwh, REFERENCE_INTENSITY_KG_PER_KWH) and math.isclose(
        pue, REFERENCE_PUE
    )


def reference_sentence(co2e_kg: float, found: list[Rate], priced_at_reference: bool) -> str:
    """The CO2e at the reference intensity; ``priced_at_reference``: the statement's own
    intensity and PUE are the reference ones, and the sentence says so instead."""
    reference = f"{REFERENCE_INTENSITY_KG_PER_KWH:g} kgCO2e/kWh and a PUE of {REFERENCE_PUE:g}"
    if priced_at_reference:
        return (
            f"That CO2e is at wattlab's reference intensity, {reference}, so it compares as it is."
        )
    per = next((r for r in found if r.unit == "sample"), None)
    each = f", {fmt_rate_co2e(per.co2e_at_reference_kg)} per training sample" if per else ""
    return (
        f"At the reference intensity of {REFERENCE_INTENSITY_KG_PER_KWH:g} kgCO2e/kWh and a PUE "
        f"of {REFERENCE_PUE:g} (wattlab's default, the reference study's assumed value, not a "
        f"measured grid's; stated so that statements compare), the CO2e is "
        f"{fmt_rate_co2e(co2e_kg)}{each}."
    )


# --------------------------------------------------------------------------- per configuration


def config_rates(group: pd.DataFrame) -> dict[str, float]:
    """One configuration's rates over its budget windows (``summary.json``): the median of
    each run's ``co2e_kg`` per sample, ``energy_total_j`` and ``co2e_kg`` per token (NaN unless
    every run recorded its count), the median energy per point of the median accuracy, and the
    median energy's CO2e at the reference intensity."""
    energy = numeric(group[RunCol.ENERGY_TOTAL_J])
    co2e = (
        numeric(group[RunCol.CO2E_KG])
        if RunCol.CO2E_KG in group.columns
        else np.full(len(group), math.nan)
    )
    out: dict[str, float] = {}

    def median_of(x: np.ndarray) -> float:
        return float(np.median(x)) if x.size and np.isfinite(x).all() else math.nan

    samples = _complete(group, RunCol.SAMPLES)
    out["co2e_per_sample_kg"] = median_of(co2e / samples) if samples is not None else math.nan
    tokens = _complete(group, RunCol.TOKENS)
    out["energy_per_token_j"] = median_of(energy / tokens) if tokens is not None else math.nan
    out["co2e_per_token_kg"] = median_of(co2e / tokens) if tokens is not None else math.nan
    accuracy = _complete(group, RunCol.ACCURACY)
    energy_median = median_of(energy)
    if accuracy is not None:
        points = float(np.median(accuracy)) * 100.0
        out["energy_per_accuracy_point_j"] = energy_median / points
        out["co2e_per_accuracy_point_kg"] = median_of(co2e) / points
    else:
        out["energy_per_accuracy_point_j"] = math.nan
        out["co2e_per_accuracy_point_kg"] = math.nan
    out["co2e_at_reference_kg"] = reference_co2e_kg(energy_median)
    return out


CONFIG_RATE_KEYS = (
    "co2e_per_sample_kg",
    "energy_per_token_j",
    "co2e_per_token_kg",
    "energy_per_accuracy_point_j",
    "co2e_per_accuracy_point_kg",
    "co2e_at_reference_kg",
)
