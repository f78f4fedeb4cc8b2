"""Second fault campaign, signals on `wattlab run` (issue #25 item 6): a signal N during a run
gives exit 128 + N and one line, with the run stored 'failed' naming the signal; never exit 0
with the run stored 'ok'."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WATTLAB = [sys.executable, "-m", "wattlab.cli"]

# a tiny CPU run with far more epochs than the test waits for
TINY_RUN = ["--model", "mobilenet_v3_small", "--stem", "imagenet", "--device", "cpu",
            "--train-samples", "2048", "--test-samples", "64", "--epochs", "50",
            "--batch-size", "16", "--warmup-steps", "1", "--no-progress"]  # fmt: skip


def _running_rows(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(db, timeout=5)
        try:
            (running,) = con.execute(
                "SELECT COUNT(*) FROM runs WHERE status = 'running'"
            ).fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError:  # not created yet, or busy
        return 0
    return int(running)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_run_is_128_plus_n_and_stores_it_failed(tmp_path, signum):
    db = tmp_path / "r.db"
    run = subprocess.Popen(
        [*WATTLAB, "run", *TINY_RUN, "--db", str(db)], cwd=tmp_path, env=ENV, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.time() + 40
        while time.time() < deadline and run.poll() is None and not _running_rows(db):
            time.sleep(0.2)
        assert _running_rows(db) == 1, "the run did not claim its row in time"
        time.sleep(2)  # into the training
        assert run.poll() is None, "the run ended before the signal"
        run.send_signal(signum)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("wattlab:")]
    assert len(lines) == 1, err[-2000:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, error FROM runs").fetchall()
    con.close()
    assert [status for status, _ in rows] == ["failed"], (rows, err[-2000:])
    assert f"signal {int(signum)}" in rows[0][1], rows
