"""The issue-22 benchmarks run on the CPU (``--device cpu --tiny``) and write what they print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, tmp_path: Path) -> dict:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--device", "cpu", "--tiny"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    name = script.removesuffix(".py")
    return json.loads((tmp_path / f"{name}.json").read_text())


@pytest.mark.slow
def test_train_throughput_tiny_has_a_careful_and_a_wattlab_row(tmp_path):
    data = _bench("train_throughput.py", tmp_path)
    loops = [r["loop"] for r in data["rows"]]
    assert loops == ["careful DataLoader loop", "wattlab eager"]  # no CUDA graphs on the CPU
    for row in data["rows"]:
        assert row["images_per_s"] > 0 and row["mj_per_image"] > 0 and row["mean_w"] > 0
        assert row["batch_size"] == 32 and row["model_flop_utilisation"] is None  # no GPU peak
        assert row["forward_flops_per_sample"] > 0


@pytest.mark.slow
def test_graphs_accuracy_tiny_compares_eager_seeds(tmp_path):
    data = _bench("graphs_accuracy.py", tmp_path)
    entry = data["models"]["resnet18"]
    assert len(entry["eager_accuracy"]) == 2 and "graphs_accuracy" not in entry
    noise = entry["bn_eager_seed0_vs_seed1"]
    assert noise["mean_max"] >= noise["mean_median"] > 0  # two seeds differ
    assert (tmp_path / "graphs_accuracy.log").is_file()
