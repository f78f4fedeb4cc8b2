"""MLflow export against a real local SQLite tracking store, read back through MlflowClient."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

from wattlab.experiment.db.record import window_row  # noqa: E402
from wattlab.experiment.db.store import open_store  # noqa: E402
from wattlab.integrations.mlflow import export_store  # noqa: E402
from wattlab.integrations.session import run_row  # noqa: E402
from wattlab.monitor import EnergyMonitor  # noqa: E402

WATTLAB = [sys.executable, "-m", "wattlab.cli"]


def wattlab(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    return subprocess.run(
        [*WATTLAB, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def measured_db(path: Path, n_runs: int = 2) -> Path:
    """A wattlab database holding runs measured by a real EnergyMonitor on this machine."""
    for i in range(n_runs):
        with EnergyMonitor(interval_s=0.02) as mon:
            for epoch in (1, 2):
                with mon.window(f"epoch:{epoch}"):
                    time.sleep(0.05)
        row = run_row(
            config={"lr": 0.1 * (i + 1), "optimizer": {"name": "sgd", "momentum": 0.9}},
            label=f"probe {i}",
            train=mon.result,
            started_at=mon.result.started_at,
            model="probe",
            precision="fp32",
            device="cpu",
            world_size=1,
            batch_size=32,
            epochs=2.0,
            samples=64,
            accuracy=0.5 + i / 10,
            train_loss=1.0,
        )
        windows = [window_row("train", None, mon.result, 64)] + [
            window_row("epoch", e, mon.results[f"epoch:{e}"], 32) for e in (1, 2)
        ]
        with open_store(path) as store:
            store.insert_run(row, windows, mon.trace)
    return path


@pytest.fixture
def uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.mark.slow  # a real MLflow store: its migrations take seconds
def test_each_run_becomes_an_mlflow_run_with_params_metrics_and_report(tmp_path, uri):
    db = measured_db(tmp_path / "w.db")
    exported = export_store(db, tracking_uri=uri, experiment="energy")
    assert [r for r, _ in exported] == [1, 2] and all(m for _, m in exported)

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("energy")
    runs = client.search_runs([experiment.experiment_id], order_by=["params.label ASC"])
    assert len(runs) == 2
    with open_store(db, create=False) as store:
        stored = store.runs().set_index("id")
    for run in runs:
        wattlab_id = int(run.data.tags["wattlab.run_id"])
        row = stored.loc[wattlab_id]
        assert run.info.status == "FINISHED"
        assert run.data.params["label"] == row["label"]
        assert run.data.params["config.optimizer.name"] == "sgd"
        assert float(run.data.params["config.lr"]) == pytest.approx(0.1 * wattlab_id)
        m = run.data.metrics
        assert m["energy_total_j"] == pytest.approx(row["energy_total_j"])
        assert m["energy_cpu_j"] == pytest.approx(row["energy_cpu_j"])
        assert m["co2e_low_kg"] <= m["co2e_kg"] <= m["co2e_high_kg"]
        assert m["accuracy"] == pytest.approx(row["accuracy"])
        assert run.data.tags["wattlab.provenance"] == row["provenance"]
        # per-epoch energy as a stepped metric
        history = client.get_metric_history(run.info.run_id, "epoch_energy_total_j")
        assert sorted(h.step for h in history) == [1, 2]
        # the report and the row as artifacts
        paths = {a.path for a in client.list_artifacts(run.info.run_id, "wattlab")}
        assert paths == {"wattlab/run.md", "wattlab/run.json"}
        local = client.download_artifacts(run.info.run_id, "wattlab", str(tmp_path / "dl"))
        report = Path(local, "run.md").read_text()
        assert row["label"] in report and "| epoch | 2 |" in report
        assert json.loads(Path(local, "run.json").read_text())["id"] == wattlab_id


@pytest.mark.slow  # a real MLflow store: its migrations take seconds
def test_exporting_again_adds_only_new_runs(tmp_path, uri):
    db = measured_db(tmp_path / "w.db", n_runs=1)
    assert export_store(db, tracking_uri=uri)[0][1] is not None
    measured_db(db, n_runs=1)  # a second run arrives
    again = export_store(db, tracking_uri=uri)
    assert again[0] == (1, None) and again[1][1] is not None
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("wattlab")
    assert len(client.search_runs([experiment.experiment_id])) == 2


@pytest.mark.slow
def test_cli_export_mlflow(tmp_path, uri):
    db = measured_db(tmp_path / "w.db", n_runs=1)
    done = wattlab(
        "export", "--db", str(db), "--mlflow", "--tracking-uri", uri, "--experiment", "cli",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 run(s) exported to experiment 'cli'" in done.stdout
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("cli").experiment_id])
    assert len(runs) == 1 and runs[0].data.metrics["energy_total_j"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --out DIR for the table files, or --mlflow"),
        (["--out", "x", "--experiment", "e"], "--tracking-uri and --experiment need --mlflow"),
    ],
)
def test_cli_export_bad_input(tmp_path, args, message):
    db = measured_db(tmp_path / "w.db", n_runs=1)
    done = wattlab("export", "--db", str(db), *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x").exists()


def test_missing_extra_is_one_sentence(tmp_path):
    db = measured_db(tmp_path / "w.db", n_runs=1)
    code = (
        "import sys; sys.modules['mlflow'] = None\n"  # as if mlflow were not installed
        "from wattlab.cli.app import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "export", "--db", str(db), "--mlflow"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert re.search(r"'mlflow' extra\).*install it with: .*\[mlflow\]'$", done.stderr)
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_run_with_mlflow_logs_the_run_as_it_is_stored(tmp_path, uri):
    done = wattlab(
        "run", "--device", "cpu", "--model", "mobilenet_v3_small", "--stem", "imagenet",
        "--train-samples", "128", "--test-samples", "64", "--batch-size", "64",
        "--warmup-steps", "1", "--no-progress", "--epochs", "1", "--db", "r.db",
        "--region", "FRA", "--mlflow",
        cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "live"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "region FRA" in done.stdout
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("live").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.data.params["model"] == "mobilenet_v3_small"
    # France's yearly intensity from the shipped table, not the 0.20 default
    assert float(run.data.params["intensity_kg_per_kwh"]) == pytest.approx(0.056039)
    assert run.data.metrics["energy_total_j"] > 0


SWEEP_SPEC = """
name: mlflow-tiny
base: {model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 128,
       test_samples: 64, epochs: 1, batch_size: 64, warmup_steps: 1}
