"""Second fault campaign, the store (issue #25 items 4, 9): a finished run is never lost to a
lock, a claim whose process is gone (a reused pid included) never stays 'running', concurrent
writers all succeed, and one database under two names is one sweep lock."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.db import store as store_module
from wattlab.experiment.db.pending import pending_files, store_finished
from wattlab.experiment.db.store import open_store
from wattlab.experiment.runs.runner import abandon_dead_lone_runs
from wattlab.experiment.sweep.lock import SweepLock
from wattlab.processes import process_started_unix


def claim(**overrides):
    row = {
        "sweep": None,
        "config_hash": "h",
        "repetition": 0,
        "config_json": {"model": "resnet18"},
        "label": "resnet18",
        "hostname": "here",
        "pid": 4242,
    }
    row.update(overrides)
    return row


def hold_exclusive(db: Path) -> sqlite3.Connection:
    """Another process's view of the database: a connection holding BEGIN EXCLUSIVE."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


def test_a_finished_run_outlasting_a_lock_is_kept_and_merged_exactly_once(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    db = tmp_path / "l.db"
    store = open_store(db)
    run_id = store.claim_run(claim())
    locker = hold_exclusive(db)
    try:
        finished = {**claim(), "status": "ok", "energy_total_j": 7.5}
        windows = [{"name": "budget", "duration_s": 1.5, "energy_total_j": 7.5}]
        trace = [(0.1, "cpu", 5.0), (0.2, "cpu", 5.5)]
        assert store_finished(store, run_id, finished, windows, trace) == run_id
    finally:
        locker.rollback()
        locker.close()
        store.close()
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "stayed locked" in said[0] and "merges it" in said[0]
    kept = pending_files(db)
    assert len(kept) == 1 and kept[0].parent == db.parent
    # the next command that opens the database for writing merges it, once, in one line
    with open_store(db) as store:
        runs = store.runs()
        assert runs["status"].tolist() == ["ok"] and runs["energy_total_j"].tolist() == [7.5]
        assert store.windows([run_id])["name"].tolist() == ["budget"]
        assert store.trace([run_id])["power_w"].tolist() == [5.0, 5.5]
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and f"merged run {run_id}" in said[0]
    assert pending_files(db) == []
    with open_store(db) as store:
        assert len(store.trace()) == 2
    assert capsys.readouterr().err == ""


def test_a_kept_run_is_merged_once_even_if_its_file_comes_back(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    db = tmp_path / "twice.db"
    store = open_store(db)
    run_id = store.claim_run(claim())
    locker = hold_exclusive(db)
    try:
        store_finished(store, run_id, {**claim(), "status": "ok"}, [], [(0.1, "cpu", 1.0)])
    finally:
        locker.rollback()
        locker.close()
        store.close()
    (kept,) = pending_files(db)
    copy = kept.read_bytes()
    open_store(db).close()  # merges
    kept.write_bytes(copy)  # a crash between the commit and the unlink
    with open_store(db) as store:
        assert len(store.runs()) == 1 and len(store.trace()) == 1
    assert "already in" in capsys.readouterr().err
    assert pending_files(db) == []


def test_report_and_export_merge_kept_runs_first_other_readers_do_not(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    db = tmp_path / "r.db"
    store = open_store(db)
    locker = hold_exclusive(db)
    try:
        assert store_finished(store, None, {**claim(), "status": "ok"}) is None
    finally:
        locker.rollback()
        locker.close()
        store.close()
    with open_store(db, readonly=True) as reader:  # a dry run, estimate: only says so
        assert reader.runs().empty
    assert pending_files(db) != []
    with open_store(db, readonly=True, merge_kept=True) as reader:  # report / export
        assert reader.runs()["status"].tolist() == ["ok"]
    assert pending_files(db) == []


def test_a_claim_whose_pid_was_reused_by_another_program_is_abandoned(tmp_path):
    import socket

    db = tmp_path / "pid.db"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_started_unix(other.pid)
        assert started is not None
        host = socket.gethostname()
        with open_store(db) as store:
            reused = store.claim_run(  # the claimer started long before the pid's owner
                claim(hostname=host, pid=other.pid, pid_started_unix=started - 3600)
            )
            alive = store.claim_run(claim(hostname=host, pid=other.pid, pid_started_unix=started))
            old = store.claim_run(claim(hostname=host, pid=other.pid))  # before schema v6
        assert abandon_dead_lone_runs(db) == [reused]
        other.kill()
        other.wait()
        assert sorted(abandon_dead_lone_runs(db)) == [alive, old]
        with open_store(db) as store:
            assert set(store.runs()["status"]) == {"abandoned"}
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_a_claim_records_its_process_start_time(tmp_path):
    from wattlab.experiment.db.record import claim_columns

    columns = claim_columns().columns()
    assert columns["pid"] == os.getpid()
    assert columns["pid_started_unix"] == pytest.approx(process_started_unix(os.getpid()))


WRITER = textwrap.dedent(
    """
    import sys
    from wattlab.experiment.db.store import open_store
    db, k = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(15):
        with open_store(db) as store:
            row = {"sweep": None, "config_hash": f"h{k}", "repetition": i,
                   "config_json": {}, "label": "x", "hostname": "h", "pid": 1}
            run_id = store.claim_run(row)
            store.finish_run(run_id, {"status": "ok"}, [{"name": "budget", "duration_s": 1.0}],
                             [(j * 0.1, "cpu", 1.0) for j in range(300)])
            store.insert_run({**row, "status": "failed", "error": "x"})
    """
)


def test_four_processes_storing_at_once_all_succeed(tmp_path):
    db = tmp_path / "many.db"  # created by the writers themselves, at the same moment
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(k)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for k in range(4)
    ]
    for writer in writers:
        assert writer.stdout.readline().strip() == "ready"
    for writer in writers:  # all start together
        writer.stdin.write("go\n")
        writer.stdin.flush()
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
        assert "Traceback" not in err
    with open_store(db, readonly=True) as store:
        runs = store.runs()
        assert len(runs) == 4 * 15 * 2
        assert (runs["status"] == "ok").sum() == 60
        assert len(store.trace()) == 60 * 300


def test_a_symlinked_path_to_the_same_database_is_the_same_sweep_lock(tmp_path):
    db = tmp_path / "real.db"
    open_store(db).close()
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "alias.db").symlink_to(db)
    with SweepLock(db, "s"), pytest.raises(ConfigError, match="already running"):
        SweepLock(other / "alias.db", "s").acquire()


def test_a_hard_linked_path_to_the_same_database_is_the_same_sweep_lock(tmp_path):
    db = tmp_path / "real.db"
    open_store(db).close()
    other = tmp_path / "elsewhere"
    other.mkdir()
    os.link(db, other / "hard.db")
    with SweepLock(db, "s"), pytest.raises(ConfigError, match="the same database file"):
        SweepLock(other / "hard.db", "s").acquire()
    # another sweep name, or another database, is free
    with SweepLock(db, "s"), SweepLock(other / "hard.db", "t"):
        pass
    fresh = tmp_path / "fresh.db"
    open_store(fresh).close()
    with SweepLock(db, "s"), SweepLock(fresh, "s"):
        pass


def test_a_damaged_kept_run_is_named_and_does_not_block_the_database(tmp_path, capsys):
    db = tmp_path / "d.db"
    open_store(db).close()
    bad = db.with_name(db.name + ".pending-7-abcd.json")
    bad.write_text('{"format": "wattlab-pending-run-1", "run_id": 7, "run": {"nope": 1}, '
                   '"windows": [], "trace": []}')  # fmt: skip
    with open_store(db) as store:  # the command goes on
        assert len(store.runs()) == 0
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "not merged yet" in said[0] and "move it away" in said[0]
    assert bad.exists()  # kept: nothing is thrown away


@pytest.mark.slow
def test_a_trained_run_outlasting_a_held_lock_is_not_lost(tmp_path, monkeypatch, capsys):
    """The issue's case: another process holds BEGIN EXCLUSIVE while a run trains; the run
    finishes, waits the (here shortened) busy timeout, keeps its result beside the database,
    and the next command merges it: nothing is lost, no claim stays 'running'."""
    import wattlab.train.loop as loop
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.runs.worker import execute
    from wattlab.train.config import make_run_config

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.5)
    db = tmp_path / "busy.db"
    held: list[sqlite3.Connection] = []
    train = loop.run_training

    def train_then_lock(*args, **kwargs):
        result = train(*args, **kwargs)
        held.append(hold_exclusive(db))  # the other process takes the database now
        return result

    monkeypatch.setattr(loop, "run_training", train_then_lock)
    cfg = make_run_config(model="mobilenet_v3_small", stem="imagenet", device="cpu",
                          train_samples=128, test_samples=64, epochs=1, batch_size=64,
                          warmup_steps=1)  # fmt: skip
    try:
        outcome = execute(cfg, WorkerOptions(db_path=str(db), progress=False))
    finally:
        for conn in held:
            conn.rollback()
            conn.close()
    assert outcome.status == "ok" and outcome.run_id is not None
    assert "stayed locked" in capsys.readouterr().err
    assert len(pending_files(db)) == 1
    with open_store(db) as store:  # the next command
        runs = store.runs()
        assert runs["status"].tolist() == ["ok"] and runs["id"].tolist() == [outcome.run_id]
        assert "budget" in set(store.windows([outcome.run_id])["name"])
    assert pending_files(db) == []


