"""Second fault campaign, disks and mounts (issue #25 item 7): a full disk is one sentence and
no partial file (exit 2, or 1 once the work ran); a read-only database is opened read-only by
every reader; a database that vanishes mid-sweep stops the sweep in one sentence; a disk that
fills under a running `wattlab run` is exit 1, one sentence and a sound database."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattlab.errors import DataError, WorkStopped
from wattlab.experiment.db.export import export_tables
from wattlab.experiment.db.store import open_store
from wattlab.jsonio import dump_json

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def wattlab(*args: str, cwd: Path, stdout=subprocess.PIPE, timeout: float = 300):
    env = ENV
    return subprocess.run(
        [*WATTLAB, *args],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        env=env,
    )


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


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, filled up: a file can still be created there, but not written."""
    folder = tmp_path / "full"
    _mount_tmpfs(folder, "1m")
    try:
        _fill(folder)
        yield folder
    finally:
        _umount(folder)


def _db_with_runs(path: Path, n: int = 3) -> Path:
    with open_store(path) as store:
        for i in range(n):
            row = {"sweep": None, "config_hash": "h", "repetition": i, "config_json": {},
                   "label": "x", "status": "ok", "energy_total_j": 10.0 + i,
                   "duration_s": 1.0 + i}  # fmt: skip
            store.insert_run(row, [{"name": "budget", "duration_s": 1.0}], [(0.1, "cpu", 1.0)])
    return path


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "filler")


