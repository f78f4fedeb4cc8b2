"""PRE features and regression on synthetic runs that follow a known physical cost law.

The law (``truth``): time per sample = kernel launches + compute at a precision-dependent
efficiency + activation traffic; power = GPUs x TDP x (idle share + shares of compute and memory
time). PRE is never told the law; it must recover it from runs of other models, precisions or
GPUs, and say when it extrapolates.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.estimate import features as features_module
from wattlab.estimate.features import ModelCost, ModelStructure, config_features, run_features
from wattlab.estimate.pre import FAMILIES, _quantiles, fit_pre, physics_terms
from wattlab.estimate.specs import lookup_gpu, peak_flops

EFFICIENCY = {"fp32": 0.55, "tf32": 0.3, "amp-bf16": 0.12, "amp-fp16": 0.13}
BYTES = {"fp32": 4, "tf32": 4, "amp-bf16": 2, "amp-fp16": 2}
# each model's own speed, which no feature explains (kernels fit the GPU better or worse)
QUIRK = {"tiny": 1.1, "slim": 0.92, "eff": 1.15, "vgg": 0.9, "r18": 1.0, "r34": 1.08, "r50": 0.95}
# name: (forward GFLOPs, params, activation elements per image, layers)
MODELS = {
    "tiny": (0.005, 1.5e6, 0.2e6, 140, 155),
    "slim": (0.012, 2.2e6, 0.8e6, 141, 151),
    "eff": (0.017, 4.0e6, 0.9e6, 230, 238),
    "vgg": (0.87, 1.3e8, 1.3e6, 39, 37),
    "r18": (1.11, 1.1e7, 3.7e6, 52, 67),
    "r34": (2.32, 2.1e7, 6.2e6, 92, 123),
    "r50": (2.60, 2.4e7, 19.7e6, 126, 173),
}  # GFLOPs, parameters, activation elements, leaf modules, writing operators


def truth(
    model: str, precision: str, batch: int, gpu: str = "NVIDIA H200", host: float = 1.0
) -> tuple[float, float]:
    """(time per sample s, power W) of one configuration on one GPU; ``host`` scales the
    launches (a machine whose CPU launches the kernels more slowly)."""
    gflops, _, activations, layers, _ = MODELS[model]
    spec = lookup_gpu(gpu)
    compute = 3 * gflops * 1e9 / (peak_flops(spec, precision) * EFFICIENCY[precision])
    memory = 3 * activations * BYTES[precision] / (spec.memory_bandwidth_gbs * 1e9 * 0.5)
    launch = host * layers * 30e-6 / batch
    time_s = (launch + compute * (256 / batch) ** 0.1 + memory) * QUIRK[model]
    power_w = spec.tdp_w * (0.15 + 0.8 * compute / time_s + 0.4 * memory / time_s)
    return time_s, power_w


def synthetic_runs(
    models=tuple(MODELS),
    precisions=("fp32", "tf32", "amp-bf16"),
    batches=(128, 256, 512),
    gpu: str = "NVIDIA H200",
    reps: int = 2,
    noise: float = 0.02,
    seed: int = 0,
    host: float = 1.0,
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for model in models:
        for precision in precisions:
            for batch in batches:
                time_s, power_w = truth(model, precision, batch, gpu, host)
                for rep in range(reps):
                    samples = 5 * (50_000 // batch) * batch
                    t = time_s * samples * rng.normal(1.0, noise)
                    p = power_w * rng.normal(1.0, noise / 2)
                    rows.append(
                        {
                            "id": len(rows) + 1,
                            "status": "ok",
                            "repetition": rep,
                            "config_hash": f"{model}-{precision}-{batch}-{gpu}",
                            "model": model,
                            "stem": "cifar",
                            "precision": precision,
                            "device": "cuda",
                            "gpus": 1,
                            "batch_size": batch,
                            "epochs": 5.0,
                            "samples": samples,
                            "power_limit_w": None,
                            "gpu_name": gpu,
                            "gpu_tdp_w": lookup_gpu(gpu).tdp_w,
                            "train_size": 50_000,
                            "image_size": 32,
                            "duration_s": t,
                            "energy_total_j": t * p,
                            "model_gflops_per_sample": MODELS[model][0],
                            "params": MODELS[model][1],
                        }
                    )
    return pd.DataFrame(rows)


@pytest.fixture
def fake_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic models' costs, without torch."""

    def cost(model, *, stem="cifar", image_size=32, num_classes=10):
        if model not in MODELS:
            raise ConfigError(f"unknown model {model!r}.")
        gflops, params, activations, layers, kernels = MODELS[model]
        return ModelCost(gflops * 1e9, int(params), activations, layers, kernels=kernels)

    def structure(model, *, stem="cifar", image_size=32, num_classes=10):
        if model not in MODELS:
            return None
        return ModelStructure(MODELS[model][2], MODELS[model][3], kernels=MODELS[model][4])

    monkeypatch.setattr(features_module, "model_cost", cost)
    monkeypatch.setattr(features_module, "model_structure", structure)


def config(model: str, precision: str = "fp32", batch: int = 256, **extra) -> dict:
    out = {
        "model": model,
        "gpus": 1,
        "precision": precision,
        "epochs": 5,
        "gpu_name": "NVIDIA H200",
        "batch_size": batch,
    }
    out.update(extra)
    return out


