"""Property tests (issue 39): runs generated with every phase mix (a run window or none, with or
without warm-up and evaluation), every provenance mix, CPU estimates on a fallback, table or
given TDP, image and non-image tasks, stored through the store's own row builders; then the
energy statement, its Hugging Face block, `wattlab export`'s runs.csv and summary.json are
checked against the generated data. The expected values are computed here, not by the code
under test."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wattlab.analysis.eu_gpai import eu_gpai_form
from wattlab.analysis.report import analyze_runs
from wattlab.analysis.statement import energy_statement
from wattlab.experiment.db.export import export_tables
from wattlab.experiment.db.record import EnergyColumns, estimate_assumptions, window_row
from wattlab.experiment.db.store import open_store
from wattlab.meters.base import Provenance
from wattlab.monitor import Measurement

SETTINGS = settings(
    max_examples=int(os.environ.get("WATTLAB_PROPERTY_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# (component, provenance)
COMPONENTS = (
    ("gpu:0", "measured"),
    ("gpu:0", "sampled"),
    ("cpu:package-0", "measured"),
    ("cpu:estimated", "estimated"),
    ("dram:package-0", "measured"),
    ("ram:estimated", "estimated"),
)
TDP_SOURCES = ("per-thread fallback", "table", "user")
INTENSITY, PUE = 0.2, 1.0  # the default the rows are priced at (the statement's stored carbon)


@dataclass
class Run:
    label: str
    budget: dict[str, tuple[str, float]]  # component -> (provenance, J)
    warmup_j: float
    eval_j: float
    rest_j: float
    has_run_window: bool
    tdp_source: str | None
    image_task: bool
    accuracy: float | None
    idle_w: float | None = None  # the GPU power read just before the run
    gap_s: float = 600.0  # from the previous run's end to this run's start
    tokens: int | None = None  # a text model's training tokens (the Hugging Face callback's)
    gflops: float | None = None  # the model's counted forward GFLOPs per sample
    wall_s: float | None = 20.0  # the whole run's wall time as stored (None: not stored)

    @property
    def budget_j(self) -> float:
        return sum(j for _, j in self.budget.values())

    @property
    def run_j(self) -> float:
        if not self.has_run_window:
            return self.budget_j
        return self.budget_j + self.warmup_j + self.eval_j + self.rest_j

    def measured_share(self) -> float:
        measured = sum(j for p, j in self.budget.values() if p in ("measured", "sampled"))
        return measured / self.budget_j


@dataclass
class Study:
    runs: list[Run] = field(default_factory=list)


@st.composite
def studies(draw: st.DrawFn) -> Study:
    study = Study()
    image_task = draw(st.booleans())
    tdp_source = draw(st.sampled_from(TDP_SOURCES))
    for c in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 4))):
            picks = draw(
                st.lists(
                    st.sampled_from(COMPONENTS), min_size=1, max_size=4, unique_by=lambda x: x[0]
                )
            )
            budget = {
                name: (prov, draw(st.floats(1.0, 5e4, allow_nan=False))) for name, prov in picks
            }
            has_run = draw(st.booleans())
            study.runs.append(
                Run(
                    label=f"cfg{c}",
                    budget=budget,
                    warmup_j=draw(st.sampled_from([0.0, 10.0, 2e3])) if has_run else 0.0,
                    eval_j=draw(st.sampled_from([0.0, 5.0, 800.0])) if has_run else 0.0,
                    rest_j=draw(st.sampled_from([0.0, 1.0, 300.0])) if has_run else 0.0,
                    has_run_window=has_run,
                    tdp_source=tdp_source,
                    image_task=image_task,
                    accuracy=draw(st.sampled_from([None, 0.55, 0.95])),
                    idle_w=draw(st.sampled_from([None, 70.0, 250.0])),
                    gap_s=draw(st.sampled_from([0.3, 9.0, 11.0, 600.0])),
                    tokens=None if image_task else draw(st.sampled_from([None, 4096, 123_457])),
                    gflops=draw(st.sampled_from([None, 0.5, 4.1])),
                    wall_s=draw(st.sampled_from([None, 20.0, 33.0])),
                )
            )
    return study


def _measurement(name: str, parts: dict[str, tuple[str, float]], scale: float) -> Measurement:
    return Measurement(
        name=name,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=10.0,
        energy_j={c: j * scale for c, (_, j) in parts.items()},
        provenance={c: Provenance(p) for c, (p, _) in parts.items()},
        uncertainty_j={c: 0.0 for c in parts},
        in_total={},
    )


RUN_S = 20.0  # each generated run's wall time
T0 = pd.Timestamp("2026-01-01T00:00:00+00:00")


def _span(study: Study, index: int) -> tuple[str, str]:
    """The run's start and end: one after another, each ``gap_s`` after the previous end."""
    start = T0 + pd.Timedelta(seconds=sum(r.gap_s + RUN_S for r in study.runs[:index]))
    start += pd.Timedelta(seconds=study.runs[index].gap_s)
    return start.isoformat(), (start + pd.Timedelta(seconds=RUN_S)).isoformat()


