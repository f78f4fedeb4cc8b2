"""Second fault campaign, a full disk under a running `wattlab run` (issue #25 item 7): the
database's disk fills up after training started; the run ends with exit 1 and one sentence
naming the full disk, never a traceback, and the database stays a sound SQLite file without a
half-written run."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WATTLAB = [sys.executable, "-m", "wattlab.cli"]

# a tiny CPU run: 8 steps, a few seconds of training
TINY_RUN = ["--model", "mobilenet_v3_small", "--stem", "imagenet", "--device", "cpu",
            "--train-samples", "128", "--test-samples", "64", "--epochs", "1",
            "--batch-size", "16", "--warmup-steps", "1", "--epoch-eval-samples", "0",
            "--no-progress"]  # fmt: skip


def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")


def _umount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(folder: Path) -> None:
    """Write a filler file until the tmpfs has no byte left."""
    with (folder / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"x" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
        try:  # the last partial page too
            while True:
                filler.write(b"x")
        except OSError as error:
            assert error.errno == errno.ENOSPC


def _statuses(db: Path) -> list[str]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return [status for (status,) in con.execute("SELECT status FROM runs")]
        finally:
            con.close()
    except sqlite3.OperationalError:  # not created yet, or busy
        return []


@pytest.mark.slow
def test_a_full_disk_under_a_running_run_is_exit_1_one_sentence_and_a_sound_db(tmp_path):
    folder = tmp_path / "small"
    _mount_tmpfs(folder, "2m")
    try:
        db = folder / "r.db"
        run = subprocess.Popen(
            [*WATTLAB, "run", *TINY_RUN, "--db", str(db)], cwd=tmp_path, env=ENV, text=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.time() + 40
            while time.time() < deadline and run.poll() is None and _statuses(db) != ["running"]:
                time.sleep(0.1)
            assert _statuses(db) == ["running"], "the run did not claim its row in time"
            assert run.poll() is None, "the run ended before the disk filled"
            _fill(folder)
            _, err = run.communicate(timeout=50)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 1, err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        lines = [line for line in err.splitlines() if line.startswith("wattlab:")]
        assert len(lines) == 1, err[-2000:]
        assert "disk is full" in lines[0] or "No space left" in lines[0], lines[0]
        left = {p.name for p in folder.iterdir()} - {"filler", "r.db", "r.db-wal", "r.db-shm"}
        assert not left, f"partial files left on the full disk: {sorted(left)}"
        (folder / "filler").unlink()  # room for SQLite to open and check the file
        con = sqlite3.connect(db)
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            rows = con.execute("SELECT id, status FROM runs").fetchall()
            windows = {
                run_id: n
                for run_id, n in con.execute("SELECT run_id, COUNT(*) FROM windows GROUP BY 1")
            }
        finally:
            con.close()
        assert len(rows) <= 1, rows
        for run_id, status in rows:  # never 'ok' with its windows missing
            assert status in ("running", "failed"), rows
            assert status == "failed" or run_id not in windows, (rows, windows)
    finally:
        _umount(folder)