def relative_error(prediction, model: str, precision: str, batch: int, gpu="NVIDIA H200"):
    time_s, power_w = truth(model, precision, batch, gpu)
    return prediction.energy_j / (time_s * power_w * prediction.samples) - 1.0


# -- features ------------------------------------------------------------------------------


def test_run_features_carry_physics_inputs(fake_models) -> None:
    runs = synthetic_runs(models=("r18",), precisions=("fp32", "amp-bf16"), reps=1).head(4)
    runs.loc[0, "power_limit_w"] = 350.0
    table = run_features(runs)
    assert table["feature_error"].isna().all()
    assert table.loc[0, "power_limit_fraction"] == pytest.approx(0.5)
    assert table.loc[1, "power_limit_w"] == 700.0  # NULL -> the default limit
    assert table.loc[0, "gpu_peak_tflops"] == pytest.approx(67.0)  # fp32
    assert table.loc[3, "gpu_peak_tflops"] == pytest.approx(989.5)  # amp-bf16
    assert table.loc[0, "gpu_memory_bandwidth_gbs"] == 4800
    assert table.loc[0, "activation_mb_per_sample"] == pytest.approx(3.7e6 * 4 / 1e6)
    assert table.loc[3, "activation_mb_per_sample"] == pytest.approx(3.7e6 * 2 / 1e6)
    assert table.loc[0, "layers"] == 52 and table.loc[0, "gpu_name"] == "NVIDIA H200"


def test_physics_terms_by_hand(fake_models) -> None:
    row = config_features(**config("r18", "amp-bf16", 512))
    terms = physics_terms(row).iloc[0]
    assert terms["compute_s"] == pytest.approx(3 * 1.11e9 / 989.5e12)
    assert terms["memory_s"] == pytest.approx(3 * 3.7e6 * 2 / 4800e9)
    assert terms["launch_s"] == pytest.approx((52 + 67) * 15e-6 / 512)  # module calls + kernels
    assert terms["roofline_s"] == pytest.approx(terms[["compute_s", "memory_s", "launch_s"]].sum())


