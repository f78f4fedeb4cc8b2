"""PRE's distance from the reference set and the interval that widens with it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from wattlab.estimate.pre_distance import Coverage, Widening


def _table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["resnet18", "resnet18", "resnet50", "mobilenet_v2"],
            "batch_size": [128.0, 512.0, 32.0, 256.0],
            "gflops_per_sample": [1.1, 1.1, 2.6, 0.012],
            "params": [11e6, 11e6, 23e6, 2.2e6],
            "activation_mb_per_sample": [3.7, 3.7, 19.7, 0.8],
            "layers": [52.0, 52.0, 126.0, 141.0],
        }
    )


def test_batch_distance_is_measured_against_the_model_then_its_family_then_all() -> None:
    coverage = Coverage.of(_table())
    # the model's own range: 768 is 1.58 octaves above resnet18's 512
    octaves, scope = coverage.batch_distance("resnet18", 768)
    assert octaves == pytest.approx(math.log2(768 / 512))
    assert scope == "model 'resnet18''s measured 128-512"
    # a new ResNet: the family's 32-512
    octaves, scope = coverage.batch_distance("resnet152", 2048)
    assert octaves == pytest.approx(2.0) and scope == "the resnet family's measured 32-512"
    # inside: no distance
    assert coverage.batch_distance("resnet50", 32)[0] == 0.0
    # a family never measured: every run's 32-512
    octaves, scope = coverage.batch_distance("vit_p4_d6_w256", 16)
    assert octaves == pytest.approx(1.0) and scope == "the reference set's measured 32-512"


def test_feature_distance_names_each_cost_outside_the_range() -> None:
    coverage = Coverage.of(_table())
    row = pd.Series({"model": "x", "batch_size": 128.0, "gflops_per_sample": 10.4,
                     "params": 5e6, "activation_mb_per_sample": 1.0, "layers": 500.0})  # fmt: skip
    octaves, reasons = coverage.feature_distance(row)
    assert octaves == pytest.approx(2.0)  # 10.4 GFLOPs against at most 2.6
    assert len(reasons) == 2
    assert reasons[0].startswith("forward GFLOPs per image 10.4 outside the reference set's")
    assert reasons[1].startswith("layers 500 outside")
    assert coverage.distance(row) == pytest.approx(2.0)
    again = Coverage.from_json(coverage.to_json())
    assert again == coverage


def test_widening_grows_with_distance_and_covers_what_it_claims() -> None:
    rng = np.random.default_rng(0)
    distance = np.concatenate([np.zeros(400), rng.uniform(0.5, 3.0, 400)])
    # log errors whose spread grows by 0.1 per octave from 0.1 at the data
    residuals = rng.normal(0.0, 0.1 + 0.1 * distance)
    widening = Widening.fit(residuals, distance, 0.9)
    assert widening.n == 800 and widening.n_outside == 400
    assert widening.slope > 0
    assert widening.half_width(2.0) > 1.5 * widening.half_width(0.0)
    # fresh draws from the same law: the interval holds about 90 % at the data and far off it
    for d in (0.0, 1.0, 3.0):
        fresh = rng.normal(0.0, 0.1 + 0.1 * d, 4000)
        covered = np.mean(np.abs(fresh) <= widening.half_width(d))
        assert 0.86 <= covered <= 0.96, (d, covered)
    assert Widening.from_json(widening.to_json()) == widening


def test_widening_without_runs_off_the_data_does_not_grow() -> None:
    widening = Widening.fit(np.array([0.1, -0.2, 0.05]), np.zeros(3), 0.9)
    assert widening.slope == 0.0 and widening.n_outside == 0
    assert widening.half_width(5.0) == widening.half_width(0.0)
    with pytest.raises(ValueError):
        Widening.from_json({**widening.to_json(), "slope": float("nan")})
