"""Issue 38: PRE on runs it was not built from. The outside validation runs
(``bench/validation/h200-outside-runs.csv``, a copy kept in the repository) are never fitted on;
STEP's live marks, which every reference run made and a plain ``wattlab run`` does not, are a
feature of their own; an unmarked prediction says it extrapolates and widens its interval."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.estimate.test_estimate_pre import config, fake_models, synthetic_runs  # noqa: F401
from wattlab.estimate.features import config_features
from wattlab.estimate.outside import load_outside_runs, summarise_outside
from wattlab.estimate.pre import fit_pre
from wattlab.estimate.reference import load_default_reference
from wattlab.estimate.roofline import MARK_S, Roofline
from wattlab.estimate.run_shape import (
    MARKS_PER_BUDGET,
    planned_marks_per_step,
    recorded_marks_per_step,
)

OUTSIDE_CSV = Path(__file__).resolve().parents[2] / "bench" / "validation" / "h200-outside-runs.csv"
SHAPE = ["model", "precision", "batch_size", "stem", "epochs", "train_size"]


def _shapes(table: pd.DataFrame) -> set[tuple]:
    return {
        (str(m), str(p), int(b), str(s or "cifar"), float(e), int(t))
        for m, p, b, s, e, t in table[SHAPE].itertuples(index=False)
    }


def test_no_outside_run_is_in_the_frame_pre_fits_on() -> None:
    """The shipped reference set (what ``wattlab estimate`` fits PRE on) holds no outside run:
    no shape and no measured duration or energy of one."""
    runs, _ = load_default_reference()
    outside = load_outside_runs(OUTSIDE_CSV)
    assert len(outside) == 26
    assert _shapes(runs) & _shapes(outside) == set()
    measured = ["duration_s", "energy_total_j"]  # a run's pair of measurements (0.1 s, 1 J)

    def pairs(table: pd.DataFrame) -> set[tuple[float, float]]:
        return {(round(float(d), 1), round(float(e), 0)) for d, e in table[measured].to_numpy()}

    assert pairs(runs) & pairs(outside) == set()


def test_the_outside_csv_is_read_with_its_comments() -> None:
    outside = load_outside_runs(OUTSIDE_CSV)
    assert set(outside["set"]) == {"A", "B", "C", "R"}
    assert outside["energy_total_j"].gt(0).all() and outside["duration_s"].gt(0).all()


def test_marks_per_step_from_a_stored_run_and_a_plan() -> None:
    marks = {"samples": [0, 128, 256, 384, 512], "time_s": [0] * 5, "energy_j": [0] * 5}
    assert recorded_marks_per_step(json.dumps(marks), 512, 128) == pytest.approx(1.0)
    assert recorded_marks_per_step(json.dumps(marks), 1024, 128) == pytest.approx(0.5)
    assert recorded_marks_per_step(None, 512, 128) == 0.0
    assert recorded_marks_per_step(math.nan, 512, 128) == 0.0
    assert recorded_marks_per_step("", 512, 128) == 0.0
    assert recorded_marks_per_step("not json", 512, 128) == 0.0
    assert planned_marks_per_step(150, marks=True) == 1.0  # fewer steps than marks: every step
    assert planned_marks_per_step(3 * MARKS_PER_BUDGET, marks=True) == pytest.approx(1 / 3)
    assert planned_marks_per_step(150, marks=False) == 0.0


def test_the_marks_constant_is_the_training_loop_s() -> None:
    pytest.importorskip("torch")
    from wattlab.train.loop import MARKS_PER_BUDGET as LOOP

    assert MARKS_PER_BUDGET == LOOP


def test_the_reference_runs_were_all_marked(fake_models) -> None:  # noqa: F811
    """Why the term exists: every shipped H200 reference run made live marks (0.25-1 per step);
    the H100's (issue 47, collected in windows) made none, as a plain run."""
    everything, _ = load_default_reference()
    h100 = everything[everything["gpu_name"] != "NVIDIA H200"]
    assert len(h100) and h100["step_marks_json"].isna().all()
    runs = everything[everything["gpu_name"] == "NVIDIA H200"]
    per_step = [
        recorded_marks_per_step(m, s, b)
        for m, s, b in zip(
            runs["step_marks_json"], runs["samples"], runs["batch_size"], strict=True
        )
    ]
    assert min(per_step) >= 0.25 and max(per_step) == pytest.approx(1.0)