def test_runs_without_features_carry_the_reason(fake_models) -> None:
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
    monkeypatch.setattr(features_module, "model_structure", lambda *a, **k: None)
    row = config_features(
        model="resnet50", gpus=2, precision="amp-bf16", epochs=3, gpu_name="H200", batch_size=512
    )
    assert calls == [("resnet50", "cifar", 32)]
    assert row.loc[0, "gflops_per_sample"] == pytest.approx(2.5)
    assert row.loc[0, "samples"] == 3 * (50_000 // 512) * 512
    assert row.loc[0, "gpus"] == 2 and row.loc[0, "precision"] == "amp-bf16"
    assert math.isnan(row.loc[0, "activation_mb_per_sample"])  # not counted: NaN, not a guess


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
def test_config_features_reject_bad_values(bad, match, fake_models) -> None:
    values = {**config("r18"), "gflops_per_sample": 1.0, "params": 1}
    values.update(bad)
    with pytest.raises(ConfigError, match=match):
        config_features(**values)


# -- PRE -----------------------------------------------------------------------------------


def test_pre_predicts_a_held_out_model_and_says_it_extrapolates(fake_models) -> None:
    runs = synthetic_runs()
    model = fit_pre(runs[runs["model"] != "r34"], search_iter=2)
    assert model.time.family in FAMILIES and model.power.family in FAMILIES
    assert set(model.cv_table["target"]) == {"time", "power"}
    assert model.selection_groups == "model"  # six models: folds leave models out
    assert {"configuration", "model", "precision", "batch_size"} <= set(model.residuals)

    prediction = model.predict_config(**config("r34", "amp-bf16", 256))
    assert abs(relative_error(prediction, "r34", "amp-bf16", 256)) < 0.15
    assert "EXTRAPOLATING" in prediction.notes and "'r34'" in prediction.notes
    assert "leave-one-model-out" in prediction.interval_basis
    assert prediction.energy_low_j <= prediction.energy_j <= prediction.energy_high_j
    assert prediction.energy_j == pytest.approx(
        prediction.power_w * prediction.time_per_sample_s * prediction.samples
    )

    inside = model.predict_config(**config("r18", "amp-bf16", 256))
    assert "EXTRAPOLATING" not in inside.notes
    assert inside.interval_basis.startswith("configurations held out (its ")
    assert abs(relative_error(inside, "r18", "amp-bf16", 256)) < 0.1
    # the new model's interval is at least as wide as an in-data one
    width = prediction.energy_high_j / prediction.energy_low_j
    assert width >= inside.energy_high_j / inside.energy_low_j


def test_lomo_error_and_interval_coverage_on_the_synthetic_law(fake_models) -> None:
    runs = synthetic_runs(batches=(256, 512), reps=1)
    errors, covered = [], []
    for held in MODELS:
        model = fit_pre(runs[runs["model"] != held], search_iter=1)
        for precision in ("fp32", "amp-bf16"):
            p = model.predict_config(**config(held, precision, 256))
            errors.append(abs(relative_error(p, held, precision, 256)))
            truth_j = p.energy_j / (1 + relative_error(p, held, precision, 256))
            covered.append(p.energy_low_j <= truth_j <= p.energy_high_j)
    assert float(np.mean(errors)) < 0.20
    assert np.mean(covered) >= 0.7


def test_unseen_precision_and_batch_are_named(fake_models) -> None:
    runs = synthetic_runs(precisions=("fp32", "amp-bf16"), batches=(256, 512), reps=1)
    model = fit_pre(runs, search_iter=1)
    p = model.predict_config(**config("r50", "tf32", 128))
    assert "precision tf32 is not in the reference set" in p.notes
    assert "batch size 128 lies outside" in p.notes
    assert "leave-one-precision-out" in p.interval_basis
    assert "leave-one-batch-size-out" in p.interval_basis

    # a known model at a known precision it never ran at (the ResNet-18 at amp-bf16)
    runs = runs[~((runs["model"] == "r18") & (runs["precision"] == "amp-bf16"))]
    model = fit_pre(runs, search_iter=1)
    p = model.predict_config(**config("r18", "amp-bf16", 256))
    assert "model 'r18' never ran at amp-bf16" in p.notes
    assert "leave-one-precision-out" in p.interval_basis
    assert abs(relative_error(p, "r18", "amp-bf16", 256)) < 0.2
    inside = model.predict_config(**config("r18", "fp32", 256))
    assert "EXTRAPOLATING" not in inside.notes


def test_a_gpu_outside_the_data_goes_through_a_stated_transfer(fake_models) -> None:
    runs = synthetic_runs(batches=(256, 512), reps=1)
    model = fit_pre(runs, search_iter=1)
    home = model.predict_config(**config("r50", "fp32", 256))
    away = model.predict_config(**config("r50", "fp32", 256, gpu_name="NVIDIA A100 SXM4 80GB"))
    assert "TRANSFER" in away.notes and "NVIDIA A100 SXM4 80GB" in away.notes
    # one GPU measured: the transfer's own scaling is its uncertainty, in quadrature
    assert "the reference set has one GPU, so no transfer error could be measured" in (
        away.interval_basis
    )
    # r50 fp32 is compute-bound; the A100's fp32 peak is 3.4x lower than the H200's
    assert away.duration_s > 2.5 * home.duration_s
    assert away.power_w < home.power_w  # 400 W TDP against 700 W
    scaling = math.log((away.duration_s / home.duration_s) * (away.power_w / home.power_w))
    half = math.log(away.energy_high_j / away.energy_j)
    assert half >= abs(scaling) - 1e-9  # at least the whole scaling, each way
    assert away.energy_high_j / away.energy_low_j > home.energy_high_j / home.energy_low_j
    assert abs(relative_error(away, "r50", "fp32", 256, "NVIDIA A100 SXM4 80GB")) < 0.5


def test_two_gpus_measure_the_transfer_error_that_a_third_gpu_is_given(fake_models) -> None:
    h200 = synthetic_runs(batches=(128, 512), reps=1)
    h100 = synthetic_runs(batches=(128, 512), reps=1, gpu="NVIDIA H100 SXM", seed=1)
    h100["id"] += 1000
    model = fit_pre(pd.concat([h200, h100], ignore_index=True), search_iter=1)
    assert model.seen.gpu_names == ("NVIDIA H100 SXM", "NVIDIA H200")
    assert "gpu" in model.residuals  # leave one GPU out, through the transfer itself
    assert model.seen.transfer_distance == pytest.approx(math.log(4800 / 3350), rel=1e-6)
    # the measured GPUs are predicted inside, not transferred
    for gpu in model.seen.gpu_names:
        p = model.predict_config(**config("r50", "amp-bf16", 256, gpu_name=gpu))
        assert "TRANSFER" not in p.notes
        assert abs(relative_error(p, "r50", "amp-bf16", 256, gpu)) < 0.15
    # a third GPU: from the nearest measured one, its interval from the measured transfer
    # error, scaled by how much farther its specs lie
    near = model.predict_config(**config("r50", "amp-bf16", 256, gpu_name="NVIDIA H100 NVL"))
    far = model.predict_config(**config("r50", "amp-bf16", 256, gpu_name="NVIDIA L4"))
    for p in (near, far):
        assert "leave-one-GPU-out over NVIDIA H100 SXM, NVIDIA H200" in p.interval_basis
        assert "x2 for the GPU transfer" not in p.interval_basis
    assert "(the reference GPU nearest it in specs)" in near.notes
    assert "predicted for the NVIDIA H100 SXM" in near.notes  # 3900 GB/s, 400 W: nearer
    assert "that no measured transfer spanned" in far.interval_basis
    assert model.unmeasured_share("NVIDIA L4", lookup_gpu("NVIDIA H100 SXM"), "amp-bf16") > 0.5
    width = lambda p: p.energy_high_j / p.energy_low_j  # noqa: E731
    assert width(far) > width(near) >= width(model.predict_config(**config("r50", "amp-bf16", 256)))


def test_absolute_quantiles_take_the_conformal_rank() -> None:
    from wattlab.estimate.pre import _abs_quantile

    values = np.arange(1, 20, dtype=float) / 100  # 19 residuals: rank ceil(20 x 0.9) = 18
    assert _abs_quantile(values, 0.9) == pytest.approx(0.18)
    assert _abs_quantile(values[:5], 0.9) == pytest.approx(0.05)  # too few: the largest
    assert _abs_quantile(np.array([]), 0.9) == 0.0
    assert _abs_quantile(values, 0.9, np.ones(19)) == _abs_quantile(values, 0.9)


def test_unknown_model_names_with_recorded_costs_are_imputed(fake_models) -> None:
    runs = synthetic_runs(models=("r18", "r34", "r50"), batches=(256,), reps=1)
    runs.loc[runs["model"] == "r34", "model"] = "custom-net"  # no structure can be counted
    model = fit_pre(runs, search_iter=1, families=("physics", "ridge"))
    assert model.n_runs == len(runs)
    assert model.chain.medians["layers"] == pytest.approx(np.median([52, 126] * 3))


def test_pre_is_deterministic(fake_models) -> None:
    runs = synthetic_runs(models=("r18", "r50", "slim"), batches=(256,), reps=1)
    first = fit_pre(runs, search_iter=1, families=("ridge", "kernel_ridge"))
    second = fit_pre(runs, search_iter=1, families=("ridge", "kernel_ridge"))
    a = first.predict_config(**config("vgg"))
    b = second.predict_config(**config("vgg"))
    assert a.energy_j == b.energy_j and np.isfinite(a.energy_j) and a.energy_j > 0


def test_pre_needs_enough_distinct_configurations(fake_models) -> None:
    runs = synthetic_runs(models=("r18",), precisions=("fp32",), batches=(128, 256, 512))
    assert runs["config_hash"].nunique() == 3 and len(runs) == 6
    with pytest.raises(DataError) as info:
        fit_pre(runs)
    message = str(info.value)
    assert "at least 4 distinct configurations" in message and "there are 3" in message


def test_pre_leaves_out_runs_it_cannot_use_and_says_why(fake_models) -> None:
    runs = synthetic_runs(models=("r18", "r50"), batches=(256, 512), reps=1)
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
    with pytest.raises(ConfigError, match="interval"):
        fit_pre(runs, interval=1.5)


def test_conformal_quantiles_widen_with_few_residuals() -> None:
    residuals = np.linspace(-0.1, 0.1, 9)
    assert _quantiles(residuals, 0.9) == (pytest.approx(-0.1), pytest.approx(0.1))
    low, high = _quantiles(np.linspace(-0.1, 0.1, 201), 0.9)
    assert -0.1 < low < -0.08 and 0.08 < high < 0.1
    assert _quantiles(np.array([0.05, 0.1]), 0.9)[0] == 0.0  # always contains the prediction


# -- the reference set's collection script: conversion with its header ----------------------


def _collect_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "collect_reference.py"
    spec = importlib.util.spec_from_file_location("collect_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collect_reference_writes_specs_from_the_template(tmp_path) -> None:
    collect = _collect_module()
    args = collect.argparse.Namespace(
        budget_samples=None, train_samples=None, device="cuda", test_samples=None, set=None,
        precisions=list(collect.PRECISIONS), batch_sizes=[128, 256, 512], pass_no=2,
        cooldown_s=1.0, grid="reference",
    )  # fmt: skip
    spec = collect.spec_for("resnet50", args)
    assert spec["name"] == "h200-reference-p2-resnet50" and spec["repetitions"] == 1
    args.repetitions = 2  # --repetitions: both in the one sweep per model
    assert collect.spec_for("resnet50", args)["repetitions"] == 2
    del args.repetitions
    assert spec["base"]["model"] == "resnet50" and spec["base"]["project_after_fraction"] == 0.2
    assert spec["grid"]["precision"] == ["fp32", "tf32", "amp-bf16", "amp-fp16"]
    assert spec["grid"]["batch_size"] == [128, 256, 512] and spec["grid"]["gpus"] == [1]
    assert collect.FULL_GRID == 84
    from wattlab.experiment.specs.trainer import load_spec

    path = tmp_path / "part.yaml"
    path.write_text(collect.yaml.safe_dump(spec))
    sweep = load_spec(str(path))  # a valid sweep: 4 precisions x 3 batch sizes, one repetition
    assert sweep.n_runs == 12
    configs = {(p["precision"], p["batch_size"]): sweep.run_config(p) for p in sweep.points()}
    for (precision, batch), config in configs.items():
        # at least TARGET_BUDGET_S at the guessed rate of its own precision and batch size, in
        # whole units of 16 epochs x 512 images (so at most one unit more)
        rate = collect.guessed_rate("resnet50", precision, batch)
        assert config.budget_samples % (16 * 512) == 0
        assert 0 <= config.budget_samples - rate * collect.TARGET_BUDGET_S < 16 * 512
        assert config.train_samples * 16 == config.budget_samples  # 16 epochs: paper STEP
    assert configs[("fp32", 256)].budget_samples < configs[("amp-bf16", 256)].budget_samples
    # a launch-bound network gets twice the images at twice the batch; a compute-bound one not
    assert configs[("amp-bf16", 512)].budget_samples > configs[("amp-bf16", 128)].budget_samples
    assert collect.guessed_rate("mobilenet_v2", "fp32", 512) == pytest.approx(
        2 * collect.guessed_rate("mobilenet_v2", "fp32", 256)
    )
    assert collect.guessed_rate("resnet50", "fp32", 512) < 1.1 * collect.guessed_rate(
        "resnet50", "fp32", 256
    )


def test_collect_reference_supersedes_runs_measured_at_an_old_budget() -> None:
    import pandas as pd

    collect = _collect_module()
    key = next(iter(collect.MEASURED_RATE))
    model, precision, batch = key
    now = collect.budget_samples(*key)
    # the measured rate sets the budget: >= TARGET_BUDGET_S at it, not at the guess
    assert now >= collect.MEASURED_RATE[key] * collect.TARGET_BUDGET_S
    assert collect.guessed_rate(*key) == collect.MEASURED_RATE[key]
    runs = pd.DataFrame(
        {
            "model": [model, model, "resnet18", model],
            "precision": [precision, precision, precision, "fp32"],
            "batch_size": [batch, batch, batch, batch],
            "samples": [now, now - 16 * 512, now - 16 * 512, now - 16 * 512],
        }
    )
    # only the over-ridden configuration's run at another budget goes; a configuration without
    # an over-ride keeps any budget (a --budget-samples check run)
    assert collect.superseded(runs).tolist() == [False, True, False, False]
    assert collect.superseded(runs.iloc[:0]).tolist() == []


@pytest.mark.slow
def test_collect_reference_end_to_end_with_a_tiny_cpu_sweep(tmp_path) -> None:
    from wattlab.estimate.reference import load_reference_csv, read_reference_header

    collect = _collect_module()
    csv = tmp_path / "ref.csv"
    code = collect.main(
        [
            "--db", str(tmp_path / "ref.db"), "--csv", str(csv), "--device", "cpu",
            "--only-models", "mobilenet_v3_small", "--precisions", "fp32",
            "--batch-sizes", "32", "--budget-samples", "1024", "--train-samples", "128",
            "--test-samples", "32", "--cooldown-s", "0",
            "--set", "warmup_steps=1",
        ]
    )  # fmt: skip
    assert code == 0
    header = read_reference_header(csv)
    assert any(line.startswith("covers: 1 of 84 configurations") for line in header)
    assert all(":" in line for line in header)  # `key: value` lines
    runs, windows = load_reference_csv(csv)
    assert len(runs) == 1 and runs.loc[0, "model"] == "mobilenet_v3_small"
    assert runs.loc[0, "samples"] == 1024 and runs.loc[0, "energy_total_j"] > 0
    assert len(windows) == 8  # 1024 samples over a training set of 128: 8 epochs
    # the run projected itself live after 20 % from step-level marks and stored every mark,
    # which replay to the same projection
    import json

    from wattlab.step.marks import replay_marks

    marks = json.loads(runs.loc[0, "step_marks_json"])
    assert marks["samples"][0] == 0 and marks["samples"][-1] == 1024
    assert len(marks["samples"]) == len(marks["time_s"]) == len(marks["energy_j"]) == 33
    replayed = replay_marks(marks["samples"], marks["time_s"], marks["energy_j"], 1024, 0.2)
    live = runs.loc[0, "projected_energy_j"]
    if replayed.ok:
        assert replayed.energy_j == pytest.approx(live, rel=1e-5)  # marks kept to 7 digits
        # the shipped calibration's interval was stored with it, and brackets it
        low, high = runs.loc[0, "projected_energy_low_j"], runs.loc[0, "projected_energy_high_j"]
        assert low < live < high
    else:
        assert live != live  # NaN: no live projection either

    # a part measured on another machine joins with --add-db: its runs get the next ids and
    # count as the next repetition of their configuration (a copy of the database stands in)
    import shutil

    other = tmp_path / "elsewhere" / "ref.db"
    other.parent.mkdir()
    shutil.copy(tmp_path / "ref.db", other)
    merged = tmp_path / "merged.csv"
    assert (
        collect.main(
            [
                "--db",
                str(tmp_path / "ref.db"),
                "--add-db",
                str(other),
                "--convert-only",
                "--csv",
                str(merged),
                "--only-models",
                "mobilenet_v3_small",
                "--precisions",
                "fp32",
                "--batch-sizes",
                "32",
            ]
        )  # fmt: skip
        == 0
    )
    runs2, windows2 = load_reference_csv(merged)
    assert list(runs2["run_id"]) == [1, 2] and list(runs2["repetition"]) == [0, 1]
    assert len(windows2) == 16 and set(windows2["run_id"]) == {1, 2}
    header2 = read_reference_header(merged)
    assert any(line.startswith("covers: 1 of 84 configurations") for line in header2)
    assert any(line.endswith("2 ok runs: 1 with 2 repetitions") for line in header2)
    assert any(
        line.startswith("databases (in run-id order): ref.db: 1 ok runs") for line in header2
    )


# -- architecture families -------------------------------------------------------------------

# the synthetic models under torchvision names, so that they fall into families
TV_NAMES = {
    "r18": "resnet18",
    "r34": "resnet34",
    "r50": "resnet50",
    "vgg": "vgg16",
    "slim": "mobilenet_v2",
    "tiny": "mobilenet_v3_small",
    "eff": "efficientnet_b0",
}


@pytest.fixture
def tv_models(fake_models, monkeypatch: pytest.MonkeyPatch) -> None:
    for short, name in TV_NAMES.items():
        monkeypatch.setitem(MODELS, name, MODELS[short])
        monkeypatch.setitem(QUIRK, name, QUIRK[short])


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("resnet18", "resnet"),
        ("resnet152", "resnet"),
        ("resnext50_32x4d", "resnext"),
        ("wide_resnet50_2", "resnext"),
        ("vgg16_bn", "vgg"),
        ("mobilenet_v3_small", "mobilenet"),
        ("efficientnet_v2_s", "efficientnet"),
        ("densenet121", "densenet"),
        ("regnet_y_400mf", "regnet"),
        ("convnext_tiny", "convnext"),
        ("shufflenet_v2_x1_0", "shufflenet"),
        ("vit_b_16", "vit"),
        ("squeezenet1_1", "squeezenet"),
        ("my_net.py:build", "custom"),
        ("r18", "custom"),
        (None, "custom"),
    ],
)
def test_model_family_from_the_name(name, family) -> None:
    from wattlab.estimate.families import model_family

    assert model_family(name) == family


