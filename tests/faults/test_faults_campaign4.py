"""Fourth fault campaign (issue #40): each case one promise of docs/errors.md.

A database the user removed is never re-created; a claim whose process is gone is marked
abandoned by the next command that writes (or may write) the database, whatever its sweep,
and a report says 'running' and 'abandoned' as such; every name that becomes part of a file
name is bounded; a full disk and a read-only folder are said as such, before slow work; the
statement's YAML and Markdown hold any byte; `WATTLAB_CACHE_DIR=off` is honoured by every
cache; exit codes as documented; echoed input is cut."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from wattlab.errors import DataError, WorkStopped
from wattlab.experiment.db.record import RunOutcome
from wattlab.experiment.db.store import open_store

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def wattlab(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        [*WATTLAB, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**ENV, **(env or {})},
    )


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _claim(store, *, sweep: str | None, pid: int) -> int:
    from wattlab.experiment.hosts import host_name

    return store.claim_run(
        {
            "sweep": sweep,
            "config_hash": "h",
            "config_json": {},
            "label": "x",
            "hostname": host_name(),
            "pid": pid,
        }  # fmt: skip
    )


def _entry():
    from wattlab.experiment.sweep.driver import PlanEntry, SweepPlan

    entry = PlanEntry(order=1, config=None, repetition=0, label="a", config_hash="h",
                      action="run")  # fmt: skip
    plan = SweepPlan(name="s", entries=[entry], order_seed=None, warmup_runs=0, cooldown_s=0.0)
    return entry, plan


# -- 1. a database the user removed is never re-created ------------------------------------
def test_showing_a_run_whose_database_was_removed_does_not_recreate_it(tmp_path, capsys):
    from wattlab.cli.sweep_view import failed_line, run_with_progress

    folder = tmp_path / "dbdir"
    folder.mkdir()
    db = folder / "s.db"
    open_store(db).close()
    entry, plan = _entry()
    lost = RunOutcome(1, "failed", f"the database {db} was removed (or moved)", stored=False)

    def run(plan, opts, *, on_start, on_finish):
        on_start(entry)
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()  # the user removes the database's folder while the run runs
        on_finish(entry, lost)
        return [(entry, lost)]

    class Opts:
        db_path = str(db)

    outcomes = run_with_progress(plan, Opts(), run=run)  # type: ignore[arg-type]
    assert not folder.exists(), "showing the run re-created the database's folder"
    assert "not stored" in capsys.readouterr().err
    line = failed_line(outcomes, "their errors")
    assert line is not None and "not stored" in line and "failed (stored" not in line


def test_a_sweep_whose_last_run_lost_its_database_stops_in_one_sentence(tmp_path):
    from wattlab.experiment.sweep.driver import drive

    db = tmp_path / "s.db"
    open_store(db).close()
    entry, plan = _entry()

    class Kind:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def prepare(self, todo):
            pass

        def warm_up(self, entry):
            pass

        def run(self, entry, sweep, identity):
            db.unlink()
            return RunOutcome(1, "failed", "removed", stored=False)

    with pytest.raises(WorkStopped, match="vanished during the sweep"):
        drive(plan, Kind(), str(db))
    assert not db.exists()


# -- 2. no claim stays 'running' after its process is gone ---------------------------------
@pytest.mark.parametrize("opener", ["writer", "report"])
def test_a_dead_claim_of_any_sweep_is_abandoned_by_the_next_writer_or_report(tmp_path, opener):
    db = tmp_path / "p.db"
    with open_store(db) as store:
        dead = _claim(store, sweep="probe-1f3a", pid=_dead_pid())  # a killed probe's sweep
        lone = _claim(store, sweep=None, pid=_dead_pid())
        live = _claim(store, sweep="other", pid=os.getpid())
    if opener == "writer":
        open_store(db).close()
    else:  # report and export read through a store that may write
        open_store(db, readonly=True, merge_kept=True).close()
    with open_store(db, readonly=True, merge_kept=False) as store:
        status = dict(zip(store.runs()["id"], store.runs()["status"], strict=True))
    assert status == {dead: "abandoned", lone: "abandoned", live: "running"}


def test_a_dry_reader_changes_no_claim(tmp_path):
    db = tmp_path / "p.db"
    with open_store(db) as store:
        dead = _claim(store, sweep="probe-1f3a", pid=_dead_pid())
    with open_store(db, readonly=True) as store:  # estimate --db, a dry run: writes nothing
        assert store.runs()["status"].tolist() == ["running"]
    assert dead


@pytest.mark.parametrize(
    ("statuses", "said"),
    [
        (["running"], "1 still running"),
        (["abandoned"], "1 abandoned"),
        (["running", "abandoned", "failed"], "1 still running, 1 abandoned"),
    ],
)
def test_a_report_says_running_and_abandoned_runs_as_such(statuses, said):
    from wattlab.analysis.report import _require_ok

    runs = pd.DataFrame({"status": statuses, "error": [None] * len(statuses)})
    with pytest.raises(DataError) as raised:
        _require_ok(runs, "s", [])
    message = str(raised.value)
    assert said in message and "all" not in message.split(":")[1], message


# -- 3. every name that becomes part of a file name is bounded ------------------------------
def test_a_long_sweep_name_makes_a_bounded_lock_and_a_finished_sweep_leaves_no_lock(tmp_path):
    from wattlab.experiment.sweep.lock import SweepLock, check_lock_path, identity_lock_path

    db = tmp_path / ("d" * 200 + ".db")
    open_store(db).close()
    for name in ("a" * 300, "b" * 300, "s"):
        check_lock_path(db, name)
        twin = identity_lock_path(db, name)
        with SweepLock(db, name) as lock:
            assert len(lock.path.name.encode()) <= 255 and lock.path.exists()
            with pytest.raises(Exception, match="already running"):
                SweepLock(db, name).acquire()
        assert not lock.path.exists() and not twin.exists(), "a finished sweep left its lock"
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name]


def test_long_names_that_share_a_start_get_different_locks(tmp_path):
    from wattlab.experiment.sweep.lock import lock_path

    db = tmp_path / "w.db"
    assert lock_path(db, "a" * 299 + "x") != lock_path(db, "a" * 299 + "y")
    assert lock_path(db, "quickstart").name == "w.db.quickstart.sweep-lock"  # short: as before


@pytest.mark.slow  # a command sweep in a subprocess
def test_a_sweep_with_a_300_character_name_runs(tmp_path):
    import json

    name = "n" * 300
    (tmp_path / "s.yaml").write_text(json.dumps(
        {"name": name, "command": ["true", "{x}"], "grid": {"x": [1]}, "repetitions": 1,
         "order": "sequential", "warmup_runs": 0, "cooldown_s": 0}))  # fmt: skip
    done = wattlab("sweep", "s.yaml", "--db", "c.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".sweep-lock")]


def test_an_output_with_a_250_character_name_is_written_whole(tmp_path):
    from wattlab.jsonio import dump_json, staged_folder

    target = tmp_path / ("j" * 245 + ".json")
    dump_json({"a": 1}, target)  # its temporary file beside it is named within bounds
    assert target.read_text().strip().startswith("{")
    out = tmp_path / ("r" * 250)
    with staged_folder(out) as staging:
        (staging / "x.txt").write_text("x")
    assert (out / "x.txt").read_text() == "x"


# -- 4. a full disk is said as such ----------------------------------------------------------
@pytest.fixture
def full_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs holding a small wattlab database, then filled to the last byte."""
    from tests.faults.test_faults_disk import _fill, _mount_tmpfs, _umount

    folder = tmp_path / "full"
    _mount_tmpfs(folder, "1m")
    try:
        open_store(folder / "d.db").close()
        _fill(folder)
        yield folder
    finally:
        _umount(folder)


