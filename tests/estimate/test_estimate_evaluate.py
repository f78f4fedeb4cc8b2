"""Every method against synthetic measured runs, the evaluation outputs, the reference CSV and
``estimate_all`` (what ``wattlab estimate`` prints)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.in_process import wattlab_in_process
from wattlab.errors import ConfigError, DataError
from wattlab.estimate import predict as predict_module
from wattlab.estimate.evaluate import (
    evaluate_methods,
    methods_for,
    score,
    write_evaluation,
)
from wattlab.estimate.features import ModelCost
from wattlab.estimate.predict import estimate_all, format_estimates
from wattlab.estimate.reference import (
    default_reference_path,
    load_default_reference,
    load_reference_csv,
    read_reference_header,
    write_reference_csv,
)

GFLOPS = {"s": 0.1, "m": 0.6, "l": 1.1, "xl": 4.1}
EFFICIENCY = {"fp32": 0.4, "amp-bf16": 0.08}
PEAK = {"fp32": 67e12, "amp-bf16": 989.5e12}
GPU_SHARE, DRAM_SHARE = 0.8, 0.05  # of each synthetic epoch's total energy


def law(gflops: float, gpus: int, precision: str) -> tuple[float, float]:
    """Energy (J) and time (s) per sample of the synthetic H200 runs."""
    time_per_sample = 3 * gflops * 1e9 / (gpus * PEAK[precision] * EFFICIENCY[precision])
    return time_per_sample * gpus * 300.0 * gflops**0.1, time_per_sample


def synthetic(epochs: int = 6, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs of 8 configurations x 2 repetitions; epoch 1 is a warm-up (+30 % energy)."""
    rng = np.random.default_rng(seed)
    runs, windows = [], []
    for model in ("s", "m", "l", "xl"):
        for gpus, precision in ((1, "fp32"), (2, "amp-bf16")):
            for rep in range(2):
                run_id = len(runs) + 1
                e_ps, t_ps = law(GFLOPS[model], gpus, precision)
                per_epoch = 50_000
                scale = rng.normal(1.0, 0.01)
                energies = [
                    e_ps * per_epoch * scale * (1.3 if i == 0 else 1.0) for i in range(epochs)
                ]
                durations = [
                    t_ps * per_epoch * scale * (1.2 if i == 0 else 1.0) for i in range(epochs)
                ]
                for epoch, (e, d) in enumerate(zip(energies, durations, strict=True), start=1):
                    windows.append(
                        {
                            "run_id": run_id,
                            "name": "epoch",
                            "epoch": epoch,
                            "duration_s": d,
                            "energy_total_j": e,
                            "energy_gpu_j": GPU_SHARE * e,
                            "energy_dram_j": DRAM_SHARE * e,
                            "mean_power_w": e / d,
                            "samples": per_epoch,
                        }
                    )
                windows.append(
                    {
                        "run_id": run_id,
                        "name": "budget",
                        "epoch": None,
                        "duration_s": sum(durations),
                        "energy_total_j": sum(energies),
                        "mean_power_w": None,
                        "samples": None,
                    }
                )
                runs.append(
                    {
                        "id": run_id,
                        "status": "ok",
                        "config_hash": f"{model}-{gpus}-{precision}",
                        "repetition": rep,
                        "label": f"{model} {gpus}xGPU {precision}",
                        "model": model,
                        "stem": "cifar",
                        "precision": precision,
                        "device": "cuda",
                        "gpus": gpus,
                        "batch_size": 250,
                        "epochs": float(epochs),
                        "samples": epochs * per_epoch,
                        "power_limit_w": 700.0,
                        "gpu_name": "NVIDIA H200",
                        "gpu_tdp_w": 700.0,
                        "ram_gb": 256.0,
                        "train_size": per_epoch,
                        "image_size": 32,
                        "duration_s": sum(durations),
                        "energy_total_j": sum(energies),
                        "energy_gpu_j": GPU_SHARE * sum(energies),
                        "energy_dram_j": DRAM_SHARE * sum(energies),
                        "gpu_utilization_percent": 90.0,
                        "model_gflops_per_sample": GFLOPS[model],
                        "params": 1e6,
                        "provenance": "measured",
                    }
                )
    return pd.DataFrame(runs), pd.DataFrame(windows)