def test_a_family_outside_the_data_is_extrapolating_with_a_wider_interval(tv_models) -> None:
    from wattlab.estimate.pre import FAMILY_WIDEN

    names = ("resnet18", "resnet50", "vgg16", "mobilenet_v2")
    runs = synthetic_runs(models=names, batches=(256, 512), reps=1)
    model = fit_pre(runs, search_iter=1, families=("physics",))
    assert model.seen.families == ("mobilenet", "resnet", "vgg")
    assert "family" in model.residuals  # three families: each can be held out

    same_family = model.predict_config(**config("resnet34"))  # new model, known family
    assert "EXTRAPOLATING: " in same_family.notes and "family" not in same_family.notes
    new_family = model.predict_config(**config("efficientnet_b0"))
    assert new_family.notes.startswith("EXTRAPOLATING: ")
    assert "the efficientnet family is not in the reference set" in new_family.notes
    assert "leave-one-family-out" in new_family.interval_basis
    assert f"widened x{FAMILY_WIDEN:g} for a new family" in new_family.interval_basis
    # +- the widest of the matching protocols' |residual| quantiles, each read on the row's
    # regime's held-out runs where there are enough, x1.25 each way: only 3 families held out
    regime = new_family.notes.split("regime: ")[1].split(" (")[0]
    half = max(
        model.protocol_half_width(p, "energy", regime) for p in ("configuration", "model", "family")
    )
    width = new_family.energy_high_j / new_family.energy_low_j
    expected = math.exp(2 * half) * FAMILY_WIDEN**2
    assert width == pytest.approx(expected, rel=1e-9)
    assert "families weighted equally" in new_family.interval_basis
    assert width > same_family.energy_high_j / same_family.energy_low_j

    # one family only: no family can be held out, so the new one is widened as unchecked
    runs = synthetic_runs(models=("resnet18", "resnet50"), batches=(256, 512), reps=1)
    model = fit_pre(runs, search_iter=1, families=("physics",))
    assert "family" not in model.residuals
    p = model.predict_config(**config("vgg16"))
    assert p.notes.startswith("EXTRAPOLATING: ") and "the vgg family" in p.notes
    assert "widened x2 for family (no held-out check possible)" in p.interval_basis


