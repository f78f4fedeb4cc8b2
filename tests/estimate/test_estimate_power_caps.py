"""Power-cap effects predicted from one uncapped run: the law, a stored run with its trace, the
CLI, and the leave-one-file-out evaluation on the real A40/V100 profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.estimate import power_caps
from wattlab.estimate.power_caps import (
    DEFAULT_LAW,
    CapLaw,
    Profile,
    evaluate_profiles,
    fit_cap_law,
    from_mean_draw,
    predict_curve,
    predict_limit,
    predict_mean_draw,
    read_profile,
    read_profiles,
    run_from_store,
)
from wattlab.estimate.zeus_profiles import profiles_dir

ROOT = Path(__file__).resolve().parents[2]
WATTLAB = [sys.executable, "-m", "wattlab.cli"]


PROFILES = profiles_dir()
NO_LAW_SPREAD = CapLaw(idle_fraction=0.2, alpha=2.0, beta=1.0, draw_ratio=1.0, spread=0.0)


def test_a_cap_above_the_draw_changes_nothing() -> None:
    run = from_mean_draw(100.0, [200.0 * 100], tdp_w=700.0)  # draws 200 W of 700 W
    for limit in (700.0, 400.0, 300.0):  # above the draw and its assumed peaks (+25 %)
        p = predict_limit(run, limit, DEFAULT_LAW)
        assert p.energy_j == pytest.approx(20_000.0) and p.duration_s == pytest.approx(100.0)
        assert p.saving == pytest.approx(0.0) and not p.in_region
        assert p.case == "cap above the draw: no change"
    curve = predict_curve(run, [700, 600, 500, 400, 300])
    assert "below every limit considered: no cap here can save anything" in curve.summary()


def test_a_cap_below_the_draw_stretches_time_and_energy_follows() -> None:
    run = from_mean_draw(100.0, [600.0 * 100], tdp_w=700.0)
    law = NO_LAW_SPREAD  # every second at 600 W, fully clock-bound
    p = predict_limit(run, 400.0, law)
    # clock x = ((400 - 140) / (600 - 140)) ** (1 / 2), time / x, power held at 400 W
    clock = ((400 - 140) / (600 - 140)) ** 0.5
    assert p.duration_s == pytest.approx(100.0 / clock)
    assert p.energy_j == pytest.approx(400.0 * 100.0 / clock)
    assert p.case == "cap below the mean draw: time stretches, energy follows"
    times = [predict_limit(run, limit, law).duration_s for limit in (600, 500, 400, 300)]
    assert times == sorted(times) and times[0] == pytest.approx(100.0)
    with pytest.raises(ConfigError, match="positive"):
        predict_limit(run, -5.0, law)


def test_vectorised_prediction_matches_the_general_one() -> None:
    run = from_mean_draw(30.0, [4000.0, 4300.0], tdp_w=300.0)
    limits = np.array([300.0, 250.0, 200.0, 150.0, 100.0])
    times, energies = predict_mean_draw(
        DEFAULT_LAW, np.array([4000.0, 4300.0]) / 30, 30, 300, limits
    )
    for limit, t, e in zip(limits, times, energies, strict=True):
        p = predict_limit(run, float(limit), DEFAULT_LAW)
        assert t == pytest.approx(p.duration_s) and e == pytest.approx(p.energy_j)


def test_region_thresholds_are_flags() -> None:
    run = from_mean_draw(100.0, [280.0 * 100], tdp_w=300.0)
    law = CapLaw(idle_fraction=0.3, alpha=3.0, beta=0.2, draw_ratio=1.0)
    strict = predict_curve(run, [300, 270, 250], law=law, min_saving=0.5)
    loose = predict_curve(run, [300, 270, 250], law=law, min_saving=0.01, max_slowdown=0.5)
    assert strict.region == [] and set(loose.region) == {270.0, 250.0}
    with pytest.raises(ConfigError):
        predict_curve(run, [300], min_saving=1.5)


def _store_run(tmp_path: Path, trace_w: list[float]) -> tuple[Path, int]:
    from wattlab.experiment.db.store import open_store

    db = tmp_path / "caps.db"
    duration = float(len(trace_w))  # one sample per second, the budget from t=2 s
    gpu_j = float(sum(trace_w))
    with open_store(db) as store:
        run_id = store.insert_run(
            {
                "status": "ok",
                "config_hash": "caps",
                "config_json": {"model": "resnet18"},
                "label": "resnet18 1xGPU fp32 bs256",
                "model": "resnet18",
                "device": "cuda",
                "gpus": 1,
                "precision": "fp32",
                "batch_size": 256,
                "duration_s": duration,
                "energy_total_j": gpu_j + 30.0 * duration,
                "energy_gpu_j": gpu_j,
                "gpu_tdp_w": 700.0,
                "power_limit_w": 700.0,
            },
            [{"name": "budget", "start_s": 2.0, "duration_s": duration, "energy_total_j": gpu_j}],
            [(2.5 + i, "gpu:0", w) for i, w in enumerate(trace_w)]
            + [(0.5, "gpu:0", 999.0)],  # before the budget: ignored
        )
    return db, run_id


def test_a_stored_run_uses_its_budget_trace(tmp_path: Path) -> None:
    from wattlab.experiment.db.store import open_store

    db, run_id = _store_run(tmp_path, [200.0, 600.0] * 10)  # mean 400 W, peaks 600 W
    with open_store(db, create=False) as store:
        run = run_from_store(store.runs(), store.windows(), store.trace(), run_id)
    assert run.source == "power trace" and run.peak_draw_w == 600.0
    assert run.mean_draw_w == pytest.approx(400.0) and run.other_energy_j == pytest.approx(600.0)
    p = predict_limit(run, 500.0, NO_LAW_SPREAD)  # above the mean, below the peaks
    assert p.case == "cap below the trace's peaks only: little change"
    assert p.duration_s > run.duration_s  # the 600 W seconds slow down
    assert predict_limit(run, 650.0, NO_LAW_SPREAD).saving == pytest.approx(0.0)
    with pytest.raises(DataError, match="no run with id 99"):
        with open_store(db, create=False) as store:
            run_from_store(store.runs(), store.windows(), store.trace(), 99)


def test_cli_prints_the_curve_and_rejects_bad_input(tmp_path: Path) -> None:
    db, run_id = _store_run(tmp_path, [600.0] * 20)
    done = subprocess.run(
        [*WATTLAB, "estimate", "power-limits", "--db", str(db), "--run", str(run_id), "--json",
         str(tmp_path / "caps.json")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "caps below 600 W bite" in done.stdout and "region: saves >= 3%" in done.stdout
    data = json.loads((tmp_path / "caps.json").read_text())
    assert data["mean_draw_w"] == pytest.approx(600.0) and len(data["points"]) == 15
    assert data["points"][0]["limit_w"] == 700.0 and data["points"][0]["saving"] == 0.0
    for args, message in (
        (["--limits", "700,abc"], "--limits"),
        (["--limits", "700,-1"], "positive"),
        (["--run", "42"], "no run with id 42"),
    ):
        base = ["--db", str(db), "--run", str(run_id)]
        bad = subprocess.run(
            [*WATTLAB, "estimate", "power-limits", *base, *args],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr


def test_reading_profiles_checks_the_format(tmp_path: Path) -> None:
    good = tmp_path / "X+m+gpu0.csv"
    good.write_text(
        "start_time,window_name,elapsed_time,gpu0_energy\n"
        "0,__GlobalPowerLimitOptimizer_300,10,2500\n0,__GlobalPowerLimitOptimizer_200,11,2100\n"
    )
    profile = read_profile(good)
    assert profile.tdp_w == 300 and profile.uncapped().mean_draw_w == pytest.approx(250.0)
    bad = tmp_path / "bad.csv"
    bad.write_text("start_time,window_name,elapsed_time\n0,x,1\n")
    with pytest.raises(DataError, match="gpuN_energy"):
        read_profile(bad)
    with pytest.raises(DataError, match="no profile CSV"):
        read_profiles(tmp_path / "empty")


def test_fitting_recovers_a_known_law() -> None:
    truth = CapLaw(idle_fraction=0.25, alpha=2.0, beta=0.6, draw_ratio=1.0, spread=0.1)
    profiles = []
    for i, draw in enumerate((180.0, 230.0, 270.0)):
        limits = np.array([300.0, 275, 250, 225, 200, 175, 150, 125, 100])
        times, energies = predict_mean_draw(truth, np.array([draw]), 20.0, 300.0, limits)
        profiles.append(Profile(f"p{i}", limits, times, energies[:, None]))
    law = fit_cap_law(profiles)
    for name in ("idle_fraction", "alpha", "beta"):
        assert getattr(law, name) == pytest.approx(getattr(truth, name), rel=0.1, abs=0.03)


@pytest.mark.slow
def test_leave_one_file_out_on_the_real_a40_v100_profiles() -> None:
    assert PROFILES is not None
    profiles = read_profiles(PROFILES)
    assert len(profiles) == 12
    # the shipped law is the draw-sensitive fit on all files; the one-beta law the plain fit
    law = fit_cap_law(profiles, draw_sensitive=True)
    for name, value in DEFAULT_LAW.to_dict().items():
        assert getattr(law, name) == pytest.approx(value, rel=0.02, abs=0.005)
    for name, value in power_caps.ONE_BETA_LAW.to_dict().items():
        assert getattr(fit_cap_law(profiles), name) == pytest.approx(value, rel=0.02, abs=0.005)
    evaluation = evaluate_profiles(profiles)
    summary = evaluation.summary
    assert summary["files"] == 12 and summary["windows"] == 84
    # better than assuming a cap changes nothing, on files it never saw, and better than the
    # one-beta law it replaced
    assert summary["energy_mape_percent"] < summary["one_beta_energy_mape_percent"]
    assert summary["duration_mape_percent"] < summary["one_beta_duration_mape_percent"]
    assert summary["one_beta_energy_mape_percent"] < summary["no_change_energy_mape_percent"]
    assert summary["duration_mape_percent"] < summary["no_change_duration_mape_percent"]
    assert 0 <= summary["region_window_agreement"] <= 1
    region = summary["region"]
    assert {s["measured_in_region"] for s in region.values()} == {13}  # by measurement
    assert region["never"]["true_positives"] == 0 and region["never"]["recall"] == 0
    assert region["one_beta"]["true_positives"] == 0  # the old law never said "region"
    # the shipped law finds some, the monotone in-sample ceiling more, and none reaches 9
    assert 0 < region["cap_law"]["true_positives"] <= region["monotone_ceiling"]["true_positives"]
    assert region["monotone_ceiling"]["true_positives"] < 9
    assert summary["region_windows_contradicting_monotone_time"] >= 13 - 9 + 1
    assert summary["windows_faster_than_uncapped"] > 0
    windows = evaluation.windows
    assert windows["measured_in_region"].sum() == 13
    text = power_caps.evaluation_markdown(evaluation)
    assert "A40+resnet50+gpu0" in text and "no change (baseline)" in text
    assert 'constant "never in the region" | 0 of 13 | 0 | - | 0% |' in text


def test_the_profiles_come_from_the_package_or_the_environment(tmp_path) -> None:
    from wattlab.errors import ConfigError
    from wattlab.estimate.zeus_profiles import ENV_VAR, PACKAGED

    assert profiles_dir(env={}) == PACKAGED and len(read_profiles(PACKAGED)) == 12
    (tmp_path / "A40+resnet50+gpu0.csv").write_text(
        (PACKAGED / "A40+resnet50+gpu0.csv").read_text()
    )
    assert profiles_dir(env={ENV_VAR: str(tmp_path)}) == tmp_path
    assert len(read_profiles(profiles_dir(env={ENV_VAR: str(tmp_path)}))) == 1
    with pytest.raises(ConfigError, match="is not a folder"):
        profiles_dir(env={ENV_VAR: str(tmp_path / "missing")})


def test_a_draw_sensitive_law_stretches_a_low_draw_run_less() -> None:
    law = CapLaw(idle_fraction=0.2, alpha=2.0, beta=0.6, draw_ratio=1.0, beta_per_draw=1.0)
    assert law.at_draw(0.7).beta == pytest.approx(0.6)
    assert law.at_draw(0.4).beta == pytest.approx(0.3)
    assert law.at_draw(0.0).beta == 0.0 and law.at_draw(1.5).beta == 1.0  # held in 0..1
    assert law.at_draw(0.2).beta_per_draw == 0.0  # the resolved law is a plain one
    low = from_mean_draw(10.0, [120.0 * 10], tdp_w=300.0)  # 40 % of TDP
    high = from_mean_draw(10.0, [270.0 * 10], tdp_w=300.0)  # 90 % of TDP
    # the same relative cap (80 % of the draw) costs the low-draw run less time
    slow_low = predict_limit(low, 96.0, law).slowdown
    slow_high = predict_limit(high, 216.0, law).slowdown
    assert 0 < slow_low < slow_high
    flat = CapLaw(idle_fraction=0.2, alpha=2.0, beta=0.6, draw_ratio=1.0)
    assert predict_limit(low, 96.0, flat).slowdown > slow_low
    curve = predict_curve(from_mean_draw(10.0, [200.0 * 10], tdp_w=700.0))  # 29 % of TDP
    assert any(n.startswith("EXTRAPOLATING: the run draws 29% of TDP") for n in curve.notes)
    assert not any("EXTRAPOLATING" in n for n in predict_curve(high).notes)


def test_monotone_time_ratios_pool_what_physics_forbids() -> None:
    limits = np.array([300.0, 250.0, 200.0, 150.0])
    # 200 W measured faster than 250 W: the two are pooled to their mean
    out = power_caps.monotone_time_ratios(limits, np.array([1.0, 1.10, 1.00, 1.30]))
    assert out.tolist() == pytest.approx([1.0, 1.05, 1.05, 1.30])
    shuffled = power_caps.monotone_time_ratios(limits[::-1], np.array([1.30, 1.00, 1.10, 1.0]))
    assert shuffled.tolist() == pytest.approx([1.30, 1.05, 1.05, 1.0])
    steady = np.array([1.0, 1.01, 1.2, 1.5])
    assert power_caps.monotone_time_ratios(limits, steady).tolist() == pytest.approx(steady)


def test_region_scores_count_hits_and_false_alarms() -> None:
    import pandas as pd

    measured = pd.Series([True, True, False, False, True])
    scores = power_caps.region_scores(measured, pd.Series([True, False, True, False, False]))
    assert scores == {
        "true_positives": 1,
        "false_positives": 1,
        "measured_in_region": 3,
        "precision": 0.5,
        "recall": pytest.approx(1 / 3),
    }
    never = power_caps.region_scores(measured, pd.Series([False] * 5))
    assert never["precision"] is None and never["recall"] == 0
