"""The energy part of the EU general-purpose AI code of practice's Model Documentation Form
(Transparency chapter), filled from stored runs: ``wattlab report --statement --format eu-gpai``.

The form asks, for the model's training, for its computational resources (training time, the
amount of computation in FLOP and how it was obtained) and its energy consumption (the amount,
whether it was measured or estimated, and the method), and for the computation and energy of
inference. Each item here is filled from the energy statement of the same runs
(:func:`wattlab.analysis.statement.energy_statement`: the same selection, the same whole-run
energy, the same provenance by share), or marked **missing** with why: a number the database
does not hold is never made up.

- **Energy** in kWh (and the form's MWh), with its interval: the interval of a configuration's
  median, the meters' stated uncertainty of one run, or none for the sum of several
  configurations.
- **Measured or estimated**, by share, and the **method** of each part: NVML's energy counter
  or its sampled power for a GPU, RAPL's counters for a CPU package or DRAM, a model (the CPU's
  TDP and utilisation, the RAM's watts per GiB) for what had no counter.
- **Hardware**, **training time** (each run's wall time over the window the energy is of) and
  **GPU-hours** (GPUs x that time).
- **Compute** in FLOP, where every run stored its model's counted forward FLOPs per sample:
  ``model_gflops_per_sample x 1e9 x 3 x samples`` (forward and backward, about three forward
  passes), an estimate from counted forward FLOPs over the budget windows' samples, never a
  measurement.

The same scope rule as the statement: one run, one configuration (medians), or a selection of
several configurations (sums)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import numeric
from wattlab.analysis.statement import EnergyStatement, markdown_text, stated_runs
from wattlab.experiment.db.stored_run import RunCol
from wattlab.jsonio import jsonable
from wattlab.monitor.carbon import J_PER_KWH
from wattlab.wording import KIND_ORDER, plural

FORM = (
    "Model Documentation Form of the EU General-Purpose AI Code of Practice (Transparency "
    "chapter): computational resources and energy consumption"
)
STATEMENT_FORMATS = ("statement", "eu-gpai")  # report --statement --format
FLOP_FACTOR = 3  # one forward and one backward pass: about three forward passes' FLOPs
# How each (component kind, provenance) was obtained, in words.
METHODS = {
    ("gpu", "measured"): "NVML's cumulative energy counter of each GPU",
    ("gpu", "sampled"): "NVML's power readings of each GPU, integrated over time",
    ("gpu", "estimated"): "a model of the GPU's power (no counter or power reading)",
    ("cpu", "measured"): "RAPL energy counters of the CPU packages (Linux powercap)",
    ("cpu", "sampled"): "the CPU's sampled power, integrated over time",
    ("cpu", "estimated"): "a model: the CPU's TDP times its utilisation",
    ("dram", "measured"): "RAPL energy counters of the DRAM (Linux powercap)",
    ("ram", "estimated"): "a model: watts per GiB of the memory in use",
    ("other", "measured"): "energy counters of other components",
    ("total", "measured"): "whole-run energy totals stored without their components",
}


@dataclass(frozen=True)
class Item:
    """One item of the form: its question, the answer, and ``status``: "filled" (from the
    runs), "estimate" (computed from the runs by a stated rule) or "missing" (with why)."""

    question: str
    answer: str
    status: str = "filled"

    def facts(self) -> dict[str, str]:
        return {"question": self.question, "answer": self.answer, "status": self.status}


@dataclass(frozen=True)
class GpaiForm:
    """The filled items, the numbers they rest on (JSON-safe) and the notes."""

    items: Sequence[Item]
    facts: dict[str, Any]
    notes: Sequence[str] = field(default_factory=tuple)

    def markdown(self) -> str:
        lines = [
            "# EU GPAI Model Documentation Form: energy and computational resources",
            "",
            "The training's computational resources and energy consumption, as the Model "
            "Documentation Form of the EU General-Purpose AI Code of Practice (Transparency "
            f"chapter) asks for them, filled by wattlab {self.facts['version']} from its "
            f"database (`{self.facts['command']}`). "
            f"{self.facts['subject']} An item marked *missing* is one the database does not "
            "know: fill it in yourself; wattlab does not guess it.",
            "",
            "| Item | Answer | Status |",
            "| --- | --- | --- |",
        ]
        for item in self.items:  # a name from the database stays in its cell, as written
            lines.append(f"| {item.question} | {markdown_text(item.answer)} | {item.status} |")
        lines.append("")
        if self.notes:
            lines += ["Before submitting it:", "", *(f"- {n}" for n in self.notes), ""]
        return "\n".join(lines)


def _sci(value: float) -> str:
    """``value`` with two significant figures as the form writes them: 3.1 x 10^15."""
    if value <= 0 or not math.isfinite(value):
        return f"{value:g}"
    exponent = int(math.floor(math.log10(value)))
    mantissa = value / 10**exponent
    if round(mantissa, 1) >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.1f} × 10^{exponent}"


def _kwh(energy_j: float) -> str:
    """kWh to four significant digits, and the form's MWh as it writes numbers."""
    kwh = energy_j / J_PER_KWH
    return f"{kwh:.4g} kWh ({_sci(kwh / 1e3)} MWh)"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h" + (f" ({seconds:.1f} s)" if seconds < 3600 else "")


