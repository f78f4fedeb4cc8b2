"""Intervals of the median that mean what they say: coverage by hand and by simulation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from wattlab.analysis.intervals import (
    MIN_RUNS_FOR_95,
    change_interval,
    median_interval,
    min_runs_for,
    rank_coverage,
)
from wattlab.analysis.summary import short_configurations, summarize
from wattlab.analysis.summary_json import summary_to_json
from wattlab.experiment.specs.trainer import load_spec


def test_rank_coverage_by_hand():
    assert rank_coverage(3, 1) == pytest.approx(0.75)  # 1 - 2 * (1/8)
    assert rank_coverage(5, 1) == pytest.approx(0.9375)  # 1 - 2 * (1/32)
    assert rank_coverage(6, 1) == pytest.approx(0.96875)  # 1 - 2 * (1/64)
    assert rank_coverage(10, 2) == pytest.approx(1 - 2 * 11 / 1024)  # C(10,0) + C(10,1)
    assert rank_coverage(10, 3) == pytest.approx(1 - 2 * 56 / 1024)  # + C(10,2) = 45
    with pytest.raises(ValueError):
        rank_coverage(4, 3)
    assert min_runs_for(0.95) == MIN_RUNS_FOR_95 == 6
    assert min_runs_for(0.75) == 3 and min_runs_for(0.99) == 8


def test_median_interval_picks_the_narrowest_rank_with_the_coverage():
    ten = median_interval([7.0, 1.0, 3.0, 10.0, 2.0, 5.0, 9.0, 4.0, 6.0, 8.0])
    # k = 2 covers 97.9 %, k = 3 only 89.1 %: [x_(2), x_(9)]
    assert (ten.low, ten.high, ten.method) == (2.0, 9.0, "order-statistic")
    assert ten.coverage == pytest.approx(0.978515625)
    three = median_interval([12.0, 10.0, float("nan"), 11.0])
    assert (three.low, three.high, three.method) == (10.0, 12.0, "range")
    assert three.coverage == pytest.approx(0.75)
    six = median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0])
    assert (six.low, six.high, six.method) == (1.0, 6.0, "order-statistic")
    one = median_interval([4.0])
    assert math.isnan(one.low) and one.method == "none"


def test_stated_coverage_holds_in_simulation():
    rng = np.random.default_rng(0)
    true_median = math.log(2.0)  # exponential(1)
    for n, expected in ((3, 0.75), (6, 0.96875), (9, 0.9609375)):
        samples = rng.exponential(1.0, size=(4000, n))
        hits = 0
        for row in samples:
            interval = median_interval(row)
            hits += interval.low <= true_median <= interval.high
        assert interval.coverage == pytest.approx(expected)
        assert abs(hits / 4000 - expected) < 0.02  # binomial s.e. <= 0.007


def test_change_interval_spans_both_medians_intervals():
    change = change_interval([10.0, 11.0, 12.0], [20.0, 21.0, 22.0])
    assert change.low == pytest.approx(10.0 / 22.0 - 1)
    assert change.high == pytest.approx(12.0 / 20.0 - 1)
    assert change.coverage == pytest.approx(0.75 * 0.75) and change.method == "combined"
    assert change_interval([1.0], [2.0, 3.0]).method == "none"


def _runs(reps: dict[str, int], **drop: bool) -> pd.DataFrame:
    rows = []
    for config, n in reps.items():
        for i in range(n):
            rows.append(
                {"status": "ok", "config_hash": config, "label": config, "model": "m",
                 "device": "cpu", "gpus": 0, "world_size": 1, "precision": "fp32",
                 "batch_size": 64, "duration_s": 10.0 + i, "energy_total_j": 100.0 + i,
                 "samples": 1000, "provenance": "measured"}
            )  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.drop(columns=[c for c, yes in drop.items() if yes])


def test_summary_labels_short_configurations():
    runs = _runs({"six": 6, "three": 3, "one": 1})
    s = summarize(runs)
    assert s.loc["six", "ci_method"] == "order-statistic"
    assert s.loc["six", "ci_coverage"] == pytest.approx(0.96875)
    assert s.loc["three", "ci_method"] == "range" and s.loc["one", "ci_method"] == "none"
    assert short_configurations(s) == ["one", "three"]  # sorted by label in the summary
    data = summary_to_json(s, runs)
    assert data["intervals"]["min_runs"] == 6
    # issue 48: the level stated is the lowest one given (the range of 3 runs: 75 %), not 95 %
    assert data["intervals"]["level"] == pytest.approx(0.75)
    assert data["intervals"]["level_asked"] == pytest.approx(0.95)
    assert data["intervals"]["coverage_given"] == [0.75, 0.96875]
    assert data["intervals"]["short_configurations"] == ["one", "three"]
    by_label = {c["label"]: c for c in data["configurations"]}
    assert by_label["three"]["ci_coverage"] == pytest.approx(0.75)
    assert by_label["three"]["energy_j_ci"] == [100.0, 102.0]


def test_summarize_without_world_size_column():
    runs = _runs({"a": 2, "b": 2}, world_size=True)
    s = summarize(runs)
    assert s["world_size"].isna().all() and list(s["gpus"]) == [0, 0]
    assert s.loc["a", "energy_total_j"] == 100.5


def test_study_presets_run_enough_repetitions_for_their_intervals(tmp_path):
    for name in ("paper-12", "h200-1gpu"):
        spec = load_spec(name, data_dir=str(tmp_path))
        assert spec.repetitions >= MIN_RUNS_FOR_95, name
