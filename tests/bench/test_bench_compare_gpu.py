"""bench/compare_gpu.sh's CPU path (COMPARE_CPU=1): three tiny sweeps and two comparisons,
every file where the lead will look for it, at most 8 of them. The GPU path is run by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.extra("train")
def test_the_cpu_path_runs_both_comparisons(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "COMPARE_CPU": "1", "OUT": str(out), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "compare_gpu.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert len(names) <= 8
    assert {"aa.md", "aa.json", "ab.md", "ab.json", "summary.txt", "compare.db.gz"} <= set(names)
    aa = json.loads((out / "aa.json").read_text())
    ab = json.loads((out / "ab.json").read_text())
    assert aa["configurations"][0]["energy_per_sample_j"]["baseline_repetitions"] == 2
    assert ab["configurations"][0]["label"].endswith("bs16")  # the regression's batch
    import gzip
    import sqlite3

    db = tmp_path / "compare.db"
    db.write_bytes(gzip.decompress((out / "compare.db.gz").read_bytes()))
    with sqlite3.connect(db) as conn:  # every run carries its fingerprint
        prints = conn.execute("SELECT wattlab_version, torch_version FROM runs").fetchall()
    assert prints and all(w and t for w, t in prints)
    summary = (out / "summary.txt").read_text()
    assert f"exit {0 if aa['gate'] == 'passed' else 1}" in summary.splitlines()[0]