def _aggregate(values: np.ndarray, scope: str) -> float:
    return float(values.sum()) if scope == "selection" else float(np.median(values))


def _per_run(ok: pd.DataFrame, column: str) -> np.ndarray:
    return numeric(ok[column]) if column in ok.columns else np.full(len(ok), math.nan)


def _times_s(ok: pd.DataFrame, without_run_window: Sequence[int | None]) -> np.ndarray:
    """Each run's time over the window its energy is of: the whole run (``wall_s``) when it
    stored a run window, else its budget window (``duration_s``); NaN when that one is missing
    (never the other window's time in its place)."""
    wall, budget = _per_run(ok, RunCol.WALL_S), _per_run(ok, RunCol.DURATION_S)
    ids = ok[RunCol.ID].tolist() if RunCol.ID in ok.columns else [None] * len(ok)
    whole = np.array([i not in without_run_window for i in ids], dtype=bool)
    return np.where(whole, wall, budget)


def _energy_items(facts: dict[str, Any]) -> list[Item]:
    scope, energy_j = facts["scope"], facts["energy_j"]
    window = (
        "whole runs (set-up, warm-up, training and evaluation)"
        if facts["window"] == "run"
        else "the training windows only (the runs stored no whole-run window)"
    )
    without = len(facts["runs_without_run_window"])
    if facts["window"] == "run" and without:
        window += (
            f"; {plural(without, 'run')} stored no whole-run window and "
            f"count{'s' if without == 1 else ''} with {'its' if without == 1 else 'their'} "
            "training window"
        )
    interval = facts.get("energy_interval") or {}
    unc = facts.get("energy_uncertainty_j")
    if scope == "configuration" and interval and math.isfinite(interval.get("low_j", math.nan)):
        low, high = interval["low_j"] / J_PER_KWH, interval["high_j"] / J_PER_KWH
        how = (
            "order-statistic interval of the median"
            if interval["method"] == "order-statistic"
            else "the range of the runs"
        )
        span = (
            f"{low:.4g} to {high:.4g} kWh ({how}, {interval['coverage']:.1%} coverage of "
            f"the median, {plural(facts['runs'], 'run')})"
        ).replace("%", " %")
        amount = f"{_kwh(energy_j)}, the median of one configuration's runs; interval {span}"
    elif scope == "configuration":
        amount = f"{_kwh(energy_j)}, one run of one configuration; no interval (one run)"
    elif scope == "run" and unc is not None:
        of = " of its training window" if facts["window"] == "run" else ""
        amount = f"{_kwh(energy_j)}, one run; ± {_sci(unc / J_PER_KWH)} kWh (the meters' stated "
        amount += f"uncertainty{of})"
    elif scope == "run":
        amount = f"{_kwh(energy_j)}, one run; the meters stated no uncertainty"
    else:
        amount = (
            f"{_kwh(energy_j)}, all {facts['runs']} runs of {facts['configurations']} "
            "configurations together; no interval for a sum of configurations"
        )
    parts = sorted(facts["energy_parts_j"], key=lambda p: KIND_ORDER.index(p["kind"]))
    total = sum(p["energy_j"] for p in parts) or 1.0
    methods = []
    for part in parts:
        key = (part["kind"], part["provenance"])
        method = METHODS.get(key, f"{part['provenance']} ({part['kind']})")
        share = f"{part['energy_j'] / total:.1%}".replace("%", " %")
        methods.append(f"{part['kind'].upper()} {share}: {method}")
    how = "; ".join(methods)
    if facts["estimated_how"]:
        how += f". The model assumed: {'; '.join(facts['estimated_how'])}"
    measured = facts["measured_share"]
    kind = "measured" if measured >= 1 else "estimated" if measured <= 0 else "measured in part"
    return [
        Item("Energy consumption during training: amount", f"{amount}; over {window}."),
        Item(
            "Energy consumption during training: measured or estimated",
            f"{kind}: {facts['provenance']}.",
        ),
        Item("Energy consumption during training: methodology", how + "."),
    ]