@pytest.fixture(scope="module")
def evaluation():
    runs, windows = synthetic()
    # a short run, a CPU run, a failed run and a run whose power never settles
    extra = runs.iloc[[0, 0, 0, 0]].copy()
    extra["id"] = [101, 102, 103, 104]
    extra["config_hash"] = ["short", "cpu", "failed", "ramp"]
    extra.loc[extra["id"] == 101, "epochs"] = 2.0
    extra.loc[extra["id"] == 102, ["device", "gpu_name", "gpu_tdp_w"]] = ["cpu", None, None]
    extra.loc[extra["id"] == 103, "status"] = "failed"
    ramp = pd.DataFrame(
        {
            "run_id": 104,
            "name": "epoch",
            "epoch": range(1, 7),
            "duration_s": 10.0,
            "energy_total_j": [1000 * 1.1**i for i in range(6)],
        }
    )
    short = windows[(windows["run_id"] == 1) & (windows["epoch"] <= 2)].assign(run_id=101)
    runs = pd.concat([runs, extra], ignore_index=True)
    windows = pd.concat([windows, ramp, short], ignore_index=True)
    result = evaluate_methods(runs, windows, pre_search_iter=1)
    return runs, windows, result


@pytest.mark.slow
def test_every_method_is_scored_on_the_runs_it_can_handle(evaluation) -> None:
    runs, _, result = evaluation
    ok_runs = 16 + 3  # the failed run is not a measurement
    assert result.settings["runs"] == ok_runs
    metrics = result.metrics
    assert set(metrics) == set(methods_for("wattlab"))
    assert metrics["ml-co2-impact"]["n"] == ok_runs - 1  # not the CPU run
    assert metrics["step"]["n"] == 16  # not the short, CPU-less-windows or ramping runs
    # synthetic epochs after the warm-up are exact: STEP recovers the totals
    assert metrics["step"]["mape_percent"] < 0.01
    # TDP x duration overestimates runs that draw far less than TDP
    assert metrics["ml-co2-impact"]["bias_percent"] > 50
    assert metrics["pre"]["n"] >= 16
    for m in metrics.values():
        if m["n"]:
            assert m["rmse_j"] >= 0 and m["mdape_percent"] <= m["mape_percent"] * 3


def test_every_method_is_scored_on_the_same_runs(evaluation) -> None:
    _, _, result = evaluation
    table = result.protocols["loco"]
    # STEP handles 16 runs, the baselines 18, PRE >= 16: the headline is over their overlap
    step_ids = set(result.predictions.loc[result.predictions["method"] == "step", "run_id"])
    assert table["common_runs"] == len(step_ids) == 16
    assert set(table["common_run_ids"]) == step_ids
    for method in methods_for("wattlab"):
        assert table["methods"][method]["n"] == 16
    assert table["methods"]["ml-co2-impact"]["own"]["n"] == 18
    own = result.predictions[result.predictions["method"] == "ml-co2-impact"]
    common = own[own["run_id"].isin(step_ids)]
    expected = float(np.mean(np.abs(common["error_percent"])))
    assert table["methods"]["ml-co2-impact"]["mape_percent"] == pytest.approx(expected)


def test_power_twin_is_window_power_times_measured_duration(evaluation) -> None:
    runs, windows, result = evaluation
    run = runs[runs["id"] == 5].iloc[0]
    epochs = windows[(windows["run_id"] == 5) & (windows["name"] == "epoch")]
    # stable from epoch 2 (epoch 1 is the warm-up), window of 2 epochs
    window = epochs[epochs["epoch"].isin([2, 3])]
    power_w = window["energy_total_j"].sum() / window["duration_s"].sum()
    rows = result.predictions[result.predictions["run_id"] == 5].set_index("method")
    assert rows.loc["step-power", "predicted_j"] == pytest.approx(power_w * run["duration_s"])
    # the warm-up epoch draws 1.3/1.2 of the stable power: the paper's twin misses it
    assert rows.loc["step-power", "error_percent"] < -0.5


