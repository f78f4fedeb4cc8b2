"""SLURM's ConsumedEnergy beside wattlab's total, and result files that merge exactly once.

These run without a cluster: ``sacct`` is a small script on PATH that prints what a cluster
with energy accounting prints, the result files are made from a private database.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from tests.analysis.test_analysis_report import make_runs
from wattlab.analysis.report import write_report
from wattlab.analysis.scheduler_energy import scheduler_energy, scheduler_energy_line
from wattlab.errors import DataError
from wattlab.experiment.db.store import open_store
from wattlab.experiment.executors.result_files import export_result, merge_results, read_result
from wattlab.experiment.executors.slurm import sacct_accounting


def _fake_sacct(folder: Path, monkeypatch: pytest.MonkeyPatch, lines: str) -> Path:
    script = folder / "sacct"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {folder}/sacct.args\nprintf '{lines}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return script


def test_sacct_consumed_energy_is_read_for_the_task(tmp_path, monkeypatch):
    _fake_sacct(tmp_path, monkeypatch, "77_1|COMPLETED|123456|300|gpu-node-3\\n")
    info = sacct_accounting("77_1")
    assert info == {
        "state": "COMPLETED",
        "consumed_energy_j": 123456.0,
        "elapsed_s": 300.0,
        "nodes": "gpu-node-3",
    }
    args = (tmp_path / "sacct.args").read_text()
    assert "-j 77_1" in args and "ConsumedEnergyRaw" in args


def _private_run(db: Path, sweep: str = "s", status: str = "ok") -> None:
    """A task's private database holding one run (the shape the worker stores)."""
    row = {
        "sweep": sweep, "status": status, "config_hash": "abc", "repetition": 0,
        "config_json": {"model": "resnet18"}, "label": "resnet18 1xCPU fp32 bs64",
        "energy_total_j": 1000.0, "duration_s": 10.0, "hostname": "node-a",
        "components_json": {"node-a/cpu:estimated": {"energy_j": 1000.0}},
    }  # fmt: skip
    windows = [{"name": "run", "duration_s": 12.0, "energy_total_j": 1200.0}]
    with open_store(db) as store:
        store.insert_run(row, windows, [(0.5, "node-a/cpu:estimated", 100.0)])


def test_result_file_merges_once_with_slurm_energy_beside_it(tmp_path):
    _private_run(tmp_path / "task.db")
    results = tmp_path / "results"
    results.mkdir()
    job = {"scheduler": "slurm", "job_id": "77_1", "consumed_energy_j": 1500.0}
    data = export_result(tmp_path / "task.db", results / "r1.json", job)
    assert read_result(results / "r1.json")["result_id"] == data["result_id"]

    with open_store(tmp_path / "shared.db") as store:
        first = merge_results(store, results)
        # the same file again (a second watcher, a crash before it was moved)
        (results / "again.json").write_text((results / "merged" / "r1.json").read_text())
        second = merge_results(store, results)
        runs, windows, trace = store.runs(), store.windows(), store.trace()
        jobs = store.scheduler_jobs()
    assert [m.action for m in first.merged] == ["stored"]
    assert [m.action for m in second.merged] == ["duplicate"]
    assert len(runs) == 1 and len(windows) == 1 and len(trace) == 1
    assert json.loads(runs.iloc[0]["config_json"]) == {"model": "resnet18"}
    assert list(jobs["job_id"]) == ["77_1"] and list(jobs["consumed_energy_j"]) == [1500.0]

    info = scheduler_energy(runs, jobs, windows)
    assert info["n"] == 1
    only = info["runs"][0]
    assert only["wattlab_window"] == "run" and only["wattlab_j"] == 1200.0
    assert only["rel_diff"] == pytest.approx(1500.0 / 1200.0 - 1)
    assert "25.0% more" in scheduler_energy_line(info)


def test_failed_result_files_also_merge_once(tmp_path):
    _private_run(tmp_path / "task.db", status="failed")
    results = tmp_path / "results"
    results.mkdir()
    export_result(tmp_path / "task.db", results / "f.json", {"scheduler": "slurm"})
    with open_store(tmp_path / "shared.db") as store:
        merge_results(store, results, move=False)
        merge_results(store, results, move=False)  # the unique result_id, not the ok guard
        assert len(store.runs()) == 1


def test_a_file_that_is_not_a_result_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"runs": []}')
    with pytest.raises(DataError, match="not a wattlab result file"):
        read_result(tmp_path / "x.json")
    with open_store(tmp_path / "db.db") as store:
        assert merge_results(store, tmp_path).merged == []


def test_report_shows_slurm_energy_beside_ours(tmp_path):
    runs = make_runs()
    ok = runs[runs["status"] == "ok"]
    jobs = pd.DataFrame(
        {
            "run_id": ok["id"].astype(int),
            "job_id": [f"9_{i}" for i in range(len(ok))],
            "consumed_energy_j": ok["energy_total_j"] * 1.1,
        }
    )
    paths = write_report(runs, None, None, tmp_path / "out", scheduler_jobs=jobs)
    text = paths.markdown.read_text()
    assert "SLURM accounting vs wattlab" in text and "SLURM vs wattlab" in text
    assert "10.0% more" in text
    summary = json.loads(paths.summary_json.read_text())
    assert summary["scheduler_energy"]["n"] == len(ok)
    # no SLURM jobs: no section
    plain = write_report(runs, None, None, tmp_path / "plain")
    assert "SLURM" not in plain.markdown.read_text()
