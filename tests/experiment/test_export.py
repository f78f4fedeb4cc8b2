"""`wattlab export`: tables as CSV / JSON / Parquet that read back with pandas."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

import pandas as pd
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db.export import export_tables
from wattlab.experiment.db.store import Store, open_store
from wattlab.jsonio import write_atomic


def run_row(sweep: str | None, rep: int, energy_j: float, **extra: object) -> dict:
    return {
        "sweep": sweep,
        "status": "ok",
        "config_hash": f"cfg-{sweep}",
        "repetition": rep,
        "config_json": {"model": "resnet18", "precision": "fp32"},
        "label": "resnet18 1xCPU fp32 bs64",
        "started_at": "2025-01-02T03:04:05+00:00",
        "duration_s": 10.0 + rep,
        "energy_total_j": energy_j,
        "provenance": "measured",
        **extra,
    }


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with open_store(tmp_path / "results.db") as s:
        s.register_sweep("a", {"name": "a"}, "hash-a", 11)
        s.register_sweep("b", {"name": "b"}, "hash-b", 22)
        windows = [
            {"name": "epoch", "epoch": 1, "duration_s": 5.0, "energy_total_j": 400.0},
            {"name": "budget", "duration_s": 10.0, "energy_total_j": 800.0, "short_window": 1},
        ]
        trace = [(0.0, "gpu:0", 250.0), (0.5, "gpu:0", 255.5)]
        s.insert_run(run_row("a", 0, 800.0, accuracy=0.5), windows, trace)
        s.insert_run(run_row("a", 1, 820.0, status="failed", error="out of memory"), windows[:1])
        s.insert_run(run_row("b", 0, 500.0), windows, [(0.0, "cpu:package-0", 30.0)])
        s.insert_run(run_row(None, 0, 100.0))
        yield s


def read(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix == ".json":
        # Keep ISO timestamps as text (pandas 2 would parse *_at columns as dates).
        no_dates = {} if int(pd.__version__.split(".")[0]) >= 3 else {"convert_dates": False}
        return pd.read_json(path, orient="records", dtype=False, **no_dates)
    return pd.read_parquet(path)


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Object values with None for every missing value: CSV/JSON cannot tell None from NaN."""
    frame = frame.astype(object)
    return frame.where(frame.notna(), None)


@pytest.mark.parametrize(
    "fmt", ["csv", "json", pytest.param("parquet", marks=pytest.mark.extra("parquet"))]
)
def test_round_trip(store: Store, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out" / fmt
    paths = export_tables(store, out, fmt)
    assert [p.name for p in paths] == [f"{t}.{fmt}" for t in ("runs", "windows", "trace", "sweeps")]
    originals = [store.runs(), store.windows(), store.trace(), store.sweeps()]
    for path, original in zip(paths, originals, strict=True):
        back = read(path)
        assert list(back.columns) == list(original.columns), path.name
        pd.testing.assert_frame_equal(plain(back), plain(original), obj=path.name)
        if fmt == "parquet":  # parquet keeps the types too
            pd.testing.assert_frame_equal(back, original, obj=path.name)
    runs = read(paths[0])
    assert runs["energy_total_j"].tolist() == [800.0, 820.0, 500.0, 100.0]
    assert runs["error"].tolist()[1] == "out of memory"
    assert sorted(out.iterdir()) == sorted(paths)  # no temporary files left behind


def test_one_sweep_only(store: Store, tmp_path: Path) -> None:
    paths = export_tables(store, tmp_path, "csv", sweep="a")
    runs, windows, trace, sweeps = (pd.read_csv(p) for p in paths)
    assert runs["sweep"].tolist() == ["a", "a"]
    assert set(windows["run_id"]) == set(runs["id"])
    assert len(windows) == 3
    assert trace["component"].tolist() == ["gpu:0", "gpu:0"]
    assert sweeps["name"].tolist() == ["a"]


def test_export_replaces_existing_files(store: Store, tmp_path: Path) -> None:
    (tmp_path / "runs.csv").write_text("stale\n")
    export_tables(store, tmp_path, "csv", sweep="b")
    assert pd.read_csv(tmp_path / "runs.csv")["sweep"].tolist() == ["b"]


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "runs.csv"
    target.write_text("old\n")

    def broken(handle: BinaryIO) -> None:
        handle.write(b"half a fi")
        raise OSError("disk full")

    with pytest.raises(DataError, match="disk full; nothing of it was written"):
        write_atomic(target, broken)
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]


def test_unknown_format_lists_formats(store: Store, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown export format 'xlsx'; choose csv, parquet or"):
        export_tables(store, tmp_path / "out", "xlsx")
    assert not (tmp_path / "out").exists()


def test_unknown_sweep_is_a_data_error(store: Store, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no sweep named 'zzz'; sweeps: a, b"):
        export_tables(store, tmp_path / "out", "csv", sweep="zzz")


def test_parquet_without_pyarrow_says_what_to_install(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    said = r"'parquet' extra.*use csv or json, or install it with: .*\[parquet\]'$"
    with pytest.raises(ConfigError, match=said):
        export_tables(store, tmp_path / "out", "parquet")
    assert not (tmp_path / "out").exists()
