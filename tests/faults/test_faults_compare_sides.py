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


# -- the "not at rest" count: O(n log n), computed once ------------------------------------------
def _naive(read, others, settled_after_s=10.0):
    """The count as the docstring states it, one pair at a time (quadratic)."""
    import datetime as dt

    def s(stamp):
        return dt.datetime.fromisoformat(stamp).timestamp() if stamp else None

    count = 0
    for run in read:
        start = s(run.started_at)
        if start is None:
            continue
        before = [
            s(o.finished_at)
            for o in others
            if o.hostname == run.hostname and o.finished_at and s(o.finished_at) <= start
        ]
        if before and start - max(before) < settled_after_s:
            count += 1
    return count  # fmt: skip


def _spans(rng, n: int):
    import datetime as dt

    from wattlab.analysis.idle_settle import RunSpan

    t0 = dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc)
    spans = []
    for _ in range(n):
        start = t0 + dt.timedelta(seconds=float(rng.uniform(0, 4000)))
        end = start + dt.timedelta(seconds=float(rng.uniform(1, 30)))
        spans.append(RunSpan(str(rng.choice(["a", "b"])), start.isoformat(),
                             None if rng.random() < 0.1 else end.isoformat()))  # fmt: skip
    return spans


def test_the_not_at_rest_count_is_the_stated_one() -> None:
    import numpy as np

    from wattlab.analysis.idle_settle import unsettled_readings

    rng = np.random.default_rng(50)
    for n in (0, 1, 5, 40, 200):
        read, more = _spans(rng, n), _spans(rng, n // 2)
        assert unsettled_readings(read, read + more) == _naive(read, read + more)
        assert unsettled_readings(read) == _naive(read, read)


def test_ten_thousand_runs_a_side_count_in_seconds_and_once(monkeypatch) -> None:
    import time

    import numpy as np

    from wattlab.analysis import compare_runs
    from wattlab.analysis.compare_report import as_json, markdown
    from wattlab.analysis.compare_runs import Side, SideSpec, compare_sides
    from wattlab.experiment.db.stored_run import StoredRun

    rng = np.random.default_rng(7)

    def side(name: str, offset: float) -> Side:
        runs = tuple(
            StoredRun.from_row(
                {
                    "id": i,
                    "status": "ok",
                    "config_hash": "cfg",
                    "label": "cfg",
                    "samples": 1000,
                    "duration_s": 10.0,
                    "energy_total_j": offset + float(rng.normal(0, 1)),
                    "idle_power_w": 70.0,
                    "hostname": "node",
                    "started_at": span.started_at,
                    "finished_at": span.finished_at,
                    "device": "cpu",
                    "gpus": 0,
                }
            )  # fmt: skip
            for i, span in enumerate(_spans(rng, 10_000))
        )
        return Side(SideSpec(f"{name}.db"), runs)

    calls = []
    real = compare_runs.idle_summary
    monkeypatch.setattr(compare_runs, "idle_summary", lambda *a: calls.append(1) or real(*a))
    comparison = compare_sides(side("base", 1000.0), side("pr", 1001.0))
    started = time.monotonic()
    text, data = markdown(comparison), as_json(comparison)
    took_s = time.monotonic() - started
    assert took_s < 10, took_s  # was 21-41 s (quadratic, four times) on a 2-core machine
    assert len(calls) == 2  # once per side, for the Markdown and the JSON together
    assert data["baseline"]["idle_readings"] == 10_000
    assert str(data["baseline"]["idle_readings_not_at_rest"]) in text
