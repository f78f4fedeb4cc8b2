"""The run record: one declaration of the `runs` columns, held against the schema, the
migrations, and every module that lists columns."""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest

from wattlab.experiment.db import store as store_module
from wattlab.experiment.db.record import (
    COLUMN_GROUPS,
    RUN_COLUMN_NAMES,
    RUN_COLUMNS,
    added_in,
    run_columns,
)
from wattlab.experiment.db.store import SCHEMA_VERSION, open_store, schema_sql


def _schema_run_columns() -> list[tuple[str, str]]:
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema_sql())
    return [(r[1], r[2]) for r in conn.execute("PRAGMA table_info(runs)")]


def test_the_declaration_is_schema_sql_column_for_column_in_order():
    declared = [(c.name, c.sql_type) for c in RUN_COLUMNS]
    assert declared == _schema_run_columns()
    assert len(set(RUN_COLUMN_NAMES)) == len(RUN_COLUMN_NAMES)


def test_the_migrations_add_exactly_the_columns_each_version_declares():
    # version v's migration (from v-1) adds the columns declared `since=v`, in order; version 1
    # columns are never added; together they are every declared column
    added = store_module._ADDED_RUN_COLUMNS
    assert sorted(added) == list(range(1, SCHEMA_VERSION))
    for before, columns in added.items():
        assert tuple(columns) == added_in(before + 1) and columns
    assert {c.since for c in RUN_COLUMNS} == set(range(1, SCHEMA_VERSION + 1))
    later = [name for v in sorted(added) for name, _ in added[v]]
    first = [c.name for c in RUN_COLUMNS if c.since == 1]
    assert first + later == list(RUN_COLUMN_NAMES)


def test_a_version_1_database_migrates_to_the_declared_columns(tmp_path):
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.executescript(schema_sql())
    conn.execute("INSERT INTO meta VALUES ('app', 'wattlab'), ('schema_version', '1')")
    first = ", ".join(c.name for c in RUN_COLUMNS if c.since == 1)  # a version-1 runs table
    conn.execute(f"CREATE TABLE runs_v1 AS SELECT {first} FROM runs")
    conn.execute("DROP TABLE runs")
    conn.execute("ALTER TABLE runs_v1 RENAME TO runs")
    conn.commit()
    conn.close()
    with open_store(path) as store:
        assert store.columns("runs") == RUN_COLUMN_NAMES


def test_every_column_group_writes_declared_columns_and_every_column_is_written():
    written = {f.name for group in COLUMN_GROUPS for f in fields(group)}
    assert written <= set(RUN_COLUMN_NAMES)
    # `id` is assigned by SQLite
    assert set(RUN_COLUMN_NAMES) - written == {"id"}


def test_modules_that_list_run_columns_list_declared_ones():
    from wattlab.analysis import runs_table
    from wattlab.estimate import reference

    # the reference set keeps a subset of the runs columns, `id` renamed `run_id`
    assert reference.RUN_COLUMNS[0] == "run_id"
    assert set(reference.RUN_COLUMNS[1:]) <= set(RUN_COLUMN_NAMES)
    for listed in (
        runs_table.CONFIG_COLUMNS,
        runs_table.MEDIAN_ONLY,
        runs_table.CONTEXT_COLUMNS,
        runs_table.REQUIRED_COLUMNS,
        runs_table.INT_COLUMNS,
    ):
        assert set(listed) <= set(RUN_COLUMN_NAMES)
    # the derived per-image metrics are computed from each run's samples, not stored
    assert set(runs_table.METRICS) - set(RUN_COLUMN_NAMES) == set(runs_table.DERIVED)
    assert set(runs_table.DERIVED) == {"energy_per_sample_j", "duration_per_sample_s"}


def test_an_undeclared_column_name_is_refused():
    assert run_columns("energy_total_j") == ("energy_total_j",)
    with pytest.raises(ValueError, match="energy_totl_j"):
        run_columns("energy_total_j", "energy_totl_j")


def test_the_worker_and_the_callbacks_build_rows_the_store_takes(tmp_path):
    from wattlab.experiment.db.record import claim_row, failed_row
    from wattlab.experiment.options import RunContext, WorkerOptions
    from wattlab.integrations.session import run_row
    from wattlab.meters.base import Provenance
    from wattlab.monitor import Measurement
    from wattlab.train.config import RunConfig

    cfg = RunConfig(model="resnet18", device="cpu", epochs=1)
    opts = WorkerOptions(db_path=str(tmp_path / "r.db"), sweep="s", repetition=2)
    ctx = RunContext(launcher="torchrun", worker_run_index=3, idle={"gpu:0": {"power_w": 60.0}})
    window = Measurement(
        name="train",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=10.0,
        energy_j={"gpu:0": 900.0, "cpu:package-0": 100.0},
        provenance={"gpu:0": Provenance.MEASURED, "cpu:package-0": Provenance.MEASURED},
        uncertainty_j={},
        in_total={},
    )
    with open_store(opts.db_path) as store:
        claimed = store.claim_run(claim_row(cfg, opts, ctx, "2026-01-01T00:00:00+00:00"))
        failed = failed_row(cfg, opts, ctx, "2026-01-01T00:00:00+00:00", "x" * 5000)
        store.finish_run(claimed, failed)
        framework = run_row(
            config={"lr": 0.1}, label="hf", train=window, started_at="t", model="bert",
            precision="fp32", device="cuda", world_size=1, batch_size=8, epochs=1.0,
            samples=80, accuracy=0.5,
        )  # fmt: skip
        other = store.insert_run(framework)
        runs = store.runs().set_index("id")
    first = runs.loc[claimed]
    assert first["status"] == "failed" and len(first["error"]) == 4000
    assert first["sweep"] == "s" and first["repetition"] == 2 and first["launcher"] == "torchrun"
    assert first["worker_run_index"] == 3 and first["idle_power_w"] == 60.0
    assert first["pid"] > 0  # the claim's process stays on the finished row
    second = runs.loc[other]
    assert second["energy_total_j"] == pytest.approx(1000.0) and second["gpus"] == 1
    assert second["energy_gpu_j"] == pytest.approx(900.0) and second["label"] == "hf"


