"""bench/evaluate_step.py: replaying stored step-level marks from a reference CSV."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.step.test_step_projection import marks_of_a_run
from wattlab.estimate.reference import write_reference_csv
from wattlab.step.marks import MarkProjector

BENCH = Path(__file__).resolve().parents[2] / "bench"


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


def test_calibrated_interval_is_judged_with_whole_models_and_precisions_held_out(tmp_path):
    import argparse

    import numpy as np

    from wattlab.step.calibration import load_step_calibration

    bench = _bench()
    rng = np.random.default_rng(3)
    per_run = []
    for i in range(120):
        model, precision = f"m{i % 4}", ("fp32", "amp-bf16")[i % 2]
        spread = 0.05 if model == "m3" else 0.02  # one model's runs drift more than the rest
        per_run.append(
            {
                "fraction": 0.2,
                "model": model,
                "precision": precision,
                "error": float(rng.normal(0, spread)),
                "band_covers": i % 4 == 0,
            }
        )
    per_run.append({"fraction": 0.2, "model": "m0", "precision": "fp32", "error": None,
                    "band_covers": None})  # not steady: no projection, no interval  # fmt: skip
    (check,) = bench.interval_check(per_run, 0.9)
    assert check["runs"] == 120 and check["model_out_runs"] == 120
    assert check["band_coverage"] == pytest.approx(0.25)
    # fitted without m3, the bounds miss most of m3's wider errors: coverage held out falls
    # below the level, which an in-sample check would not show
    m3 = [r["error"] for r in per_run if r["model"] == "m3"]
    low, high = np.quantile([r["error"] for r in per_run[:-1] if r["model"] != "m3"], [0.05, 0.95])
    assert np.mean([low <= e <= high for e in m3]) < 0.8
    assert check["model_out_coverage"] < 0.9
    lo, hi = check["model_out_coverage_ci"]
    assert lo < check["model_out_coverage"] < hi
    assert 0.8 < check["precision_out_coverage"] < 1.0  # precisions alike here

    runs = pd.DataFrame({"gpu_name": ["NVIDIA H200"] * 2, "duration_s": [6.2, 9.8]})
    args = argparse.Namespace(level=0.9, write_calibration=tmp_path / "cal.csv")
    written = bench.write_calibration(per_run, args, Path("ref.csv"), runs)
    cal = load_step_calibration(written)
    assert cal.fractions == (0.2,) and cal.runs == (120,)
    assert cal.error_low[0] == pytest.approx(check["error_low"], abs=1e-6)
    assert cal.source == "2 NVIDIA H200 runs of 6-10 s (ref.csv)"
    assert "use: measured total in [E / (1 + error_high)" in written.read_text()


@pytest.fixture(autouse=True)
def _restore_path():
    before = list(sys.path)
    yield
    sys.path[:] = before


def _jittery_run(run_id: int, jitter: float, error: float) -> dict:
    """A steady run whose steps alternate (1 + jitter) and (1 - jitter) x 10 ms per 100 samples
    at 500 W, measured ``error`` below what its marks project after 20 %."""
    from wattlab.step.marks import replay_marks

    samples = list(range(0, 40_001, 100))
    steps = [0.01 * (1 + jitter * (-1) ** i) for i in range(len(samples) - 1)]
    times = [0.0, *np.cumsum(steps).tolist()]
    energies = [500.0 * t for t in times]
    projected = replay_marks(samples, times, energies, samples[-1], 0.2).energy_j
    return {
        "run_id": run_id, "samples": samples[-1], "energy_total_j": projected / (1 + error),
        "step_marks_json": json.dumps({"samples": samples, "time_s": times, "energy_j": energies}),
    }  # fmt: skip


def test_own_unsteadiness_is_measured_and_ranked_against_the_error():
    bench = _bench()
    from wattlab.step.marks import replay_marks

    run = _jittery_run(1, 0.2, 0.0)
    marks = json.loads(run["step_marks_json"])
    projection = replay_marks(marks["samples"], marks["time_s"], marks["energy_j"], 40_000, 0.2)
    measured = bench.unsteadiness(marks, projection)
    assert measured["step_spread"] == pytest.approx(0.2, rel=0.02)  # +-20 % from step to step
    assert measured["chunk_spread"] < 0.01  # the alternation averages out within a chunk
    assert measured["band"] >= 0
    assert bench.rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench.rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)

    # runs whose error grows with their step-to-step jitter: the step spread ranks them exactly,
    # and the steadiest quarter is within 3 % while the least steady is not
    jitters = [0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35]
    runs = pd.DataFrame([_jittery_run(i, j, j / 5) for i, j in enumerate(jitters)])
    rows = {r["measure"]: r for r in bench.variability_check(runs, 0.2, 0.03)}
    step = rows["step_spread"]
    assert step["runs"] == 8 and step["spearman_rho"] == pytest.approx(1.0)
    assert step["within_steadiest_quarter"] == 1.0 and step["within_least_steady_quarter"] == 0.0
