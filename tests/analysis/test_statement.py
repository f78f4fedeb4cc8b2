"""The energy statement on stored runs of every kind: a real H200 database (wattlab's trainer),
runs stored by the framework callbacks, and a command sweep's runs, written through the store
as each of them writes them. (Generated tables: tests/analysis/test_report_properties.py.)"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wattlab.analysis.statement import energy_statement, write_statement
from wattlab.errors import DataError
from wattlab.experiment.db.store import open_store

ROOT = Path(__file__).resolve().parents[2]
H200_DB = ROOT / "docs" / "measured" / "h200-reference-2026-12-03-main.db.gz"
SWEEP = "h200-reference-p1-resnet18"


@pytest.fixture(scope="module")
def h200_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("h200") / "h200.db"
    with gzip.open(H200_DB, "rb") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return db


def test_a_sweep_of_a_real_h200_database(h200_db: Path) -> None:
    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep=SWEEP)
    stated = energy_statement(runs, what=f"sweep {SWEEP}", command="wattlab report ...")
    with sqlite3.connect(h200_db) as conn:
        (total_j, n) = conn.execute(
            "select sum(energy_total_j), count(*) from runs where sweep = ? and status = 'ok'",
            (SWEEP,),
        ).fetchone()
        cells = conn.execute(
            "select components_json from runs where sweep = ? and status = 'ok'", (SWEEP,)
        ).fetchall()
    parts = [json.loads(c) for (c,) in cells]
    gpu_j = sum(p["gpu:0"]["energy_j"] for p in parts)
    facts = stated.facts
    assert facts["scope"] == "selection" and facts["runs"] == n == 12
    assert facts["energy_j"] == pytest.approx(total_j)
    assert facts["measured_share"] == pytest.approx(gpu_j / total_j)  # the GPU counters
    p = stated.paragraph
    assert f"{facts['measured_share']:.1%}".replace("%", " %") + " measured by GPU counters" in p
    assert "1 x NVIDIA H200" in p and "driver 580.159.04" in p
    assert "a power limit of 700 W per GPU (their default)" in p
    assert "just before the runs (median" in p and "Each configuration ran once." in p
    assert "W idle" not in p  # a reading right after a run is not the card at rest
    with sqlite3.connect(h200_db) as conn:
        spans = conn.execute(
            "select started_at, finished_at from runs where sweep = ? and status = 'ok' "
            "and idle_power_w is not null",
            (SWEEP,),
        ).fetchall()
    moments = [(dt.datetime.fromisoformat(a), dt.datetime.fromisoformat(b)) for a, b in spans]
    soon = sum(
        any(0 <= (start - end).total_seconds() < 10 for _, end in moments) for start, _ in moments
    )
    assert 0 < soon < n  # the first run's reading came at rest (76 W), the others did not
    assert f"not at rest: at least {soon} of {n} readings came less than 10 s after" in p
    assert "wattlab's default" in p  # the stored intensity is the default one, and says so
    card = yaml.safe_load(stated.model_card)["co2_eq_emissions"]
    assert card["emissions"] == pytest.approx(total_j / 3.6e6 * 0.2 * 1e3, rel=1e-3)
    assert card["training_type"] == "pre-training"  # wattlab's trainer starts from random weights
    assert card["hardware_used"] == "1 x NVIDIA H200"
    assert len(stated.table) == 2 + 12


def test_one_run_and_one_configuration(h200_db: Path) -> None:
    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep=SWEEP)
    run_id = int(runs[runs["status"] == "ok"]["id"].iloc[0])
    one = energy_statement(runs, run_id=run_id)
    row = runs.set_index("id").loc[run_id]
    assert one.facts["scope"] == "run" and one.facts["energy_j"] == row["energy_total_j"]
    assert one.paragraph.startswith(f"Run {run_id} ({row['label']}) used ")
    assert "the meters' stated uncertainty" in one.paragraph
    assert "drew 76 W just before the run" in one.paragraph  # this run's idle_power_w
    config = runs[runs["config_hash"] == row["config_hash"]]
    three = energy_statement(config.assign(status="ok"))  # one configuration, one run
    assert three.facts["scope"] == "configuration" and "(median of 1 run)" in three.paragraph
    with pytest.raises(DataError, match="no run 99999"):
        energy_statement(runs, run_id=99999)


def _callback_window(gpu_j: float, cpu_j: float):
    from wattlab.meters.base import Provenance
    from wattlab.monitor import Measurement

    return Measurement(
        name="train",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=10.0,
        energy_j={"gpu:0": gpu_j, "cpu:estimated": cpu_j},
        provenance={"gpu:0": Provenance.MEASURED, "cpu:estimated": Provenance.ESTIMATED},
        uncertainty_j={"gpu:0": 1.0, "cpu:estimated": 4.0},
        in_total={},
    )


def test_runs_stored_by_the_callbacks(tmp_path: Path) -> None:
    from wattlab.integrations.session import run_row, store_run

    db = tmp_path / "hf.db"
    for gpu_j in (900.0, 950.0, 1000.0):  # three trainings of one configuration
        row = run_row(
            config={"lr": 0.1}, label="bert-base fine-tune", train=_callback_window(gpu_j, 100.0),
            started_at="t", model="bert", precision="fp32", device="cuda", world_size=1,
            batch_size=8, epochs=1.0, samples=80, accuracy=0.5,
        )  # fmt: skip
        store_run(db, row, [], [])
    with open_store(db, readonly=True) as store:
        runs, windows = store.runs(), store.windows()
    stated = energy_statement(runs, training_type="fine-tuning", windows=windows)
    p = stated.paragraph
    assert (
        "One training of bert-base fine-tune used 1.05 kJ of electricity in the budget "
        "(training) window only, as no run window was stored (median of 3 runs; " in p
    )
    assert "min–max of 3 runs, 75 % coverage: 1.00 kJ to 1.10 kJ" in p
    assert "1 GPU whose model was not recorded" in p  # the callbacks store no GPU name
    assert "Their driver, power limit and power before the runs were not recorded." in p
    # 950 of 1050 J from the GPU's counter, 100 J from the CPU model
    assert "90.5 % measured by GPU counters, 9.5 % estimated (CPU)" in p
    assert "the CPU (" in p and "a TDP whose origin the runs did not record" in p
    card = yaml.safe_load(stated.model_card)["co2_eq_emissions"]
    assert card["training_type"] == "fine-tuning" and card["hardware_used"] == "1 GPU"
    unknown = energy_statement(runs)  # the callbacks cannot tell pre-training from fine-tuning
    assert "as no windows were given" in unknown.paragraph  # none passed: it says so
    assert "training_type" not in yaml.safe_load(unknown.model_card)["co2_eq_emissions"]
    assert any("--training-type" in note for note in unknown.notes)


def test_a_command_sweeps_runs(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from wattlab.experiment.runs import command_record
    from wattlab.experiment.runs.command_meter import BudgetSegment, MeteredCommand
    from wattlab.experiment.specs.command import CommandSweepSpec
    from wattlab.meters.base import Provenance
    from wattlab.monitor import Measurement

    spec = CommandSweepSpec.from_dict(
        {"name": "s", "command": ["python", "t.py", "--bs", "{batch_size}"],
         "grid": {"batch_size": [8]}}
    )  # fmt: skip
    point = spec.resolve(spec.points()[0])
    gpu = SimpleNamespace(component="gpu:0", details={"name": "NVIDIA H200", "driver": "580.1"})
    monitor = SimpleNamespace(meters=[SimpleNamespace(info=gpu)])

    def window(name: str, seconds: float) -> Measurement:
        return Measurement(
            name=name, started_at="2026-01-01T00:00:00+00:00", duration_s=seconds,
            energy_j={"gpu:0": 300.0 * seconds}, provenance={"gpu:0": Provenance.MEASURED},
            uncertainty_j={"gpu:0": 2.0}, in_total={},
        )  # fmt: skip

    with open_store(tmp_path / "cmd.db") as store:
        for rep, seconds in enumerate((10.0, 12.0)):
            run_id = store.claim_run(
                command_record.claim_row(point, "s", rep, {"gpu:0": {"power_w": 70.0}})
            )
            block = window("budget", seconds)
            result = MeteredCommand(0, window("run", seconds + 5), block, True,
                                    [BudgetSegment(block, samples=80)], started_unix=0.0,
                                    ended_unix=seconds + 5)  # fmt: skip
            out, err = tmp_path / f"{rep}.out", tmp_path / f"{rep}.err"
            row = command_record.finished_row(point, result, monitor, out, err)
            rows, _ = command_record.windows_and_trace(result, SimpleNamespace(trace=[]))
            store.finish_run(run_id, row, rows)
        runs, windows = store.runs(), store.windows()
    stated = energy_statement(runs, windows=windows)
    p = stated.paragraph
    # the whole process (16 s median at 300 W), the marked block beside it (11 s)
    assert "used 4.80 kJ of electricity over the whole run (median of 2 runs; min–max of 2 " in p
    assert "its budget window, the timed training: 3.30 kJ)" in p
    assert "the budget window (timed training) held 68.8 %" in p
    assert "1 x NVIDIA H200" in p and "driver 580.1" in p
    assert "drew 70 W just before each run" in p
    assert "All of it was read from hardware: measured by GPU counters." in p
    assert "training_type" not in yaml.safe_load(stated.model_card)["co2_eq_emissions"]


def test_nothing_to_state_is_one_sentence(h200_db: Path, tmp_path: Path) -> None:
    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep=SWEEP)
    broken = runs.assign(energy_total_j=float("nan"))
    with pytest.raises(DataError, match="no ok run with a finite energy"):
        energy_statement(broken)
    some = runs.copy()
    some.loc[some.index[0], "energy_total_j"] = float("inf")
    stated = energy_statement(some)
    assert f"({int(some['id'].iloc[0])}) is left out" in stated.paragraph
    path = write_statement(stated, tmp_path)
    assert path.read_text().startswith("# Energy statement\n\n")
    assert "```yaml\nco2_eq_emissions:\n" in path.read_text()


@pytest.mark.slow
def test_the_cli_writes_statement_md_and_refuses_misuse(h200_db: Path, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "wattlab.cli", "report", "--db", str(h200_db)]
    done = subprocess.run(
        [*cli, "--sweep", SWEEP, "--statement", "--out", "st", "--region", "FRA"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "st" / "statement.md").read_text()
    assert "France's 2023 yearly mean" in text and 'geographical_location: "France"' in text
    assert f"--sweep {SWEEP} --statement --out st --region FRA" in text  # the command
    assert "co2_eq_emissions:" in done.stdout
    wrong = subprocess.run([*cli, "--out", "r", "--region", "FRA"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert wrong.returncode == 2 and "add --statement" in wrong.stderr
    assert "Traceback" not in wrong.stderr and not (tmp_path / "r").exists()


def test_config_picks_one_configuration_or_says_why_not(h200_db: Path) -> None:
    from wattlab.analysis.baseline import select_config
    from wattlab.errors import ConfigError

    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep="h200-reference-p1-mobilenet_v3_small")
    one = select_config(runs, "precision=amp-bf16,batch_size=512")
    assert set(one["label"]) == {"mobilenet_v3_small 1xGPU amp-bf16 bs512"} and len(one) == 2
    stated = energy_statement(one)
    assert stated.facts["scope"] == "configuration" and stated.facts["runs"] == 2
    assert "min–max of 2 runs, 50 % coverage" in stated.paragraph
    with pytest.raises(ConfigError, match="matches 3 configurations"):
        select_config(runs, "precision=amp-bf16")
    with pytest.raises(ConfigError, match="matches no run"):
        select_config(runs, "batch_size=7")
    with pytest.raises(ConfigError, match="--config key 'colour' is not a configuration column"):
        select_config(runs, "colour=red")


def test_the_statement_heads_with_the_whole_run(h200_db: Path) -> None:
    """With the windows, the headline is the run windows (warm-up, evaluation and set-up
    included), the budget beside it, and the shares of what the run windows hold add up."""
    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep=SWEEP)
        windows = store.windows()
    stated = energy_statement(runs, windows=windows)
    with sqlite3.connect(h200_db) as conn:
        (run_j, budget_j, warmup_j) = conn.execute(
            "select sum(case when w.name = 'run' then w.energy_total_j end), "
            "sum(case when w.name = 'budget' then w.energy_total_j end), "
            "sum(case when w.name = 'warmup' then w.energy_total_j end) "
            "from windows w join runs r on r.id = w.run_id where r.sweep = ? and r.status = 'ok'",
            (SWEEP,),
        ).fetchone()
    facts = stated.facts
    assert facts["window"] == "run" and facts["energy_j"] == pytest.approx(run_j)
    assert facts["budget_energy_j"] == pytest.approx(budget_j) and run_j > budget_j
    assert facts["run_windows_hold_j"]["warmup"] == pytest.approx(warmup_j)
    assert sum(facts["run_windows_hold_j"].values()) == pytest.approx(run_j)
    p = stated.paragraph
    assert "over their whole runs" in p and "of it in their budget windows" in p
    assert f"warm-up {warmup_j / run_j:.1%}".replace("%", " %") in p
    card = yaml.safe_load(stated.model_card)["co2_eq_emissions"]
    assert card["emissions"] == pytest.approx(run_j / 3.6e6 * 0.2 * 1e3, rel=1e-3)
    assert "whole run windows (warm-up, evaluation and set-up included" in card["source"]


def _card_energy_of(stated) -> dict:
    return yaml.safe_load(stated.model_card)["energy_consumption"]


def test_the_model_card_carries_the_kwh_and_its_measured_share(h200_db: Path) -> None:
    """Beside co2_eq_emissions: the kWh the CO2e was priced from, the share read from the GPU
    counters, and the interval of a configuration's median."""
    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep="h200-reference-p1-mobilenet_v3_small")
        windows = store.windows()
    from wattlab.analysis.baseline import select_config

    one = select_config(runs, "precision=amp-bf16,batch_size=512")
    stated = energy_statement(one, windows=windows)
    facts = stated.facts
    loaded = yaml.safe_load(stated.model_card)
    energy = loaded["energy_consumption"]
    assert energy["energy_kwh"] == pytest.approx(facts["energy_j"] / 3.6e6, rel=1e-3)
    assert energy["measured_share"] == pytest.approx(facts["measured_share"], abs=1e-4)
    low, high = energy["energy_interval_kwh"]
    assert low == pytest.approx(facts["energy_interval"]["low_j"] / 3.6e6, rel=1e-3)
    assert high == pytest.approx(facts["energy_interval"]["high_j"] / 3.6e6, rel=1e-3)
    assert "min–max of 2 runs, 50 % coverage" in stated.model_card
    # the CO2e is the same kWh priced: grams = kWh x PUE x intensity
    assert loaded["co2_eq_emissions"]["emissions"] == pytest.approx(
        energy["energy_kwh"] * 1.0 * 0.2 * 1e3, rel=1e-3
    )
    assert set(loaded["co2_eq_emissions"]) <= {
        "emissions", "source", "training_type", "geographical_location", "hardware_used"
    }  # fmt: skip


