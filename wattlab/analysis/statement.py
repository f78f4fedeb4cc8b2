"""The energy statement: one paragraph a paper can quote, and the Hugging Face model-card block,
built from stored runs (``wattlab report --statement``).

**What "the training" is.** With ``run_id`` it is that one run. Else, when the selected runs
(all of them, or one sweep's) hold one configuration, it is one training of that configuration:
the median energy of its repetitions with the interval of the median and its true coverage, and
what all repetitions used together.
When they hold several configurations there is no one training to speak of: the statement is
about the whole selection (the energy all its runs used, which is what the study cost), and a
table gives each configuration's median; pick one with ``--run ID`` or ``--sweep NAME``.

**Which energy.** The headline is each run's ``run`` window: data loading, set-up, the untimed
warm-up, the budget window and the final evaluation (a command run's: the whole process). The
budget window, the timed training the reports compare, stands beside it (with the meters'
stated uncertainty for one run), and a sentence says what share of the run windows the budget,
warm-up, evaluation and the rest held (:mod:`wattlab.analysis.run_windows`). A run that stored no
run window (a callback's) counts with its budget window, and the statement says so.

Every clause comes from the runs: the provenance by share and how the estimated part was modelled;
the GPUs, their driver and power limit (or that they were not recorded, as for runs stored by the
Hugging Face or Lightning callbacks); the GPU power read just before the runs (never called idle:
see ``idle_settle``); the carbon intensity with its source and year and the PUE (the stored ones,
or the ones given to re-price the CO2e: ``--region`` and the other carbon flags); the CO2e with its
range; the wattlab version and the command that wrote it. The model-card block is the
``co2_eq_emissions`` metadata the Hub reads (``emissions`` in grams, ``source``, ``training_type``,
``geographical_location``, ``hardware_used``), and beside it ``energy_consumption`` (the kWh
and its measured share, which no assumed intensity changes); a field wattlab cannot know is left
out and named in a comment, never guessed."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.assumptions import estimation_methods
from wattlab.analysis.idle_settle import SETTLED_AFTER_S, RunSpan, unsettled_readings
from wattlab.analysis.intervals import median_interval
from wattlab.analysis.markdown_text import md_code, md_text, visible
from wattlab.analysis.run_windows import RunWhole, holds_words, run_wholes, whole_parts
from wattlab.analysis.runs_table import (
    intensity_range,
    numeric,
    ok_runs,
    split_unusable,
)
from wattlab.analysis.work_rates import (
    is_reference,
    rates,
    rates_sentence,
    reference_carbon,
    reference_co2e_kg,
    reference_sentence,
    significant,
    subject_work,
)
from wattlab.errors import DataError
from wattlab.experiment.db.stored_run import RunCol, StoredRun
from wattlab.monitor.carbon import (
    DEFAULT_INTENSITY_HIGH_KG_PER_KWH,
    DEFAULT_INTENSITY_KG_PER_KWH,
    DEFAULT_INTENSITY_LOW_KG_PER_KWH,
    DEFAULT_PUE,
    DEFAULT_SOURCE,
    J_PER_KWH,
    CarbonSettings,
    fmt_energy,
    region_table,
)
from wattlab.wording import (
    IntervalKind,
    and_join,
    component_kind,
    interval_words,
    plural,
)

TRAINING_TYPES = ("pre-training", "fine-tuning")
BUILT_IN_LAUNCHERS = ("in-process", "torchrun", "warm-worker")  # wattlab's own trainer


@dataclass(frozen=True)
class Carbon:
    """The intensity (kgCO2e/kWh) with its low/high range, the PUE, and their source in words;
    ``location`` is the country when a region gave the intensity."""

    intensity: float
    low: float
    high: float
    pue: float
    source: str
    location: str | None = None

    def co2e_kg(self, energy_j: float) -> tuple[float, float, float]:
        kwh = energy_j / J_PER_KWH * self.pue
        return kwh * self.intensity, kwh * self.low, kwh * self.high


@dataclass(frozen=True)
class EnergyStatement:
    """The statement: ``paragraph`` (Markdown-free text), ``table`` (Markdown rows, one per
    configuration, when the selection holds several), ``model_card`` (the YAML block) and
    ``facts`` (every number and word it rests on, JSON-safe)."""

    paragraph: str
    model_card: str
    facts: dict[str, Any]
    table: Sequence[str] = field(default_factory=tuple)
    notes: Sequence[str] = field(default_factory=tuple)

    def markdown(self) -> str:
        """statement.md: the paragraph, the table when there is one, notes for the person who
        quotes it, and the model-card block."""
        parts = ["# Energy statement", "", self.paragraph, ""]
        if self.table:
            parts += [*self.table, ""]
        if self.notes:
            parts += ["Before quoting it:", "", *(f"- {n}" for n in self.notes), ""]
        parts += [
            "## Hugging Face model card",
            "",
            "Add this to the YAML metadata at the top of the model's README.md:",
            "",
            "```yaml",
            self.model_card.rstrip(),
            "```",
            "",
        ]
        return "\n".join(parts)


# one rule for text from the runs in Markdown: wattlab.analysis.markdown_text
_visible = visible
_md = md_text
_code = md_code

markdown_text = _md  # for the other writers of stated text (the EU GPAI form)


def _unique(frame: pd.DataFrame, column: str) -> list[Any]:
    if column not in frame.columns:
        return []
    out: list[Any] = []
    for value in frame[column].tolist():
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        if isinstance(value, str):
            for part in value.split(","):  # gpu_name of a mixed run: "A,B"
                part = _visible(part.strip())
                if part and part not in out:
                    out.append(part)
        elif value not in out:
            out.append(value)
    return out


_number = significant  # wattlab.analysis.work_rates: one rule for significant digits


def fmt_co2e_g(kg: float) -> str:
    """CO2e for people: mg below 1 g, g below 1 kg, kg above (three significant digits)."""
    grams = kg * 1e3
    if grams < 1:
        return f"{_number(grams * 1e3)} mg"
    if grams < 1e3:
        return f"{_number(grams)} g"
    return f"{_number(kg)} kg"


# --------------------------------------------------------------------------- selection


def stated_runs(
    runs: pd.DataFrame, run_id: int | None
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The usable ok runs the statement is about, and the ok runs left out."""
    if run_id is not None:
        if RunCol.ID not in runs.columns:
            raise DataError("the runs table has no id column; --run needs one.")
        ids = pd.to_numeric(runs[RunCol.ID], errors="coerce")
        runs = runs[ids == run_id]
        if runs.empty:
            raise DataError(f"there is no run {run_id} in this selection.")
        status = str(StoredRun.from_row(runs.iloc[0]).status)
        if status != "ok":
            raise DataError(f"run {run_id} is {status!r}, not ok: it has no energy to state.")
    usable, left_out = split_unusable(runs)
    ok = ok_runs(usable)
    if ok.empty:
        why = f" ({left_out[0]['reason']})" if left_out else ""
        raise DataError(f"no ok run with a finite energy and time to state{why}.")
    return ok, left_out


