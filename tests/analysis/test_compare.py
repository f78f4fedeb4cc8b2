"""wattlab.analysis.compare: the verdicts, the interval, what one repetition allows, and the
repetitions a threshold needs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wattlab.analysis.compare import (
    compare_paired,
    compare_values,
    detectable_change,
    reps_needed,
    sidak_confidence,
)


def _draw(rng: np.random.Generator, n: int, change: float = 0.0, sd: float = 0.02) -> np.ndarray:
    return 0.05 * (1 + change) * np.exp(rng.normal(0.0, sd, n))


def test_a_clear_increase_is_a_regression_that_fails_the_gate() -> None:
    rng = np.random.default_rng(3)
    change = compare_values(_draw(rng, 8), _draw(rng, 8, change=0.15))
    assert change.verdict == "regression" and change.exceeds
    assert 1.0 < change.low < change.ratio < change.high
    assert change.ratio == pytest.approx(1.15, abs=0.03)


def test_a_clear_decrease_is_an_improvement_and_passes() -> None:
    rng = np.random.default_rng(4)
    change = compare_values(_draw(rng, 8), _draw(rng, 8, change=-0.15))
    assert change.verdict == "improvement" and not change.exceeds
    assert change.high < 1.0


def test_a_shown_increase_below_the_threshold_passes() -> None:
    rng = np.random.default_rng(5)
    change = compare_values(_draw(rng, 30, sd=0.002), _draw(rng, 30, change=0.01, sd=0.002))
    assert change.verdict == "regression"
    assert change.high < 1.05 and not change.exceeds


def test_one_repetition_forms_no_interval_and_says_why() -> None:
    change = compare_values([0.05], [0.06, 0.061])
    assert change.verdict == "no interval" and not change.exceeds
    assert math.isnan(change.low) and math.isnan(change.detectable)
    assert change.reps_needed is None
    assert change.why_no_interval is not None
    assert "the baseline has 1 repetition" in change.why_no_interval
    assert change.ratio == pytest.approx(0.0605 / 0.05, rel=1e-3)


def test_a_session_term_and_the_resolution_widen_the_interval() -> None:
    rng = np.random.default_rng(6)
    base, cand = _draw(rng, 6), _draw(rng, 6, change=0.05)
    plain = compare_values(base, cand)
    session = compare_values(base, cand, session_sd=0.05)
    resolved = compare_values(base, cand, resolution=0.01)
    assert session.high - session.low > plain.high - plain.low
    assert math.log(resolved.high) - math.log(plain.high) == pytest.approx(0.01)
    assert session.detectable > plain.detectable


def test_reps_needed_makes_the_threshold_detectable_and_no_fewer_do() -> None:
    spread = 0.067
    n = reps_needed(spread, 0.05)
    assert n is not None and n > 2

    def detectable(reps: int) -> float:
        return detectable_change(math.sqrt(2 * spread**2 / reps), 2 * reps - 2)

    assert detectable(n) <= 0.05 < detectable(n - 1)
    assert reps_needed(spread, 0.10) < n  # a larger threshold needs fewer


def test_a_session_floor_no_repetitions_lower_gives_none() -> None:
    assert reps_needed(0.067, 0.05, session_sd=0.06) is None
    assert reps_needed(0.067, 0.50, session_sd=0.06) is not None


def test_sidak_keeps_the_family_confidence() -> None:
    each = sidak_confidence(0.95, 12)
    assert each**12 == pytest.approx(0.95)
    assert sidak_confidence(0.95, 1) == pytest.approx(0.95)


def test_paired_values_drop_a_drift_both_runs_of_a_pair_share() -> None:
    """Each pair ran together while the machine slowed by 3 % a pair: Welch sees the drift as
    scatter and cannot tell a 5 % change; the pairs' differences can."""
    rng = np.random.default_rng(3)
    drift = np.exp(0.03 * np.arange(10))
    base = _draw(rng, 10, sd=0.005) * drift
    cand = _draw(rng, 10, change=0.05, sd=0.005) * drift
    paired = compare_paired(base, cand)
    welch = compare_values(base, cand)
    assert paired.method == "paired" and welch.method == "welch"
    assert paired.verdict == "regression" and welch.verdict == "no detectable change"
    assert paired.baseline_n == paired.candidate_n == 10
    assert math.isclose(paired.ratio, welch.ratio)  # the same geometric means
    assert 1.03 < paired.ratio < 1.07 and paired.reps_needed is not None


def test_paired_values_need_two_pairs_and_equal_lengths() -> None:
    one = compare_paired([0.05], [0.06])
    assert one.verdict == "no interval" and one.method == "paired"
    assert one.why_no_interval is not None and "1 pair of runs" in one.why_no_interval
    with pytest.raises(ValueError, match="as many"):
        compare_paired([0.05, 0.05], [0.06])