def _compute_items(
    ok: pd.DataFrame, facts: dict[str, Any], times_s: np.ndarray
) -> tuple[list[Item], dict[str, Any]]:
    scope = facts["scope"]
    items, numbers = [], {}
    if np.isfinite(times_s).all() and times_s.size:
        seconds = _aggregate(times_s, scope)
        numbers["training_time_s"] = seconds
        what = "the whole runs" if facts["window"] == "run" else "the training windows"
        agg = {
            "run": "",
            "configuration": "the median of its runs, " if facts["runs"] > 1 else "",
            "selection": "all runs together, ",
        }
        items.append(
            Item(
                "Training time",
                f"{_hours(seconds)} of wall-clock time ({agg[scope]}over {what}).",
            )
        )
    else:
        items.append(
            Item(
                "Training time",
                "missing: a run stored no time for the window its energy is of.",
                "missing",
            )
        )
    gpus = _per_run(ok, RunCol.GPUS)
    if np.isfinite(gpus).all() and np.isfinite(times_s).all() and times_s.size:
        gpu_h = _aggregate(gpus * times_s / 3600.0, scope)
        numbers["gpu_hours"] = gpu_h
        answer = (
            f"{gpu_h:.3g} GPU-hours (GPUs x the training time above)"
            if gpu_h > 0
            else "none: the runs used no GPU"
        )
        items.append(Item("GPU-hours", answer + "."))
    else:
        items.append(Item("GPU-hours", "missing: a run stored no GPU count.", "missing"))
    items.append(Item("Hardware", f"{facts['hardware_used']}."))
    gflops, samples = _per_run(ok, RunCol.MODEL_GFLOPS_PER_SAMPLE), _per_run(ok, RunCol.SAMPLES)
    flop = gflops * 1e9 * FLOP_FACTOR * samples
    if flop.size and np.isfinite(flop).all() and (flop > 0).all():
        total = _aggregate(flop, scope)
        numbers["training_flop"] = total
        items.append(
            Item("Amount of computation used for training", f"{_sci(total)} FLOP.", "estimate")
        )
        items.append(
            Item(
                "Amount of computation: methodology",
                "an estimate from counted forward FLOPs, not a measurement: the model's forward "
                "FLOPs per sample (counted by torch's FlopCounterMode on one forward pass on the "
                f"CPU) x {FLOP_FACTOR} (forward and backward) x the samples trained in the "
                "budget windows; the warm-up's and evaluation's samples are not counted.",
                "estimate",
            )
        )
    else:
        why = (
            "the runs did not store their model's FLOPs per sample (runs of the framework "
            "callbacks and of your own command do not count them)"
            if not np.isfinite(gflops).all()
            else "a run stored no sample count"
        )
        items.append(Item("Amount of computation used for training", f"missing: {why}.", "missing"))
        items.append(
            Item("Amount of computation: methodology", "missing: no estimate made.", "missing")
        )
    return items, numbers


_INFERENCE = (
    "missing: wattlab measures training; the database holds no inference benchmark (the "
    "evaluation windows are the test set's, not a benchmark of inference)."
)


def eu_gpai_form(
    stated: EnergyStatement, runs: pd.DataFrame, *, db: str | Path | None = None
) -> GpaiForm:
    """The form's energy and compute items for the runs ``stated`` is about (``runs``: the
    selection it was made from, failed runs included)."""
    facts = stated.facts
    ok, _ = stated_runs(runs, facts["run_id"])  # the statement's runs, in its order
    times = _times_s(ok, facts["runs_without_run_window"])
    compute, numbers = _compute_items(ok, facts, times)
    items = [
        *_energy_items(facts),
        *compute,
        Item("Computation used for inference (benchmarked)", _INFERENCE, "missing"),
        Item("Energy consumption during inference", _INFERENCE, "missing"),
    ]
    subject = {
        "run": f"It states run {facts['run_id']}.",
        "configuration": "It states one training: "
        + (
            f"the median of the {facts['runs']} runs of one configuration."
            if facts["runs"] > 1
            else "the one run of one configuration."
        ),
        "selection": f"It states all {facts['runs']} runs of {facts['configurations']} "
        "configurations together.",
    }[facts["scope"]]
    notes = [
        "the form asks for the energy of the model's training: wattlab knows the runs in this "
        "database, not whether they are all of it (preliminary, intermediate and restarted "
        "runs stored elsewhere count too).",
    ]
    status = runs[RunCol.STATUS].astype("object") if RunCol.STATUS in runs.columns else None
    failed = int((status == "failed").sum()) if status is not None else 0
    if failed:
        notes.append(
            f"{plural(failed, 'failed run')} of this selection stored no energy; the "
            "electricity it used is not in the amount."
        )
    if facts["left_out"]:
        notes.append(
            f"{plural(len(facts['left_out']), 'run')} stored as ok without a usable energy "
            "left out of the amount."
        )
    out_facts = {
        "form": FORM,
        "scope": facts["scope"],
        "subject": subject,
        "run_ids": facts["run_ids"],
        "energy_j": facts["energy_j"],
        "energy_kwh": facts["energy_j"] / J_PER_KWH,
        "energy_interval": facts["energy_interval"],
        "energy_uncertainty_j": facts["energy_uncertainty_j"],
        "measured_share": facts["measured_share"],
        "energy_parts_j": facts["energy_parts_j"],
        **numbers,
        "items": [i.facts() for i in items],
        "missing": [i.question for i in items if i.status == "missing"],
        "version": facts["version"],
        "command": facts["command"],
        "database": str(db) if db is not None else None,
    }
    return GpaiForm(items=tuple(items), facts=jsonable(out_facts), notes=tuple(notes))


def write_form(form: GpaiForm, out_dir: str | Path) -> Path:
    """Write ``eu-gpai.md`` into ``out_dir`` (atomically, never through a link)."""
    from wattlab.jsonio import refuse_links_in, write_text_atomic

    out = Path(out_dir)
    refuse_links_in(out, ("eu-gpai.md",), "form")
    return write_text_atomic(out / "eu-gpai.md", form.markdown())