def test_a_planned_run_makes_no_marks_by_default(fake_models) -> None:  # noqa: F811
    assert float(config_features(**config("r18"))["marks_per_step"].iloc[0]) == 0.0
    row = config_features(**config("r18"), marks_per_step=1.0)
    assert float(row["marks_per_step"].iloc[0]) == 1.0


def test_the_roofline_adds_the_marks_cost_on_the_cpu_side() -> None:
    # a launch-bound row: the CPU sets the pace, so each mark's cost adds to the step
    parts = np.array([[1e-4, 1e-6, 1e-6, 0.0, 1e-3 / 256, 0.0]])
    marked = parts.copy()
    marked[0, 5] = 1.0 * MARK_S / 256
    roof = Roofline(log_k=math.log(2.0))
    plain, with_marks = (
        roof.predict(p, np.array(["fp32"]), np.array([2.0]))[0] for p in (parts, marked)
    )
    assert with_marks - plain == pytest.approx(2.0 * MARK_S / 256, rel=0.05)
    # a row the GPU paces hides most of it behind the queued kernels
    gpu = np.array([[1e-6, 1e-3, 1e-6, 0.0, 1e-3 / 256, 0.0]])
    gpu_marked = gpu.copy()
    gpu_marked[0, 5] = MARK_S / 256
    slower = roof.predict(gpu_marked, np.array(["fp32"]), np.array([2.0]))[0]
    assert slower / roof.predict(gpu, np.array(["fp32"]), np.array([2.0]))[0] < 1.01
    doc = roof.to_json()
    assert len(doc["log"]) == 8 and Roofline.from_json(doc).log_k == pytest.approx(math.log(2.0))


def test_the_roofline_fits_a_marks_cost_it_can_see() -> None:
    """Launch-bound rows marked every step and every third step: the mark's cost is fitted
    apart from the per-layer cost."""
    rng = np.random.default_rng(0)
    rows, times = [], []
    for layers in (60, 120, 240):
        for batch in (128, 256, 512):
            for marks in (1.0, 1 / 3):
                launch = layers * 15e-6 / batch
                parts = [launch, 1e-8, 1e-8, 0.0, 1e-3 / batch, marks * MARK_S / batch]
                rows.append(parts)
                times.append((10 * launch + 2.0 * marks * MARK_S / batch) * rng.normal(1, 0.01))
    fitted = Roofline.fit(np.array(rows), np.array(["fp32"] * len(rows)), np.ones(len(rows)), times)
    assert math.exp(fitted.log_k) == pytest.approx(2.0, rel=0.15)


def _marked(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs as if each had marked every step (as the shipped reference runs did)."""
    out = runs.copy()
    out["step_marks_json"] = [
        json.dumps({"samples": list(range(0, int(s) + 1, int(b)))})
        for s, b in zip(out["samples"], out["batch_size"], strict=True)
    ]
    return out


def test_an_unmarked_run_from_marked_runs_extrapolates_and_widens(fake_models) -> None:  # noqa: F811
    runs = _marked(synthetic_runs(models=("r18", "r50", "vgg", "tiny"), batches=(128, 256), reps=1))
    model = fit_pre(runs, search_iter=1, families=("physics",))
    plain = model.predict_one(config_features(**config("r18", batch=256)))
    marked = model.predict_one(config_features(**config("r18", batch=256), marks_per_step=1.0))
    assert "live STEP marks" in plain.notes and "EXTRAPOLATING" in plain.notes
    assert "live STEP marks" not in marked.notes
    assert plain.duration_s <= marked.duration_s  # no marks: no faster than with them
    width = lambda p: p.energy_high_j / p.energy_low_j  # noqa: E731
    assert width(plain) >= width(marked)


def test_summarise_outside_counts_errors_and_coverage() -> None:
    table = pd.DataFrame(
        {
            "energy_error": [0.1, -0.2, 0.3],
            "time_error": [0.0, 0.1, -0.1],
            "covered": [True, False, True],
            "time_covered": [True, True, False],
        }
    )
    s = summarise_outside(table)
    assert s["n"] == 3 and s["covered"] == 2 and s["time_covered"] == 2
    assert s["mape_percent"] == pytest.approx(20.0)
    assert s["median_error_percent"] == pytest.approx(10.0)
