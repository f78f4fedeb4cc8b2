"""bench/evaluate_step.py: replaying stored step-level marks from a reference CSV."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.test_step_projection import marks_of_a_run
from wattlab.estimate.reference import write_reference_csv
from wattlab.step_projection import MarkProjector

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("evaluate_step", BENCH / "evaluate_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(run_id: int, drift: float, seed: int) -> dict:
    samples, times, energies, truth_j = marks_of_a_run(drift=drift, seed=seed)
    live = MarkProjector(0.2)
    marks = zip(samples, times, energies, strict=True)
    made = [live.add_mark(s, samples[-1], t, e) for s, t, e in marks]
    projection = next(r for r in made if r is not None)
    return {
        "id": run_id, "status": "ok", "model": "resnet18", "precision": "fp32", "gpus": 1,
        "batch_size": 512, "samples": samples[-1], "duration_s": times[-1],
        "energy_total_j": truth_j, "label": f"run {run_id}",
        "projected_energy_j": projection.energy_j,
        "step_marks_json": json.dumps({"samples": samples, "time_s": times, "energy_j": energies}),
    }  # fmt: skip


def test_replays_every_run_and_counts_hits_and_misses(tmp_path, monkeypatch, capsys):
    runs = pd.DataFrame([_run(1, 0.0, 0), _run(2, 0.0, 1), _run(3, 3.0, 2)])  # run 3 drifts
    windows = pd.DataFrame(columns=["run_id", "name", "epoch", "duration_s", "energy_total_j"])
    csv = write_reference_csv(runs, windows, tmp_path / "ref.csv", ["test data"])
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert _bench().main(["--data", str(csv), "--fractions", "0.2"]) == 0
    result = json.loads((tmp_path / "out" / "evaluate_step.json").read_text())
    (summary,) = result["summary"]
    assert summary["runs"] == 3
    assert summary["within"] == 2  # the steady runs, within 1 %; the drifting one misses
    by_run = {r["run_id"]: r for r in result["runs"]}
    assert abs(by_run[1]["error"]) < 0.01 and abs(by_run[2]["error"]) < 0.01
    assert by_run[3]["error"] is None or abs(by_run[3]["error"]) >= 0.03
    # marks rounded to 7 digits in the CSV still reproduce the live projections
    matched, checked = summary["live_equals_replay"].split("/")
    assert matched == checked and int(checked) >= 2  # every live projection reproduced
    assert "misses" in capsys.readouterr().out


def test_data_without_marks_says_so(tmp_path, capsys):
    runs = pd.DataFrame([{k: v for k, v in _run(1, 0.0, 0).items() if k != "step_marks_json"}])
    windows = pd.DataFrame(columns=["run_id", "name", "epoch", "duration_s", "energy_total_j"])
    csv = write_reference_csv(runs, windows, tmp_path / "ref.csv", ["test data"])
    assert _bench().main(["--data", str(csv)]) == 2
    assert "holds no step-level marks" in capsys.readouterr().out


@pytest.fixture(autouse=True)
def _restore_path():
    before = list(sys.path)
    yield
    sys.path[:] = before
