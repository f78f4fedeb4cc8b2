"""`wattlab run`, `sweep` and `estimate` with a model outside the reference seven: a factory
file and another image size, end to end on the CPU; bad factories exit 2 before training."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.in_process import wattlab_in_process

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
FACTORY = """
    from torch import nn

    def small_cnn(num_classes):
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(8, num_classes),
        )

    def broken(num_classes):
        raise RuntimeError("width must be even")
"""
TINY = [
    "--device", "cpu", "--train-samples", "128", "--test-samples", "64", "--batch-size", "32",
    "--warmup-steps", "1", "--no-progress", "--epochs", "1",
]  # fmt: skip


def wattlab(*args: str, cwd: Path, timeout: float = 300):
    return subprocess.run(
        [*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip


def wattlab_here(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The same command in this process (tests/in_process.py), for the ones that train nothing
    (a refused model, a dry run): a fresh interpreter paid ~4.5 s of CPU importing torch."""
    return wattlab_in_process(*args, cwd=cwd, env={"CUDA_VISIBLE_DEVICES": ""})


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "mine.py").write_text(textwrap.dedent(FACTORY))
    return tmp_path


@pytest.mark.slow
def test_run_a_factory_at_another_image_size_records_its_name(cwd: Path) -> None:
    done = wattlab(
        "run", "--model-factory", "mine.py:small_cnn", "--image-size", "40", *TINY,
        "--db", "r.db", cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    con = sqlite3.connect(cwd / "r.db")
    con.row_factory = sqlite3.Row
    run = con.execute("SELECT * FROM runs").fetchone()
    assert run["status"] == "ok"
    assert run["model"] == "mine.py:small_cnn" and run["image_size"] == 40
    assert json.loads(run["config_json"])["model_factory"] == "mine.py:small_cnn"
    # 3x3 conv 3->8 on 40x40 plus the 8->10 head, in FLOPs (a multiply-add counts 2)
    assert run["model_gflops_per_sample"] * 1e9 == pytest.approx(2 * (40 * 40 * 8 * 27 + 80))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--model-factory", "mine.py:broken"], "raised RuntimeError: width must be even"),
        (["run", "--model-factory", "gone.py:make"], "file 'gone.py' does not exist"),
        (["run", "--model", "resnet_18"], "unknown model 'resnet_18'.*list_models"),
        (["run", "--model", "vit_b_32", "--image-size", "48"], "multiple of 32"),
        (["estimate", "--model-factory", "mine.py:nothing", "--gpu-name", "H200"],
         "has no function 'nothing'"),
    ],
)  # fmt: skip
def test_bad_models_are_one_sentence_exit_2_nothing_written(cwd: Path, args, message) -> None:
    extra = ["--epochs", "1"] if args[0] == "estimate" else ["--db", "r.db", *TINY]
    done = wattlab_here(*args, *extra, cwd=cwd)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    error = done.stderr.strip().splitlines()
    assert len(error) == 1
    assert re.search(message, error[0]), error[0]
    assert not (cwd / "r.db").exists()


@pytest.mark.slow
def test_sweep_spec_takes_a_factory_and_image_sizes(cwd: Path) -> None:
    spec = cwd / "s.yaml"
    spec.write_text(
        "name: mine\nrepetitions: 1\n"
        "base: {model_factory: mine.py:small_cnn, device: cpu, epochs: 1, batch_size: 32,\n"
        "       train_samples: 128, test_samples: 64, warmup_steps: 1}\n"
        "grid: {image_size: [32, 48]}\n"
    )
    done = wattlab_here("sweep", str(spec), "--db", "s.db", "--dry-run", "--json", "-", cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    labels = sorted(r["label"] for r in json.loads(done.stdout)["runs"])
    assert labels == ["mine.py:small_cnn 1xCPU fp32 bs32", "mine.py:small_cnn 1xCPU fp32 bs32 48px"]
    spec.write_text(spec.read_text().replace("small_cnn", "broken"))
    done = wattlab_here("sweep", str(spec), "--db", "s.db", "--dry-run", cwd=cwd)
    assert done.returncode == 2 and "width must be even" in done.stderr
