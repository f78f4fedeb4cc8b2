"""Second fault campaign, scale (issue #25 item 10): `report` and `export` on a big database
complete with the right numbers (bench/big_db.py builds it; the issue's sizes and timings are
in docs/measured/). No timing threshold here: the numbers are checked, not the seconds."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("big_db", ROOT / "bench" / "big_db.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wattlab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "wattlab.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=1800, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def big_db(tmp_path_factory) -> Path:
    """5 000 runs over 200 configurations (one run in 50 failed), 25 000 windows, 100 000
    trace rows, built the way bench/big_db.py builds the issue's 50 000-run database."""
    db = tmp_path_factory.mktemp("big") / "big.db"
    built = _bench().build(db, runs=5000, configs=200, windows_per_run=5, trace_per_run=20)
    assert (built["runs"], built["windows"], built["trace"]) == (5000, 25000, 100000)
    return db


def test_the_bench_database_is_a_healthy_wattlab_database(big_db):
    from wattlab.experiment.db.store import open_store

    with open_store(big_db, readonly=True) as store:
        store.check_intact()
        runs = store.runs()
    assert len(runs) == 5000 and (runs["status"] == "failed").sum() == 100


@pytest.mark.slow
def test_report_of_5000_runs_completes_with_the_right_medians(big_db, tmp_path):
    done = wattlab("report", "--db", str(big_db), "--json", str(tmp_path / "s.json"),
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    configs = {c["config_hash"]: c for c in summary["configurations"]}
    con = sqlite3.connect(big_db)
    ok = pd.read_sql_query(
        "SELECT config_hash, energy_total_j, duration_s FROM runs WHERE status = 'ok'", con
    )
    con.close()
    expected = ok.groupby("config_hash").agg(
        n=("energy_total_j", "size"),
        energy=("energy_total_j", "median"),
        time=("duration_s", "median"),
    )
    # every run of 4 configurations failed (ids 50, 100, ...): 196 are reported
    assert sorted(configs) == sorted(expected.index) and len(configs) == 196
    for config_hash, row in expected.iterrows():
        got = configs[config_hash]
        assert got["n"] == row["n"] == 25
        assert got["energy_j"] == pytest.approx(row["energy"], rel=1e-12)
        assert got["time_s"] == pytest.approx(row["time"], rel=1e-12)


@pytest.mark.slow
def test_report_and_export_of_5000_runs_write_every_file(big_db, tmp_path):
    done = wattlab("report", "--db", str(big_db), "--out", str(tmp_path / "rep"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("report.html", "report.md", "summary.json", "energy_components.png"):
        assert (tmp_path / "rep" / name).stat().st_size > 0
    done = wattlab("export", "--db", str(big_db), "--out", str(tmp_path / "exp"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(pd.read_csv(tmp_path / "exp" / "runs.csv")) == 5000
    assert len(pd.read_csv(tmp_path / "exp" / "trace.csv")) == 100000
    assert len(pd.read_csv(tmp_path / "exp" / "windows.csv")) == 25000


# -- issue 33: one configuration with more than 1 023 runs -----------------------------------


@pytest.mark.parametrize("n", [1024, 1100, 5000, 50_000])
def test_the_median_interval_of_many_runs_is_computed(n):
    """2.0**n overflowed past 1 023 runs of one configuration (a sweep of 1 100 repetitions,
    a database of 50 000 runs of one configuration): a traceback instead of a report."""
    import time

    from wattlab.analysis.intervals import median_interval

    values = np.random.default_rng(n).normal(100.0, 5.0, n)
    started = time.perf_counter()
    interval = median_interval(values)
    assert time.perf_counter() - started < 5.0
    assert interval.method == "order-statistic"
    assert 0.95 <= interval.coverage < 0.96
    ordered = np.sort(values)
    # the normal approximation of the ranks: k = n/2 - 1.96 sqrt(n)/2, within a rank or two
    k = int(np.searchsorted(ordered, interval.low)) + 1
    assert abs(k - (n / 2 - 1.959964 * np.sqrt(n) / 2)) <= 2
    assert interval.high == ordered[n - k]


def test_the_median_interval_is_unchanged_for_few_runs():
    from wattlab.analysis.intervals import median_interval, rank_coverage

    for n in range(2, 120):
        values = np.arange(n, dtype=float)
        interval = median_interval(values)
        ks = [k for k in range(1, (n + 1) // 2 + 1) if rank_coverage(n, k) >= 0.95]
        if not ks:
            assert interval.method == "range" and (interval.low, interval.high) == (0, n - 1)
        else:
            k = max(ks)
            assert (interval.low, interval.high) == (k - 1, n - k)
            assert interval.coverage == pytest.approx(rank_coverage(n, k), abs=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("runs", [1100, 50_000])
def test_report_of_one_configuration_with_many_runs_completes(tmp_path, runs):
    db = tmp_path / "one.db"
    _bench().build(db, runs=runs, configs=1, windows_per_run=1, trace_per_run=2)
    done = wattlab("report", "--db", str(db), "--json", str(tmp_path / "s.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (config,) = json.loads((tmp_path / "s.json").read_text())["configurations"]
    assert config["n"] == runs - runs // 50 and config["ci_method"] == "order-statistic"