def test_baseline_predictions_follow_their_formulas(evaluation) -> None:
    runs, _, result = evaluation
    run = runs[runs["id"] == 3].iloc[0]
    rows = result.predictions[result.predictions["run_id"] == 3].set_index("method")
    assert rows.loc["ml-co2-impact", "predicted_j"] == pytest.approx(700 * 2 * run["duration_s"])
    expected_ga = (700 * 2 * 0.9 + 256 * 0.3725) * run["duration_s"]
    assert rows.loc["green-algorithms", "predicted_j"] == pytest.approx(expected_ga)
    assert rows.loc["ml-co2-impact", "measured_j"] == run["energy_total_j"]


@pytest.mark.slow
def test_exclusions_carry_their_reasons(evaluation) -> None:
    _, _, result = evaluation
    excluded = result.excluded
    reasons = dict(
        zip(
            zip(excluded["run_id"], excluded["method"], strict=True),
            excluded["reason"],
            strict=True,
        )
    )
    assert "more than its 2-epoch window" in reasons[(101, "step")]
    assert "not stable" in reasons[(104, "step")]
    assert "CPU run" in reasons[(102, "ml-co2-impact")]
    assert 103 not in set(excluded["run_id"])  # failed runs are not evaluated at all
    assert all(r.endswith(".") for r in excluded["reason"])


@pytest.mark.slow
def test_pre_never_sees_the_configuration_it_predicts() -> None:
    runs, windows = synthetic()
    cheat = runs["config_hash"] == "l-2-amp-bf16"
    runs.loc[cheat, "energy_total_j"] *= 3.0  # only this configuration breaks the law
    result = evaluate_methods(runs, windows, pre_search_iter=1, pre_families=("ridge",))
    rows = result.predictions[
        (result.predictions["method"] == "pre")
        & result.predictions["run_id"].isin(runs.loc[cheat, "id"])
    ]
    lawful = law(1.1, 2, "amp-bf16")[0] * runs.loc[cheat, "samples"].iloc[0]
    assert len(rows) == 2
    for predicted in rows["predicted_j"]:
        assert predicted == pytest.approx(lawful, rel=0.25)  # not pulled toward 3x


@pytest.mark.slow
def test_outputs_markdown_json_and_plots(evaluation, tmp_path: Path) -> None:
    _, _, result = evaluation
    paths = write_evaluation(result, tmp_path / "out")
    markdown = paths["markdown"].read_text()
    assert "| STEP | total | 16 |" in markdown and "| ML CO2 Impact | gpu | 16 |" in markdown
    assert "16 common runs" in markdown
    assert "more than its 2-epoch window" in markdown
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in paths["svg"].read_text()
    data = json.loads(paths["json"].read_text())
    assert list(data["methods"]) == list(methods_for("wattlab"))
    assert data["protocols"]["loco"]["common_runs"] == 16
    assert data["methods"]["step"]["n"] == 16
    assert data["methods"]["step"]["predictions"][0]["measured_j"] > 0
    assert json.loads(result.to_json()) == data


def test_evaluation_needs_measured_runs() -> None:
    runs, windows = synthetic()
    runs["status"] = "failed"
    with pytest.raises(DataError, match="no ok runs"):
        evaluate_methods(runs, windows)


@pytest.fixture(scope="module")
def paper_target():
    runs, windows = synthetic(epochs=16)
    return (
        runs,
        windows,
        evaluate_methods(
            runs,
            windows,
            target="paper",
            step_method="both",
            protocols="all",
            pre_search_iter=1,
            pre_families=("ridge",),
        ),
    )