def test_the_family_interval_weighs_every_held_out_family_equally() -> None:
    from wattlab.estimate.pre import _quantiles

    # one big family erring far low (60 runs at -1.0) and 50 small ones near 0 (2 runs each)
    small = np.linspace(-0.2, 0.2, 100)
    residuals = np.concatenate([np.full(60, -1.0), small])
    sizes = np.concatenate([np.full(60, 60.0), np.full(100, 2.0)])
    plain_low, _ = _quantiles(residuals, 0.9)
    weighted_low, weighted_high = _quantiles(residuals, 0.9, 1.0 / sizes)
    assert plain_low == -1.0  # most of the runs are the big family's
    # weighted, the big family is one of 51 (2 %, under the 5 % tail): the small ones decide
    assert -0.2 <= weighted_low < 0
    assert weighted_high == pytest.approx(0.2, abs=0.02)
    # equal weights are the plain conformal rank
    assert _quantiles(residuals, 0.9, np.ones(160)) == _quantiles(residuals, 0.9)


# -- the fit kept on disk --------------------------------------------------------------------


def _counting(runs: pd.DataFrame) -> tuple[list[int], object]:
    calls: list[int] = []

    def load() -> pd.DataFrame:
        calls.append(1)
        return runs

    return calls, load


@pytest.mark.parametrize("regressor", ["physics", "ridge", "kernel_ridge"])
def test_a_cached_fit_predicts_exactly_as_the_fit(regressor, fake_models, tmp_path) -> None:
    import json

    from wattlab.estimate import pre_cache

    runs = synthetic_runs(models=("r18", "r50", "vgg", "slim"), batches=(256, 512), reps=1)
    fitted = fit_pre(runs, search_iter=1, families=(regressor,))
    assert fitted.time.family == regressor
    path = pre_cache.save(fitted, "k" * 40, tmp_path)
    assert path is not None and path.name == f"pre-{'k' * 40}.json"
    assert "sklearn" not in path.read_text() and json.loads(path.read_text())["key"] == "k" * 40
    loaded = pre_cache.load("k" * 40, tmp_path)
    assert loaded is not None
    for values in (
        config("r18"),
        config("r34", "amp-bf16", 128),  # new model, precision's sibling, batch outside
        config("tiny", gpu_name="NVIDIA A100 SXM4 80GB"),  # GPU transfer
    ):
        a, b = fitted.predict_config(**values), loaded.predict_config(**values)
        assert a.notes == b.notes and a.interval_basis == b.interval_basis
        for name in ("energy_j", "energy_low_j", "energy_high_j", "duration_s", "power_w"):
            assert getattr(b, name) == pytest.approx(getattr(a, name), rel=1e-9)
    assert loaded.describe() == fitted.describe()
    assert loaded.excluded == fitted.excluded and loaded.n_runs == fitted.n_runs


