"""STEP as published (wattlab.step.paper) on traces whose answer is known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.step.epochs import step_project
from wattlab.step.paper import (
    fluss_regime_change,
    fluss_stable_epoch,
    matrix_profile_index,
    step_paper_project,
)


def drifting(epochs: int = 30, drift: float = 0.02, settle: int = 9) -> np.ndarray:
    """Epoch energies (J) falling 2 % per epoch until epoch ``settle``, flat after it."""
    return np.array([1000.0 * (1 - drift * (min(k, settle) - 1)) for k in range(1, epochs + 1)])


def two_regimes(samples: int = 600, change: int = 150, seed: int = 0) -> np.ndarray:
    """A power trace (W, one sample per second) whose shape changes at sample ``change``:
    a sine while warming up, then a square wave, as batches settle into a rhythm."""
    x = np.arange(samples)
    warm = 300 + 20 * np.sin(2 * np.pi * x[:change] / 10)
    stable = np.where((x[change:] % 10) < 5, 520.0, 480.0)
    return np.r_[warm, stable] + np.random.default_rng(seed).normal(0, 2, samples)


def test_published_settings_are_exact_on_a_drifting_trace() -> None:
    energies = drifting()
    durations = np.full(energies.size, 10.0)
    measured = energies.sum()
    # only what STEP knew after epoch s + w - 1 = 14 is passed on
    paper = step_paper_project(energies[:14], durations[:14], 30)
    assert paper.ok and paper.stable_epoch == 10 and paper.stable_epoch_source == "fixed"
    assert paper.energy_j == pytest.approx(measured)
    # E_before + E_window x (epochs s..end) / w, by hand
    assert paper.energy_j == pytest.approx(energies[:9].sum() + energies[9:14].sum() * 21 / 5)
    assert paper.duration_s == pytest.approx(300.0)
    # wattlab's 5 % running-median rule with w = 2 calls the drift stable at once
    ours = step_project(energies[:3], durations[:3], 30, window=2, tolerance=0.05)
    assert ours.ok and ours.stable_epoch == 1
    # (1000 + 980) / 2 x 30 epochs = 29 700 J against 25 920 J measured
    assert (ours.energy_j - measured) / measured == pytest.approx(29700 / 25920 - 1)


def test_power_twin_is_window_power_times_total_duration() -> None:
    energies = drifting()
    durations = np.linspace(10.0, 12.9, 30)
    result = step_paper_project(energies, durations, 30, total_duration_s=400.0)
    window_power_w = energies[9:14].sum() / durations[9:14].sum()
    assert result.mean_power_w == pytest.approx(window_power_w)
    assert result.power_energy_j == pytest.approx(window_power_w * 400.0)
    assert result.power_basis == "measured duration"
    # the band (wattlab's addition) brackets the projection
    assert result.energy_low_j <= result.energy_j <= result.energy_high_j


def test_fluss_finds_the_regime_change_of_a_known_trace() -> None:
    power = two_regimes()
    where = fluss_regime_change(power)
    assert abs(where - 150) <= 10
    # epochs of 60 s: the change at ~150 s falls in epoch 3 (120-180 s)
    t = np.arange(power.size, dtype=float)
    epoch, change_s = fluss_stable_epoch(t, power, epoch_end_s=np.arange(60.0, 601.0, 60.0))
    assert epoch == 3 and abs(change_s - 150) <= 10


def test_stable_epoch_from_fluss_drives_the_projection() -> None:
    power = two_regimes()
    t = np.arange(power.size, dtype=float)
    ends = np.arange(60.0, 601.0, 60.0)
    energies = np.array([1500.0, 1400.0, 1200.0] + [1000.0] * 7)  # 10 epochs, flat from 3
    durations = np.full(10, 60.0)
    result = step_paper_project(
        energies[:7],
        durations[:7],
        20,
        stable_epoch=None,
        window=5,
        trace_t_s=t,
        trace_power_w=power,
        epoch_end_s=ends,
    )
    assert result.ok and result.stable_epoch == 3 and result.stable_epoch_source == "FLUSS"
    assert result.energy_j == pytest.approx(1500 + 1400 + (1200 + 4000) * 18 / 5)
    # with a fixed s the FLUSS epoch is still reported
    fixed = step_paper_project(
        energies, durations, 20, stable_epoch=2, window=5, trace_t_s=t, trace_power_w=power,
        epoch_end_s=ends,
    )  # fmt: skip
    assert fixed.fluss_epoch == 3 and "before the FLUSS stable epoch 3" in fixed.notes


@pytest.mark.parametrize(
    ("kwargs", "epochs_measured", "total", "match"),
    [
        ({}, 12, 30, "has 12 measured epochs and the window ends at epoch 14"),
        ({}, 14, 14, "nothing is left to project"),
        ({"stable_epoch": None}, 14, 30, "no power trace"),
    ],
)
def test_runs_the_published_rule_cannot_handle(kwargs, epochs_measured, total, match) -> None:
    energies = drifting()[:epochs_measured]
    result = step_paper_project(energies, np.full(energies.size, 10.0), total, **kwargs)
    assert not result.ok and result.energy_j is None
    assert match in result.error and result.error.endswith(".")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"window": 0}, ConfigError, "window w"),
        ({"stable_epoch": 0}, ConfigError, "start s"),
        ({"total_epochs": -1}, ConfigError, "total epochs"),
    ],
)
def test_bad_settings(kwargs, error, match) -> None:
    args = {"total_epochs": 30, **kwargs}
    with pytest.raises(error, match=match):
        step_paper_project(drifting(), np.full(30, 10.0), **args)


def test_short_or_broken_traces_are_data_errors() -> None:
    with pytest.raises(DataError, match="needs at least 29"):
        matrix_profile_index(np.ones(20), 10)
    with pytest.raises(DataError, match="finite"):
        matrix_profile_index([1.0, np.nan] * 30, 10)
    with pytest.raises(DataError, match="FLUSS with L=10"):
        fluss_regime_change(two_regimes(samples=60, change=30))
    with pytest.raises(ConfigError, match="engine"):
        fluss_regime_change(two_regimes(), engine="gpu")


@pytest.mark.slow
def test_numpy_matrix_profile_and_fluss_match_stumpy() -> None:
    stumpy = pytest.importorskip("stumpy")
    power = two_regimes(seed=3)
    index = matrix_profile_index(power, 10)
    # stumpy.stump compiles with numba (slow on first use)
    assert np.array_equal(stumpy.stump(power, 10)[:, 1].astype(np.int64), index)
    ours = fluss_regime_change(power)
    theirs = fluss_regime_change(power, engine="stumpy")
    assert abs(ours - theirs) <= 5


def test_evaluation_takes_s_from_fluss_on_the_stored_trace() -> None:
    import pandas as pd

    from wattlab.estimate.evaluate import evaluate_methods

    power = two_regimes()
    energies = [1500.0, 1400.0, 1200.0] + [1000.0] * 7
    runs = pd.DataFrame(
        [{"id": 1, "status": "ok", "device": "cuda", "gpus": 1, "epochs": 10.0,
          "duration_s": 600.0, "energy_total_j": sum(energies), "gpu_name": "NVIDIA H200",
          "gpu_tdp_w": 700.0, "model": "m", "precision": "fp32"}]
    )  # fmt: skip
    windows = pd.DataFrame(
        {"run_id": 1, "name": "epoch", "epoch": range(1, 11), "start_s": np.arange(0.0, 600, 60),
         "duration_s": 60.0, "energy_total_j": energies}
    )  # fmt: skip
    trace = pd.DataFrame(
        {"run_id": 1, "t_s": np.arange(600.0), "component": "gpu:0", "power_w": power}
    )
    result = evaluate_methods(
        runs, windows, traces_df=trace, step_method="paper", paper_stable_epoch=None
    )
    row = result.predictions[result.predictions["method"] == "step-paper"].iloc[0]
    assert "s=3 (FLUSS)" in row["notes"]
    # s = 3 (the change falls in epoch 3), w = 5: 1500 + 1400 + (1200 + 4 x 1000) x 8 / 5
    assert row["predicted_j"] == pytest.approx(2900 + 5200 * 8 / 5)
    # PRE cannot learn from this table (no samples column), and says why
    assert "samples" in result.excluded.loc[result.excluded["method"] == "pre", "reason"].iloc[0]
