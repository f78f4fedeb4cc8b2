"""The SQLite results store: creation, rejection of foreign files, atomic inserts, resume."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import wattlab
from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db import store as store_mod
from wattlab.experiment.db.errors import AlreadyStoredError
from wattlab.experiment.db.store import Store, open_store
from wattlab.meters.base import Provenance

REPO = Path(wattlab.__file__).resolve().parents[1]


def make_run(**extra: object) -> dict:
    run = {
        "sweep": "s1",
        "status": "ok",
        "config_hash": "abc123",
        "repetition": 0,
        "config_json": {"model": "resnet18", "batch_size": 64},
        "label": "resnet18 1xCPU fp32 bs64",
        "duration_s": 12.5,
        "energy_total_j": 1500.0,
        "provenance": "measured",
    }
    run.update(extra)
    return run


WINDOWS = [
    {"name": "warmup", "duration_s": 1.0, "energy_total_j": 50.0},
    {"name": "epoch", "epoch": 1, "start_s": 1.0, "duration_s": 5.0, "energy_total_j": 600.0},
    {"name": "budget", "start_s": 1.0, "duration_s": 10.0, "energy_total_j": 1200.0},
]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with open_store(tmp_path / "results.db") as s:
        yield s


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchone()[0]


# -- opening ---------------------------------------------------------------------------------


def test_new_database_gets_schema_meta_wal_and_guard(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "new.db"
    open_store(db).close()
    conn = sqlite3.connect(db)
    assert dict(conn.execute("SELECT key, value FROM meta")) == {
        "app": "wattlab",
        "schema_version": "10",
    }
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"runs", "windows", "trace", "sweeps", "runs_ok_unique"} <= names
    conn.close()
    # Reopening an existing database works and keeps its rows.
    with open_store(db, create=False) as s:
        s.insert_run(make_run())
    with open_store(db) as s:
        assert len(s.runs()) == 1


def test_foreign_keys_are_on(store: Store) -> None:
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_missing_file_without_create_is_a_data_error(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    with pytest.raises(DataError, match="absent.db"):
        open_store(db, create=False)
    assert not db.exists()


def test_text_file_is_rejected(tmp_path: Path) -> None:
    db = tmp_path / "notes.txt"
    db.write_text("hello, these are my notes\n" * 20)
    with pytest.raises(DataError, match=r"notes\.txt is not a wattlab database"):
        open_store(db)
    assert db.read_text().startswith("hello")  # untouched


def test_foreign_sqlite_database_is_rejected_and_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
        conn.execute("INSERT INTO people VALUES ('ada')")
    conn.close()
    with pytest.raises(DataError, match=r"other\.db is not a wattlab database"):
        open_store(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master")} == {"people"}
    conn.close()


def test_foreign_meta_table_is_rejected(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('app', 'something-else')")
    conn.close()
    with pytest.raises(DataError, match="not a wattlab database"):
        open_store(db)


def test_empty_sqlite_file_without_create_is_rejected(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    with pytest.raises(DataError, match="not a wattlab database"):
        open_store(db, create=False)


def test_newer_schema_version_names_the_supported_one(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    open_store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '11' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(DataError, match="version 11.*supports version 10"):
        open_store(db)


def test_folder_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="folder"):
        open_store(tmp_path)


def test_guard_index_is_added_to_an_existing_database(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    open_store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX runs_ok_unique")
    conn.close()
    with open_store(db) as s:
        s.insert_run(make_run())
        with pytest.raises(AlreadyStoredError):
            s.insert_run(make_run())


# -- inserting and reading -------------------------------------------------------------------


def test_insert_and_read_back(store: Store) -> None:
    trace = [(0.0, "gpu:0", 250.0), (0.1, "gpu:0", 260.5), (0.1, "cpu:package-0", 40.0)]
    components = {"gpu:0": {"energy_j": 1400.0, "provenance": "measured"}}
    run_id = store.insert_run(make_run(components_json=components), WINDOWS, trace)

    runs = store.runs()
    assert list(runs.columns) == list(store.columns("runs"))
    assert list(runs.columns)[:3] == ["id", "sweep", "status"]
    row = runs.iloc[0]
    assert row["id"] == run_id
    assert row["energy_total_j"] == 1500.0
    assert row["label"] == "resnet18 1xCPU fp32 bs64"
    assert json.loads(row["config_json"]) == {"model": "resnet18", "batch_size": 64}
    assert json.loads(row["components_json"]) == components

    windows = store.windows([run_id])
    # and each window's measured share, computed (issue 48)
    assert list(windows.columns) == [*store.columns("windows"), "energy_measured_share"]
    assert list(windows["name"]) == ["warmup", "epoch", "budget"]
    assert list(windows["run_id"]) == [run_id] * 3
    assert windows["energy_total_j"].tolist() == [50.0, 600.0, 1200.0]
    assert windows["short_window"].tolist() == [0, 0, 0]  # the schema's default

    got = store.trace([run_id])
    assert list(got.columns) == ["run_id", "t_s", "component", "power_w"]
    assert list(got[["t_s", "component", "power_w"]].itertuples(index=False, name=None)) == trace


def test_numpy_and_enum_values_are_stored_plainly(store: Store) -> None:
    run_id = store.insert_run(
        make_run(samples=np.int64(5000), duration_s=np.float32(2.5), provenance=Provenance.SAMPLED),
        trace=[(np.float64(0.5), "gpu:0", np.float32(100.0))],
    )
    row = store.runs().iloc[0]
    assert row["samples"] == 5000
    assert row["duration_s"] == 2.5
    assert row["provenance"] == "sampled"
    assert store.trace([run_id])["power_w"].tolist() == [100.0]


def test_filters(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [
        store.insert_run(make_run(sweep="a", repetition=0), WINDOWS[:1]),
        store.insert_run(make_run(sweep="a", repetition=1, status="failed", error="boom")),
        store.insert_run(make_run(sweep="b"), WINDOWS[:2], [(0.0, "gpu:0", 1.0)]),
        store.insert_run(make_run(sweep=None), WINDOWS),
    ]
    assert store.runs(sweep="a")["id"].tolist() == ids[:2]
    assert store.runs(sweep="a", status="ok")["id"].tolist() == ids[:1]
    assert store.runs(status="failed")["error"].tolist() == ["boom"]
    assert len(store.runs()) == 4
    assert len(store.windows()) == 1 + 2 + 3
    assert store.windows([]).empty
    assert list(store.windows([]).columns) == [*store.columns("windows"), "energy_measured_share"]
    monkeypatch.setattr(store_mod, "_CHUNK", 1)  # several IN (...) queries, concatenated
    assert (
        store.windows([ids[3], ids[0], ids[2]])["run_id"].tolist()
        == [ids[0]] + [ids[2]] * 2 + [ids[3]] * 3
    )
    assert store.trace([ids[2], ids[3]])["run_id"].tolist() == [ids[2]]


def test_unknown_columns_are_a_programming_error(store: Store) -> None:
    with pytest.raises(ValueError, match="energy_totl_j"):
        store.insert_run(make_run(energy_totl_j=1.0))
    with pytest.raises(ValueError, match="wat"):
        store.insert_run(make_run(), [{"name": "epoch", "duration_s": 1.0, "wat": 2}])
    with pytest.raises(ValueError, match="status"):
        store.insert_run(make_run(status="done"))
    assert store.runs().empty


def test_a_failing_window_leaves_no_run_row(store: Store) -> None:
    bad_windows = [*WINDOWS, {"name": "epoch", "duration_s": None}]  # NOT NULL violated
    with pytest.raises(sqlite3.IntegrityError):
        store.insert_run(make_run(), bad_windows, [(0.0, "gpu:0", 1.0)])
    assert store.runs().empty
    assert store.windows().empty
    assert store.trace().empty
    # The connection is usable afterwards.
    store.insert_run(make_run(), WINDOWS)
    assert len(store.runs()) == 1


def test_a_failing_trace_leaves_no_run_row(store: Store) -> None:
    def trace():
        yield (0.0, "gpu:0", 100.0)
        raise RuntimeError("sampler died")

    with pytest.raises(RuntimeError, match="sampler died"):
        store.insert_run(make_run(), WINDOWS, trace())
    assert store.runs().empty and store.windows().empty and store.trace().empty


def test_duplicate_ok_is_refused_but_failed_reruns_are_kept(store: Store) -> None:
    store.insert_run(make_run(status="failed", error="oom"))
    store.insert_run(make_run(status="failed", error="oom again"))
    first = store.insert_run(make_run(), WINDOWS)
    with pytest.raises(AlreadyStoredError, match="abc123"):
        store.insert_run(make_run(), WINDOWS)
    assert isinstance(AlreadyStoredError("x"), DataError)
    assert store.runs(status="ok")["id"].tolist() == [first]
    assert len(store.windows()) == len(WINDOWS)  # the refused run's windows rolled back
    # The same config in another sweep, another repetition, or a lone run is fine.
    store.insert_run(make_run(sweep="other"))
    store.insert_run(make_run(repetition=1))
    store.insert_run(make_run(sweep=None))
    store.insert_run(make_run(sweep=None))
    assert len(store.runs(status="ok")) == 5


def test_completed_keys_count_ok_runs_of_one_sweep(store: Store) -> None:
    store.insert_run(make_run(config_hash="h1", repetition=0))
    store.insert_run(make_run(config_hash="h1", repetition=1, status="failed"))
    store.insert_run(make_run(config_hash="h2", repetition=2))
    store.insert_run(make_run(sweep="other", config_hash="h3"))
    assert store.completed_keys("s1") == {("h1", 0), ("h2", 2)}
    assert store.completed_keys("nope") == set()


def test_register_sweep_first_time_resume_and_conflict(store: Store) -> None:
    spec = {"name": "s1", "grid": {"precision": ["fp32", "amp-bf16"]}}
    assert store.register_sweep("s1", spec, "hash-1", 1234) == 1234
    # Resume: same spec; the stored seed wins over a freshly drawn one.
    assert store.register_sweep("s1", spec, "hash-1", 999) == 1234
    with pytest.raises(ConfigError) as info:
        store.register_sweep("s1", spec, "hash-2", 1234)
    message = str(info.value)
    assert "already holds sweep 's1' with a different spec" in message
    assert "--db" in message and "\n" not in message
    drawn = store.register_sweep("s2", spec, "hash-2", None)  # no seed given: one is drawn
    assert isinstance(drawn, int) and 0 <= drawn < 2**31
    assert store.register_sweep("s2", spec, "hash-2", None) == drawn
    sweeps = store.sweeps()
    assert list(sweeps.columns) == ["name", "spec_json", "spec_hash", "order_seed", "created_at"]
    assert sorted(sweeps["name"]) == ["s1", "s2"]
    assert store.sweep_spec("s1") == spec
    assert store.sweep_spec("missing") is None


# -- several processes -----------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from wattlab.experiment.db.errors import AlreadyStoredError
    from wattlab.experiment.db.store import open_store

    store = open_store(sys.argv[1])
    i = int(sys.argv[2])  # a fresh range of repetitions per child
    while True:
        n_windows, n_trace = i % 4 + 1, 300 + (i % 7) * 100
        run = dict(sweep="kill", status="ok", config_hash=f"h{i % 3}", repetition=i,
                   config_json={"i": i}, label="x", train_size=n_windows, params=n_trace)
        windows = [dict(name="epoch", epoch=k + 1, duration_s=1.0) for k in range(n_windows)]
        trace = ((k * 0.01, "gpu:0", 100.0 + k) for k in range(n_trace))
        store.insert_run(run, windows, trace)
        try:  # the same ok run again: refused as a whole
            store.insert_run(run, windows, [(0.0, "gpu:0", 1.0)])
            sys.exit("duplicate ok run was stored")
        except AlreadyStoredError:
            pass
        i += 1
    """
)


