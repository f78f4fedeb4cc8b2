"""Step-level STEP in the method evaluation: replayed marks, an interval fitted without the
run's group, and runs without marks or with another target left out with the reason."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.step.test_step_projection import marks_of_a_run
from wattlab.estimate import step_marks
from wattlab.estimate.evaluate import evaluate_methods
from wattlab.step import stored
from wattlab.step.calibration import conformal_bounds
from wattlab.step.marks import replay_marks


def _runs(per_model: int = 10) -> pd.DataFrame:
    """Three models' runs; model "c" drifts more after the first fifth than "a" and "b"."""
    rng = np.random.default_rng(5)
    rows = []
    for model, spread in (("a", 0.01), ("b", 0.01), ("c", 0.08)):
        for _ in range(per_model):
            drift = float(np.clip(rng.normal(0, spread), -0.2, 0.2))
            samples, times, energies, truth_j = marks_of_a_run(drift=drift, seed=len(rows))
            rows.append({
                "id": len(rows) + 1, "status": "ok", "model": model, "precision": "fp32",
                "config_hash": f"{model}-{len(rows) % 2}", "label": f"{model} run",
                "samples": samples[-1], "epochs": 1.0, "energy_total_j": truth_j,
                "energy_gpu_j": 0.9 * truth_j, "duration_s": times[-1],
                "step_marks_json": json.dumps(
                    {"samples": samples, "time_s": times, "energy_j": energies}
                ),
            })  # fmt: skip
    return pd.DataFrame(rows)


def test_the_interval_comes_from_the_other_groups_errors_only() -> None:
    runs = _runs()
    measured = runs["energy_total_j"]
    projections = stored.replayed(runs, 0.2)
    errors = {i: (p.energy_j - measured[i]) / measured[i] for i, p in projections.items() if p.ok}
    assert len(errors) == len(runs)
    held = step_marks.held_out_estimates(projections, measured, runs["model"], "its model")
    for model in ("a", "b", "c"):
        low, high = conformal_bounds(
            [e for i, e in errors.items() if runs.loc[i, "model"] != model]
        )
        for i in runs.index[runs["model"] == model]:
            estimate = held[i]
            assert estimate.energy_j == pytest.approx(projections[i].energy_j)
            assert estimate.energy_low_j == pytest.approx(estimate.energy_j / (1 + high))
            assert estimate.energy_high_j == pytest.approx(estimate.energy_j / (1 + low))
            assert "from the errors of 20 other runs' replays (its model held out)" in (
                estimate.notes
            )
    # the point estimate is what the live projector says at 20 %
    marks = json.loads(runs.loc[0, "step_marks_json"])
    live = replay_marks(marks["samples"], marks["time_s"], marks["energy_j"], runs.loc[0, "samples"], 0.2)  # fmt: skip  # noqa: E501
    assert held[0].energy_j == live.energy_j
    # fitted without "c", the bounds are too narrow for c's drifting runs: held out, coverage
    # shows it; fitted on every run (no groups), c's own errors widen them
    inside = [
        held[i].energy_low_j <= measured[i] <= held[i].energy_high_j
        for i in runs.index[runs["model"] == "c"]
    ]
    pooled = step_marks.held_out_estimates(projections, measured, None, "none")
    inside_pooled = [
        pooled[i].energy_low_j <= measured[i] <= pooled[i].energy_high_j
        for i in runs.index[runs["model"] == "c"]
    ]
    assert sum(inside) < sum(inside_pooled)


def test_too_few_other_runs_give_an_estimate_without_an_interval() -> None:
    runs = _runs(per_model=6)  # holding out one model leaves 12 runs: a 90 % interval needs 19
    projections = stored.replayed(runs, 0.2)
    held = step_marks.held_out_estimates(
        projections, runs["energy_total_j"], runs["model"], "its model"
    )
    assert held[0].ok and held[0].energy_low_j is None
    assert "no interval: a 90% interval needs at least 19 calibration runs, got 12" in (
        held[0].notes
    )


def test_evaluation_scores_it_per_protocol_and_says_why_runs_are_left_out() -> None:
    runs = _runs()
    runs.loc[len(runs)] = {**runs.loc[0].to_dict(), "id": 99, "step_marks_json": None}
    windows = pd.DataFrame(columns=["run_id", "name", "epoch", "duration_s", "energy_total_j"])
    result = evaluate_methods(
        runs, windows, step_method="marks", protocols=["lomo", "lopo"], pre_search_iter=1
    )
    rows = result.predictions[result.predictions["method"] == "step-marks"]
    assert set(rows["protocol"]) == {"lomo", "lopo"} and len(rows) == 2 * 30
    lopo = rows[rows["protocol"] == "lopo"]  # one precision: nothing left to calibrate on
    assert lopo["low_j"].isna().all()
    lomo = rows[rows["protocol"] == "lomo"]
    assert lomo["low_j"].notna().all()
    gone = result.excluded[result.excluded["method"] == "step-marks"]
    assert set(gone["run_id"]) == {99}
    assert gone["reason"].str.contains("stored no step-level marks").all()
    gpu = evaluate_methods(runs, windows, step_method="marks", target="gpu", pre_search_iter=1)
    assert not (gpu.predictions["method"] == "step-marks").any()
    reasons = gpu.excluded.loc[gpu.excluded["method"] == "step-marks", "reason"]
    assert len(reasons) == 31 and reasons.str.contains("target total only").all()
    with pytest.raises(Exception, match="marks fraction must be in"):
        evaluate_methods(runs, windows, step_method="marks", marks_fraction=1.5)