def _command_window(name, duration_s, start_offset_s):
    from wattlab.meters.base import Provenance
    from wattlab.monitor import Measurement

    return Measurement(
        name=name,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=duration_s,
        energy_j={"gpu:0": 90.0 * duration_s, "ram:estimated": 5.0 * duration_s},
        provenance={"gpu:0": Provenance.MEASURED, "ram:estimated": Provenance.ESTIMATED},
        uncertainty_j={"gpu:0": 2.0},
        in_total={},
        start_offset_s=start_offset_s,
        utilization_percent={"gpu:0": 40.0},
    )


def test_a_command_sweep_builds_its_rows_from_the_column_groups(tmp_path):
    import json
    import os
    import socket
    from types import SimpleNamespace

    import pandas as pd

    from wattlab.experiment.runs import command_record
    from wattlab.experiment.runs.command_meter import BudgetSegment, MeteredCommand
    from wattlab.experiment.specs.command import CommandSweepSpec

    spec = CommandSweepSpec.from_dict(
        {
            "name": "s",
            "command": ["python", "t.py", "--bs", "{batch_size}", "--on", "{device}"],
            "grid": {"batch_size": [8], "device": ["cpu"]},
        }
    )
    point = spec.resolve(spec.points()[0])
    gpu = SimpleNamespace(component="gpu:0", details={"name": "H", "uuid": "G1"})
    ram = SimpleNamespace(component="ram:estimated", details={"ram_measure": "used"})
    monitor = SimpleNamespace(meters=[SimpleNamespace(info=gpu), SimpleNamespace(info=ram)])
    run = _command_window("run", 20.0, 1.0)
    block = _command_window("budget", 10.0, 4.0)
    segments = [BudgetSegment(block, samples=80)]
    marked = MeteredCommand(0, run, block, True, segments, started_unix=0.0, ended_unix=21.0)
    crashed = MeteredCommand(3, None, None, False, [], started_unix=0.0, ended_unix=21.0)
    out, err = tmp_path / "1.stdout", tmp_path / "1.stderr"
    err.write_text("boom\n")
    with open_store(tmp_path / "r.db") as store:
        idle = {"gpu:0": {"power_w": 60.0, "temperature_c": 40.0}}
        ok_id = store.claim_run(command_record.claim_row(point, "s", 1, idle))
        claimed = store.runs().set_index("id").loc[ok_id]
        ok = command_record.finished_row(point, marked, monitor, out, err)
        store.finish_run(ok_id, ok)
        failed_id = store.claim_run(command_record.claim_row(point, "s", 2, None))
        store.finish_run(failed_id, command_record.finished_row(point, crashed, monitor, out, err))
        refused_id = store.claim_run(command_record.claim_row(point, "s", 3, None))
        store.finish_run(refused_id, command_record.refused_row(ok, "stored elsewhere"))
        runs = store.runs().set_index("id")
    assert claimed["status"] == "running" and claimed["launcher"] == "command"
    assert claimed["pid"] == os.getpid() and claimed["hostname"] == socket.gethostname()
    assert json.loads(claimed["command_json"]) == {"argv": point.argv, "cwd": None, "env": {}}
    assert claimed["idle_power_w"] == 60.0 and pd.isna(claimed["exit_code"])
    first = runs.loc[ok_id]
    assert first["status"] == "ok" and first["exit_code"] == 0
    assert first["batch_size"] == 8 and first["device"] == "cuda"  # measured, not the axis
    assert first["budget_window"] == "marked" and first["samples"] == 80
    assert first["stdout_path"] == str(out) and first["stderr_path"] == str(err)
    assert json.loads(first["command_json"])["marks"][0]["samples"] == 80
    assert first["energy_total_j"] == pytest.approx(950.0) and first["duration_s"] == 10.0
    assert first["wall_s"] == 20.0 and first["gpu_name"] == "H" and first["gpu_uuids"] == "G1"
    assert json.loads(first["components_json"])["ram:estimated"]["ram_measure"] == "used"
    assert first["gpu_utilization_percent"] == 40.0 and first["phase_budget_s"] == 10.0
    assert first["phase_setup_s"] == 3.0 and first["phase_teardown_s"] == 7.0
    assert pd.isna(first["phase_eval_s"]) and first["pue"] > 0 and first["co2e_kg"] > 0
    second = runs.loc[failed_id]
    assert second["status"] == "failed" and second["exit_code"] == 3
    assert second["error"] == "the command exited with code 3; the end of its stderr:\nboom"
    assert second["wall_s"] == 21.0 and pd.isna(second["budget_window"])
    assert pd.isna(second["energy_total_j"]) and second["device"] == "cpu"  # the axis stays
    third = runs.loc[refused_id]
    assert third["status"] == "failed" and third["error"] == "stored elsewhere"
    assert third["energy_total_j"] == pytest.approx(950.0)