def test_every_method_predicts_the_chosen_target(paper_target) -> None:
    runs, windows, result = paper_target
    assert result.settings["target_columns"] == ["energy_gpu_j", "energy_dram_j"]
    rows = result.predictions[result.predictions["run_id"] == 3]
    measured = (GPU_SHARE + DRAM_SHARE) * runs.loc[runs["id"] == 3, "energy_total_j"].iloc[0]
    assert rows["measured_j"].to_numpy() == pytest.approx(measured)
    by = rows[rows["protocol"] == "all"].set_index("method")
    # STEP projects the target's own epochs (GPU + RAM), not the total, so it stays exact
    assert by.loc["step", "predicted_j"] == pytest.approx(measured, rel=1e-6)
    assert by.loc["step-paper", "predicted_j"] == pytest.approx(measured, rel=1e-6)
    # PRE learns the target: fitted on the runs' GPU + RAM, its prediction scales with it
    pre = rows[(rows["method"] == "pre") & (rows["protocol"] == "loco")]
    total = evaluate_methods(runs, windows, pre_search_iter=1, pre_families=("ridge",))
    pre_total = total.predictions[
        (total.predictions["run_id"] == 3) & (total.predictions["method"] == "pre")
    ]
    ratio = pre["predicted_j"].iloc[0] / pre_total["predicted_j"].iloc[0]
    assert ratio == pytest.approx(GPU_SHARE + DRAM_SHARE, rel=0.02)
    # Green Algorithms keeps its RAM term for the paper's target, drops it for the GPU target
    run = runs[runs["id"] == 3].iloc[0]
    assert by.loc["green-algorithms", "predicted_j"] == pytest.approx(
        (700 * 2 * 0.9 + 256 * 0.3725) * run["duration_s"]
    )
    gpu = evaluate_methods(runs, windows, target="gpu", pre_search_iter=1, pre_families=("ridge",))
    ga = gpu.predictions[
        (gpu.predictions["run_id"] == 3) & (gpu.predictions["method"] == "green-algorithms")
    ]
    assert ga["predicted_j"].iloc[0] == pytest.approx(700 * 2 * 0.9 * run["duration_s"])
    step = gpu.predictions[(gpu.predictions["run_id"] == 3) & (gpu.predictions["method"] == "step")]
    assert step["predicted_j"].iloc[0] == pytest.approx(GPU_SHARE * run["energy_total_j"])
    assert gpu.to_dict()["methods"]["green-algorithms"]["covers"] == "gpu"


def test_the_protocols_hold_out_configuration_model_precision_and_batch(paper_target) -> None:
    _, _, result = paper_target
    assert list(result.protocols) == ["loco", "lomo", "lopo", "lofo", "lobo", "logo"]
    # one batch size in these runs: holding it out leaves nothing to fit on, and says so
    lobo = result.excluded[
        (result.excluded["protocol"] == "lobo") & (result.excluded["method"] == "pre")
    ]
    assert len(lobo) == 16 and all("held out" in r for r in lobo["reason"])
    pre = result.predictions[result.predictions["method"] == "pre"]
    notes = {p: len(pre[pre["protocol"] == p]) for p in ("loco", "lomo", "lopo")}
    assert notes["loco"] == 16 and notes["lomo"] == 16
    for protocol, table in result.protocols.items():
        # the online methods and PRE are scored on the same rows in each protocol
        n = {m: table["methods"][m]["n"] for m in table["common_methods"]}
        assert len(set(n.values())) == 1, (protocol, n)
        assert table["common_runs"] == next(iter(n.values()))
        coverage = table["methods"]["pre"]["coverage_percent"]
        assert coverage is None or 0 <= coverage <= 100
        assert table["methods"]["ml-co2-impact"]["coverage_percent"] is None
    # one precision held out: the other precision alone leaves too few configurations to fit
    lopo = result.excluded[(result.excluded["protocol"] == "lopo")]
    assert (lopo["method"] == "pre").sum() == 16 - notes["lopo"]
    assert all("held out" in r for r in lopo.loc[lopo["method"] == "pre", "reason"])