def test_a_database_on_a_full_disk_is_called_full_not_damaged(full_tmpfs):
    from wattlab.experiment.db.store import check_writable_database

    for attempt in (
        lambda: check_writable_database(full_tmpfs / "d.db"),
        lambda: open_store(full_tmpfs / "d.db").close(),
        lambda: check_writable_database(full_tmpfs / "new.db"),
        lambda: open_store(full_tmpfs / "new.db").close(),
    ):
        with pytest.raises(DataError) as raised:
            attempt()
        assert "the disk is full" in str(raised.value) and "damaged" not in str(raised.value)
    assert not (full_tmpfs / "new.db").exists()


# -- 7. WATTLAB_CACHE_DIR=off is honoured by every cache; no promise of caching it cannot keep -
@pytest.mark.extra("train")  # the data cache's folder is the training package's
@pytest.mark.parametrize("off", ["off", "OFF", "none", "0", ""])
def test_cache_dir_off_turns_every_cache_off(tmp_path, monkeypatch, off):
    from wattlab.estimate import pre_cache
    from wattlab.train.data import default_cache_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WATTLAB_CACHE_DIR", off)
    assert pre_cache.cache_dir() is None and default_cache_dir() is None
    said = []
    model, how = pre_cache.fit_cached(
        b"runs", lambda: pd.DataFrame(), on_fit=lambda n, c: said.append(c)
    )
    assert said == [False] and model is None
    assert list(tmp_path.iterdir()) == [], "the cache wrote into ./off"