def _row(run: Run, index: int, span: tuple[str, str] = ("", "")) -> tuple[dict, list[dict]]:
    budget = _measurement("budget", run.budget, 1.0)
    energy = EnergyColumns.of(budget)
    for comp in energy.components_json:  # what the worker keeps of an estimate's meter
        if comp == "cpu:estimated" and run.tdp_source:
            details = {"tdp_w": 7.0, "tdp_source": run.tdp_source, "utilisation": "machine-wide"}
            details |= {"cpu_model": "Made-up CPU", "logical_cpus": 2}
            energy.components_json[comp].update(estimate_assumptions(details))
        if comp == "ram:estimated":
            energy.components_json[comp]["ram_measure"] = "system"
    config = {"model_config": {"id2label": {"0": "a", "1": "b"}}} if not run.image_task else {}
    row = {
        **energy.columns(),
        "sweep": "gen",
        "status": "ok",
        "config_hash": run.label,
        "repetition": index,
        "config_json": config,
        "label": run.label,
        "model": "resnet18" if run.image_task else "bert",
        "dataset": "synthetic" if run.image_task else None,
        "device": "cuda",
        "gpus": 1,
        "samples": 1000,
        "test_size": 200,
        "accuracy": run.accuracy,
        "pue": PUE,
        "hostname": "gen-host",
        "started_at": span[0] or None,
        "finished_at": span[1] or None,
        "idle_power_w": run.idle_w,
        "tokens": run.tokens,
        "gpu_name": "Made-up GPU",
        "model_gflops_per_sample": run.gflops,
        "wall_s": run.wall_s,
    }
    windows = [window_row("budget", None, budget, 1000)]
    if run.has_run_window:
        for name, joules in (("warmup", run.warmup_j), ("eval", run.eval_j)):
            if joules > 0:
                windows.append(
                    window_row(name, None, _measurement(name, run.budget, joules / run.budget_j), 0)
                )
        whole = _measurement("run", run.budget, run.run_j / run.budget_j)
        windows.append(window_row("run", None, whole, 1000))
    return row, windows


def _store(study: Study, folder: Path) -> Path:
    db = folder / "gen.db"
    with open_store(db) as store:
        for i, run in enumerate(study.runs):
            row, windows = _row(run, i, _span(study, i))
            store.insert_run(row, windows)
    return db


def _is_one_word_of_estimated(text: object) -> bool:
    return str(text).strip() == "estimated"


