"""Sixth fault campaign (issue #50 items 1 and 2): reading never writes. An older database opened
by a command that only reads (compare, report, report --statement, export) is read through a
migrated copy in memory and left as it is on disk, on read-only storage and on a full disk
too; only a command that writes migrates it, and says so once."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattlab.experiment.db.store import SCHEMA_VERSION, open_store

FINGERPRINT = ("wattlab_version", "code_commit", "code_dirty", "torch_version", "cuda_version",
               "cudnn_version")  # fmt: skip


def old_db(path: Path, sweep: str = "main", energies_j: tuple[float, ...] = (1000.0, 1010.0, 990.0)
           ) -> Path:  # fmt: skip
    """A schema-7 database (as wattlab 0.2.0 wrote it: no fingerprint columns) of ok runs."""
    with open_store(path) as store:
        for rep, energy in enumerate(energies_j):
            store.insert_run(
                {"sweep": sweep, "status": "ok", "config_hash": "cfg", "repetition": rep,
                 "config_json": {"model": "resnet18"}, "label": "resnet18", "samples": 10_000,
                 "duration_s": 10.0, "energy_total_j": energy,
                 "started_at": f"2026-12-05T01:0{rep}:00+00:00", "device": "cpu", "gpus": 0},
                [{"name": "budget", "duration_s": 10.0, "energy_total_j": energy}],
                [(0.1, "cpu", 100.0)],
            )  # fmt: skip
    conn = sqlite3.connect(path)
    keep = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] not in FINGERPRINT]
    conn.execute(f"CREATE TABLE runs_old AS SELECT {', '.join(keep)} FROM runs")
    conn.execute("DROP TABLE runs")
    conn.execute("ALTER TABLE runs_old RENAME TO runs")
    conn.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    conn.commit()
    conn.execute("PRAGMA journal_mode = DELETE")  # one file: its bytes say whether it changed
    conn.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_version(path: Path) -> str:
    uri = "file:" + str(path) + "?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as conn:
        return str(conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])


def wattlab(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from wattlab.cli.app import main

    monkeypatch.setattr(sys, "argv", ["wattlab", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return int(stop.value.code or 0), out.out, out.err


READERS = [
    ("compare", "{db}::main", "{other}::main", "--markdown", "{out}/c.md"),
    ("report", "--db", "{db}", "--json", "{out}/summary.json"),
    ("report", "--db", "{db}", "--statement", "--out", "{out}/st"),
    ("export", "--db", "{db}", "--out", "{out}/ex"),
]


def run_reader(monkeypatch, capsys, args, db: Path, other: Path, out: Path):
    given = [a.format(db=db, other=other, out=out) for a in args]
    return wattlab(monkeypatch, capsys, *given)


def test_a_reader_reads_an_old_database_in_memory_and_leaves_the_file(tmp_path) -> None:
    db = old_db(tmp_path / "old.db")
    before = digest(db)
    with open_store(db, readonly=True) as store:
        assert set(FINGERPRINT) <= set(store.columns("runs"))
        assert len(store.runs()) == 3 and len(store.trace()) == 3
        assert store.file_schema_version == 7
    assert digest(db) == before and file_version(db) == "7"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]


@pytest.mark.parametrize("args", READERS, ids=["compare", "report", "statement", "export"])
def test_read_only_commands_never_migrate_an_old_database(tmp_path, monkeypatch, capsys, args):
    db = old_db(tmp_path / "old.db")
    other = old_db(tmp_path / "other.db", energies_j=(1000.0, 1001.0, 999.0))
    out = tmp_path / "out"
    out.mkdir()
    before = digest(db), digest(other)
    code, _, err = run_reader(monkeypatch, capsys, args, db, other, out)
    assert code == 0, err
    assert "migrated" not in err
    assert (digest(db), digest(other)) == before
    assert file_version(db) == file_version(other) == "7"


def test_a_writer_migrates_an_old_database_and_says_so_once(tmp_path, capsys) -> None:
    db = old_db(tmp_path / "old.db")
    for _ in range(3):
        with open_store(db) as store:
            assert store.file_schema_version == SCHEMA_VERSION
    err = capsys.readouterr().err
    assert err.count("migrated") == 1, err
    assert f"from database schema version 7 to {SCHEMA_VERSION}" in err
    assert file_version(db) == str(SCHEMA_VERSION)


def test_a_reader_leaves_kept_runs_of_an_old_database_unmerged(tmp_path, capsys) -> None:
    """A reader that may merge kept runs (report, export) merges them through a writer, which
    would migrate the file: an older file waits for a command that writes."""
    from wattlab.experiment.db.pending import keep_finished

    db = old_db(tmp_path / "old.db")
    run = {"sweep": "main", "status": "ok", "config_hash": "cfg", "repetition": 9,
           "config_json": {}, "label": "x"}  # fmt: skip
    keep_finished(db, None, run)
    before = digest(db)
    with open_store(db, readonly=True, merge_kept=True) as store:
        assert len(store.runs()) == 3
    assert digest(db) == before and file_version(db) == "7"
    assert "only a command that writes migrates" in capsys.readouterr().err


# -- read-only storage and full disks ----------------------------------------------------------
def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")


def _umount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture(params=["read-only", "full"])
def stuck_old_db(request, tmp_path: Path) -> Iterator[Path]:
    """A schema-7 database on a tmpfs remounted read-only, or on a tmpfs filled to the last
    byte."""
    folder = tmp_path / "stuck"
    _mount_tmpfs(folder, "4m")
    try:
        db = old_db(folder / "old.db")
        if request.param == "read-only":
            done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
            if done.returncode != 0:
                pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr!r}")
        else:
            with (folder / "filler").open("wb", buffering=0) as filler:
                try:
                    while True:
                        filler.write(b"x" * 4096)
                except OSError:
                    pass
                try:
                    while True:
                        filler.write(b"x")
                except OSError:
                    pass
        yield db
    finally:
        _umount(folder)


@pytest.mark.parametrize("args", READERS, ids=["compare", "report", "statement", "export"])
def test_an_old_database_on_read_only_or_full_storage_is_read(
    tmp_path, monkeypatch, capsys, stuck_old_db, args
):
    other = old_db(tmp_path / "other.db", energies_j=(1000.0, 1001.0, 999.0))
    out = tmp_path / "out"
    out.mkdir()
    before = digest(stuck_old_db)
    code, _, err = run_reader(monkeypatch, capsys, args, stuck_old_db, other, out)
    assert code == 0, err
    assert "cannot write" not in err and digest(stuck_old_db) == before
    assert file_version(stuck_old_db) == "7"
