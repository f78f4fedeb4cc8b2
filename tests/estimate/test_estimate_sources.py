"""Where the estimate commands' measured runs come from: --db, --data or the shipped reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.estimate.reference import default_reference_path, load_reference_csv
from wattlab.estimate.sources import measured_runs, measured_traces, pre_fit
from wattlab.experiment.db.store import open_store


def test_no_source_is_the_shipped_reference() -> None:
    runs, windows = measured_runs(None, None)
    shipped, _ = load_reference_csv(default_reference_path())  # the H200's, then the H100's
    h100, _ = load_reference_csv(default_reference_path().with_name("h100-reference.csv"))
    assert len(runs) == len(shipped) + len(h100) > len(shipped) > 0
    assert list(runs.columns) == list(shipped.columns)
    assert len(windows) > 0
    assert measured_traces(None) is None  # a CSV has no power trace


def test_a_database_gives_its_ok_runs_and_its_trace(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with open_store(db):
        pass
    runs, windows = measured_runs(str(db), None)
    assert len(runs) == 0 and len(windows) == 0
    trace = measured_traces(str(db))
    assert trace is not None and len(trace) == 0


def test_bad_sources_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give --db or --data, not both"):
        measured_runs("a.db", "b.csv")
    with pytest.raises(DataError, match="no database at"):
        measured_runs(str(tmp_path / "missing.db"), None)
    with pytest.raises(DataError, match="no database at"):
        measured_traces(str(tmp_path / "missing.db"))
    assert not (tmp_path / "missing.db").exists()  # nothing was created


def test_pre_fit_is_deferred_until_called(tmp_path: Path, monkeypatch) -> None:
    from wattlab.estimate import pre_cache

    called = []
    monkeypatch.setattr(pre_cache, "fit_reference", lambda data: called.append(data) or (None, ""))
    fit, note = pre_fit(None, "ref.csv")
    assert note is None and called == []  # nothing read or fitted yet
    assert fit is not None and fit() == (None, "")
    assert called == ["ref.csv"]
