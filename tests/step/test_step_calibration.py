"""STEP's calibrated interval: conformal bounds, the table on disk, projections that carry it."""

from __future__ import annotations

import numpy as np
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.step.calibration import (
    StepCalibration,
    conformal_bounds,
    fit_step_calibration,
    load_step_calibration,
    write_step_calibration,
)
from wattlab.step.marks import project_from_marks


def test_conformal_bounds_are_the_order_statistics_the_method_names() -> None:
    errors = [i / 100 for i in range(99)]  # n = 99, level 0.9: k_lo = 5, k_hi = 95
    assert conformal_bounds(errors, 0.9) == (0.04, 0.94)
    assert conformal_bounds(list(range(19)), 0.9) == (0, 18)  # the fewest that can state 90 %
    with pytest.raises(DataError, match="at least 19 calibration runs, got 18"):
        conformal_bounds(list(range(18)), 0.9)
    with pytest.raises(ConfigError, match="level"):
        conformal_bounds(errors, 1.0)


def test_bounds_fitted_on_one_sample_cover_new_runs_at_the_level() -> None:
    rng = np.random.default_rng(7)
    draw = lambda n: rng.gamma(2.0, 0.03, n) - 0.05  # noqa: E731 (skewed, like STEP's errors)
    low, high = conformal_bounds(draw(400), 0.9)
    fresh = draw(20_000)
    coverage = np.mean((fresh >= low) & (fresh <= high))
    assert 0.87 < coverage < 0.93
    low80, high80 = conformal_bounds(draw(400), 0.8)
    assert high80 - low80 < high - low  # a lower level is a narrower interval


def test_interval_inverts_the_relative_error_and_uses_the_earlier_fraction() -> None:
    cal = StepCalibration((0.1, 0.2), (50, 50), (-0.1, -0.05), (0.2, 0.1))
    low, high = cal.interval(110.0, 0.2)  # (E - M) / M in [-0.05, 0.1]  <=>  M in [100, 115.8]
    assert low == pytest.approx(100.0) and high == pytest.approx(110 / 0.95)
    assert cal.interval(110.0, 0.15) == pytest.approx((110 / 1.2, 110 / 0.9))  # 10 % row
    assert cal.interval(110.0, 0.05) is None
    assert "no calibration before 10%" in cal.basis(0.05)
    assert "from the errors of 50 reference runs projected after 20%" in cal.basis(0.9)


def test_table_round_trips_and_bad_tables_are_refused(tmp_path) -> None:
    rng = np.random.default_rng(1)
    errors = {0.2: list(rng.normal(0, 0.03, 40)), 0.1: list(rng.normal(0, 0.06, 40)), 0.5: [0.0]}
    cal = fit_step_calibration(errors, source="40 test runs")
    assert cal.fractions == (0.1, 0.2)  # 0.5 has too few runs to state an interval
    path = write_step_calibration(cal, tmp_path / "cal.csv", ["made by: a test"])
    back = load_step_calibration(path)
    assert back.fractions == cal.fractions and back.runs == (40, 40)
    assert back.error_low == pytest.approx(cal.error_low, abs=1e-6)
    assert back.source == "40 test runs" and back.level == 0.9
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="is not a STEP calibration"):
        load_step_calibration(tmp_path / "bad.csv")
    with pytest.raises(DataError, match="cannot read the STEP calibration"):
        load_step_calibration(tmp_path / "missing.csv")
    with pytest.raises(DataError, match="no fraction has enough"):
        fit_step_calibration({0.2: [0.01] * 5})
    with pytest.raises(DataError, match="must rise"):
        StepCalibration((0.2, 0.1), (20, 20), (-0.1, -0.1), (0.1, 0.1))


def test_the_shipped_table_loads_and_brackets_zero() -> None:
    cal = load_step_calibration()
    assert cal.level == 0.9 and "runs" in cal.source
    assert 0.2 in cal.fractions  # the reference runs' live fraction
    for low, high, runs in zip(cal.error_low, cal.error_high, cal.runs, strict=True):
        assert low < 0 < high and runs >= 19


def test_a_projection_carries_the_interval_for_its_fraction() -> None:
    from tests.step.test_step_projection import marks_of_a_run

    samples, times, energies, truth_j = marks_of_a_run()
    cut = next(i for i, s in enumerate(samples) if s >= 0.3 * samples[-1])
    projection = project_from_marks(samples[: cut + 1], times[: cut + 1], energies[: cut + 1],
                                    samples[-1])  # fmt: skip
    cal = StepCalibration((0.1, 0.3), (30, 30), (-0.3, -0.02), (0.3, 0.02))
    carried = projection.with_interval(cal)
    assert carried.interval_low_j == pytest.approx(projection.energy_j / 1.02)
    assert carried.interval_high_j == pytest.approx(projection.energy_j / 0.98)
    assert "90% interval from the errors of 30 reference runs projected after 30%" in (
        carried.describe()
    )
    assert projection.with_interval(None) is projection
    early = StepCalibration((0.5,), (30,), (-0.1,), (0.1,))
    none = projection.with_interval(early)
    assert none.interval_low_j is None and "no calibration before 50%" in none.describe()
    assert "(band " in none.describe()


def test_held_out_bounds_fit_each_group_on_the_others_only() -> None:
    from wattlab.step.calibration import held_out_bounds

    errors = {i: i / 100 for i in range(40)}
    groups = {i: "low" if i < 20 else "high" for i in range(40)}
    bounds = held_out_bounds(errors, groups)
    assert bounds["low"] == (*conformal_bounds([i / 100 for i in range(20, 40)]), 20)
    assert bounds["high"] == (*conformal_bounds([i / 100 for i in range(20)]), 20)
    assert held_out_bounds(errors, None)["all"] == (*conformal_bounds(list(errors.values())), 40)
    few = held_out_bounds({0: 0.0, 1: 0.1}, {0: "a", 1: "b"})
    assert few["a"] == "a 90% interval needs at least 19 calibration runs, got 1"