def check_consistent(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        bad = conn.execute(
            """SELECT r.id FROM runs r
               WHERE r.train_size IS NOT NULL AND (
                 r.train_size != (SELECT COUNT(*) FROM windows w WHERE w.run_id = r.id)
                 OR r.params != (SELECT COUNT(*) FROM trace t WHERE t.run_id = r.id))"""
        ).fetchall()
        assert bad == [], f"runs with missing windows/trace rows: {bad}"
        dupes = conn.execute(
            """SELECT sweep, config_hash, repetition, COUNT(*) FROM runs WHERE status = 'ok'
               GROUP BY sweep, config_hash, repetition HAVING COUNT(*) > 1"""
        ).fetchall()
        assert dupes == []
        orphans = conn.execute(
            "SELECT COUNT(*) FROM windows WHERE run_id NOT IN (SELECT id FROM runs)"
        ).fetchone()[0]
        assert orphans == 0
        return conn.execute("SELECT COUNT(*) FROM runs WHERE sweep = 'kill'").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.slow
def test_sigkill_mid_insert_leaves_a_consistent_database(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    open_store(db).close()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stored_before = 0
    for round_ in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db), str(100_000 * round_)], env=env
        )
        try:
            # Meanwhile this process writes too: the busy timeout serialises the writers.
            with open_store(db) as parent:
                for k in range(3):
                    parent.insert_run(make_run(sweep="parent", repetition=10 * round_ + k), WINDOWS)
            deadline = time.monotonic() + 30
            while count(db, "SELECT COUNT(*) FROM runs WHERE sweep='kill'") < stored_before + 15:
                assert child.poll() is None, "the writer process died on its own"
                assert time.monotonic() < deadline, "the writer process stored too few runs"
                time.sleep(0.02)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        assert child.returncode == -signal.SIGKILL
        stored = check_consistent(db)
        assert stored >= stored_before + 15
        stored_before = stored
    with open_store(db) as s:  # still opens and accepts writes after the kills
        s.insert_run(make_run(sweep="after"))
        assert len(s.runs(sweep="parent")) == 6