grid: {precision: [fp32]}
repetitions: 1
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


@pytest.mark.slow
def test_sweep_with_mlflow_and_an_intensity_trace(tmp_path, uri):
    from datetime import datetime, timedelta, timezone

    (tmp_path / "spec.yaml").write_text(SWEEP_SPEC)
    now = datetime.now(timezone.utc)
    (tmp_path / "grid.csv").write_text(
        "timestamp,intensity_g_per_kwh\n"
        f"{(now - timedelta(hours=1)).isoformat()},300\n"
        f"{(now + timedelta(hours=1)).isoformat()},300\n"
    )
    done = wattlab(
        "sweep", "spec.yaml", "--db", "s.db", "--intensity-trace", "grid.csv", "--mlflow",
        cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open_store(tmp_path / "s.db", create=False) as store:
        run = store.runs().iloc[0]
    # the traced intensity reached the stored run and its CO2e
    assert run["intensity_kg_per_kwh"] == pytest.approx(0.3)
    assert run["co2e_kg"] == pytest.approx(run["energy_total_j"] / 3.6e6 * 0.3)
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("wattlab").experiment_id])
    assert len(runs) == 1
    assert runs[0].data.params["sweep"] == "mlflow-tiny"
    assert runs[0].data.metrics["co2e_kg"] == pytest.approx(run["co2e_kg"])