def test_a_read_only_cache_folder_is_not_promised_a_cached_fit(tmp_path):
    from tests.faults.test_faults_disk import _mount_tmpfs, _umount
    from wattlab.estimate import pre_cache

    folder = tmp_path / "ro"
    _mount_tmpfs(folder, "1m")
    try:
        done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr!r}")
        said = []
        pre_cache.fit_cached(b"runs", lambda: pd.DataFrame(), directory=folder / "cache",
                             on_fit=lambda n, c: said.append(c))  # fmt: skip
        assert said == [False]
    finally:
        _umount(folder)


# -- 5. advise --probe writes no database: --db without --run is said at once -----------------
@pytest.mark.slow  # the CLI in a subprocess
def test_advise_probe_with_a_database_but_no_run_is_refused_before_any_fit(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    done = wattlab("advise", "--model", "resnet18", "--gpu-name", "H200", "--epochs", "1",
                   "--probe", "5", "--db", str(folder / "p.db"), cwd=tmp_path,
                   env={"WATTLAB_CACHE_DIR": "off"})  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--run" in done.stderr and "damaged" not in done.stderr, done.stderr
    assert "fitting PRE" not in done.stderr, "the fit ran before the arguments were checked"
    assert list(folder.iterdir()) == []  # nothing created


def test_a_new_database_in_a_read_only_folder_is_said_read_only_not_damaged(tmp_path):
    from tests.faults.test_faults_disk import _mount_tmpfs, _umount

    folder = tmp_path / "ro"
    _mount_tmpfs(folder, "1m")
    try:
        done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr!r}")
        with pytest.raises(DataError) as raised:
            open_store(folder / "p.db")
    finally:
        _umount(folder)
    assert "read-only" in str(raised.value) and "damaged" not in str(raised.value)


# -- 6. the statement's YAML and Markdown hold any character ---------------------------------
@pytest.mark.parametrize("odd", ["\x7f", "\x85", "\x9f", "\n", "\u2028", "\ufeff", "*[x]|<b>"])
def test_a_hostile_gpu_or_cpu_name_keeps_the_statement_sound(tmp_path, odd):
    import gzip
    import shutil

    import yaml

    from wattlab.analysis.statement import energy_statement

    root = Path(__file__).resolve().parents[2]
    db = tmp_path / "h.db"
    with gzip.open(root / "docs/measured/h200-reference-2026-12-03-main.db.gz", "rb") as src:
        with db.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    with open_store(db, readonly=True) as store:
        runs = store.runs(sweep="h200-reference-p1-resnet18")
    runs = runs[runs["status"] == "ok"].head(1).copy()
    runs["gpu_name"] = f"NVIDIA{odd}H200"
    runs["driver"] = f"580{odd}1"
    runs["label"] = f"res{odd}net"
    stated = energy_statement(runs, what="a run", command=f"wattlab report `x`{odd}")
    card = yaml.safe_load(stated.model_card)["co2_eq_emissions"]
    assert card["hardware_used"].startswith("1 x NVIDIA")
    assert "\n" not in stated.paragraph and stated.paragraph.isprintable()
    md = stated.markdown()
    block = md.split("```yaml\n", 1)[1].split("\n```", 1)[0]
    assert yaml.safe_load(block)["co2_eq_emissions"]["hardware_used"] == card["hardware_used"]
    if odd == "*[x]|<b>":  # escaped where it lands (wattlab.analysis.markdown_text): no tag
        assert "\\*\\[x\\]\\|\\<b" in stated.paragraph  # (as typed inside a code span)