# -- a database removed or replaced while it is open (issue 33) ----------------------------------


def _swap(db: Path, how: str) -> None:
    """Take the database away: removed, or replaced by another (new, empty) wattlab database."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if how == "replaced":
        other = db.with_name("other.db")
        open_store(other).close()
        os.replace(other, db)


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_store_never_writes_into_a_database_that_was_removed_or_replaced(tmp_path, how):
    from wattlab.errors import WorkStopped

    db = tmp_path / "s.db"
    store = open_store(db)
    try:
        run_id = store.claim_run(claim())
        _swap(db, how)
        with pytest.raises(WorkStopped) as stopped:
            store_finished(store, run_id, {**claim(), "status": "ok", "energy_total_j": 1.0})
        message = str(stopped.value)
        assert str(db) in message and how in message and "\n" not in message, message
        with pytest.raises(WorkStopped):
            store.claim_run(claim(config_hash="h2"))
    finally:
        store.close()
    if how == "replaced":
        with open_store(db) as again:
            assert again.runs().empty  # nothing landed in the new file
    else:
        assert not db.exists()  # nothing re-created it


def _command_plan(tmp_path: Path, db: Path, command: list[str], n: int = 3):
    from wattlab.experiment.specs.command import CommandSweepSpec
    from wattlab.experiment.sweep.command_plan import make_command_plan

    spec = CommandSweepSpec.from_dict({
        "name": "c", "command": [*command, "{i}"], "grid": {"i": list(range(n))},
        "repetitions": 1, "order": "sequential", "warmup_runs": 0, "cooldown_s": 0,
    })  # fmt: skip
    with open_store(db) as store:
        return make_command_plan(spec, store)


@pytest.mark.parametrize("how", ["removed", "replaced"])
@pytest.mark.parametrize("when", ["between-runs", "during-a-run"])
def test_a_command_sweep_stops_when_its_database_is_removed_or_replaced(tmp_path, how, when):
    from wattlab.errors import WorkStopped
    from wattlab.experiment.sweep.command_plan import CommandOptions, run_command_plan

    db = tmp_path / "s.db"
    swapper = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from tests.faults.test_faults_store import _swap
        if sys.argv[1] == "1":
            _swap(Path({str(db)!r}), {how!r})
    """)  # fmt: skip
    (tmp_path / "swap.py").write_text(swapper)
    command = [sys.executable, str(tmp_path / "swap.py")] if when == "during-a-run" else ["true"]
    plan = _command_plan(tmp_path, db, command)
    finished = []

    def on_finish(entry, outcome):
        finished.append(outcome)
        if when == "between-runs" and len(finished) == 1:
            _swap(db, how)

    with pytest.raises(WorkStopped) as stopped:
        run_command_plan(plan, CommandOptions(str(db), cpu_tdp_w=65.0), on_finish=on_finish)
    message = str(stopped.value)
    assert str(db) in message and "\n" not in message, message
    if how == "replaced":
        with open_store(db) as again:
            assert again.runs().empty, "a run of the sweep landed in the new database"
    else:
        assert not db.exists(), "the sweep re-created its database"


