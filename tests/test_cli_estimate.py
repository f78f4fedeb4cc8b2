"""`wattlab estimate`, `estimate evaluate` and `report --import-profile` through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
REFERENCE = Path(__file__).resolve().parents[1] / "wattlab" / "data" / "h200-reference.csv"


def wattlab(*args: str, cwd: Path):
    return subprocess.run([*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_estimate_prints_every_method_and_pre_uses_the_shipped_h200_runs(tmp_path):
    done = wattlab("estimate", "--model", "resnet18", "--epochs", "5", "--gpu-name",
                   "NVIDIA H200", "--batch-size", "256", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    methods = json.loads(done.stdout)["methods"]
    assert {"ml-co2-impact", "green-algorithms", "flops", "step", "pre"} <= set(methods)
    for key in ("ml-co2-impact", "green-algorithms", "flops", "pre"):
        assert methods[key]["energy_j"] > 0, methods[key]
    assert methods["step"]["error"]  # STEP cannot run before training, and says so
    # ML CO2 Impact is TDP x duration x GPUs, with the H200's 700 W
    ml = methods["ml-co2-impact"]
    assert ml["energy_j"] == pytest.approx(700.0 * ml["duration_s"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "resnet50", "--epochs", "3", "--gpu-name", "NVIDIA Z9000"], "--gpu-tdp"),
        (["--model", "resnet50", "--epochs", "-3", "--gpu-name", "NVIDIA H200"], "epochs"),
        pytest.param(
            ["--model", "nonet", "--epochs", "3", "--gpu-name", "NVIDIA H200"],
            "nonet",
            marks=pytest.mark.slow,  # lists the models: imports torchvision
        ),
        (["--epochs", "3"], "--model"),
    ],
)
def test_estimate_bad_input(tmp_path, args, message):
    done = wattlab("estimate", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_evaluate_on_the_reference_runs(tmp_path):
    done = wattlab("estimate", "evaluate", "--data", str(REFERENCE), "--out", "ev",
                   "--json", "ev.json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    methods = json.loads((tmp_path / "ev.json").read_text())["methods"]
    assert methods["pre"]["n"] == 6 and methods["ml-co2-impact"]["n"] == 6
    assert methods["pre"]["mape_percent"] < methods["ml-co2-impact"]["mape_percent"]
    assert (tmp_path / "ev" / "evaluation.md").exists()


@pytest.mark.slow
def test_import_profile_finds_the_250_w_region(tmp_path):
    csv = tmp_path / "a40.csv"
    csv.write_text(
        "start_time,window_name,elapsed_time,gpu0_energy\n"
        "1.0,__GlobalPowerLimitOptimizer_300,24.011604165658355,6224.88599999249\n"
        "2.0,__GlobalPowerLimitOptimizer_275,24.062182845547795,6122.302000001073\n"
        "3.0,__GlobalPowerLimitOptimizer_250,24.163184974342585,5915.574000000954\n"
        "4.0,__GlobalPowerLimitOptimizer_225,24.547974875196815,5499.97199998796\n"
    )
    done = wattlab("report", "--import-profile", str(csv), "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["baseline_w"] == 300
    # 250 W: (5915.57 - 6224.89) / 6224.89 = -4.97 % energy, 24.163 / 24.012 - 1 = +0.63 % time
    assert 250 in data["operating_region"] and 225 not in data["operating_region"]
    bad = wattlab("report", "--import-profile", str(csv), "--baseline-w", "280", "--json", "-",
                  cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "280" in bad.stderr