@SETTINGS
@given(studies())
def test_statement_card_export_and_summary_are_true_of_the_runs(study: Study) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = _store(study, folder)
        with open_store(db, readonly=True) as store:
            runs, windows = store.runs(), store.windows()
            export_tables(store, folder / "export", "csv")
        stated = energy_statement(runs, windows=windows)
        form = eu_gpai_form(stated, runs)
        exported = pd.read_csv(folder / "export" / "runs.csv")
        _, summary = analyze_runs(runs, windows=windows)

    # --- the statement: the whole training as headline, the budget beside it
    facts, p = stated.facts, stated.paragraph
    by_config: dict[str, list[Run]] = {}
    for run in study.runs:
        by_config.setdefault(run.label, []).append(run)
    whole = [r.run_j for r in study.runs]
    budget = [r.budget_j for r in study.runs]
    if len(by_config) == 1:
        assert facts["energy_j"] == pytest.approx(float(pd.Series(whole).median()))
        assert facts["budget_energy_j"] == pytest.approx(float(pd.Series(budget).median()))
    else:
        assert facts["energy_j"] == pytest.approx(sum(whole))
        assert facts["budget_energy_j"] == pytest.approx(sum(budget))
    any_window = any(r.has_run_window for r in study.runs)
    assert facts["window"] == ("run" if any_window else "budget")
    assert ("over the whole run" in p or "over their whole runs" in p) == any_window
    assert ("as no run window was stored" in p) == (not any_window)
    held = facts["run_windows_hold_j"]
    with_window = [r for r in study.runs if r.has_run_window]
    assert held["warmup"] == pytest.approx(sum(r.warmup_j for r in with_window))
    assert held["eval"] == pytest.approx(sum(r.eval_j for r in with_window))
    assert held["rest"] == pytest.approx(sum(r.rest_j for r in with_window), abs=1e-6)
    if with_window and any(r.warmup_j > 0 for r in with_window):
        assert "warm-up " in p
    without = [r for r in study.runs if not r.has_run_window]
    assert ("stored no run window" in p) == bool(with_window and without)
    # provenance by share of the run windows (each kind's provenance as in its budget)
    whole_measured = sum(
        j * r.run_j / r.budget_j
        for r in study.runs
        for prov, j in r.budget.values()
        if prov in ("measured", "sampled")
    )
    assert facts["measured_share"] == pytest.approx(whole_measured / sum(whole))
    # the estimate's assumptions
    estimated_cpu = any("cpu:estimated" in r.budget for r in study.runs)
    fallback = estimated_cpu and study.runs[0].tdp_source == "per-thread fallback"
    assert ("an assumed TDP of 7 W" in p) == fallback
    assert ("the whole machine's CPU utilisation" in p) == estimated_cpu
    assert ("Made-up CPU" in p) == estimated_cpu
    # the GPU power read before the runs: never called idle; how many came too soon after a run
    read = [(i, r) for i, r in enumerate(study.runs) if r.idle_w is not None]
    soon = sum(1 for i, r in read if i > 0 and r.gap_s < 10.0)
    assert " W idle" not in p
    if read:
        assert " W just before " in p
        assert facts["idle_readings_not_at_rest"] == soon
        assert ("not at rest:" in p) == (soon > 0)
        if soon and len(read) > 1:
            assert f"at least {soon} of {len(read)} readings came less than 10 s after" in p
    # the HF block: the CO2e of the same run windows, the budget's grams beside them
    card = yaml.safe_load(stated.model_card)["co2_eq_emissions"]
    assert card["emissions"] == pytest.approx(facts["energy_j"] / 3.6e6 * INTENSITY * 1e3, rel=1e-3)
    assert ("whole run windows" in card["source"]) == any_window

    # the rates per unit of work: the headline energy over the budget's samples and tokens
    samples = [1000] * len(study.runs)  # every generated run trained 1000 samples
    tokens = [r.tokens for r in study.runs]
    rates = facts["work_rates"]
    pick = sum if len(by_config) > 1 else (lambda x: float(pd.Series(x).median()))
    assert rates["sample"]["energy_j"] == pytest.approx(facts["energy_j"] / pick(samples))
    co2e = facts["energy_j"] / 3.6e6 * INTENSITY * PUE
    assert rates["sample"]["co2e_kg"] == pytest.approx(co2e / pick(samples))
    if all(t is not None for t in tokens):
        assert rates["token"]["energy_j"] == pytest.approx(facts["energy_j"] / pick(tokens))
        assert "per training token (" in p
    else:  # an image task, or a run without its count: named as missing, never estimated
        assert "token" not in rates and "token" in facts["work_missing"]
        assert "per training token" not in p
    accuracies = [r.accuracy for r in study.runs]
    if len(by_config) == 1 and all(a is not None for a in accuracies):
        points = float(pd.Series(accuracies).median()) * 100
        assert rates["accuracy_point"]["energy_j"] == pytest.approx(facts["energy_j"] / points)
    else:
        assert "accuracy_point" in facts["work_missing"]
    assert facts["reference_carbon"]["co2e_kg"] == pytest.approx(facts["energy_j"] / 3.6e6 * 0.2)
    energy_card = yaml.safe_load(stated.model_card)["energy_consumption"]
    assert energy_card["energy_kwh"] == pytest.approx(facts["energy_j"] / 3.6e6, rel=1e-3)
    assert energy_card["measured_share"] == pytest.approx(facts["measured_share"], abs=1e-4)
    for config in summary["configurations"]:  # summary.json: over the budget windows
        mine = by_config[config["label"]]
        if all(r.tokens is not None for r in mine):
            per_token = pd.Series([r.budget_j / r.tokens for r in mine]).median()
            assert config["energy_per_token_j"] == pytest.approx(per_token)
        else:
            assert config["energy_per_token_j"] is None
        median_budget = float(pd.Series([r.budget_j for r in mine]).median())
        assert config["co2e_at_reference_kg"] == pytest.approx(median_budget / 3.6e6 * 0.2)

    # --- the EU GPAI form: the statement's energy, each run's time over its energy's window
    gpai, items = form.facts, {i.question: i for i in form.items}
    assert gpai["energy_kwh"] == pytest.approx(facts["energy_j"] / 3.6e6)
    assert gpai["measured_share"] == pytest.approx(whole_measured / sum(whole))
    times = [(r.wall_s if r.has_run_window else 10.0) for r in study.runs]  # budget: 10 s
    if all(t is not None for t in times):
        assert gpai["training_time_s"] == pytest.approx(pick(times))
        assert gpai["gpu_hours"] == pytest.approx(pick([t / 3600 for t in times]))  # 1 GPU
    else:  # a whole run's time not stored: missing, never the budget's in its place
        assert "training_time_s" not in gpai and "Training time" in gpai["missing"]
    flops = [r.gflops for r in study.runs]
    if all(g is not None for g in flops):
        assert gpai["training_flop"] == pytest.approx(pick([g * 1e9 * 3 * 1000 for g in flops]))
        assert items["Amount of computation used for training"].status == "estimate"
    else:
        assert "training_flop" not in gpai
        assert "Amount of computation used for training" in gpai["missing"]
    assert "Energy consumption during inference" in gpai["missing"]
    amount = items["Energy consumption during training: amount"].answer
    assert ("stored no whole-run window and count" in amount) == bool(with_window and without)
    method = items["Energy consumption during training: methodology"].answer
    kinds = {(c.split(":")[0], p) for r in study.runs for c, (p, _) in r.budget.items()}
    assert ("NVML's cumulative energy counter" in method) == (("gpu", "measured") in kinds)
    assert ("NVML's power readings" in method) == (("gpu", "sampled") in kinds)
    assert ("RAPL energy counters of the CPU" in method) == (("cpu", "measured") in kinds)
    assert ("TDP times its utilisation" in method) == (("cpu", "estimated") in kinds)
    assert ("watts per GiB" in method) == (("ram", "estimated") in kinds)
    for item in form.items:
        assert item.answer and item.status in ("filled", "estimate", "missing")
        assert (item.status == "missing") == item.answer.startswith("missing: ")
    json.dumps(gpai, allow_nan=False)

    # --- export: every run's measured share, and never "estimated" alone when any was measured
    for run, (_, row) in zip(study.runs, exported.sort_values("id").iterrows(), strict=True):
        share = run.measured_share()
        assert row["energy_measured_share"] == pytest.approx(share)
        if share > 0:
            assert not _is_one_word_of_estimated(row["provenance"])
        if 0 < share < 1:
            assert "% measured" in row["provenance"] or "% sampled" in row["provenance"]

    # --- summary.json: top level and per configuration, by share
    total_measured = sum(r.measured_share() * r.budget_j for r in study.runs)
    assert summary["measured_share"] == pytest.approx(total_measured / sum(budget))
    if total_measured > 0:
        assert not _is_one_word_of_estimated(summary["provenance"])
    for config in summary["configurations"]:
        mine = by_config[config["label"]]
        measured = sum(r.measured_share() * r.budget_j for r in mine)
        assert config["measured_share"] == pytest.approx(measured / sum(r.budget_j for r in mine))
        if measured > 0:
            assert not _is_one_word_of_estimated(config["provenance"])
    assumptions = summary.get("estimate_assumptions") or ""
    assert ("an assumed TDP of 7 W" in assumptions) == fallback
    # --- chance: every classifier is judged (2 labels from the config, or the synthetic task)
    verdict = summary["accuracy_vs_chance"]
    if any(r.accuracy is not None for r in study.runs):
        assert verdict["judged"] is True
        if verdict["none_beyond"] and verdict["sentence"]:
            unit = "test images" if study.runs[0].image_task else "test samples"
            assert unit in verdict["sentence"]
    json.dumps(summary, allow_nan=False)  # JSON-safe
    assert math.isfinite(facts["energy_j"])
