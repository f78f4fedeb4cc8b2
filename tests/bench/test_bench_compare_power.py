"""bench/compare_power.py on a small seeded run: `wattlab compare`'s gate raises at most its
stated false alarms on H200 noise (A/A), and catches a threshold-sized change as often as
promised with the repetitions it recommends."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    path = ROOT / "bench" / "compare_power.py"
    spec = importlib.util.spec_from_file_location("compare_power", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_power"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def noise(bench):
    return bench.load_noise()


def _slack(p: float, trials: int) -> float:
    return 3 * math.sqrt(p * (1 - p) / trials)  # three standard errors of a binomial rate


def test_the_noise_comes_from_the_stored_h200_runs(noise) -> None:
    assert noise.within.size >= 20 and noise.between.size >= 6
    assert 0.01 < noise.spread < 0.2 and 0.01 < noise.session_sd < 0.2


def test_a_a_false_alarms_stay_at_most_5_percent(bench, noise) -> None:
    trials = 600
    rate = bench.simulate(noise, 5, trials=trials, seed=11)
    assert rate.trials == trials
    assert rate.rate <= 0.05 + _slack(0.05, trials)


def test_two_sessions_need_the_session_term(bench, noise) -> None:
    trials = 300
    blind = bench.simulate(noise, 10, cross_session=True, trials=trials, seed=12)
    told = bench.simulate(
        noise, 10, cross_session=True, session_sd=noise.session_sd, trials=trials, seed=12
    )
    assert blind.rate > 0.15  # repetitions cannot see a session's offset
    assert told.rate <= 0.05 + _slack(0.05, trials)


def test_the_recommended_repetitions_catch_the_threshold(bench, noise) -> None:
    from wattlab.analysis.compare import reps_needed

    reps = reps_needed(noise.spread, 0.05)
    assert reps is not None
    trials = 300
    power = bench.simulate(noise, reps, true_change=0.05, trials=trials, seed=13)
    assert power.rate >= 0.80 - _slack(0.80, trials)
