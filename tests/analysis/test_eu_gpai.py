"""The EU GPAI Model Documentation Form's energy and compute items (`report --statement --format
eu-gpai`), filled from a real H200 database and from runs the callbacks stored: every number
checked against the database with SQL, every item the database cannot know named as missing."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from wattlab.analysis.baseline import select_config
from wattlab.analysis.eu_gpai import eu_gpai_form, write_form
from wattlab.analysis.statement import energy_statement
from wattlab.experiment.db.store import open_store

ROOT = Path(__file__).resolve().parents[2]
H200_DB = ROOT / "docs" / "measured" / "h200-reference-2026-12-03-main.db.gz"
SWEEP = "h200-reference-p1-mobilenet_v3_small"
CONFIG = "precision=amp-bf16,batch_size=512"
LABEL = "mobilenet_v3_small 1xGPU amp-bf16 bs512"


@pytest.fixture(scope="module")
def h200_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("h200") / "h200.db"
    with gzip.open(H200_DB, "rb") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return db


def _items(form) -> dict[str, dict[str, str]]:
    return {i["question"]: i for i in form.facts["items"]}


def test_one_configuration_of_a_real_h200_database(h200_db: Path, tmp_path: Path) -> None:
    with open_store(h200_db, readonly=True) as store:
        runs, windows = store.runs(sweep=SWEEP), store.windows()
    chosen = select_config(runs, CONFIG)
    stated = energy_statement(chosen, windows=windows)
    form = eu_gpai_form(stated, chosen, db=h200_db)
    with sqlite3.connect(h200_db) as conn:
        rows = conn.execute(
            "select w.energy_total_j, r.wall_s, r.gpus, r.model_gflops_per_sample, r.samples "
            "from runs r join windows w on w.run_id = r.id and w.name = 'run' "
            "where r.sweep = ? and r.label = ? and r.status = 'ok'",
            (SWEEP, LABEL),
        ).fetchall()
    assert len(rows) == 2
    facts = form.facts
    # the energy: the median of the two whole-run windows, its interval the two runs' range
    assert facts["energy_kwh"] == pytest.approx(statistics.median(r[0] for r in rows) / 3.6e6)
    assert facts["energy_interval"]["low_j"] == pytest.approx(min(r[0] for r in rows))
    assert facts["energy_interval"]["high_j"] == pytest.approx(max(r[0] for r in rows))
    # GPU-hours: GPUs x the whole run's wall time, the median of the runs
    assert facts["gpu_hours"] == pytest.approx(statistics.median(r[2] * r[1] / 3600 for r in rows))
    assert facts["training_time_s"] == pytest.approx(statistics.median(r[1] for r in rows))
    # compute: counted forward GFLOPs x 1e9 x 3 x samples, an estimate and said so
    flop = statistics.median(r[3] * 1e9 * 3 * r[4] for r in rows)
    assert facts["training_flop"] == pytest.approx(flop)
    items = _items(form)
    assert items["Amount of computation used for training"]["status"] == "estimate"
    assert (
        "estimate from counted forward FLOPs"
        in (items["Amount of computation: methodology"]["answer"])
    )
    # measured or estimated by share, and the method of each part
    energy = items["Energy consumption during training: measured or estimated"]["answer"]
    assert energy.startswith("measured in part: ") and "measured by GPU counters" in energy
    method = items["Energy consumption during training: methodology"]["answer"]
    assert "NVML's cumulative energy counter" in method and "TDP times its utilisation" in method
    assert facts["measured_share"] == pytest.approx(stated.facts["measured_share"])
    amount = items["Energy consumption during training: amount"]["answer"]
    assert "the range of the runs, 50.0 % coverage of the median, 2 runs" in amount
    # what the database cannot know is named, never filled in
    assert facts["missing"] == [
        "Computation used for inference (benchmarked)",
        "Energy consumption during inference",
    ]
    assert items["Hardware"]["answer"] == "1 x NVIDIA H200."
    json.dumps(facts, allow_nan=False)
    text = write_form(form, tmp_path).read_text()
    assert text.startswith("# EU GPAI Model Documentation Form")
    assert "| Amount of computation used for training | " in text and "| missing |" in text


def test_callback_runs_name_the_compute_as_missing(tmp_path: Path) -> None:
    from wattlab.integrations.session import run_row, store_run
    from wattlab.meters.base import Provenance
    from wattlab.monitor import Measurement

    db = tmp_path / "hf.db"
    train = Measurement(
        name="train", started_at="2026-01-01T00:00:00+00:00", duration_s=10.0,
        energy_j={"gpu:0": 900.0, "cpu:estimated": 100.0},
        provenance={"gpu:0": Provenance.MEASURED, "cpu:estimated": Provenance.ESTIMATED},
        uncertainty_j={"gpu:0": 1.0, "cpu:estimated": 4.0}, in_total={},
    )  # fmt: skip
    row = run_row(
        config={"lr": 0.1}, label="bert", train=train, started_at="t", model="bert",
        precision="fp32", device="cuda", world_size=1, batch_size=8, epochs=1.0, samples=80,
    )  # fmt: skip
    run_id = store_run(db, row, [], [])
    with open_store(db, readonly=True) as store:
        runs, windows = store.runs(), store.windows()
    form = eu_gpai_form(energy_statement(runs, run_id=run_id, windows=windows), runs)
    facts, items = form.facts, _items(form)
    assert facts["energy_kwh"] == pytest.approx(1000.0 / 3.6e6)
    assert "training_flop" not in facts  # never made up
    assert "Amount of computation used for training" in facts["missing"]
    assert (
        "did not store their model's FLOPs"
        in (items["Amount of computation used for training"]["answer"])
    )
    # one run: the meters' stated uncertainty (1 J and 4 J in quadrature) beside it, in kWh
    assert facts["energy_uncertainty_j"] == pytest.approx((1.0**2 + 4.0**2) ** 0.5)
    amount = items["Energy consumption during training: amount"]["answer"]
    assert "one run; ± 1.1 × 10^-6 kWh (the meters' stated uncertainty)" in amount
    assert "over the training windows only" in amount
    assert facts["gpu_hours"] == pytest.approx(10.0 / 3600)  # 1 GPU x the training window
    assert (
        "90.0 % measured by GPU counters"
        in (items["Energy consumption during training: measured or estimated"]["answer"])
    )


@pytest.mark.slow
def test_the_cli_writes_the_form_and_refuses_misuse(h200_db: Path, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "wattlab.cli", "report", "--db", str(h200_db)]
    done = subprocess.run(
        [*cli, "--sweep", SWEEP, "--config", CONFIG, "--statement", "--format", "eu-gpai",
         "--out", "form", "--json", "form.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "form" / "eu-gpai.md").read_text().startswith("# EU GPAI")
    assert not (tmp_path / "form" / "statement.md").exists()
    facts = json.loads((tmp_path / "form.json").read_text())
    assert facts["missing"] and facts["energy_kwh"] > 0
    for wrong, said in (
        (["--format", "eu-gpai", "--out", "r"], "add --statement"),
        (["--statement", "--format", "iso", "--out", "r"], "--format must be one of"),
    ):
        refused = subprocess.run([*cli, *wrong], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=300)  # fmt: skip
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and not (tmp_path / "r").exists()


def test_a_hostile_gpu_name_stays_in_its_cell(h200_db: Path) -> None:
    with open_store(h200_db, readonly=True) as store:
        runs, windows = store.runs(sweep=SWEEP), store.windows()
    chosen = select_config(runs, CONFIG).assign(gpu_name="H200 | evil\nrow")
    form = eu_gpai_form(energy_statement(chosen, windows=windows), chosen)
    row = next(line for line in form.markdown().splitlines() if line.startswith("| Hardware"))
    # one line, the pipe escaped, the newline shown as the escape the statement writes
    assert row == "| Hardware | 1 x H200 \\| evil\\\\nrow. | filled |"