def test_version_8_fills_the_measured_share_of_stored_runs_from_their_components(tmp_path):
    """The H200 reference database (schema 4) stored "estimated" for runs 87-97 % counter-
    measured; opened, each run gets its measured share and its provenance by share."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "docs/measured/h200-reference-2026-12-03-main.db.gz"
    path = tmp_path / "v4.db"
    with gzip.open(src, "rb") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    with sqlite3.connect(path) as conn:
        assert (
            conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "4"
        )
    conn.close()
    with open_store(path) as store:
        runs = store.runs(status="ok")
    assert len(runs) > 0
    for _, row in runs.iterrows():
        parts = json.loads(row["components_json"])
        total = sum(p["energy_j"] for p in parts.values() if p.get("in_total", True))
        measured = sum(
            p["energy_j"]
            for p in parts.values()
            if p.get("in_total", True) and p["provenance"] in ("measured", "sampled")
        )
        assert row["energy_measured_share"] == pytest.approx(measured / total)
        if 0 < measured < total:
            assert (
                row["provenance"].endswith(" % estimated") and " % measured, " in row["provenance"]
            )


def test_a_new_row_states_its_provenance_by_share():
    from wattlab.experiment.db.record import provenance_by_share

    comps = {
        "gpu:0": {"energy_j": 90.0, "provenance": "measured"},
        "cpu:estimated": {"energy_j": 10.0, "provenance": "estimated"},
        "psys": {"energy_j": 500.0, "provenance": "measured", "in_total": False},
    }
    assert provenance_by_share(comps, "estimated") == ("90.0 % measured, 10.0 % estimated", 0.9)
    assert provenance_by_share({}, "estimated") == ("estimated", 0.0)
    assert provenance_by_share(None, "sampled") == ("sampled", 1.0)
    assert provenance_by_share(None, None) == ("unknown", None)


def test_the_fingerprint_names_wattlab_and_the_checkout_it_ran_in(tmp_path: Path) -> None:
    import subprocess

    from wattlab import __version__
    from wattlab.experiment.db.record import fingerprint_columns

    outside = fingerprint_columns(str(tmp_path))  # not a git checkout
    assert outside.wattlab_version == __version__
    assert outside.code_commit is None and outside.code_dirty is None
    who = {
        f"GIT_{r}_{k}": v
        for r in ("AUTHOR", "COMMITTER")
        for k, v in (("NAME", "t"), ("EMAIL", "t@t"))
    }
    env = {**who, "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    (tmp_path / "train.py").write_text("print(1)\n")
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    clean = fingerprint_columns(str(tmp_path))
    assert (clean.code_commit, clean.code_dirty) == (head, 0)
    (tmp_path / "train.py").write_text("print(2)\n")
    assert fingerprint_columns(str(tmp_path)).code_dirty == 1


def test_windows_of_a_migrated_database_state_their_provenance_by_share(tmp_path):
    """Issue 48: opened, the H200 reference database's runs said "95.2 % measured" while all 286
    run and budget windows still said "estimated" (the weakest word, written before schema
    8), and export's windows.csv had no measured share."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    import pandas as pd

    from wattlab.experiment.db.export import export_tables

    src = Path(__file__).resolve().parents[2] / "docs/measured/h200-reference-2026-12-03-main.db.gz"
    path = tmp_path / "v4.db"
    with gzip.open(src, "rb") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    with open_store(path) as store:
        runs = store.runs(status="ok").set_index("id")
        windows = store.windows(list(runs.index))
        export_tables(store, tmp_path / "out")
    whole = windows[windows["name"].isin(["run", "budget"])]
    assert len(whole) > 0
    for _, w in whole.iterrows():
        parts = json.loads(runs.loc[w["run_id"], "components_json"])
        gpu_word = {p["provenance"] for n, p in parts.items() if n.startswith("gpu")}
        assert gpu_word == {"measured"}  # the GPU counters measured; CPU and RAM estimated
        assert w["energy_measured_share"] == pytest.approx(w["energy_gpu_j"] / w["energy_total_j"])
        assert " % measured, " in w["provenance"] and w["provenance"].endswith(" % estimated")
    exported = pd.read_csv(tmp_path / "out" / "windows.csv")
    assert "energy_measured_share" in exported.columns
    assert exported["energy_measured_share"].between(0, 1).all()
