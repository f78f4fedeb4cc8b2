"""`wattlab --version`, and an unknown --sweep answered with the sweeps that exist."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wattlab import __version__
from wattlab.cli import main
from wattlab.experiment.db.store import open_store


def _run(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["wattlab", *argv])
    try:
        main()
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def test_version_prints_the_version_and_exits_0(monkeypatch, capsys) -> None:
    assert _run(monkeypatch, "--version") == 0
    assert capsys.readouterr().out == f"wattlab {__version__}\n"


def test_an_unknown_sweep_lists_the_sweeps_there_are(monkeypatch, capsys, tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    with open_store(db) as store:
        for sweep in ("demo", "big-study"):
            store.insert_run(
                {
                    "sweep": sweep,
                    "status": "ok",
                    "config_hash": "h",
                    "repetition": 0,
                    "config_json": {},
                    "label": "x",
                    "duration_s": 1.0,
                    "energy_total_j": 1.0,
                    "provenance": "measured",
                }
            )
    assert _run(monkeypatch, "report", "--db", str(db), "--sweep", "dmeo", "--json", "-") == 2
    err = capsys.readouterr().err
    assert "holds no runs of sweep 'dmeo'; its sweeps: big-study, demo." in err
    assert err.count("\n") == 1  # one sentence