def test_fit_cached_hits_and_is_invalidated_by_the_data_and_options(fake_models, tmp_path) -> None:
    from wattlab.estimate.pre_cache import fit_cached

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    calls, load = _counting(runs)
    options = {"search_iter": 1, "families": ("physics",)}
    first, how = fit_cached(b"data v1", load, directory=tmp_path, **options)
    assert how == "fitted and cached" and len(calls) == 1
    again, how = fit_cached(b"data v1", load, directory=tmp_path, **options)
    assert how == "cached" and len(calls) == 1  # the runs were not even loaded
    assert again.predict_config(**config("r34")).energy_j == pytest.approx(
        first.predict_config(**config("r34")).energy_j, rel=1e-12
    )
    changed = runs.assign(duration_s=runs["duration_s"] * 2)  # new data: new bytes, new fit
    _, slow = _counting(changed)
    refit, how = fit_cached(b"data v2", slow, directory=tmp_path, **options)
    assert how == "fitted and cached"
    assert refit.predict_config(**config("r34")).duration_s == pytest.approx(
        2 * first.predict_config(**config("r34")).duration_s, rel=1e-6
    )
    _, how = fit_cached(b"data v1", load, directory=tmp_path, search_iter=1, interval=0.8)
    assert how == "fitted and cached" and len(calls) == 2  # other options: another key
    assert len(list(tmp_path.glob("pre-*.json"))) == 3
    assert not list(tmp_path.glob(".pre-*"))  # no temporary file left behind