# --------------------------------------------------------------------------- clauses


def _hardware(ok: pd.DataFrame, runs: list[StoredRun]) -> tuple[str, str, dict[str, Any]]:
    """(the GPUs in words for the paragraph, hardware_used for the model card, facts);
    ``runs``: the rows of ``ok``, typed."""
    names = _unique(ok, RunCol.GPU_NAME)
    counts = sorted({int(g) for g in _finite(ok, RunCol.GPUS) if g > 0})
    if not counts:  # a callback's row (gpus 0 on the CPU, else the GPUs it metered): count them
        seen = {
            sum(1 for c in run.components_json or {} if component_kind(c) == "gpu") for run in runs
        }
        counts = sorted(c for c in seen if c > 0)
    cpus = _unique(ok, RunCol.CPU_MODEL)
    facts = {"gpu_names": names, "gpu_counts": counts, "cpu_models": cpus}
    count = "/".join(str(c) for c in counts)
    if counts:
        gpu = "GPU" if counts == [1] else "GPUs"
        if names:
            used = f"{count} x {', '.join(names)}"
            return f"{count} x {', '.join(map(_md, names))}", used, facts
        return f"{count} {gpu} whose model was not recorded", f"{count} {gpu}", facts
    cpu = ", ".join(cpus) if cpus else "model not recorded"
    words = ", ".join(map(_md, cpus)) if cpus else cpu
    return f"a CPU only ({words}), no GPU", f"CPU only ({cpu})", facts


