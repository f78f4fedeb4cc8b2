"""`wattlab estimate`, `estimate evaluate` and `report --import-profile` through the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.in_process import wattlab_in_process

REFERENCE = Path(__file__).resolve().parents[2] / "wattlab" / "data" / "h200-reference.csv"


def wattlab(*args: str, cwd: Path, cache: Path | None = None):
    """Run the CLI with its PRE cache in ``cache`` (default: the session's, tests/conftest.py), in
    this process (tests/in_process.py: these commands' output and files are the point, and each
    fresh interpreter paid ~4.5 s of CPU importing torch to count the model's cost)."""
    env = {"WATTLAB_CACHE_DIR": str(cache)} if cache else None
    return wattlab_in_process(*args, cwd=cwd, env=env)


def small_reference(path: Path, models: tuple[str, ...]) -> Path:
    """The shipped reference's header and its runs of ``models`` only (a quick fit)."""
    lines = REFERENCE.read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if not line.startswith("#")]
    column = body[0].split(",").index("model")
    kept = [line for line in body[1:] if line.split(",")[column] in models]
    path.write_text("\n".join([*header, body[0], *kept]) + "\n")
    return path


def pre_of(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)["methods"]["pre"]


ESTIMATE = ("estimate", "--model", "resnet50", "--epochs", "2", "--gpu-name", "NVIDIA H200",
            "--json", "-")  # fmt: skip


@pytest.mark.slow
def test_estimate_keeps_the_pre_fit_and_refits_when_it_must(tmp_path):
    data = small_reference(tmp_path / "ref.csv", ("resnet18", "resnet34", "mobilenet_v2"))
    cache = tmp_path / "cache"
    first = pre_of(wattlab(*ESTIMATE, "--data", str(data), cwd=tmp_path, cache=cache))
    files = list(cache.glob("pre-*.json"))
    assert len(files) == 1
    # a hit: the same answer from the kept fit
    assert pre_of(wattlab(*ESTIMATE, "--data", str(data), cwd=tmp_path, cache=cache)) == first
    assert list(cache.glob("pre-*.json")) == files
    # a corrupt cache is refitted, without a traceback, to the same answer
    files[0].write_text('{"key": "half-writ')
    assert pre_of(wattlab(*ESTIMATE, "--data", str(data), cwd=tmp_path, cache=cache)) == first
    assert json.loads(files[0].read_text())["model"]["n_runs"] > 0
    # other data (one run less): another key, another fit
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines[:-1]) + "\n")
    changed = pre_of(wattlab(*ESTIMATE, "--data", str(data), cwd=tmp_path, cache=cache))
    assert len(list(cache.glob("pre-*.json"))) == 2
    assert changed["energy_j"] != first["energy_j"]
    # a cache folder that cannot be written: the answer, and no cache
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = pre_of(wattlab(*ESTIMATE, "--data", str(data), cwd=tmp_path, cache=blocker / "c"))
    assert unwritable == changed


@pytest.mark.slow
def test_estimate_flags_a_family_outside_the_reference_runs(tmp_path):
    data = small_reference(tmp_path / "ref.csv", ("resnet18", "resnet34", "mobilenet_v2"))
    args = [a if a != "resnet50" else "efficientnet_b0" for a in ESTIMATE]
    pre = pre_of(wattlab(*args, "--data", str(data), cwd=tmp_path))
    assert pre["notes"].startswith("EXTRAPOLATING: ")
    assert "the efficientnet family is not in the reference set (mobilenet, resnet)" in pre["notes"]
    assert "leave-one-family-out" in pre["notes"] and "for a new family" in pre["notes"]
    inside = pre_of(wattlab(*ESTIMATE, "--data", str(data), cwd=tmp_path))  # resnet50: new model
    assert "family" not in inside["notes"].split("; interval from")[0]


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
    # four models (37 runs) of the shipped set: leave-one-configuration-out over all 222 takes over
    # 15 minutes on 2 cores since PRE reads the live marks (bench/evaluate_pre.py scores them all)
    data = small_reference(
        tmp_path / "ref.csv", ("resnet101", "convnext_tiny", "densenet121", "regnet_y_400mf")
    )
    done = wattlab("estimate", "evaluate", "--data", str(data), "--out", "ev",
                   "--protocol", "loco", "--json", "ev.json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shipped = sum(1 for line in data.read_text().splitlines()[1:] if line[:1].isdigit())
    methods = json.loads((tmp_path / "ev.json").read_text())["methods"]
    assert methods["pre"]["n"] == shipped and methods["ml-co2-impact"]["n"] == shipped
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