@pytest.mark.slow  # trains
def test_a_sweep_stops_when_its_database_is_replaced_between_runs(tmp_path):
    from wattlab.errors import WorkStopped
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.specs.trainer import SweepSpec
    from wattlab.experiment.sweep.plan import MachineFacts, make_plan, run_plan

    db = tmp_path / "s.db"
    spec = SweepSpec.from_dict({
        "name": "v", "warmup_runs": 0, "cooldown_s": 0, "order": "sequential",
        "base": {"model": "mobilenet_v3_small", "stem": "imagenet", "epochs": 1,
                 "device": "cpu", "train_samples": 64, "test_samples": 32,
                 "warmup_steps": 0},
        "grid": {"batch_size": [16, 32]},
    })  # fmt: skip
    with open_store(db) as store:
        plan = make_plan(spec, store, MachineFacts(cuda_gpus=0, can_set_power_limits=False))
    started = []

    def on_start(entry):
        started.append(entry)
        if len(started) == 2:
            _swap(db, "replaced")

    opts = WorkerOptions(db_path=str(db), progress=False, cpu_tdp_w=65.0)
    with pytest.raises(WorkStopped) as stopped:
        run_plan(plan, opts, on_start=on_start, warm=False)
    assert str(db) in str(stopped.value)
    with open_store(db) as again:
        assert again.runs().empty, "a run of the sweep landed in the new database"


