"""GPU spec table, lookups and the three baseline estimates (ML CO2 Impact, Green Algorithms,
FLOPs). The FLOPs path counts a tiny torch model through a stand-in ``wattlab.train.models``."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.estimate.baselines import (
    PRECISION_SPEEDUP_CAP,
    RAM_W_PER_GB,
    flops_based,
    green_algorithms,
    mean_sampled_utilization,
    ml_co2_impact,
)
from wattlab.estimate.features import clear_model_cost_cache, model_cost
from wattlab.estimate.specs import gpu_specs, lookup_gpu, parse_gpu_specs, peak_flops
from wattlab.monitor.carbon import CarbonSettings, co2e

# ---------------------------------------------------------------------------------------------
# spec table


def test_table_covers_the_required_gpus_with_sane_numbers() -> None:
    required = [
        "NVIDIA V100 PCIe",
        "NVIDIA V100 SXM2",
        "NVIDIA T4",
        "NVIDIA A10",
        "NVIDIA A40",
        "NVIDIA A100 PCIe 40GB",
        "NVIDIA A100 PCIe 80GB",
        "NVIDIA A100 SXM4 40GB",
        "NVIDIA A100 SXM4 80GB",
        "NVIDIA L4",
        "NVIDIA L40S",
        "NVIDIA H100 PCIe",
        "NVIDIA H100 SXM",
        "NVIDIA H200",
        "NVIDIA GeForce RTX 3090",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce GTX 750 Ti",
        "NVIDIA GeForce RTX 3070",
    ]
    names = {spec.name for spec in gpu_specs()}
    assert set(required) <= names
    for spec in gpu_specs():
        assert 30 <= spec.tdp_w <= 1000
        assert spec.fp32_tflops > 0 and spec.memory_gb > 0 and spec.cuda_cores > 0
        for rate in (spec.tf32_tflops, spec.bf16_tflops, spec.fp16_tflops):
            assert rate is None or rate >= spec.fp32_tflops  # tensor paths are never slower


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "NVIDIA V100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 SXM4 40GB"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 PCIe 80GB"),
        ("nvidia h200", "NVIDIA H200"),
        ("H200 SXM 141GB", "NVIDIA H200"),
        ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
        ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"),
        ("GeForce GTX 750 Ti", "NVIDIA GeForce GTX 750 Ti"),
        ("Tesla T4", "NVIDIA T4"),
        ("NVIDIA A10", "NVIDIA A10"),
    ],
)
def test_lookup_accepts_typed_and_nvml_names(name: str, expected: str) -> None:
    assert lookup_gpu(name).name == expected


def test_unknown_gpu_lists_close_matches_and_the_tdp_flag() -> None:
    with pytest.raises(ConfigError) as info:
        lookup_gpu("NVIDIA B200")
    message = str(info.value)
    assert "'NVIDIA B200'" in message and "NVIDIA H200" in message and "--gpu-tdp" in message


def test_an_incomplete_name_is_refused_with_its_variants() -> None:
    # "A100" could be any of four boards with 250-400 W: no silent pick
    with pytest.raises(ConfigError) as info:
        lookup_gpu("A100")
    assert "NVIDIA A100 SXM4 80GB" in str(info.value) and "NVIDIA A100 PCIe 40GB" in str(info.value)
    with pytest.raises(ConfigError):
        lookup_gpu("RTX 3090 Ti")  # a different card, not the RTX 3090


def test_peak_flops_per_precision_and_fallback() -> None:
    h200 = lookup_gpu("H200")
    assert peak_flops(h200, "amp-bf16") == pytest.approx(989.5e12)
    assert peak_flops(h200, "tf32") == pytest.approx(494.5e12)
    assert peak_flops(h200, "fp32") == pytest.approx(67e12)
    v100 = lookup_gpu("Tesla V100-SXM2-16GB")
    assert not v100.supports("tf32")
    assert peak_flops(v100, "tf32") == pytest.approx(15.7e12)  # no TF32 path: FP32 rate
    with pytest.raises(ConfigError, match="precision"):
        peak_flops(h200, "int8")


def test_malformed_spec_table_is_a_data_error() -> None:
    from wattlab.errors import DataError

    with pytest.raises(DataError):
        parse_gpu_specs("name,tdp_w\nX,100\n")
    header = (
        "name,aliases,tdp_w,fp32_tflops,tf32_tflops,bf16_tflops,fp16_tflops,memory_gb,cuda_cores"
    )
    with pytest.raises(DataError, match="row 2"):
        parse_gpu_specs(f"# comment\n{header}\nX,,lots,1,,,,1,1\n")


def test_importing_the_package_loads_no_heavy_modules() -> None:
    code = (
        "import sys, wattlab.estimate as e; "
        "print(any(m in sys.modules for m in ('sklearn', 'torch', 'matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# ML CO2 Impact and Green Algorithms


def test_ml_co2_impact_is_tdp_times_duration_times_gpus() -> None:
    carbon = CarbonSettings(intensity_kg_per_kwh=0.4, intensity_low_kg_per_kwh=0.1)
    estimate = ml_co2_impact(duration_s=3600.0, gpus=2, gpu_name="NVIDIA H200", carbon=carbon)
    assert estimate.ok and estimate.method == "ml-co2-impact"
    assert estimate.energy_j == pytest.approx(700 * 3600 * 2)
    assert estimate.co2e.value_kg == pytest.approx(co2e(700 * 3600 * 2, carbon).value_kg)
    assert estimate.co2e_range_kg() == pytest.approx((1.4 * 0.1, 1.4 * 0.3))  # default high
    # the override wins over the table
    assert ml_co2_impact(duration_s=10.0, gpu_name="H200", gpu_tdp_w=500).energy_j == 5000.0


def test_duration_baselines_need_a_duration_and_say_so() -> None:
    for estimate in (
        ml_co2_impact(duration_s=None, gpu_name="H200"),
        green_algorithms(duration_s=None, gpu_name="H200"),
    ):
        assert not estimate.ok and estimate.energy_j is None
        assert "--duration-s" in estimate.error and estimate.error.endswith(".")


def test_green_algorithms_uses_utilisation_and_ram() -> None:
    estimate = green_algorithms(
        duration_s=100.0, gpus=2, gpu_tdp_w=300.0, gpu_utilization_percent=50.0, ram_gb=64.0
    )
    assert estimate.energy_j == pytest.approx((300 * 2 * 0.5 + 64 * RAM_W_PER_GB) * 100)
    assert "50 %" in estimate.notes
    unknown = green_algorithms(duration_s=100.0, gpus=1, gpu_tdp_w=300.0)
    assert unknown.energy_j == pytest.approx(300 * 100)
    assert "100 % assumed" in unknown.notes and "memory term left out" in unknown.notes


@pytest.mark.parametrize(
    "call",
    [
        lambda: ml_co2_impact(duration_s=10.0, gpus=0, gpu_name="H200"),
        lambda: ml_co2_impact(duration_s=-1.0, gpu_name="H200"),
        lambda: ml_co2_impact(duration_s=10.0, gpu_tdp_w=-5),
        lambda: ml_co2_impact(duration_s=10.0),
        lambda: ml_co2_impact(duration_s=10.0, gpu_name="Voodoo 3"),
        lambda: green_algorithms(duration_s=10.0, gpu_name="H200", gpu_utilization_percent=150),
    ],
)
def test_bad_values_raise_one_sentence_config_errors(call) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert str(info.value).endswith(".") and "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------------
# FLOPs-based, with a tiny torch model


@pytest.fixture
def tiny_models(monkeypatch: pytest.MonkeyPatch):
    """A stand-in wattlab.train.models with two tiny models (same signatures as the real one);
    FLOPs counted by torch.utils.flop_counter."""
    torch = pytest.importorskip("torch")
    from torch import nn

    module = types.ModuleType("wattlab.train.models")
    module.builds = []

    def build_model(name: str, *, stem: str = "cifar", num_classes: int = 10, image_size: int = 32):
        module.builds.append(name)
        if name == "tiny":
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_classes))
        if name == "broken":
            raise RuntimeError("out of memory")
        raise ConfigError(f"unknown model {name!r}; allowed: tiny.")

    def forward_flops_per_sample(model, image_size: int = 32) -> float:
        from torch.utils.flop_counter import FlopCounterMode

        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, 3, image_size, image_size))
        return float(counter.get_total_flops())

    def count_parameters(model) -> int:
        return sum(p.numel() for p in model.parameters())

    from wattlab.train.models import profile_model as real_profile

    def profile_model(model, image_size: int = 32):
        return real_profile(model, image_size)

    module.build_model = build_model
    module.forward_flops_per_sample = forward_flops_per_sample
    module.profile_model = profile_model
    module.count_parameters = count_parameters
    monkeypatch.setitem(sys.modules, "wattlab.train.models", module)
    clear_model_cost_cache()
    yield module
    clear_model_cost_cache()


@pytest.mark.slow
def test_model_cost_counts_a_real_forward_pass_and_caches(tiny_models) -> None:
    cost = model_cost("tiny")
    assert cost.forward_flops_per_sample == 2 * 3072 * 10  # one multiply-add = 2 FLOPs
    assert cost.params == 3072 * 10 + 10
    assert model_cost("tiny") is cost
    assert tiny_models.builds == ["tiny"]  # built once


@pytest.mark.slow
def test_model_cost_with_the_real_models_module() -> None:
    pytest.importorskip("torchvision")
    pytest.importorskip("wattlab.train.models")
    clear_model_cost_cache()
    cost = model_cost("resnet18")  # CIFAR stem, 10 classes
    assert cost.params == 11_173_962
    assert cost.gflops_per_sample == pytest.approx(1.11, rel=0.02)
    with pytest.raises(ConfigError, match="unknown model 'resnet9000'"):
        model_cost("resnet9000")
    clear_model_cost_cache()


def test_model_that_cannot_be_built_is_a_config_error(tiny_models) -> None:
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        model_cost("nope")
    with pytest.raises(ConfigError, match="'broken'.*cannot be built: out of memory"):
        model_cost("broken")


def test_flops_estimate_from_counted_model(tiny_models) -> None:
    samples = 1_000_000
    estimate = flops_based(
        samples=samples, precision="amp-bf16", gpus=2, gpu_name="NVIDIA H200", model="tiny"
    )
    # BF16's dense peak is 989.5 / 67 = 14.8x FP32's; the rate is capped at 2x FP32
    expected_s = 3 * 61440 * samples / (2 * PRECISION_SPEEDUP_CAP * 67e12 * 0.3)
    assert estimate.ok
    assert estimate.duration_s == pytest.approx(expected_s)
    assert estimate.energy_j == pytest.approx(expected_s * 700 * 2)
    assert "ASSUMED 30% utilisation" in estimate.notes and "3 x forward" in estimate.notes
    assert estimate.notes.startswith("wattlab's own construction, not a published method")
    assert "capped at 2x the FP32 rate (its peak is 14.8x" in estimate.notes
    fp32 = flops_based(
        samples=samples, precision="fp32", gpus=2, gpu_name="NVIDIA H200", model="tiny"
    )
    assert fp32.energy_j / estimate.energy_j == pytest.approx(PRECISION_SPEEDUP_CAP)
    uncapped = flops_based(
        samples=samples,
        precision="amp-bf16",
        gpus=2,
        gpu_name="NVIDIA H200",
        model="tiny",
        speedup_cap=100,
    )
    assert fp32.energy_j / uncapped.energy_j == pytest.approx(989.5 / 67)
    assert "capped" not in uncapped.notes
    # utilisation and TDP override scale it as they should
    half = flops_based(
        samples=samples,
        precision="amp-bf16",
        gpus=2,
        gpu_name="H200",
        model="tiny",
        utilization=0.15,
        gpu_tdp_w=350,
    )
    assert half.duration_s == pytest.approx(2 * expected_s)
    assert half.energy_j == pytest.approx(estimate.energy_j)


def test_flops_with_recorded_flops_and_cases_it_cannot_handle() -> None:
    estimate = flops_based(
        samples=10, precision="fp32", gpu_name="Tesla V100-SXM2-32GB", forward_flops_per_sample=1e9
    )
    assert estimate.duration_s == pytest.approx(3e10 / (15.7e12 * 0.3))
    no_peak = flops_based(
        samples=10,
        precision="fp32",
        gpu_name="Mystery",
        gpu_tdp_w=200,
        forward_flops_per_sample=1e9,
    )
    assert not no_peak.ok and "peak FLOP/s" in no_peak.error
    no_model = flops_based(samples=10, precision="fp32", gpu_name="H200")
    assert not no_model.ok and "model" in no_model.error
    with pytest.raises(ConfigError, match="utilisation"):
        flops_based(
            samples=10,
            precision="fp32",
            gpu_name="H200",
            forward_flops_per_sample=1.0,
            utilization=0,
        )
    with pytest.raises(ConfigError, match="--gpu-tdp"):
        flops_based(samples=10, precision="fp32", gpu_name="Mystery", forward_flops_per_sample=1.0)


def test_green_algorithms_says_which_utilisation_and_power_limit_it_used() -> None:
    estimate = green_algorithms(
        duration_s=100.0,
        gpu_tdp_w=700.0,
        tdp_source="the run's recorded maximum power limit",
        gpu_utilization_percent=50.0,
        utilization_basis="mean of NVML reads at epoch ends",
        ram_gb=100.0,
    )
    assert estimate.energy_j == pytest.approx((350.0 + 37.25) * 100.0)
    assert "TDP 700 W per GPU (the run's recorded maximum power limit)" in estimate.notes
    assert "50 % (mean of NVML reads at epoch ends)" in estimate.notes
    gpu_only = green_algorithms(
        duration_s=100.0, gpu_tdp_w=700.0, gpu_utilization_percent=50.0, ram_gb=100.0,
        include_ram=False,
    )  # fmt: skip
    assert gpu_only.energy_j == pytest.approx(350.0 * 100.0)
    assert "memory term left out (GPU-only target)" in gpu_only.notes


def test_sampled_utilisation_is_averaged_over_the_budget_window() -> None:
    # samples every 0.5 s: 0 % during a warm-up, 80 % in the budget, 10 % in evaluation
    t = [i * 0.5 for i in range(40)]
    util = [0.0] * 8 + [80.0] * 24 + [10.0] * 8
    assert mean_sampled_utilization(t, util, 4.0, 16.0) == pytest.approx(80.0)
    # a window starting mid-sample: the last earlier sample holds until the next one
    assert mean_sampled_utilization(t, util, 3.0, 5.0) == pytest.approx(40.0)
    with pytest.raises(DataError, match="no utilisation sample"):
        mean_sampled_utilization(t, util, 100.0, 110.0)
    with pytest.raises(DataError, match="end after it starts"):
        mean_sampled_utilization(t, util, 5.0, 5.0)