# -- damaged, read-only and empty files ------------------------------------------------------------


def _damage(db: Path) -> None:
    with open_store(db) as s:
        for i in range(20):
            s.insert_run(
                make_run(sweep=f"s{i}"), WINDOWS, [(0.1 * t, "gpu:0", 1.0) for t in range(300)]
            )
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(db, "r+b") as handle:
        handle.seek(db.stat().st_size // 2)
        handle.write(np.random.default_rng(12).bytes(4096))


def test_a_damaged_database_is_one_sentence_and_never_written(tmp_path: Path) -> None:
    db = tmp_path / "bad.db"
    _damage(db)
    with open_store(db, readonly=True) as s, pytest.raises(DataError) as caught:
        s.trace()
    message = str(caught.value)
    assert "bad.db" in message and "PRAGMA integrity_check" in message and "\n" not in message
    before = db.read_bytes()
    with open_store(db) as s, pytest.raises(DataError, match="quick_check"):
        s.insert_run(make_run(sweep="new"))
    with pytest.raises(DataError, match="damaged"):
        store_mod.check_writable_database(db)
    assert db.read_bytes()[100:] == before[100:]  # no row went in (the header may switch to WAL)


def test_check_writable_database_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    open_store(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    before = db.read_bytes()
    store_mod.check_writable_database(db)
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.db"]
    with pytest.raises(DataError, match="does not exist"):
        store_mod.check_writable_database(tmp_path / "no" / "x.db")
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_a_read_only_database_is_refused_before_work(tmp_path: Path) -> None:
    db = tmp_path / "ro.db"
    open_store(db).close()
    db.chmod(0o444)
    with pytest.raises(DataError, match="read-only"):
        store_mod.check_writable_database(db)


def test_one_rule_for_an_empty_file(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    for kwargs in ({"create": False}, {"readonly": True}):  # readers: no database yet
        with pytest.raises(DataError, match="empty file"):
            open_store(db, **kwargs)
    assert db.stat().st_size == 0
    store_mod.check_writable_database(db)  # writers: the database is created in it
    with open_store(db) as s:
        s.insert_run(make_run())
    with open_store(db, readonly=True) as s:
        assert len(s.runs()) == 1


def test_a_reader_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with open_store(db) as s:
        s.insert_run(make_run(), WINDOWS)
    db.chmod(0o444)
    before = db.read_bytes()
    with open_store(db, readonly=True) as s:
        assert len(s.runs()) == 1
        with pytest.raises(DataError):
            s.insert_run(make_run(sweep="x"))
    assert db.read_bytes() == before
