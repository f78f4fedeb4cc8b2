"""bench/compare_drift.py, tiny: real command sweeps in the order abba (the one sweep driver),
judged by `compare`'s own functions; the interleaved sides are paired, the sequential ones are
two sessions, and a busy loop turned on partway through is ended with the trial."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_tiny_drift_bench_pairs_the_interleaved_sides(tmp_path, monkeypatch, capsys) -> None:
    path = ROOT / "bench" / "compare_drift.py"
    spec = importlib.util.spec_from_file_location("compare_drift", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["compare_drift"] = bench
    spec.loader.exec_module(bench)
    monkeypatch.setenv("OUT", str(tmp_path))
    args = ["--aa", "1", "--ab", "0", "--seq", "1", "--reps", "2", "--work", "1000", "--busy", "1"]
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    assert "other processes (other users) share the machine" in out
    data = json.loads((tmp_path / "compare-drift.json").read_text())
    trials = {t["scenario"]: t for t in data["trials"]}
    assert trials["interleaved A/A"]["analysis"] == "paired"
    assert trials["interleaved A/A"]["timing"] == "interleaved"
    assert trials["interleaved A/A"]["baseline_n"] == 2
    assert trials["sequential A/A"]["timing"] == "sequential"
    assert trials["sequential A/A"]["session_sd_log"] > 0
    assert trials["sequential A/A, no session term"]["session_sd_log"] == 0
    assert data["summary"]["interleaved A/A"]["trials"] == 1
    assert data["args"]["cpu_load"] == "process"  # the CPU-only recipe's load
    assert {"time_change", "loop_cpu_change"} <= set(trials["interleaved A/A"])


@pytest.mark.slow
def test_the_busy_loops_run_outside_the_benchs_tree_and_end_with_it() -> None:
    import psutil

    path = ROOT / "bench" / "compare_drift.py"
    spec = importlib.util.spec_from_file_location("compare_drift", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["compare_drift"] = bench
    spec.loader.exec_module(bench)
    with bench.BusyLoops(1) as loops:
        loops.start()
        (loop,) = loops.procs
        assert loop.is_running()
        assert loop.pid not in {p.pid for p in psutil.Process().children(recursive=True)}
    assert not loop.is_running()
