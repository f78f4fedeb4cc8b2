"""One failure contract: bad input refused before anything is stored (exit 2); a run that
fails after it started is stored as failed with its id; a failure that stored nothing says so."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.db.store import open_store
from wattlab.experiment.runs import checks, runner
from wattlab.experiment.runs.worker import WorkerOptions, execute
from wattlab.train.config import make_run_config

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
TINY = [
    "--device", "cpu", "--model", "mobilenet_v3_small", "--stem", "imagenet",
    "--train-samples", "256", "--test-samples", "64", "--batch-size", "64",
    "--warmup-steps", "1", "--no-progress",
]  # fmt: skip


def wattlab(*args: str, cwd: Path, timeout: float = 600):
    return subprocess.run(
        [*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "1", "--batch-size", "512"], "larger than the 256 training samples"),
        (["--epochs", "1", "--lr", "nan"], "--lr must be a number > 0 and <= 100, got nan"),
        (["--epochs", "1", "--lr", "inf"], "--lr must be a number > 0 and <= 100, got inf"),
        (["--epochs", "1", "--power-limit", "inf"], "--power-limit must be a number > 0"),
        (["--epochs", "1", "--precision", "amp-fp16"], "needs a CUDA GPU"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, args, message):
    # a repeated option (--batch-size): the last one counts
    done = wattlab("run", *TINY, *args, "--db", "x.db", cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()


@pytest.mark.extra("train")
def test_codecarbon_asked_for_but_missing_is_bad_input(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "codecarbon" else real(name)
    )
    cfg = make_run_config(device="cpu", epochs=1, codecarbon=True)
    with pytest.raises(ConfigError, match="CodeCarbon was asked for"):
        checks.check_inputs(cfg)
    checks.check_inputs(make_run_config(device="cpu", epochs=1))  # not asked for: fine


def _tiny_cfg(**overrides):
    values = dict(model="mobilenet_v3_small", stem="imagenet", device="cpu", train_samples=128,
                  test_samples=64, epochs=1, batch_size=64, warmup_steps=1)  # fmt: skip
    values.update(overrides)
    return make_run_config(**values)


@pytest.mark.extra("train")
def test_a_failure_in_meter_discovery_is_stored_as_failed_with_its_id(tmp_path, monkeypatch):
    import wattlab.meters.discover as discover

    def broken(**_kwargs):
        raise RuntimeError("no meters today")

    monkeypatch.setattr(discover, "discover_meters", broken)
    db = tmp_path / "f.db"
    result = execute(_tiny_cfg(), WorkerOptions(db_path=str(db), progress=False))
    assert result.status == "failed" and result.stored and result.run_id is not None
    assert "no meters today" in result.error
    with open_store(db) as store:
        rows = store.runs()
    assert rows["id"].tolist() == [result.run_id]
    assert rows["status"].tolist() == ["failed"]
    assert "no meters today" in rows["error"].iloc[0]


def test_a_failure_that_could_not_be_stored_says_so(tmp_path, monkeypatch):
    import wattlab.meters.discover as discover
    from wattlab.experiment.db.store import Store

    monkeypatch.setattr(discover, "discover_meters", lambda **_: 1 / 0)

    def refuse(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(Store, "finish_run", refuse)
    result = execute(_tiny_cfg(), WorkerOptions(db_path=str(tmp_path / "g.db"), progress=False))
    assert result.status == "failed" and not result.stored
    assert "could not be stored" in result.error and "disk full" in result.error


def _write_cifar(folder: Path, broken: str) -> None:
    import pickle

    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        if name == broken:
            (folder / name).write_bytes(b"not a pickle")
            continue
        batch = {
            b"data": rng.integers(0, 256, (64, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, 64)],
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)


@pytest.mark.slow
def test_a_run_failing_after_start_is_stored_failed_and_json_writes_the_row(tmp_path):
    # a model that trains a few steps and then fails: bad input files are refused before a run
    # starts (exit 2), so the failure after start comes from the training itself
    (tmp_path / "flaky.py").write_text(
        "import torch.nn as nn\n"
        "class Flaky(nn.Module):\n"
        "    def __init__(self, num_classes):\n"
        "        super().__init__()\n"
        "        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_classes))\n"
        "        self.steps = 0\n"
        "    def forward(self, x):\n"
        "        if self.training:\n"
        "            self.steps += 1\n"
        "            if self.steps > 6:\n"
        "                raise RuntimeError('flaky model gave up after 6 training steps')\n"
        "        return self.net(x)\n"
        "def make(num_classes=10):\n"
        "    return Flaky(num_classes)\n"
    )
    base = [a for a in TINY if a not in ("mobilenet_v3_small", "--stem", "imagenet")]
    base[base.index("--model")] = "--model-factory"
    base.insert(base.index("--model-factory") + 1, "flaky.py:make")
    done = wattlab("run", *base, "--epochs", "3", "--db", "c.db", "--json", "row.json",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    row = json.loads((tmp_path / "row.json").read_text())
    assert row["status"] == "failed" and row["id"] >= 1 and "gave up" in row["error"]
    assert f"stored as failed (run {row['id']})" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_sigterm_of_an_in_process_run_stores_it_failed_and_exits_143(tmp_path):
    child = subprocess.Popen(
        [*WATTLAB, "run", *TINY, "--epochs", "200", "--db", "t.db"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    db = tmp_path / "t.db"
    deadline = time.time() + 600
    claimed = False
    while time.time() < deadline and not claimed:
        time.sleep(0.5)
        if db.exists():
            try:
                con = sqlite3.connect(db, timeout=5)
                claimed = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
                con.close()
            except sqlite3.OperationalError:
                pass
    assert claimed, "the run was not claimed in time"
    time.sleep(3)  # training now
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 143, err
    con = sqlite3.connect(db)
    status, error = con.execute("SELECT status, error FROM runs").fetchone()
    assert status == "failed" and error == "interrupted by signal 15"
    assert "Traceback" not in err


def test_pid_of_a_dead_lone_run_is_abandoned_by_the_next_run(tmp_path):
    db = tmp_path / "d.db"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    with open_store(db) as store:
        run_id = store.claim_run(
            {
                "config_hash": "h",
                "config_json": {},
                "label": "x",
                "hostname": socket.gethostname(),
                "pid": dead.pid,
            }  # fmt: skip
        )
        mine = store.claim_run(
            {
                "config_hash": "h",
                "config_json": {},
                "label": "x",
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
            }  # fmt: skip
        )
    assert runner.abandon_dead_lone_runs(db) == [run_id]
    with open_store(db) as store:
        statuses = dict(zip(store.runs()["id"], store.runs()["status"], strict=True))
    assert statuses == {run_id: "abandoned", mine: "running"}