def _finite(ok: pd.DataFrame, column: str) -> list[float]:
    if column not in ok.columns:
        return []
    return [float(x) for x in numeric(ok[column]) if math.isfinite(x)]


def _unsettled_idle(ok: pd.DataFrame) -> int:
    """How many of the runs' readings before them came too soon after a run (idle_settle)."""
    columns = [RunCol.HOSTNAME, RunCol.STARTED_AT, RunCol.FINISHED_AT]
    if any(c not in ok.columns for c in [*columns, RunCol.IDLE_POWER_W]):
        return 0

    def spans(frame: pd.DataFrame) -> list[RunSpan]:
        return [
            RunSpan(*(None if pd.isna(v) else str(v) for v in row))
            for row in frame[columns].itertuples(index=False)
        ]

    read = ok[np.isfinite(numeric(ok[RunCol.IDLE_POWER_W]))]
    return unsettled_readings(spans(read), spans(ok))


def _gpu_settings(ok: pd.DataFrame) -> tuple[str, dict[str, Any]]:
    """Driver, power limit in force and the GPU power read just before the runs, in one sentence."""
    drivers = _unique(ok, RunCol.DRIVER)
    limits, tdps = _finite(ok, RunCol.POWER_LIMIT_W), _finite(ok, RunCol.GPU_TDP_W)
    idle = _finite(ok, RunCol.IDLE_POWER_W)
    driver = (
        f"driver {', '.join(map(_md, drivers))}" if drivers else "a driver that was not recorded"
    )
    if limits:
        lo, hi = min(limits), max(limits)
        default = bool(tdps) and lo == hi and max(tdps) == lo
        limit = f"a power limit of {lo:g} W" if lo == hi else f"power limits of {lo:g}–{hi:g} W"
        limit += " per GPU" + (" (their default)" if default else "")
    else:
        limit = "a power limit that was not recorded"
    unsettled = _unsettled_idle(ok)
    if len(idle) == 1:
        idle_text = f"drew {idle[0]:.0f} W just before the run"
    elif idle and round(min(idle)) == round(max(idle)):  # the same to the watt
        idle_text = f"drew {idle[0]:.0f} W just before each run"
    elif idle:
        idle_text = (
            f"drew {float(np.median(idle)):.0f} W just before the runs (median, "
            f"{min(idle):.0f}–{max(idle):.0f} W)"
        )
    else:
        idle_text = "their power just before the runs was not recorded"
    if idle and unsettled:
        of = (
            "the reading came"
            if len(idle) == 1
            else f"at least {unsettled} of {len(idle)} readings came"
        )
        idle_text += (
            f", not at rest: {of} less than {SETTLED_AFTER_S:.0f} s after the previous run ended"
        )
    if not (drivers or limits or idle):  # a callback's run: none of it is stored
        sentence = "Their driver, power limit and power before the runs were not recorded."
    else:
        joiner = "; " if not idle else " and "
        sentence = f"The GPUs ran with {driver} at {limit}{joiner}{idle_text}."
    facts = {
        "drivers": drivers,
        "power_limit_w": [min(limits), max(limits)] if limits else None,
        "idle_power_w_median": float(np.median(idle)) if idle else None,
        "idle_readings_not_at_rest": unsettled if idle else None,
    }
    return sentence, facts


def stored_carbon(ok: pd.DataFrame) -> Carbon | None:
    """The intensity and PUE stored with the runs, when all runs share them (None when they
    differ: a traced intensity, or runs priced differently)."""
    intensities = _unique(ok, RunCol.INTENSITY_KG_PER_KWH)
    pues = _unique(ok, RunCol.PUE) or [DEFAULT_PUE]
    if len(intensities) != 1 or len(pues) != 1:
        return None
    intensity, pue = float(intensities[0]), float(pues[0])
    rng = intensity_range(ok)
    low, high = rng if rng else (intensity, intensity)
    is_default = (
        math.isclose(intensity, DEFAULT_INTENSITY_KG_PER_KWH)
        and math.isclose(low, DEFAULT_INTENSITY_LOW_KG_PER_KWH, rel_tol=1e-6)
        and math.isclose(high, DEFAULT_INTENSITY_HIGH_KG_PER_KWH, rel_tol=1e-6)
    )
    if is_default:
        source = DEFAULT_WORDS
    else:
        source = "as stored with the runs, which do not record its source or year"
    return Carbon(intensity, low, high, pue, source)


