"""The typed view of a stored run: read back from real store rows, NULL/NaN/missing as None, the
column names held against the table's declaration, and attribute access checked by mypy."""

from __future__ import annotations

import math
import sqlite3
import typing
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlab.experiment.db.record import RUN_COLUMNS
from wattlab.experiment.db.store import open_store
from wattlab.experiment.db.stored_run import RunCol, StoredRun

REPO = Path(__file__).resolve().parents[2]

FULL = {
    "sweep": "s1",
    "status": "ok",
    "config_hash": "abc123",
    "repetition": 2,
    "config_json": {"model": "resnet18", "batch_size": 64},
    "label": "resnet18 2xGPU amp-bf16 bs64",
    "model": "resnet18",
    "precision": "amp-bf16",
    "device": "cuda",
    "gpus": 2,
    "batch_size": 64,
    "epochs": 1.5,
    "power_limit_w": 250.0,
    "samples": 7680,
    "gpu_name": "NVIDIA H200",
    "gpu_tdp_w": 700.0,
    "duration_s": 12.5,
    "wall_s": 20.25,
    "energy_total_j": 1500.0,
    "energy_gpu_j": 1200.0,
    "energy_cpu_j": 250.0,
    "energy_dram_j": 50.0,
    "provenance": "measured",
    "components_json": {"gpu:0": {"energy_j": 600.0, "provenance": "measured"}},
    "co2e_kg": 0.0002,
    "codecarbon_energy_j": 1530.0,
    "codecarbon_rel_error": 0.02,
    "codecarbon_components_json": {"gpu_j": 1210.0, "cpu_j": 260.0, "ram_j": 60.0},
}


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, int, int]:
    """A database with a full run and a bare one (most columns NULL), made with the store."""
    path = tmp_path / "results.db"
    with open_store(path) as store:
        full = store.insert_run(FULL)
        bare = store.insert_run(
            {"sweep": "s1", "status": "failed", "config_hash": "def", "repetition": 0,
             "config_json": "{}", "label": "bare", "error": "boom"}
        )  # fmt: skip
    return path, full, bare


def _check_full(run: StoredRun, run_id: int) -> None:
    assert run.id == run_id and isinstance(run.id, int)
    assert run.ok and run.sweep == "s1" and run.label == FULL["label"]
    assert run.gpus == 2 and isinstance(run.gpus, int)
    assert run.batch_size == 64 and run.samples == 7680 and run.repetition == 2
    assert run.epochs == 1.5 and run.power_limit_w == 250.0 and run.gpu_tdp_w == 700.0
    assert run.energy_total_j == 1500.0 and run.energy_gpu_j == 1200.0
    assert run.energy_cpu_j == 250.0 and run.energy_dram_j == 50.0
    assert run.duration_s == 12.5 and run.wall_s == 20.25
    assert run.config_json == FULL["config_json"]
    assert run.components_json == FULL["components_json"]
    assert run.codecarbon_components_json == FULL["codecarbon_components_json"]
    assert run.codecarbon_energy_j == 1530.0 and run.codecarbon_rel_error == 0.02
    assert run.energy_other_j is None and run.pue is None and run.exit_code is None


def test_every_way_of_reading_a_stored_run_gives_the_same_typed_run(
    db: tuple[Path, int, int],
) -> None:
    path, full, bare = db
    with open_store(path, readonly=True) as store:
        one = store.stored_run(full)
        listed = store.stored_runs(sweep="s1")
        ok_only = store.stored_runs(status="ok")
        from_frame = StoredRun.from_frame(store.runs())
        from_record = StoredRun.from_row(store.run_record(full) or {})
        assert store.stored_run(999) is None
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    from_sqlite = StoredRun.from_row(
        conn.execute("SELECT * FROM runs WHERE id = ?", (full,)).fetchone()
    )
    conn.close()
    assert one is not None
    _check_full(one, full)
    assert [r.id for r in listed] == [full, bare] and [r.id for r in ok_only] == [full]
    # a DataFrame's int column with a NULL in it is float64: the view gives ints back
    assert from_frame[0] == one == from_record == from_sqlite == listed[0] == ok_only[0]