# -- an ok run without a finite energy (issue 33; the report's wording is issue 28's) ------------


def _db_with_energy(db: Path, value: float | None, *, others: bool = True) -> None:
    from tests.experiment.test_store import WINDOWS, make_run

    with open_store(db) as store:
        for rep in range(3 if others else 1):
            store.insert_run(make_run(config_hash="c", repetition=rep,
                                      energy_total_j=1000.0 + rep), WINDOWS)  # fmt: skip
    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET energy_total_j = ? WHERE id = 1", (value,))
    con.commit()
    con.close()


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), None],
                         ids=["nan", "inf", "-inf", "null"])  # fmt: skip
@pytest.mark.parametrize("output", [["--json", "-"], ["--out", "rep"]], ids=["json", "out"])
def test_report_names_an_ok_run_without_a_finite_energy(tmp_path, value, output):
    _db_with_energy(tmp_path / "e.db", value)
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "report", "--db", "e.db", *output],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    notes = [line for line in done.stderr.splitlines() if "run 1" in line]
    assert len(notes) == 1 and "energy" in notes[0], done.stderr


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize("value", [float("inf"), None], ids=["inf", "null"])
def test_report_of_only_runs_without_energy_is_one_sentence(tmp_path, value):
    _db_with_energy(tmp_path / "e.db", value, others=False)
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "report", "--db", "e.db", "--out", "rep"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("wattlab: error:")]
    assert len(errors) == 1, done.stderr
    assert not (tmp_path / "rep").exists()