@pytest.mark.extra("transformers")
def test_the_model_card_round_trips_through_huggingface_hub(h200_db: Path) -> None:
    """The block, pasted into a README's metadata, is read by huggingface_hub's ModelCard and
    written back by ModelCardData unchanged (the Hub's own reader and writer)."""
    from huggingface_hub import ModelCard, ModelCardData

    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep=SWEEP)
        windows = store.windows()
    for stated in (
        energy_statement(runs, windows=windows),
        energy_statement(runs[runs["status"] == "ok"].iloc[:3].assign(config_hash="one")),
    ):
        expected = yaml.safe_load(stated.model_card)
        card = ModelCard(f"---\n{stated.model_card}---\n\n# A model\n")
        assert card.data.to_dict() == expected
        assert card.data.energy_consumption == expected["energy_consumption"]
        again = ModelCardData(**yaml.safe_load(card.data.to_yaml()))
        assert again.to_dict() == expected
        written = ModelCard(str(card))  # the README as huggingface_hub writes it back
        assert written.data.to_dict() == expected


def test_rates_per_unit_of_work_of_a_real_h200_configuration(h200_db: Path) -> None:
    """Per sample and per accuracy point from the stored counts; the reference CO2e beside a
    country's; no token rate for an image model, and that is named, not filled in."""
    from wattlab.analysis.baseline import select_config
    from wattlab.monitor.carbon import settings_from_flags

    with open_store(h200_db, readonly=True) as store:
        runs = store.runs(sweep="h200-reference-p1-mobilenet_v3_small")
        windows = store.windows()
    one = select_config(runs, "precision=amp-bf16,batch_size=512")
    stated = energy_statement(
        one, windows=windows, carbon=settings_from_flags(region="FRA"), region="FRA"
    )
    facts, p = stated.facts, stated.paragraph
    with sqlite3.connect(h200_db) as conn:
        rows = conn.execute(
            "select samples, accuracy from runs where sweep = ? and status = 'ok' and "
            "label = 'mobilenet_v3_small 1xGPU amp-bf16 bs512'",
            ("h200-reference-p1-mobilenet_v3_small",),
        ).fetchall()
    samples = sorted(s for s, _ in rows)
    accuracy = sorted(a for _, a in rows)
    assert len(rows) == 2 and samples[0] == samples[1]  # median = that count
    per_sample = facts["work_rates"]["sample"]
    assert per_sample["energy_j"] == pytest.approx(facts["energy_j"] / samples[0])
    assert per_sample["co2e_kg"] == pytest.approx(facts["co2e_kg"] / samples[0])
    points = (accuracy[0] + accuracy[1]) / 2 * 100
    assert facts["work_rates"]["accuracy_point"]["energy_j"] == pytest.approx(
        facts["energy_j"] / points
    )
    assert "token" in facts["work_missing"] and "per training token" not in p
    assert f"per training sample ({samples[0]:,})".replace(",", " ") in p
    assert "per point of test accuracy" in p
    # France's grid for the CO2e, the reference intensity beside it
    assert facts["co2e_kg"] < facts["reference_carbon"]["co2e_kg"]
    assert facts["reference_carbon"]["co2e_kg"] == pytest.approx(facts["energy_j"] / 3.6e6 * 0.2)
    assert "At the reference intensity of 0.2 kgCO2e/kWh and a PUE of 1" in p


def test_a_text_models_runs_give_the_energy_per_token(tmp_path: Path) -> None:
    from wattlab.integrations.session import run_row, store_run

    db = tmp_path / "hf.db"
    for gpu_j, tokens in ((900.0, 42_000), (950.0, 42_000), (1000.0, 42_000)):
        row = run_row(
            config={"lr": 0.1}, label="bert-base fine-tune", train=_callback_window(gpu_j, 100.0),
            started_at="t", model="bert", precision="fp32", device="cuda", world_size=1,
            batch_size=8, epochs=1.0, samples=80, accuracy=0.5, tokens=tokens,
        )  # fmt: skip
        store_run(db, row, [], [])
    with open_store(db, readonly=True) as store:
        runs, windows = store.runs(), store.windows()
    assert list(runs["tokens"]) == [42_000] * 3  # stored by the callbacks' row
    stated = energy_statement(runs, windows=windows)
    rate = stated.facts["work_rates"]["token"]
    assert rate["energy_j"] == pytest.approx(1050.0 / 42_000)  # the median run over its tokens
    assert "0.0250 J and " in stated.paragraph and "per training token (42 000)" in stated.paragraph
    assert stated.facts["work_rates"]["sample"]["energy_j"] == pytest.approx(1050.0 / 80)