DEFAULT_WORDS = "wattlab's default, the reference study's assumed value, not a measured grid's"


def given_carbon(settings: CarbonSettings, region: str | None) -> Carbon:
    """The intensity and PUE given to the statement (its carbon flags), with the source in
    words: a country's yearly mean and its year, a value given by hand, or the default."""
    location, source = None, settings.source
    entry = region_table().get(region.strip().upper()) if region is not None else None
    if entry is not None:
        location = entry.country
        source = (
            f"{entry.country}'s {entry.year} yearly mean (region {entry.iso3}, from CodeCarbon's "
            "per-country energy-mix table)"
        )
    elif settings.source == DEFAULT_SOURCE:
        source = DEFAULT_WORDS
    elif settings.source == "--carbon-intensity":
        source = "a value given by hand (--carbon-intensity)"
    return Carbon(
        settings.intensity_kg_per_kwh,
        settings.intensity_low_kg_per_kwh,
        settings.intensity_high_kg_per_kwh,
        settings.pue,
        source,
        location,
    )


# --------------------------------------------------------------------------- the statement


def built_in_training_type(runs: list[StoredRun]) -> str | None:
    """ "pre-training" when every run is wattlab's own trainer on one of its torchvision models
    (built with ``weights=None``: trained from random weights); None otherwise (a callback's,
    a command's or a factory model's run may start from trained weights)."""
    for run in runs:
        if run.launcher not in BUILT_IN_LAUNCHERS:
            return None  # the callbacks store no launcher, command sweeps "command"
        if run.config_json is None or run.config_json.get("model_factory"):
            return None
    return "pre-training" if runs else None


@dataclass(frozen=True)
class _Subject:
    scope: str  # "run", "configuration" or "selection"
    energy_j: float  # the energy the statement is about: the run windows
    budget_j: float  # the same scope's budget windows
    words: str  # that energy in words, with its interval, and the budget beside it
    who: str  # the sentence's subject
    interval: dict[str, Any] | None


def _where(wholes: Sequence[RunWhole], many: bool, given: bool = True) -> str:
    """Which window the headline energy is: the whole run, or (no run window stored, or no
    windows ``given``) the budget window only."""
    if any(w.has_run_window for w in wholes):
        return " over " + ("their whole runs" if many else "the whole run")
    why = "no run window was stored" if given else "no windows were given"
    return f" in the budget (training) window only, as {why}"


def _subject(
    ok: pd.DataFrame,
    wholes: Sequence[RunWhole],
    run_id: int | None,
    what: str | None,
    given: bool = True,
) -> _Subject:
    energy = np.array([w.run_j for w in wholes], dtype="float64")
    budget = np.array([w.budget_j for w in wholes], dtype="float64")
    first = StoredRun.from_row(ok.iloc[0])
    label = _md(str(first.label))
    configs = ok[RunCol.CONFIG_HASH].astype("object").nunique()
    has_whole = any(w.has_run_window for w in wholes)
    if run_id is not None:  # ok holds that one run, its energy finite (split_unusable)
        energy_j, budget_j, unc = float(energy[0]), float(budget[0]), first.energy_uncertainty_j
        stated = ""
        if unc is not None and math.isfinite(unc) and unc > 0:
            stated = f" ± {fmt_energy(unc)}, the meters' stated uncertainty"
        words = f"{fmt_energy(energy_j)} of electricity{_where(wholes, False, given)}"
        if has_whole:
            words += f" (its budget window, the timed training: {fmt_energy(budget_j)}{stated})"
        else:
            stated = stated.replace(", the meters'", " (the meters'") + (")" if stated else "")
            words = f"{fmt_energy(energy_j)}{stated} of electricity{_where(wholes, False, given)}"
        return _Subject("run", energy_j, budget_j, words, f"Run {run_id} ({label})", None)
    if configs == 1:
        median, budget_median = float(np.median(energy)), float(np.median(budget))
        iv = median_interval(energy)
        kind = IntervalKind(len(energy), iv.method, iv.coverage)
        words = (
            f"{fmt_energy(median)} of electricity{_where(wholes, False, given)} (median of "
            f"{plural(len(energy), 'run')}"
        )
        if kind.has_interval:
            words += f"; {interval_words(kind)}: {fmt_energy(iv.low)} to {fmt_energy(iv.high)}"
        if has_whole:
            words += f"; its budget window, the timed training: {fmt_energy(budget_median)}"
        words += ")"
        interval = {
            "n": len(energy),
            "low_j": iv.low,
            "high_j": iv.high,
            "coverage": iv.coverage,
            "method": iv.method,
        }
        return _Subject(
            "configuration", median, budget_median, words, f"One training of {label}", interval
        )
    total_j, budget_j = float(energy.sum()), float(budget.sum())
    where = f" of {_md(what)}" if what else ""
    who = f"The {plural(len(ok), 'run')}{where} ({configs} configurations) together"
    words = f"{fmt_energy(total_j)} of electricity{_where(wholes, True, given)}"
    if has_whole:
        words += f" ({fmt_energy(budget_j)} of it in their budget windows, the timed training)"
    return _Subject("selection", total_j, budget_j, words, who, None)


