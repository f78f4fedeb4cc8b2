"""PRE features and regression on synthetic runs that follow a known cost law."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.estimate import features as features_module
from wattlab.estimate.features import ModelCost, config_features, run_features
from wattlab.estimate.pre import FAMILIES, fit_pre

PEAK = {"fp32": 67e12, "amp-bf16": 989.5e12, "tf32": 494.5e12}
EFFICIENCY = {"fp32": 0.4, "amp-bf16": 0.08, "tf32": 0.15}
MODELS = {"s": (0.1, 1e6), "m": (0.6, 1.1e7), "l": (1.1, 2.1e7), "xl": (4.1, 2.5e7)}


def truth(gflops: float, gpus: int, precision: str, samples: float) -> tuple[float, float]:
    """The synthetic cost law: (energy J, duration s) of a budget on H200s."""
    time_per_sample = 3 * gflops * 1e9 / (gpus * PEAK[precision] * EFFICIENCY[precision])
    power_w = gpus * 300.0 * gflops**0.1
    return time_per_sample * power_w * samples, time_per_sample * samples


def synthetic_runs(
    models=MODELS,
    gpu_counts=(1, 2, 4),
    precisions=("fp32", "amp-bf16"),
    reps: int = 2,
    seed: int = 0,
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for model, (gflops, params) in models.items():
        for gpus in gpu_counts:
            for precision in precisions:
                for rep in range(reps):
                    samples = 5 * 50_000
                    energy_j, duration_s = truth(gflops, gpus, precision, samples)
                    noise = rng.normal(1.0, 0.01)
                    rows.append(
                        {
                            "id": len(rows) + 1,
                            "status": "ok",
                            "repetition": rep,
                            "config_hash": f"{model}-{gpus}-{precision}",
                            "model": model,
                            "stem": "cifar",
                            "precision": precision,
                            "device": "cuda",
                            "gpus": gpus,
                            "batch_size": 256,
                            "epochs": 5.0,
                            "samples": samples,
                            "power_limit_w": None,
                            "gpu_name": "NVIDIA H200",
                            "gpu_tdp_w": 700.0,
                            "train_size": 50_000,
                            "image_size": 32,
                            "duration_s": duration_s * noise,
                            "energy_total_j": energy_j * noise,
                            "model_gflops_per_sample": gflops,
                            "params": params,
                        }
                    )
    return pd.DataFrame(rows)


@pytest.fixture
def no_model_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("recorded GFLOPs should have been used")

    monkeypatch.setattr(features_module, "model_cost", refuse)


def test_run_features_use_recorded_costs_and_the_spec_table(no_model_building) -> None:
    runs = synthetic_runs(reps=1).head(3)
    runs.loc[0, "power_limit_w"] = 350.0
    table = run_features(runs)
    assert table["feature_error"].isna().all()
    assert table.loc[0, "power_limit_fraction"] == pytest.approx(0.5)
    assert table.loc[1, "power_limit_w"] == 700.0  # NULL -> the default limit
    assert table.loc[0, "gpu_peak_tflops"] == pytest.approx(67.0)  # fp32
    assert table.loc[1, "gpu_peak_tflops"] == pytest.approx(989.5)  # amp-bf16
    assert table.loc[0, "gpu_memory_gb"] == 141 and table.loc[0, "gflops_per_sample"] == 0.1


def test_runs_without_features_carry_the_reason(no_model_building) -> None:
    runs = synthetic_runs(reps=1).head(3)
    runs.loc[0, "device"] = "cpu"
    runs.loc[1, "gpu_name"] = "Mystery GPU 9000"
    table = run_features(runs)
    assert "CPU run" in table.loc[0, "feature_error"]
    assert "Mystery GPU 9000" in table.loc[1, "feature_error"]
    assert table.loc[2, "feature_error"] is None


def test_config_features_compute_model_cost_and_samples(monkeypatch) -> None:
    calls = []

    def fake_cost(model, *, stem="cifar", image_size=32, num_classes=10):
        calls.append((model, stem, image_size))
        return ModelCost(forward_flops_per_sample=2.5e9, params=123)

    monkeypatch.setattr(features_module, "model_cost", fake_cost)
    row = config_features(
        model="resnet50",
        gpus=2,
        precision="amp-bf16",
        epochs=3,
        gpu_name="NVIDIA H200",
        batch_size=512,
    )
    assert calls == [("resnet50", "cifar", 32)]
    assert row.loc[0, "gflops_per_sample"] == pytest.approx(2.5)
    assert row.loc[0, "samples"] == 3 * (50_000 // 512) * 512
    assert row.loc[0, "gpus"] == 2 and row.loc[0, "precision"] == "amp-bf16"


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"epochs": -1}, "epochs"),
        ({"gpus": 1.5}, "gpus"),
        ({"precision": "fp8"}, "precision"),
        ({"batch_size": 100_000}, "batch_size"),
        ({"gpu_name": "Voodoo"}, "--gpu-tdp"),
    ],
)
def test_config_features_reject_bad_values(bad, match) -> None:
    config = {
        "model": "m",
        "gpus": 1,
        "precision": "fp32",
        "epochs": 1,
        "gpu_name": "H200",
        "gflops_per_sample": 1.0,
        "params": 1,
    }
    config.update(bad)
    with pytest.raises(ConfigError, match=match):
        config_features(**config)


def test_pre_predicts_a_held_out_configuration(no_model_building) -> None:
    runs = synthetic_runs()
    held = runs["config_hash"] == "l-2-amp-bf16"
    model = fit_pre(runs[~held], search_iter=2)
    assert model.n_configs == 23 and model.n_runs == 46
    assert model.energy.family in FAMILIES and model.time.family in FAMILIES
    assert set(model.cv_table["family"]) == set(FAMILIES)
    assert set(model.cv_table["target"]) == {"energy", "time"}

    samples = 5 * 50_000
    prediction = model.predict_config(
        model="l",
        gpus=2,
        precision="amp-bf16",
        epochs=5,
        gpu_name="NVIDIA H200",
        gflops_per_sample=1.1,
        params=2.1e7,
        samples=samples,
    )
    energy_j, duration_s = truth(1.1, 2, "amp-bf16", samples)
    assert prediction.energy_j == pytest.approx(energy_j, rel=0.1)
    assert prediction.duration_s == pytest.approx(duration_s, rel=0.1)
    assert prediction.energy_low_j <= prediction.energy_j <= prediction.energy_high_j
    assert prediction.duration_low_s <= prediction.duration_s <= prediction.duration_high_s
    assert prediction.energy_per_sample_j == pytest.approx(prediction.energy_j / samples)
    assert "interval" in model.describe()


def test_pre_is_deterministic_and_tolerates_an_unseen_precision(no_model_building) -> None:
    runs = synthetic_runs(reps=1)
    first = fit_pre(runs, search_iter=1, families=("ridge", "kernel_ridge"))
    second = fit_pre(runs, search_iter=1, families=("ridge", "kernel_ridge"))
    config = {
        "model": "m",
        "gpus": 1,
        "precision": "tf32",
        "epochs": 5,
        "gpu_name": "H200",
        "gflops_per_sample": 0.6,
        "params": 1.1e7,
    }
    a, b = first.predict_config(**config), second.predict_config(**config)
    assert a.energy_j == b.energy_j and np.isfinite(a.energy_j) and a.energy_j > 0


def test_pre_needs_enough_distinct_configurations(no_model_building) -> None:
    runs = synthetic_runs(models={"s": MODELS["s"]}, gpu_counts=(1, 2, 4), precisions=("fp32",))
    assert runs["config_hash"].nunique() == 3 and len(runs) == 6
    with pytest.raises(DataError) as info:
        fit_pre(runs)
    message = str(info.value)
    assert "at least 4 distinct configurations" in message and "there are 3" in message


def test_pre_leaves_out_runs_it_cannot_use_and_says_why(no_model_building) -> None:
    runs = synthetic_runs(reps=1)
    runs.loc[0, "status"] = "failed"
    runs.loc[1, "device"] = "cpu"
    runs.loc[2, "energy_total_j"] = None
    model = fit_pre(runs, search_iter=1, families=("ridge",))
    assert model.n_runs == len(runs) - 3
    assert "failed" in model.excluded[0]
    assert "CPU run" in model.excluded[1]
    assert "no positive energy" in model.excluded[2]
    with pytest.raises(ConfigError, match="family"):
        fit_pre(runs, families=("svr",))