# -- full disk -------------------------------------------------------------------------------
def test_export_to_a_full_disk_is_one_sentence_and_leaves_nothing(tmp_path, full_disk):
    db = _db_with_runs(tmp_path / "e.db")
    done = wattlab("export", "--db", str(db), "--out", str(full_disk / "out"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert _left(full_disk) == []  # the folder it created is gone again, no temporary file


def test_export_into_an_existing_folder_on_a_full_disk_keeps_no_half_file(tmp_path, full_disk):
    db = _db_with_runs(tmp_path / "e2.db")
    out = full_disk / "out"
    out.mkdir()
    with open_store(db, readonly=True) as store, pytest.raises(DataError, match="No space"):
        export_tables(store, out)
    assert list(out.iterdir()) == []


def test_monitor_json_to_a_full_disk_is_one_sentence_exit_1_and_no_file(tmp_path, full_disk):
    target = full_disk / "m.json"
    done = wattlab("monitor", "--json", str(target), "--", sys.executable, "-c", "pass",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr  # the command ran: not bad input
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("wattlab:")]
    assert lines == [lines[0]] and "No space left on device" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert _left(full_disk) == []


def test_monitor_json_to_a_full_stdout_is_one_sentence(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        done = wattlab("monitor", "--json", "-", "--", sys.executable, "-c", "pass",
                       cwd=tmp_path, stdout=full)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "wattlab: error: cannot write the JSON to standard output: No space left on device."
    ]


def test_json_on_a_full_disk_raises_one_sentence_and_keeps_the_old_file(full_disk):
    target = full_disk / "s.json"
    target.touch()  # an earlier file (empty: a full disk still takes a new name)
    with pytest.raises(DataError, match=r"cannot write .*s\.json: No space left on device"):
        dump_json({"x": "y" * 100_000}, target)
    assert target.read_text() == ""
    assert _left(full_disk) == ["s.json"]


@pytest.mark.slow
def test_report_to_a_full_disk_is_one_sentence_and_leaves_nothing(tmp_path, full_disk):
    db = _db_with_runs(tmp_path / "r.db")
    done = wattlab("report", "--db", str(db), "--out", str(full_disk / "rep"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    assert _left(full_disk) == []


def test_a_database_on_a_full_disk_says_the_disk_is_full(full_disk):
    db = full_disk / "d.db"
    (full_disk / "filler").unlink()
    store = open_store(db)
    with (full_disk / "filler").open(
        "wb", buffering=0
    ) as filler:  # fill it again around the database
        try:
            while True:
                filler.write(b"x" * 4096)

        except OSError:
            pass
    try:
        row = {"sweep": None, "config_hash": "h", "repetition": 0, "config_json": {},
               "label": "x", "status": "ok"}  # fmt: skip
        with pytest.raises(DataError, match="the disk is full"):
            store.insert_run(row, [], [(i * 0.1, "cpu", 1.0) for i in range(100_000)])
    finally:
        store.close()


# -- read-only databases ---------------------------------------------------------------------
@pytest.fixture
def read_only_db(tmp_path: Path) -> Iterator[Path]:
    """A healthy WAL database (3 runs) on a tmpfs remounted read-only."""
    folder = tmp_path / "ro"
    _mount_tmpfs(folder, "8m")
    try:
        db = _db_with_runs(folder / "w.db")
        check = sqlite3.connect(db)
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        check.close()
        done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr!r}")
        assert not os.access(folder, os.W_OK) or os.statvfs(folder).f_flag & os.ST_RDONLY
        yield db
    finally:
        _umount(folder)


def test_readers_open_a_read_only_database_read_only(read_only_db):
    with open_store(read_only_db, readonly=True) as store:
        assert len(store.runs()) == 3 and len(store.trace()) == 3
    assert sorted(p.name for p in read_only_db.parent.iterdir()) == ["w.db"]


def test_export_of_a_read_only_database_works(tmp_path, read_only_db):
    done = wattlab("export", "--db", str(read_only_db), "--out", str(tmp_path / "o"),
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "runs.csv").read_text().count("\n") == 4


@pytest.mark.slow
def test_report_and_estimate_of_a_read_only_database_work(tmp_path, read_only_db):
    done = wattlab("report", "--db", str(read_only_db), "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "damaged" not in done.stderr
    done = wattlab("estimate", "--db", str(read_only_db), "--model", "resnet18", "--epochs",
                   "1", "--gpu-name", "H200", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "damaged" not in done.stderr and "PRE" in done.stdout


def test_a_read_only_wal_database_with_its_log_is_read_whole(tmp_path):
    folder = tmp_path / "rowal"
    _mount_tmpfs(folder, "8m")
    try:
        db = _db_with_runs(folder / "w.db", 1)
        keep = sqlite3.connect(db)  # a writer that has not checkpointed: rows in the -wal
        keep.execute("PRAGMA wal_autocheckpoint = 0")
        keep.execute(
            "INSERT INTO runs (config_hash, config_json, label, status) "
            "VALUES ('h2', '{}', 'y', 'ok')"
        )
        keep.commit()
        saved = {s: (folder / f"w.db{s}").read_bytes() for s in ("", "-wal", "-shm")}
        keep.close()  # checkpoints and removes the log: put the uncheckpointed state back
        for suffix, data in saved.items():
            (folder / f"w.db{suffix}").write_bytes(data)
        done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr!r}")
        with open_store(db, readonly=True) as store:
            assert sorted(store.runs()["config_hash"]) == ["h", "h2"]
    finally:
        _umount(folder)


# -- a database that vanishes mid-sweep ------------------------------------------------------
@pytest.mark.extra("train")
def test_a_database_removed_mid_sweep_stops_the_sweep_and_is_not_recreated(tmp_path):
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.specs.trainer import SweepSpec
    from wattlab.experiment.sweep.plan import MachineFacts, make_plan, run_plan

    folder = tmp_path / "dbdir"
    folder.mkdir()
    db = folder / "s.db"
    spec = SweepSpec.from_dict(
        {
            "name": "v",
            "base": {"model": "resnet18", "epochs": 1, "device": "cpu"},
            "grid": {"batch_size": [8, 16, 32]},
        }
    )
    machine = MachineFacts(cuda_gpus=0, can_set_power_limits=False)
    with open_store(db) as store:
        plan = make_plan(spec, store, machine)
    launched = []

    def launch(cfg, opts):
        launched.append(cfg.batch_size)
        for path in folder.iterdir():  # the folder is emptied while the first run runs
            path.unlink()

    with pytest.raises(WorkStopped, match="vanished during the sweep"):
        run_plan(plan, WorkerOptions(db_path=str(db), progress=False), launch=launch)
    assert len(launched) == 1
    assert not db.exists()


def test_a_sweep_run_never_creates_its_database(tmp_path):
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.runs.worker import execute
    from wattlab.train.config import make_run_config

    db = tmp_path / "gone.db"
    cfg = make_run_config(model="mobilenet_v3_small", device="cpu", epochs=1)
    outcome = execute(cfg, WorkerOptions(db_path=str(db), sweep="v", progress=False))
    assert outcome.status == "failed" and not outcome.stored
    assert "no wattlab database" in (outcome.error or "")
    assert not db.exists()


# --- the disk fills under a running `wattlab run` ----------------------------------------------
# a tiny CPU run: 8 steps, a few seconds of training
TINY_RUN = ["--model", "mobilenet_v3_small", "--stem", "imagenet", "--device", "cpu",
            "--train-samples", "128", "--test-samples", "64", "--epochs", "1",
            "--batch-size", "16", "--warmup-steps", "1", "--epoch-eval-samples", "0",
            "--no-progress"]  # fmt: skip


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