def _provenance_sentence(parts: Any, methods: list[str]) -> str:
    measured, prov = parts.measured_share(), parts.phrase(detail=True)
    modelled = f"; wattlab modelled {and_join(methods)}" if methods else ""
    if measured <= 0:
        return f"All of it is estimated, not measured: {prov}{modelled}."
    if measured >= 1:
        return f"All of it was read from hardware: {prov}."
    return f"Of this energy: {prov}{modelled}."


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _repetitions_sentence(ok: pd.DataFrame, scope: str, total_j: float) -> str:
    reps = ok.groupby(ok[RunCol.CONFIG_HASH].astype("object")).size()
    if scope == "configuration":
        if len(ok) == 1:
            return "The configuration was run once."
        total = fmt_energy(total_j)
        return f"The configuration was run {_times(len(ok))}, {total} in all."
    if scope == "selection":
        lo, hi = int(reps.min()), int(reps.max())
        return f"Each configuration ran {_times(lo) if lo == hi else f'{lo}–{hi} times'}."
    return ""


def _stored_co2e(
    ok: pd.DataFrame, scope: str, wholes: Sequence[RunWhole]
) -> tuple[float, float, float]:
    """The stored CO2e of the subject, each run's scaled from its budget window to its run
    window (run_j / budget_j): the run's, the median of a configuration's runs, or the sum over
    the selection (kg; value, low, high)."""
    scale = np.array(
        [w.run_j / w.budget_j if w.budget_j > 0 else math.nan for w in wholes], dtype="float64"
    )
    out = []
    for column in (RunCol.CO2E_KG, RunCol.CO2E_LOW_KG, RunCol.CO2E_HIGH_KG):
        stored = numeric(ok[column]) if column in ok.columns else np.full(len(ok), math.nan)
        x = stored * scale
        x = x[np.isfinite(x)]
        if x.size == 0:
            out.append(math.nan)
        elif scope == "run":
            out.append(float(x[0]))
        elif scope == "configuration":
            out.append(float(np.median(x)))
        else:
            out.append(float(x.sum()))
    return out[0], out[1], out[2]