def test_lobo_predicts_every_run_of_a_batch_size_from_the_others() -> None:
    runs, windows = synthetic()
    runs["batch_size"] = np.where(runs["id"] % 4 < 2, 128, 512)  # two batch sizes, both ways
    result = evaluate_methods(
        runs, windows, protocols="lobo", pre_search_iter=1, pre_families=("ridge",)
    )
    lobo = result.predictions[result.predictions["method"] == "pre"]
    assert len(lobo) == len(runs)
    batch = runs.set_index("id")["batch_size"]
    for _, row in lobo.iterrows():
        assert "fitted without this run's batch_size (leave one batch size out)" in row["notes"]
        # the fit saw only the other batch size, and the prediction says it extrapolates
        other = 640 - batch[row["run_id"]]
        assert f"batch sizes {other}, GPUs" in row["notes"]
        assert f"EXTRAPOLATING: batch size {batch[row['run_id']]} lies outside" in row["notes"]


def test_lomo_predicts_a_model_it_never_saw(paper_target) -> None:
    runs, _, result = paper_target
    rows = result.predictions[
        (result.predictions["method"] == "pre") & (result.predictions["protocol"] == "lomo")
    ]
    xl = rows[rows["model"] == "xl"]
    assert len(xl) == 4  # 2 configurations x 2 repetitions, fitted on s, m, l only
    loco = result.predictions[
        (result.predictions["method"] == "pre") & (result.predictions["protocol"] == "loco")
    ]
    # extrapolating to the largest model is harder than filling in a configuration
    lomo_error = xl["error_percent"].abs().mean()
    loco_error = loco[loco["model"] == "xl"]["error_percent"].abs().mean()
    assert lomo_error >= loco_error


def test_lofo_holds_out_every_run_of_a_family() -> None:
    runs, windows = synthetic()
    # names of two architecture families that wattlab cannot build (their costs are recorded)
    names = {"s": "resnet9", "m": "resnet11", "l": "vgg7", "xl": "vgg9"}
    runs["model"] = runs["model"].map(names)
    result = evaluate_methods(runs, windows, protocols="lofo", pre_search_iter=1)
    assert list(result.protocols) == ["lofo"]
    assert result.protocols["lofo"]["label"] == "leave one architecture family out"
    pre = result.predictions[result.predictions["method"] == "pre"]
    assert len(pre) == len(runs) and set(pre["protocol"]) == {"lofo"}
    for _, row in pre.iterrows():
        family = "resnet" if row["model"].startswith("resnet") else "vgg"
        other = "vgg" if family == "resnet" else "resnet"
        # fitted on the other family alone: its own family is new to that fit
        assert f"the {family} family is not in the reference set ({other})" in row["notes"]
        assert "fitted without this run's family" in row["notes"]
    # the runs table itself is not changed by the derived column
    assert "family" not in runs


def test_score_counts_interval_coverage() -> None:
    rows = pd.DataFrame(
        {
            "predicted_j": [100.0, 100.0, 100.0, 100.0],
            "measured_j": [100.0, 110.0, 80.0, 125.0],
            "low_j": [90.0, 90.0, 90.0, None],
            "high_j": [110.0, 110.0, 110.0, None],
        }
    )
    result = score(rows)
    assert result["interval_runs"] == 3
    assert result["median_width_percent"] == pytest.approx(20.0)  # (110 - 90) / 100
    assert result["coverage_percent"] == pytest.approx(200 / 3)
    low, high = result["coverage_ci_percent"]  # 2 of 3 covered: anything from 9 % to 99 %
    assert low == pytest.approx(9.43, abs=0.01) and high == pytest.approx(99.16, abs=0.01)
    assert result["bias_percent"] == pytest.approx(np.mean([0, -100 / 11, 25, -20]))