# -- 8. an output lost after the work ran is exit 1, not 2 ------------------------------------
@pytest.mark.slow  # trains a tiny run in a subprocess
@pytest.mark.extra("train")
def test_a_json_folder_removed_during_a_run_is_exit_1_and_the_run_is_stored(tmp_path):
    import time

    from tests.faults.test_faults_disk import TINY_RUN, _statuses

    jdir = tmp_path / "jdir"
    jdir.mkdir()
    db = tmp_path / "r.db"
    run = subprocess.Popen(
        [*WATTLAB, "run", *TINY_RUN, "--db", str(db), "--json", str(jdir / "row.json")],
        cwd=tmp_path, env=ENV, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.time() + 60
        while time.time() < deadline and run.poll() is None and _statuses(db) != ["running"]:
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before its JSON folder could be removed"
        jdir.rmdir()
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert _statuses(db) == ["ok"], err[-2000:]
    assert run.returncode == 1, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("wattlab:")]
    assert len(lines) == 1 and "stored as ok (run 1)" in lines[0], err[-2000:]
    assert "Traceback" not in err


# -- 9. echoed input is cut ----------------------------------------------------------------
def test_every_error_line_cuts_what_it_echoes():
    from wattlab.cli.app import one_line, optional_values
    from wattlab.errors import ConfigError
    from wattlab.monitor.carbon import region_intensity

    with pytest.raises(ConfigError) as raised:
        region_intensity("x" * 5000)
    assert len(str(raised.value)) < 600
    for message in (f"--foo {'y' * 5000!r} is bad.", f"--foo {'z' * 5000} is bad.",
                    f'--foo "{"w " * 3000}" is bad.'):  # fmt: skip
        line = one_line(message)
        assert len(line) < 400 and line.endswith("is bad."), line
    assert optional_values(["advise", "--probe", "-5"]) == ["advise", "--probe", "-5"]
    assert optional_values(["advise", "--probe", "--db", "x"])[2] == "auto"


def test_a_report_of_a_sweep_in_progress_counts_running_and_abandoned_apart_from_failed():
    from tests.analysis.test_analysis_report import make_runs
    from wattlab.analysis.summary import summarize
    from wattlab.analysis.summary_json import summary_to_json

    runs = make_runs()
    unfinished = runs[runs["status"] != "ok"].index
    runs.loc[unfinished, "status"] = "running"
    runs.loc[unfinished, "error"] = None
    abandoned = runs.loc[unfinished].copy()
    abandoned["id"] = runs["id"].max() + 1
    abandoned["status"] = "abandoned"
    runs = pd.concat([runs, abandoned], ignore_index=True)
    summary = summarize(runs)
    assert summary["n_failed"].sum() == 0
    data = summary_to_json(summary, runs)["runs"]
    assert (data["failed"], data["running"], data["abandoned"]) == (0, 1, 1)
    assert data["failures"] == []


@pytest.mark.slow  # the CLI in a subprocess
def test_a_command_sweep_checks_its_lock_before_it_creates_the_database(tmp_path):
    import json

    (tmp_path / "s.yaml").write_text(json.dumps(
        {"name": "s", "command": ["true", "{x}"], "grid": {"x": [1]}, "repetitions": 1,
         "order": "sequential", "warmup_runs": 0, "cooldown_s": 0}))  # fmt: skip
    (tmp_path / "c.db.s.sweep-lock").symlink_to(tmp_path / "victim")
    done = wattlab("sweep", "s.yaml", "--db", "c.db", cwd=tmp_path)
    assert done.returncode == 2 and "symbolic link" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "c.db").exists() and not (tmp_path / "victim").exists()


def test_the_advise_api_with_a_probe_and_a_database_but_no_run_is_refused(tmp_path):
    from wattlab.estimate.advise.api import advise

    with pytest.raises(DataError, match="give both db and run"):  # no fit (seconds) before this
        advise(model="resnet18", gpu_name="H200", epochs=1, probe_s=5,
               db=tmp_path / "missing" / "p.db")  # fmt: skip