def energy_statement(
    runs: pd.DataFrame,
    *,
    run_id: int | None = None,
    carbon: CarbonSettings | None = None,
    region: str | None = None,
    training_type: str | None = None,
    command: str = "wattlab report --statement",
    version: str | None = None,
    what: str | None = None,
    windows: pd.DataFrame | None = None,
) -> EnergyStatement:
    """The statement of ``runs`` (already narrowed to a sweep, when one was asked for); see the
    module docstring. ``windows``: the store's windows table (the runs' ``run`` windows; without
    it every run counts with its budget window, and the statement says so). ``carbon``
    re-prices the CO2e (``region`` names its country); ``training_type`` is "pre-training" or
    "fine-tuning" (default: "pre-training" for wattlab's own trainer, else unknown); ``what``
    names the selection ("sweep h200-1gpu").
    Raises DataError when there is nothing to state."""
    if version is None:
        from wattlab import __version__ as version
    if training_type is not None and training_type not in TRAINING_TYPES:
        raise DataError(
            f"the training type must be one of {', '.join(TRAINING_TYPES)}, got {training_type!r}."
        )
    ok, left_out = stated_runs(runs, run_id)
    typed = StoredRun.from_frame(ok)
    wholes = run_wholes(typed, windows)
    subject = _subject(ok, wholes, run_id, what, given=windows is not None)
    parts = whole_parts(wholes)
    total_j = float(sum(w.run_j for w in wholes))
    hardware, hardware_used, hw_facts = _hardware(ok, typed)
    settings, gpu_facts = _gpu_settings(ok) if hw_facts["gpu_counts"] else ("", {})
    methods = estimation_methods(typed)
    chosen = given_carbon(carbon, region) if carbon is not None else stored_carbon(ok)
    sentences = [f"{subject.who} used {subject.words} on {hardware}."]
    if settings:
        sentences.append(settings)
    holds = holds_words(wholes)
    if holds:
        sentences.append(holds[0].upper() + holds[1:] + ".")
    sentences.append(_provenance_sentence(parts, methods))
    repetitions = _repetitions_sentence(ok, subject.scope, total_j)
    if repetitions:
        sentences.append(repetitions)
    if chosen is not None:
        co2, co2_low, co2_high = chosen.co2e_kg(subject.energy_j)
        sentences.append(
            f"At a carbon intensity of {chosen.intensity:.3g} kgCO2e/kWh (range "
            f"{chosen.low:.3g}–{chosen.high:.3g}) and a PUE of {chosen.pue:g}, this is "
            f"{fmt_co2e_g(co2)} CO2e ({fmt_co2e_g(co2_low)} to {fmt_co2e_g(co2_high)}); the "
            f"intensity is {chosen.source}."
        )
    else:
        co2, co2_low, co2_high = _stored_co2e(ok, subject.scope, wholes)
        intensities = ", ".join(f"{x:g}" for x in _unique(ok, RunCol.INTENSITY_KG_PER_KWH))
        pues = ", ".join(f"{x:g}" for x in _unique(ok, RunCol.PUE)) or "not recorded"
        sentences.append(
            f"Its CO2e at the carbon intensities stored with the runs (they differ between runs: "
            f"{intensities} kgCO2e/kWh; PUE {pues}) is {fmt_co2e_g(co2)} "
            f"({fmt_co2e_g(co2_low)} to {fmt_co2e_g(co2_high)}), each run's stored CO2e "
            "scaled from its budget window to its whole run."
        )
    work, work_missing = subject_work(ok, subject.scope)
    found = rates(subject.energy_j, co2, work)
    sentence = rates_sentence(found, "that energy over what the budget windows trained")
    if sentence:
        sentences.append(sentence)
    at_reference = reference_co2e_kg(subject.energy_j)
    same = chosen is not None and is_reference(chosen.intensity, chosen.pue)
    sentences.append(reference_sentence(at_reference, found, same))
    sentences.append(f"Stated by wattlab {version} ({_code(command)}).")
    if left_out:
        ids = ", ".join(str(r["run_id"]) for r in left_out)
        sentences.append(
            f"{plural(len(left_out), 'run')} stored as ok without a usable energy ({ids}) "
            f"{'is' if len(left_out) == 1 else 'are'} left out."
        )
    what_scope = {
        "run": f"run {run_id}",
        "configuration": f"median of {plural(len(ok), 'run')} of one configuration",
        "selection": f"all {len(ok)} runs together",
    }[subject.scope]
    intensity = (
        f"intensity {chosen.intensity:.3g} kgCO2e/kWh, PUE {chosen.pue:g}"
        if chosen is not None
        else "the intensities stored with the runs"
    )
    budget_g = subject.budget_j / subject.energy_j * co2 * 1e3 if subject.energy_j > 0 else 0.0
    alone = f"; the budget window alone {_number(budget_g, 4)} g" if math.isfinite(budget_g) else ""
    window = (
        f"whole run windows (warm-up, evaluation and set-up included{alone})"
        if any(w.has_run_window for w in wholes) and subject.energy_j > 0
        else "budget (training) windows only: "
        + ("no run window was stored" if windows is not None else "no windows were given")
    )
    source = f"wattlab {version}: {what_scope}; {window}; energy {parts.short()}; {intensity}"
    kind = training_type or built_in_training_type(typed)
    location = chosen.location if chosen is not None else None
    card = _model_card(
        co2 * 1e3, source, kind, location, hardware_used, _card_energy(subject, parts)
    )
    facts: dict[str, Any] = {
        "scope": subject.scope,
        "run_id": run_id,
        "runs": len(ok),
        "configurations": int(ok[RunCol.CONFIG_HASH].astype("object").nunique()),
        "energy_j": subject.energy_j,
        "window": "run" if any(w.has_run_window for w in wholes) else "budget",
        "budget_energy_j": subject.budget_j,
        "total_energy_j": total_j,
        "total_budget_energy_j": float(sum(w.budget_j for w in wholes)),
        "run_windows_hold_j": {
            "budget": float(sum(w.budget_j for w in wholes if w.has_run_window)),
            "warmup": float(sum(w.warmup_j for w in wholes)),
            "eval": float(sum(w.eval_j for w in wholes)),
            "rest": float(sum(w.rest_j for w in wholes)),
        },
        "runs_without_run_window": [w.run_id for w in wholes if not w.has_run_window],
        "run_ids": [w.run_id for w in wholes],
        "energy_interval": subject.interval,
        "provenance": parts.phrase(detail=True),
        "measured_share": parts.measured_share(),
        "energy_parts_j": [  # every run's energy by component kind and provenance
            {"kind": kind, "provenance": prov, "energy_j": joules}
            for (kind, prov), joules in sorted(parts.joules.items())
            if joules > 0
        ],
        "energy_uncertainty_j": _uncertainty(typed[0]) if subject.scope == "run" else None,
        "estimated_how": methods,
        "hardware": hardware,
        "hardware_used": hardware_used,
        **hw_facts,
        **gpu_facts,
        "carbon": None
        if chosen is None
        else {
            "intensity_kg_per_kwh": chosen.intensity,
            "range_kg_per_kwh": [chosen.low, chosen.high],
            "pue": chosen.pue,
            "source": chosen.source,
            "location": chosen.location,
        },
        "co2e_kg": co2,
        "co2e_range_kg": [co2_low, co2_high],
        "reference_carbon": {**reference_carbon(), "co2e_kg": at_reference},
        "work": work,
        "work_rates": {r.unit: r.facts() for r in found},
        "work_missing": work_missing,
        "training_type": kind,
        "left_out": left_out,
        "version": version,
        "command": command,
    }
    table = _config_table(ok, wholes) if subject.scope == "selection" else []
    notes = []
    if subject.scope == "selection":
        notes.append(
            f"the selection holds {facts['configurations']} configurations, so this states what "
            "all its runs used together; `--run ID`, or `--sweep NAME` of one configuration, "
            "states one training."
        )
    if chosen is not None and chosen.location is None:
        notes.append(
            "the intensity is not a grid's of a known place: `--region ISO3` prices the CO2e at "
            "a country's yearly mean and fills in geographical_location; a value given with "
            "`--carbon-intensity` needs its source named where you quote it."
        )
    if kind is None:
        notes.append(
            "wattlab cannot tell whether this was pre-training or fine-tuning: "
            "`--training-type` sets it in the model card."
        )
    return EnergyStatement(
        paragraph=" ".join(sentences),
        model_card=card,
        facts=facts,
        table=tuple(table),
        notes=tuple(notes),
    )