def test_published_step_on_short_runs_says_why(evaluation) -> None:
    runs, windows, _ = evaluation
    result = evaluate_methods(
        runs, windows, step_method="paper", pre_search_iter=1, pre_families=("ridge",)
    )
    assert "step" not in result.metrics and result.metrics["step-paper"]["n"] == 0
    reasons = set(result.excluded.loc[result.excluded["method"] == "step-paper", "reason"])
    assert any("nothing is left to project" in r for r in reasons)
    assert result.protocols["loco"]["unscored_methods"] == ["step-paper", "step-paper-power"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target": "cpu"}, "target must be one of total, gpu, paper"),
        ({"protocols": "lono"}, "protocol must be one of"),
        ({"step_method": "magic"}, "STEP method must be one of"),
        ({"target_column": "energy_cpu_j"}, "target_column must be one of"),
    ],
)
def test_bad_evaluation_settings(kwargs, match) -> None:
    runs, windows = synthetic(epochs=3)
    with pytest.raises(ConfigError, match=match):
        evaluate_methods(runs, windows, **kwargs)


def test_a_target_the_runs_lack_is_a_data_error() -> None:
    runs, windows = synthetic(epochs=3)
    with pytest.raises(DataError, match="energy_dram_j"):
        evaluate_methods(runs.drop(columns=["energy_dram_j"]), windows, target="paper")


# ---------------------------------------------------------------------------------------------
# reference CSV


def test_reference_csv_round_trip(tmp_path: Path) -> None:
    runs, windows = synthetic(epochs=4)
    path = write_reference_csv(
        runs,
        windows,
        tmp_path / "ref.csv",
        ["measured on 1x H200 by a test", "# already a comment"],
    )
    text = path.read_text()
    assert text.startswith("# measured on 1x H200 by a test\n# already a comment\n")
    assert read_reference_header(path) == ["measured on 1x H200 by a test", "already a comment"]
    loaded_runs, loaded_windows = load_reference_csv(path)
    assert list(loaded_runs["id"]) == list(runs["id"])
    assert loaded_runs["energy_total_j"].to_numpy() == pytest.approx(runs["energy_total_j"])
    assert loaded_runs.loc[0, "gpu_name"] == "NVIDIA H200"
    epochs = windows[windows["name"] == "epoch"].reset_index(drop=True)
    assert len(loaded_windows) == len(epochs)
    assert loaded_windows["energy_total_j"].to_numpy() == pytest.approx(epochs["energy_total_j"])
    assert list(loaded_windows["epoch"]) == list(epochs["epoch"])
    # the per-epoch components travel too, so STEP can project every target
    assert loaded_windows["energy_gpu_j"].to_numpy() == pytest.approx(epochs["energy_gpu_j"])
    assert "epoch_energy_dram_j" in text.splitlines()[2]
    # the loaded data feeds the evaluation directly
    result = evaluate_methods(
        loaded_runs, loaded_windows, target="paper", pre_search_iter=1, pre_families=("ridge",)
    )
    assert result.metrics["step"]["n"] == 16 and result.metrics["step"]["mape_percent"] < 0.01


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda t: t.replace("epoch_duration_s", "epoch_seconds"), "lacks the columns"),
        (lambda t: t.replace("NVIDIA H200,700", "NVIDIA H200,lots", 1), "must be numeric"),
        (lambda t: "# only the header comments\n", "no header row"),
        (lambda t: t + "1,ok\n", "run_id must be present and unique"),
    ],
)
def test_malformed_reference_csv_is_a_data_error(tmp_path: Path, edit, match) -> None:
    runs, windows = synthetic(epochs=3)
    path = write_reference_csv(runs, windows, tmp_path / "ref.csv", ["test"])
    path.write_text(edit(path.read_text()))
    with pytest.raises(DataError, match=match):
        load_reference_csv(path)


