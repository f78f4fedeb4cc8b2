"""Claimed runs: 'running' rows finished in one transaction, abandoned when their process died,
and version-1 databases migrated in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from wattlab.errors import DataError
from wattlab.experiment.db.store import SCHEMA_VERSION, open_store


def claim(**overrides):
    row = {
        "sweep": "s",
        "config_hash": "h",
        "repetition": 0,
        "config_json": {"model": "resnet18"},
        "label": "resnet18",
        "hostname": "here",
        "pid": 4242,
    }
    row.update(overrides)
    return row


def test_a_claim_is_running_until_finished_with_its_windows(tmp_path: Path) -> None:
    with open_store(tmp_path / "c.db") as store:
        run_id = store.claim_run(claim())
        assert store.runs()["status"].tolist() == ["running"]
        store.finish_run(
            run_id,
            {**claim(), "status": "ok", "energy_total_j": 5.0, "phase_budget_s": 1.5},
            [{"name": "budget", "duration_s": 1.5}],
            [(0.1, "cpu", 10.0)],
        )
        runs = store.runs()
        assert runs["status"].tolist() == ["ok"] and runs["id"].tolist() == [run_id]
        assert runs["phase_budget_s"].tolist() == [1.5]
        assert store.windows([run_id])["name"].tolist() == ["budget"]
        assert len(store.trace([run_id])) == 1
        with pytest.raises(DataError, match="no longer 'running'"):
            store.finish_run(run_id, {**claim(), "status": "failed"})


def test_abandon_marks_only_the_sweeps_running_rows(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as store:
        left = store.claim_run(claim())
        other = store.claim_run(claim(sweep="other"))
        done = store.claim_run(claim(repetition=1))
        store.finish_run(done, {**claim(repetition=1), "status": "ok"})
        assert store.abandon_running("s") == [left]
        statuses = dict(zip(store.runs()["id"], store.runs()["status"], strict=True))
        assert statuses == {left: "abandoned", other: "running", done: "ok"}
        # the abandoned run cannot be finished later by a straggler
        with pytest.raises(DataError):
            store.finish_run(left, {**claim(), "status": "ok"})
        # lone runs: only dead pids of this host
        lone = store.claim_run(claim(sweep=None, pid=11))
        live = store.claim_run(claim(sweep=None, pid=12))
        assert store.running_lone_runs("here") == [(lone, 11), (live, 12)]
        assert store.abandon_running(None, hostname="here", dead_pids=[11]) == [lone]
        assert store.abandon_running(None, hostname="elsewhere", dead_pids=[12]) == []


@pytest.mark.parametrize(
    ("old_version", "dropped"),
    [
        ("1", ("idle_json", "gpu_utilization_basis", "step_marks_json", "projected_energy_low_j")),
        ("2", ("gpu_utilization_basis", "step_marks_json", "projection_interval_basis")),
        ("3", ("projected_energy_low_j", "projected_energy_high_j", "projection_interval_basis")),
        ("4", ("exit_code", "stdout_path", "stderr_path", "budget_window", "command_json")),
        ("5", ("pid_started_unix",)),
        ("6", ("synthetic_version", "recipe")),
        (
            "7",
            (
                "wattlab_version",
                "code_commit",
                "code_dirty",
                "torch_version",
                "cuda_version",
                "cudnn_version",
            ),
        ),
    ],
)
def test_an_older_database_is_migrated_keeping_its_rows(
    tmp_path: Path, old_version: str, dropped: tuple[str, ...]
) -> None:
    db = tmp_path / f"v{old_version}.db"
    with open_store(db) as store:
        store.insert_run({**claim(), "status": "ok"})
    conn = sqlite3.connect(db)  # make it look like the old version: without later columns
    keep = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] not in dropped]
    # (rebuilt rather than ALTER TABLE DROP COLUMN, which trips over the schema's comments)
    conn.execute(f"CREATE TABLE runs_old AS SELECT {', '.join(keep)} FROM runs")
    conn.execute("DROP TABLE runs")
    conn.execute("ALTER TABLE runs_old RENAME TO runs")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (old_version,))
    conn.commit()
    conn.close()
    with open_store(db) as store:
        assert set(dropped) <= set(store.columns("runs"))
        assert len(store.runs()) == 1
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    assert version == str(SCHEMA_VERSION) == "10"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_read_only_database_refuses_the_claim_in_one_sentence(tmp_path: Path) -> None:
    import os

    db = tmp_path / "ro.db"
    open_store(db).close()
    store = open_store(db)
    store._conn.execute("PRAGMA query_only = ON")  # as a read-only file behaves, without root
    try:
        with pytest.raises(DataError, match="cannot write"):
            store.claim_run(claim())
    finally:
        store.close()
    assert os.path.exists(db)


def test_a_version_5_database_gains_the_windows_accuracy_column(tmp_path: Path) -> None:
    db = tmp_path / "v5.db"
    with open_store(db) as store:
        store.insert_run({**claim(), "status": "ok"})
    conn = sqlite3.connect(db)  # a version-5 windows table: no accuracy column
    keep = [r[1] for r in conn.execute("PRAGMA table_info(windows)") if r[1] != "accuracy"]
    conn.execute(f"CREATE TABLE windows_old AS SELECT {', '.join(keep)} FROM windows")
    conn.execute("DROP TABLE windows")
    conn.execute("ALTER TABLE windows_old RENAME TO windows")
    conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with open_store(db) as store:
        assert "accuracy" in store.columns("windows")
        assert len(store.runs()) == 1