def test_null_columns_of_a_stored_run_read_as_none(db: tuple[Path, int, int]) -> None:
    path, _, bare = db
    with open_store(path, readonly=True) as store:
        run = store.stored_run(bare)
        from_frame = store.stored_runs()[1]
    assert run is not None and run == from_frame
    assert run.status == "failed" and not run.ok and run.error == "boom"
    assert run.config_json == {}  # stored as "{}"
    for name in ("energy_total_j", "duration_s", "gpus", "samples", "gpu_name", "components_json"):
        assert getattr(run, name) is None, name


def test_nan_missing_and_wrong_kinds_read_as_none() -> None:
    row = pd.Series(
        {"id": 3.0, "gpus": np.nan, "batch_size": "64", "energy_total_j": np.float64("nan"),
         "duration_s": "not a number", "wall_s": math.inf, "samples": 2.5, "label": None,
         "model": np.nan, "precision": pd.NA, "components_json": "{broken",
         "config_json": "[1, 2]", "codecarbon_components_json": " "}
    )  # fmt: skip
    run = StoredRun.from_row(row)
    assert run.id == 3 and isinstance(run.id, int)
    assert run.batch_size == 64  # a number stored as text is still that number
    assert run.gpus is None and run.energy_total_j is None and run.duration_s is None
    assert run.wall_s == math.inf  # infinite is a value (readers name it unusable), not NULL
    assert run.samples is None  # not a whole number in an INTEGER column
    assert run.label is None and run.model is None and run.precision is None
    assert run.components_json is None and run.config_json is None  # not a JSON object
    assert run.codecarbon_components_json is None
    assert run.status is None and run.energy_gpu_j is None  # columns the row lacks
    assert StoredRun.from_frame(pd.DataFrame([row])) == [run]  # column by column, the same
    assert StoredRun.from_row({}) == StoredRun()
    assert StoredRun.in_frame(pd.DataFrame([row]), 3) == run
    assert StoredRun.in_frame(pd.DataFrame([row]), 4) is None
    assert StoredRun.in_frame(pd.DataFrame([{"label": "no id"}]), 3) is None


def test_the_column_names_are_the_tables_and_each_field_has_one() -> None:
    declared = {c.name: c.sql_type for c in RUN_COLUMNS}
    constants = {n: v for n, v in vars(RunCol).items() if n.isupper()}
    assert set(constants.values()) <= set(declared), set(constants.values()) - set(declared)
    assert len(set(constants.values())) == len(constants)  # no column spelt twice
    names = [f.name for f in fields(StoredRun)]
    assert sorted(n.upper() for n in names) == sorted(constants)
    kinds = {"INTEGER": int, "REAL": float, "TEXT": str}
    hints = typing.get_type_hints(StoredRun)
    for name in names:
        column = constants[name.upper()]
        want = dict if column.endswith("_json") else kinds[declared[column]]
        args = [typing.get_origin(a) or a for a in typing.get_args(hints[name])]
        assert args == [want, type(None)], (name, hints[name])


def test_mypy_rejects_a_misspelt_field_and_an_unchecked_none(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    code = tmp_path / "reader.py"
    code.write_text(
        "from wattlab.experiment.db.stored_run import StoredRun\n"
        "run = StoredRun.from_row({'energy_total_j': 3.0})\n"
        "kwh: float = run.energy_total_j / 3.6e6\n"  # line 3: may be None
        "j = run.energy_totl_j\n"  # line 4: no such field
        "if run.energy_total_j is not None:\n"
        "    ok: float = run.energy_total_j / 3.6e6\n"
    )
    out, _, status = api.run(
        [str(code), "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"),
         "--follow-imports=silent", "--config-file", str(REPO / "pyproject.toml")]
    )  # fmt: skip
    assert status == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 2, out
    assert "reader.py:3:" in errors[0] and "None" in errors[0], out
    assert "reader.py:4:" in errors[1] and '"energy_totl_j"' in errors[1], out