def test_reference_epoch_lists_are_checked(tmp_path: Path) -> None:
    header = "run_id,status,model,precision,gpus,batch_size,epochs,samples,gpu_name,duration_s,"
    header += "energy_total_j,epoch_energy_j,epoch_duration_s\n"
    row = "1,ok,resnet18,fp32,1,256,2,100000,NVIDIA H200,20,2000,{e},{d}\n"
    cases = [
        ("1000 1000", "10", "has 2 values"),
        ("1000 abc", "10 10", "space-separated"),
        ("1000 -5", "10 10", "positive"),
    ]
    for energies, durations, match in cases:
        path = tmp_path / "bad.csv"
        path.write_text(header + row.format(e=energies, d=durations))
        with pytest.raises(DataError, match=match):
            load_reference_csv(path)
    with pytest.raises(DataError, match="does not exist"):
        load_reference_csv(tmp_path / "missing.csv")


def test_default_reference_path_points_into_the_package() -> None:
    path = default_reference_path()
    assert path.parts[-3:] == ("wattlab", "data", "h200-reference.csv")
    if not path.exists():
        with pytest.raises(DataError, match="does not exist yet"):
            load_default_reference()


# ---------------------------------------------------------------------------------------------
# estimate_all


@pytest.fixture
def fake_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    def cost(model, *, stem="cifar", image_size=32, num_classes=10):
        if model not in GFLOPS:
            raise ConfigError(f"unknown model {model!r}; allowed: s, m, l, xl.")
        return ModelCost(forward_flops_per_sample=GFLOPS[model] * 1e9, params=1_000_000)

    monkeypatch.setattr(predict_module, "model_cost", cost)


@pytest.mark.slow
def test_estimate_all_lists_every_method_side_by_side(fake_cost) -> None:
    runs, _ = synthetic()
    estimates = estimate_all(
        model="l",
        gpus=2,
        precision="amp-bf16",
        epochs=6,
        gpu_name="NVIDIA H200",
        batch_size=250,
        runs_df=runs,
    )
    methods = [e.method for e in estimates]
    assert methods == ["ml-co2-impact", "green-algorithms", "flops", "step", "pre"]
    by = {e.method: e for e in estimates}
    assert not by["step"].ok and "during training" in by["step"].error
    pre = by["pre"]
    e_ps, t_ps = law(1.1, 2, "amp-bf16")
    assert pre.energy_j == pytest.approx(e_ps * 6 * 50_000, rel=0.1)
    assert pre.energy_low_j <= pre.energy_j <= pre.energy_high_j
    # without --duration-s the duration baselines use PRE's duration, and say so
    assert by["ml-co2-impact"].duration_s == pytest.approx(pre.duration_s)
    assert "duration predicted by PRE" in by["ml-co2-impact"].notes
    assert by["ml-co2-impact"].energy_j == pytest.approx(700 * 2 * pre.duration_s)
    low, high = pre.co2e_range_kg()
    assert low < pre.co2e.value_kg < high
    table = format_estimates(estimates)
    assert "cannot apply: STEP projects" in table and "PRE" in table


def test_estimate_all_without_runs_or_with_an_unlisted_gpu(fake_cost) -> None:
    estimates = estimate_all(
        model="m",
        gpus=1,
        precision="fp32",
        epochs=3,
        gpu_name="B200",
        gpu_tdp_w=1000,
        duration_s=600,
    )
    by = {e.method: e for e in estimates}
    assert by["ml-co2-impact"].energy_j == pytest.approx(1000 * 600)
    assert "duration given" in by["ml-co2-impact"].notes
    assert not by["flops"].ok and "'B200' is not in it" in by["flops"].error
    assert not by["pre"].ok and "B200" in by["pre"].error

    few = synthetic()[0].head(6)  # 3 configurations
    estimates = estimate_all(
        model="m", gpus=1, precision="fp32", epochs=3, gpu_name="H200", runs_df=few
    )
    pre = estimates[-1]
    assert not pre.ok and "at least 4" in pre.error and "there are 3" in pre.error
    assert estimates[0].ok and "FLOPs estimate" in estimates[0].notes  # duration from FLOPs


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"epochs": -2}, "epochs must be a positive"),
        ({"gpu_name": "B200"}, "close matches.*--gpu-tdp"),
        ({"model": "resnet9000"}, "unknown model"),
        ({"precision": "fp64"}, "precision"),
        ({"gpu_name": None}, "--gpu-name"),
    ],
)
def test_estimate_all_rejects_bad_input(fake_cost, bad, match) -> None:
    config = {"model": "m", "gpus": 1, "precision": "fp32", "epochs": 3, "gpu_name": "H200"}
    config.update(bad)
    with pytest.raises(ConfigError, match=match):
        estimate_all(**config)