def test_a_fit_says_it_is_fitting_first_and_a_hit_says_nothing(
    fake_models, tmp_path, capsys
) -> None:
    from wattlab.estimate.pre_cache import FIRST_FIT_RUNS, FIRST_FIT_S, fit_cached

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    options = {"search_iter": 1, "families": ("physics",)}
    fit_cached(b"data", lambda: runs, directory=tmp_path, **options)
    line = capsys.readouterr().err.strip()
    assert line == (
        # issue 48: "usually ~10 s" was the idle figure; at load 5 the fit took 70 s
        f"wattlab: fitting PRE on {len(runs)} runs (~{FIRST_FIT_S} s on 2 idle cores for the "
        f"{FIRST_FIT_RUNS} shipped ones, longer on a busy machine; cached afterwards)"
    )
    assert fit_cached(b"data", lambda: runs, directory=tmp_path, **options)[1] == "cached"
    assert capsys.readouterr().err == ""  # a hit is quick: nothing to say
    fit_cached(b"data", lambda: runs, directory=tmp_path, use_cache=False, **options)
    assert capsys.readouterr().err.strip().endswith("; not cached)")


def test_the_stated_first_fit_figures_are_the_measured_ones() -> None:
    from wattlab.estimate.pre_cache import FIRST_FIT_RUNS, FIRST_FIT_S
    from wattlab.estimate.reference import load_default_reference

    assert len(load_default_reference()[0]) == FIRST_FIT_RUNS
    measured = Path(__file__).resolve().parents[2] / "docs/measured"
    text = (measured / "cpu-estimate-speed-idle-2026-12-06b.txt").read_text()
    cold = float(re.search(r"estimate, cold cache \| 1 +\| ([\d.]+)", text).group(1))
    warm = float(re.search(r"estimate, warm cache \| 3 +\| ([\d.]+)", text).group(1))
    assert round(cold - warm) == FIRST_FIT_S


def test_a_changed_reference_csv_is_refitted(fake_models, tmp_path) -> None:
    from wattlab.estimate.pre_cache import fit_reference
    from wattlab.estimate.reference import write_reference_csv

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    csv = write_reference_csv(runs, pd.DataFrame(), tmp_path / "ref.csv", ["test data"])
    cache = tmp_path / "cache"
    options = {"search_iter": 1, "families": ("physics",)}
    model, how = fit_reference(csv, directory=cache, **options)
    assert how == "fitted and cached" and model is not None
    assert fit_reference(csv, directory=cache, **options)[1] == "cached"
    csv.write_text(csv.read_text().replace("# test data", "# test data, edited"))
    assert fit_reference(csv, directory=cache, **options)[1] == "fitted and cached"


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{not json",
        '{"key": "KEY", "model": {"format": 1}}',
        '{"key": "KEY", "model": "os.system"}',
        '{"key": "other", "model": {}}',
        "[1, 2, 3]",
    ],
)
def test_a_corrupt_cache_is_refitted_without_a_traceback(content, fake_models, tmp_path) -> None:
    from wattlab.estimate import pre_cache

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    calls, load = _counting(runs)
    options = {"search_iter": 1, "families": ("physics",)}
    key = pre_cache.fit_key(b"data", options)
    (tmp_path / f"pre-{key}.json").write_text(content.replace("KEY", key))
    model, how = pre_cache.fit_cached(b"data", load, directory=tmp_path, **options)
    assert how == "fitted and cached" and len(calls) == 1 and model is not None
    assert pre_cache.fit_cached(b"data", load, directory=tmp_path, **options)[1] == "cached"


