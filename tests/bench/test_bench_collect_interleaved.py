"""bench/collect_interleaved.py (issue 47): the plan's order and caps, the wall-time accounting,
a tiny CPU collection end to end, and bench/reference_from_windows.py's reference rows from it
(read back by the reference loader and featurised as PRE reads them)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plan_takes_every_precision_at_a_batch_size_first_and_caps_slow_steps() -> None:
    collect = _load("collect_interleaved")
    shapes = collect.plan_shapes("m", [256, 32], ["amp-bf16", "fp32"], None, set())
    assert shapes == [("amp-bf16", 256), ("fp32", 256), ("amp-bf16", 32), ("fp32", 32)]
    # fp32 at 2048 of a model at 50 us an image (bf16) would step for 0.73 s: halved to 0.3 s
    per_image = 50e-6
    assert collect.capped_batch(2048, "amp-bf16", per_image) == 2048
    capped = collect.capped_batch(2048, "fp32", per_image)
    assert capped < 2048
    factor = collect.PRECISION_FACTOR["fp32"] * collect.H100_SLOWER * per_image
    assert capped * factor <= collect.MAX_STEP_S < 2 * capped * factor
    assert collect.capped_batch(64, "fp32", 1.0) == collect.MIN_BATCH  # never below the floor
    # configurations an earlier call measured are left out, and duplicates once capped
    done = {("m", "fp32", 256)}
    shapes = collect.plan_shapes("m", [256], ["amp-bf16", "fp32"], None, done)
    assert shapes == [("amp-bf16", 256)]


def test_explicit_configurations_group_by_model_in_their_order() -> None:
    collect = _load("collect_interleaved")
    assert collect.explicit_configs(["a:fp32:8", "b:tf32:16", "a:amp-bf16:4"]) == [
        ("a", [("fp32", 8), ("amp-bf16", 4)]),
        ("b", [("tf32", 16)]),
    ]
    with pytest.raises(SystemExit, match="unknown precision"):
        collect.explicit_configs(["a:fp64:8"])


def test_the_accounting_splits_the_wall_time() -> None:
    collect = _load("collect_interleaved")
    models = [
        {
            "model": "m",
            "build_s": 2.0,
            "shapes": [{"setup_s": 3.0, "first_step_s": 2.0}, {"error": "out of memory"}],
            "windows": [
                {"precision": "fp32", "batch_size": 8, "duration_s": 1.0},
                {"precision": "fp32", "batch_size": 8, "duration_s": 1.5},
            ],
        }
    ]
    out = collect.accounting(models, wall_s=10.0, start_s=1.0)
    assert out["windows_s"] == 2.5 and out["windows_share"] == 0.25
    assert out["windows_share_after_autotuning"] == pytest.approx(2.5 / 8.0)
    assert out["other_s"] == pytest.approx(10.0 - 2.5 - 3.0 - 2.0 - 1.0)
    assert out["configurations"] == 1 and out["windows"] == 2


@pytest.mark.slow  # trains two tiny configurations on the CPU
@pytest.mark.extra("train")
def test_a_cpu_collection_becomes_reference_rows(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WATTLAB_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "collect_interleaved.py"), "--out", str(out),
         "--device", "cpu", "--configs", "resnet18:fp32:4", "resnet18:amp-bf16:4",
         "--seconds", "90", "--window-s", "0.2", "--max-window-s", "0.3", "--rounds", "2",
         "--train-samples", "32"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    raw = json.loads((out / "raw" / "resnet18.json").read_text())
    summary = json.loads((out / "collect.json").read_text())
    assert summary["configurations"] == len(
        {(w["precision"], w["batch_size"]) for w in raw["windows"]}
    )
    assert 0 < summary["windows_share"] < 1
    for shape in raw["shapes"]:  # each set-up timed apart, its first (autotuning) step inside
        assert 0 < shape["first_step_s"] <= shape["setup_s"]
    rounds = {}
    for window in raw["windows"]:
        rounds.setdefault((window["precision"], window["batch_size"]), []).append(window["round"])
        assert window["energy_j"] > 0 and window["images"] == 4 * window["steps"]
    assert all(sorted(r) == [1, 2] for r in rounds.values())  # one window a round each
    csv = tmp_path / "ref.csv"
    made = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "reference_from_windows.py"), "rows",
         str(out / "raw"), "--csv", str(csv), "--header", "# a test"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    from wattlab.estimate.reference import load_reference_csv, read_reference_header

    runs, _ = load_reference_csv(csv)
    assert len(runs) == len(rounds)
    assert runs["run_id"].min() == 100_001  # apart from the H200 set's ids
    for _, run in runs.iterrows():
        windows = [
            w
            for w in raw["windows"]
            if (w["precision"], w["batch_size"]) == (run["precision"], run["batch_size"])
        ]
        assert run["samples"] == sum(w["images"] for w in windows)
        assert run["energy_total_j"] == pytest.approx(sum(w["energy_j"] for w in windows))
        assert run["duration_s"] == pytest.approx(sum(w["duration_s"] for w in windows))
        assert run["provenance"] == "estimated"  # a CPU with no RAPL here: all modelled
    assert any(line.startswith("rows: 2 configurations") for line in read_reference_header(csv))