def _uncertainty(run: StoredRun) -> float | None:
    """The meters' stated uncertainty of one run (J), when it stored a finite positive one."""
    unc = run.energy_uncertainty_j
    return float(unc) if unc is not None and math.isfinite(unc) and unc > 0 else None


def _card_energy(subject: _Subject, parts: Any) -> CardEnergy:
    iv = subject.interval
    interval, words = None, ""
    if iv is not None and iv["low_j"] is not None and math.isfinite(iv["low_j"]):
        kind = IntervalKind(int(iv["n"]), str(iv["method"]), iv["coverage"])
        if kind.has_interval:
            interval = (iv["low_j"] / J_PER_KWH, iv["high_j"] / J_PER_KWH)
            words = interval_words(kind)
    return CardEnergy(subject.energy_j / J_PER_KWH, parts.measured_share(), interval, words)


def _config_table(ok: pd.DataFrame, wholes: Sequence[RunWhole]) -> list[str]:
    rows = [
        "| Configuration | Runs | Median energy (whole run) | Interval of the median | "
        "Median budget window | Provenance |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    hashes = ok[RunCol.CONFIG_HASH].astype("object").tolist()
    for config_hash, group in ok.groupby(ok[RunCol.CONFIG_HASH].astype("object"), sort=False):
        mine = [w for w, h in zip(wholes, hashes, strict=True) if h == config_hash]
        energy = np.array([w.run_j for w in mine], dtype="float64")
        budget = float(np.median([w.budget_j for w in mine]))
        parts = whole_parts(mine)
        iv = median_interval(energy)
        kind = IntervalKind(len(energy), iv.method, iv.coverage)
        span = interval_words(kind)
        if kind.has_interval:
            span = f"{fmt_energy(iv.low)} to {fmt_energy(iv.high)} ({span})"
        label = _md(str(group[RunCol.LABEL].iloc[0]))
        rows.append(
            f"| {label} | {len(group)} | {fmt_energy(float(np.median(energy)))} | {span} | "
            f"{fmt_energy(budget)} | {parts.short()} |"
        )
    return rows


def _yaml_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that any YAML parser reads back as it is: a JSON
    string (a YAML double-quoted scalar) with every character that YAML does not allow
    unescaped (DEL, C1 controls, surrogates, U+FEFF, U+FFFE/U+FFFF) or reads as a line break
    (U+0085, U+2028, U+2029) written as a \\u escape."""
    quoted = json.dumps(text, ensure_ascii=False)
    return "".join(
        ch
        if ch.isprintable() or ch == " "
        else f"\\u{ord(ch):04x}"
        if ord(ch) < 0x10000
        else f"\\U{ord(ch):08x}"
        for ch in quoted
    )


ENERGY_KEY = "energy_consumption"  # the model card's key for the electricity itself


@dataclass(frozen=True)
class CardEnergy:
    """The model card's energy: the kWh the CO2e was priced from (no grid intensity in it), the
    share of it read from hardware counters, and the interval of a median (kWh)."""

    kwh: float
    measured_share: float
    interval_kwh: tuple[float, float] | None = None
    interval_words: str = ""

    def yaml_lines(self) -> list[str]:
        """A top-level mapping beside ``co2_eq_emissions``: the Hub documents five keys inside
        that one, and keeps a top-level key it does not know as written (so does
        ``huggingface_hub``'s ``ModelCardData``)."""
        lines = [
            "# the electricity itself, which no assumed carbon intensity changes (wattlab)",
            f"{ENERGY_KEY}:",
            f"  energy_kwh: {_number(self.kwh, 4)}",
            f"  measured_share: {_number(self.measured_share, 4)}"
            "  # read from hardware counters; the rest estimated",
        ]
        if self.interval_kwh is not None:
            low, high = (_number(x, 4) for x in self.interval_kwh)
            lines.append(f"  energy_interval_kwh: [{low}, {high}]  # {self.interval_words}")
        return lines


def _model_card(
    grams: float,
    source: str,
    training_type: str | None,
    location: str | None,
    hardware: str,
    energy: CardEnergy,
) -> str:
    lines = [
        "co2_eq_emissions:",
        f"  emissions: {_number(grams, 4)}  # grams of CO2e",
        f"  source: {_yaml_string(source)}",
    ]
    if training_type:
        lines.append(f"  training_type: {_yaml_string(training_type)}")
    else:
        lines.append("  # training_type: pre-training or fine-tuning (unknown; --training-type)")
    if location:
        lines.append(f"  geographical_location: {_yaml_string(location)}")
    else:
        lines.append("  # geographical_location: where it ran (not recorded; --region sets it)")
    lines.append(f"  hardware_used: {_yaml_string(hardware)}")
    lines += energy.yaml_lines()
    return "\n".join(lines) + "\n"


def write_statement(statement: EnergyStatement, out_dir: str | Path) -> Path:
    """Write ``statement.md`` into ``out_dir`` (atomically, never through a link)."""
    from wattlab.jsonio import refuse_links_in, write_text_atomic

    out = Path(out_dir)
    refuse_links_in(out, ("statement.md",), "statement")
    return write_text_atomic(out / "statement.md", statement.markdown())