def test_a_tampered_number_of_the_wrong_kind_is_not_loaded(fake_models, tmp_path) -> None:
    import json

    from wattlab.estimate import pre_cache

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    path = pre_cache.save(fit_pre(runs, search_iter=1, families=("physics",)), "key", tmp_path)
    doc = json.loads(path.read_text())
    assert doc["model"]["chain"]["time"]["kind"] == "roofline"
    doc["model"]["chain"]["time"]["log"] = ["__import__('os')"] * 7
    path.write_text(json.dumps(doc))
    assert pre_cache.load("key", tmp_path) is None
    doc["model"]["chain"]["time"]["log"] = [1.0]  # a number, but the wrong count of them
    path.write_text(json.dumps(doc))
    assert pre_cache.load("key", tmp_path) is None
    doc["model"]["chain"]["power"]["split"] = ["__import__('os')"]  # the power model's physics
    doc["model"]["chain"]["time"]["log"] = [1.0] * 8  # the right count (issue 38: 8)
    path.write_text(json.dumps(doc))
    assert pre_cache.load("key", tmp_path) is None


def test_a_cache_that_cannot_be_written_means_no_cache(fake_models, tmp_path, monkeypatch) -> None:
    import os

    from wattlab.estimate import pre_cache

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    options = {"search_iter": 1, "families": ("physics",)}
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    model, how = pre_cache.fit_cached(b"x", lambda: runs, directory=blocker / "cache", **options)
    assert model is not None and how == "fitted (not cached)"

    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.access(read_only, os.W_OK):  # root writes anyway: refuse the write as a read-only fs

        def refuse(*args, **kwargs):
            raise PermissionError(30, "Read-only file system")

        monkeypatch.setattr("wattlab.jsonio._new_temp", refuse)
    model, how = pre_cache.fit_cached(b"x", lambda: runs, directory=read_only, **options)
    assert model is not None and how == "fitted (not cached)"
    assert not list(read_only.iterdir())


def test_a_crash_while_writing_leaves_no_cache(fake_models, tmp_path, monkeypatch) -> None:
    from wattlab.estimate import pre_cache

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)
    model = fit_pre(runs, search_iter=1, families=("physics",))

    def crash(src, dst):
        raise OSError(5, "I/O error")

    import os

    monkeypatch.setattr(os, "replace", crash)  # the cache's atomic write renames last
    assert pre_cache.save(model, "key", tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


def test_gradient_boosting_is_refitted_rather_than_kept(fake_models, tmp_path) -> None:
    from wattlab.estimate import pre_cache

    runs = synthetic_runs(models=("r18", "r50", "vgg"), batches=(256,), reps=1)
    model = fit_pre(runs, search_iter=1, families=("gradient_boosting",))
    assert pre_cache.save(model, "key", tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_the_cache_folder_follows_the_environment(tmp_path) -> None:
    from wattlab.estimate.pre_cache import cache_dir

    assert cache_dir({"WATTLAB_CACHE_DIR": str(tmp_path / "w")}) == tmp_path / "w"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "wattlab"
    assert cache_dir({}).parts[-2:] == (".cache", "wattlab")


def test_an_unseen_precision_is_predicted_by_the_physics_models(fake_models) -> None:
    """A learned model has no column for a precision it never saw; the physics models take
    over there, and the notes say so (fp32 held out: a kernel-ridge power model was off 42 %)."""
    runs = synthetic_runs(models=("r18", "r50", "vgg"), precisions=("tf32", "amp-bf16"), reps=1)
    learned = fit_pre(runs, search_iter=1, families=("ridge",))
    assert learned.time.family == "ridge" and learned.power.family == "ridge"
    row = run_features(synthetic_runs(models=("r50",), precisions=("fp32",), reps=1)).iloc[:1]
    prediction = learned.predict(row).iloc[0]
    assert (
        "time and power from the physics model: precision fp32 has no training run"
        in (prediction["notes"])
    )
    design, rows = learned.chain.design, learned.chain.rows(row)
    assert prediction["time_per_sample_s"] == pytest.approx(
        float(learned.physics_time.predict(design, rows)[0])
    )
    # a precision the fit saw keeps the chosen (learned) models
    seen = run_features(synthetic_runs(models=("r50",), precisions=("tf32",), reps=1)).iloc[:1]
    assert "from the physics model" not in learned.predict(seen).iloc[0]["notes"]


def test_a_machine_whose_host_launches_slower_gets_its_own_cpu_factor(fake_models) -> None:
    """Issue 47: the H100's machine launched kernels more slowly than the H200's; a GPU spec
    cannot say so, and one fit read it as the cost of every run like the H100's."""
    h200 = synthetic_runs(batches=(128, 512), reps=1)
    h100 = synthetic_runs(batches=(128, 512), reps=1, gpu="NVIDIA H100 SXM", seed=1, host=1.6)
    h100["id"] += 1000
    runs = pd.concat([h200, h100], ignore_index=True)
    model = fit_pre(runs, search_iter=1, families=("physics",))
    roofline = model.physics_time.model
    assert set(roofline.dev_h) == {"NVIDIA H100 SXM", "NVIDIA H200"}
    assert roofline.dev_h["NVIDIA H100 SXM"] - roofline.dev_h["NVIDIA H200"] > math.log(1.3)
    # each machine's launch-bound runs are predicted with its own host, not the pooled one
    for gpu, host in (("NVIDIA H200", 1.0), ("NVIDIA H100 SXM", 1.6)):
        p = model.predict_config(**config("tiny", "amp-bf16", 128, gpu_name=gpu))
        time_s, _ = truth("tiny", "amp-bf16", 128, gpu, host)
        assert p.time_per_sample_s == pytest.approx(time_s, rel=0.12), gpu
        assert f"on the {lookup_gpu(gpu).name}" in p.interval_basis  # its own GPU's runs
