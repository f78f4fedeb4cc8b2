"""Second fault campaign, readers (issue #25 item 5): `export` and `report` read one snapshot,
so rows written meanwhile never tear what they write."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

from wattlab.experiment.db.export import export_tables
from wattlab.experiment.db.store import open_store

WRITER = textwrap.dedent(
    """
    import sys
    from wattlab.experiment.db.store import open_store
    db = sys.argv[1]
    with open_store(db) as store:
        print("ready", flush=True)
        i = 0
        while True:
            row = {"sweep": None, "config_hash": "h", "repetition": i, "config_json": {},
                   "label": "x", "hostname": "h", "pid": 1, "status": "ok"}
            store.insert_run(row, [{"name": "budget", "duration_s": 1.0}],
                             [(j * 0.1, "cpu", 1.0) for j in range(50)])
            i += 1
    """
)


def _seed(db: Path, n: int) -> None:
    with open_store(db) as store:
        for i in range(n):
            row = {"sweep": None, "config_hash": "s", "repetition": i, "config_json": {},
                   "label": "x", "hostname": "h", "pid": 1, "status": "ok"}  # fmt: skip
            store.insert_run(row, [{"name": "budget", "duration_s": 1.0}], [(0.1, "cpu", 1.0)])


def test_export_while_runs_are_stored_never_writes_rows_of_runs_it_did_not_export(tmp_path):
    db = tmp_path / "busy.db"
    _seed(db, 2000)  # enough rows that reading the four tables takes a while
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        for k in range(5):
            out = tmp_path / f"out{k}"
            with open_store(db, readonly=True) as store:
                export_tables(store, out)
            ids = set(pd.read_csv(out / "runs.csv")["id"])
            assert set(pd.read_csv(out / "windows.csv")["run_id"]) <= ids
            assert set(pd.read_csv(out / "trace.csv")["run_id"]) <= ids
            # and nothing of a run it did export is missing
            assert set(pd.read_csv(out / "trace.csv")["run_id"]) == ids
    finally:
        writer.kill()
        writer.wait()
    with open_store(db, readonly=True) as store:
        assert len(store.runs()) > 2000  # the writer did store runs meanwhile


def test_reads_inside_a_snapshot_do_not_see_a_run_stored_meanwhile(tmp_path):
    db = tmp_path / "snap.db"
    _seed(db, 1)
    with open_store(db, readonly=True) as reader, reader.snapshot():
        before = len(reader.runs())
        _seed(db, 1)  # another connection stores a run
        assert len(reader.runs()) == before and len(reader.trace()) == before
    with open_store(db, readonly=True) as reader:
        assert len(reader.runs()) == before + 1