# ---------------------------------------------------------------------------------------------
# `wattlab estimate evaluate`


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`wattlab estimate evaluate ARGS` in this process (tests/in_process.py): a fresh
    interpreter paid ~4.5 s of CPU importing torch and recounted every reference model's cost."""
    return wattlab_in_process("estimate", "evaluate", *args, cwd=cwd)


@pytest.mark.slow
def test_cli_scores_the_paper_target_under_one_protocol(tmp_path: Path) -> None:
    reference = str(default_reference_path())
    done = _cli("--data", reference, "--target", "paper", "--protocol", "lopo",
                "--step-method", "both", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["settings"]["target_columns"] == ["energy_gpu_j", "energy_dram_j"]
    assert list(data["protocols"]) == ["lopo"]
    table = data["protocols"]["lopo"]
    assert table["common_runs"] == table["methods"]["ml-co2-impact"]["n"]
    # the shipped CSV lists per-epoch GPU and RAM energy, so STEP projects GPU + DRAM, and what
    # it is scored against is that sum, not the run's total
    runs, _ = load_reference_csv(reference)
    paper_j = (runs["energy_gpu_j"] + runs["energy_dram_j"]).set_axis(runs["id"])
    step = data["methods"]["step"]
    assert step["predictions"], step["excluded_runs"]
    for prediction in step["predictions"]:
        assert prediction["measured_j"] == pytest.approx(paper_j[prediction["run_id"]], rel=1e-9)
        assert (
            prediction["measured_j"]
            < runs.set_index("id").loc[prediction["run_id"], "energy_total_j"]
        )
    assert data["methods"]["flops"]["predictions"][0]["measured_j"] > 0
    # step-level marks add up the run's total, so they are not scored on GPU + RAM, and say so
    marks = data["methods"]["step-marks"]
    assert not marks["predictions"] and len(marks["excluded_runs"]) == len(runs)
    assert "target total only" in json.dumps(marks["excluded_runs"][0])


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--target", "cpu", "--target must be one of total, gpu, paper"),
        ("--protocol", "lono", "--protocol must be one of loco, lomo, lopo, lofo, lobo, logo"),
        ("--step-method", "magic", "--step-method must be one of wattlab, paper, marks, both"),
        ("--step-start", "ten", "--step-start must be an epoch number >= 1 or fluss"),
    ],
)
def test_cli_bad_flags_exit_2(tmp_path: Path, flag: str, value: str, message: str) -> None:
    done = _cli("--data", str(default_reference_path()), flag, value, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_coverage_comes_with_how_far_few_runs_can_be_trusted() -> None:
    from wattlab.estimate.evaluate import coverage_interval

    # Clopper-Pearson by hand: 13 of 13 covered -> lower bound 0.025 ** (1 / 13)
    assert coverage_interval(13, 13) == pytest.approx((0.025 ** (1 / 13), 1.0))
    low, high = coverage_interval(12, 13)
    assert low < 0.90 < high  # 12 of 13 is consistent with a calibrated 90 % interval
    assert coverage_interval(0, 5) == pytest.approx((0.0, 1 - 0.025 ** (1 / 5)))
    with pytest.raises(ValueError):
        coverage_interval(3, 2)
