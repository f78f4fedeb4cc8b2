"""Sixth fault campaign (issue #50 item 8 and the quadratic count): `wattlab compare`'s sides.
A database whose file name holds ``::`` is that database, not DB::SWEEP; a side that names
neither says both readings in one sentence."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wattlab.analysis.compare_runs import parse_side
from wattlab.experiment.db.store import open_store


def make_db(path: Path, sweep: str, energies_j: list[float]) -> Path:
    with open_store(path) as store:
        for rep, energy in enumerate(energies_j):
            store.insert_run(
                {"sweep": sweep, "status": "ok", "config_hash": "cfg", "repetition": rep,
                 "config_json": {}, "label": "cfg", "samples": 1000, "duration_s": 10.0,
                 "energy_total_j": energy, "started_at": "2026-12-05T01:00:00+00:00",
                 "device": "cpu", "gpus": 0}
            )  # fmt: skip
    return path


def wattlab(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from wattlab.cli.app import main

    monkeypatch.setattr(sys, "argv", ["wattlab", "compare", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return int(stop.value.code or 0), out.out, out.err


def test_a_database_named_with_a_double_colon_is_that_database(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    odd = make_db(tmp_path / "x::y.db", "main", [1000.0, 1001.0, 999.0])
    other = make_db(tmp_path / "pr.db", "pr", [1000.0, 1002.0, 998.0])
    assert parse_side(str(odd)).path == str(odd) and parse_side(str(odd)).sweep is None
    assert parse_side("x::y.db").sweep is None  # relative, as typed
    code, out, err = wattlab(monkeypatch, capsys, "x::y.db", str(other))
    assert code == 0, err
    assert "x::y.db" in out
    # DB::SWEEP still reads as before when no file has the whole name
    code, _, err = wattlab(monkeypatch, capsys, f"{odd}::main", f"{other}::pr")
    assert code == 0, err


def test_a_side_that_is_neither_names_both_readings(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    other = make_db(tmp_path / "pr.db", "pr", [1000.0, 1002.0, 998.0])
    code, out, err = wattlab(monkeypatch, capsys, "x::y.db", str(other))
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert "no wattlab database at x::y.db, nor at x (reading it as DB::SWEEP" in lines[0]
