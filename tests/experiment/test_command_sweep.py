"""Command sweeps end to end on the CPU: a small numpy script swept, stored and reported; a
failing command; kill -9 of the sweep (nothing of its tree survives), a second sweep refused,
resume with the abandoned run rerun; a stop signal stores the run failed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORK = """
import sys, time
mode, size = sys.argv[1], int(sys.argv[2])
import numpy as np
import wattlab

def work():
    a = np.random.default_rng(0).random((size, size))
    start = time.monotonic()
    while time.monotonic() - start < 0.3:
        a = a @ a
        a /= a.max()

print(mode, size, "start", flush=True)
if mode == "fail":
    print("boom: the script failed", file=sys.stderr)
    sys.exit(3)
if mode == "mark":
    with wattlab.budget(samples=size):
        work()
else:
    work()
print("done", flush=True)
"""

SPAWN = """
import os, pathlib, subprocess, sys, time
folder = pathlib.Path(sys.argv[1])
if (folder / "quick").exists():
    print("quick")
    sys.exit(0)
sleeper = subprocess.Popen(["sleep", "300"])
(folder / "pids").write_text(f"{os.getpid()} {sleeper.pid}")
time.sleep(300)
"""


def wattlab(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wattlab.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_spec(folder: Path, name: str, command: list[str], grid: dict, **more: object) -> Path:
    spec = {
        "name": name,
        "command": command,
        "grid": grid,
        "repetitions": 1,
        "order": "sequential",
        "warmup_runs": 0,
        "cooldown_s": 0,
        **more,
    }
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(spec))
    return path


def rows(db: Path, sql: str) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql)]
    finally:
        con.close()


def test_a_2x2_grid_with_repetitions_is_stored_and_reported(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(WORK)
    write_spec(
        tmp_path,
        "grid",
        [sys.executable, "work.py", "{mode}", "{batch_size}"],
        {"mode": ["mark", "whole"], "batch_size": [64, 96]},
        repetitions=2,
        baseline={"mode": "mark", "batch_size": 64},
    )
    done = wattlab("sweep", "grid.yaml", "--db", "g.db", "--cpu-tdp", "65", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = rows(tmp_path / "g.db", "SELECT * FROM runs ORDER BY id")
    assert len(runs) == 8 and {r["status"] for r in runs} == {"ok"}
    assert sorted((r["config_hash"], r["repetition"]) for r in runs) == sorted(
        {(r["config_hash"], rep) for r in runs for rep in (0, 1)}
    )
    for run in runs:
        assert run["model"] == "work.py" and run["launcher"] == "command"
        assert run["exit_code"] == 0 and run["energy_total_j"] > 0
        assert "done" in Path(run["stdout_path"]).read_text()
        assert Path(run["stderr_path"]).exists()
        marks = json.loads(run["command_json"])["marks"]
        if "mode=mark" in run["label"]:
            assert run["budget_window"] == "marked" and run["samples"] == run["batch_size"]
            assert run["duration_s"] < run["wall_s"]  # imports and start-up are outside
            assert len(marks) == 1 and marks[0]["ended_by"] == "mark"
        else:
            assert run["budget_window"] == "whole process" and run["samples"] is None
            assert run["duration_s"] == pytest.approx(run["wall_s"]) and marks == []
    windows = rows(tmp_path / "g.db", "SELECT DISTINCT name FROM windows")
    assert {w["name"] for w in windows} == {"budget", "run"}
    report = wattlab("report", "--db", "g.db", "--sweep", "grid", "--json", "-", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    summary = json.loads(report.stdout)
    assert len(summary["configurations"]) == 4
    assert all(c["n"] == 2 for c in summary["configurations"])
    assert summary["baseline"]["label"] == "work.py mode=mark batch_size=64"
    assert summary["pareto"] and summary["finding"]["sentence"]
    assert summary["budget_windows"]["marked"] == 4
    assert summary["budget_windows"]["whole_process"] == 4
    out = wattlab("report", "--db", "g.db", "--sweep", "grid", "--out", "rep", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the whole process" in (tmp_path / "rep" / "report.md").read_text()


def test_a_failing_command_is_stored_failed_with_its_exit_code_and_stderr(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(WORK)
    write_spec(tmp_path, "bad", [sys.executable, "work.py", "{mode}", "64"], {"mode": ["fail"]})
    done = wattlab("sweep", "bad.yaml", "--db", "b.db", cwd=tmp_path)
    assert done.returncode == 1
    (run,) = rows(tmp_path / "b.db", "SELECT * FROM runs")
    assert run["status"] == "failed" and run["exit_code"] == 3
    assert "exited with code 3" in run["error"] and "boom: the script failed" in run["error"]
    assert "boom" in Path(run["stderr_path"]).read_text()
    assert "fail 64 start" in Path(run["stdout_path"]).read_text()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _start_spawning_sweep(tmp_path: Path) -> tuple[subprocess.Popen[bytes], set[int]]:
    """A sweep of SPAWN (a script that starts a grandchild `sleep` and waits), once the
    script has started; with every process of its tree."""
    import psutil

    (tmp_path / "spawn.py").write_text(SPAWN)
    write_spec(
        tmp_path, "spawn", [sys.executable, "spawn.py", "{folder}"], {"folder": [str(tmp_path)]},
        repetitions=2,
    )  # fmt: skip
    sweep = subprocess.Popen(
        [sys.executable, "-m", "wattlab.cli", "sweep", "spawn.yaml", "--db", "k.db"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 300
    while not (tmp_path / "pids").exists() and time.time() < deadline:
        assert sweep.poll() is None, "the sweep ended before its script started"
        time.sleep(0.2)
    script_pid, sleep_pid = map(int, (tmp_path / "pids").read_text().split())
    tree = {p.pid for p in psutil.Process(sweep.pid).children(recursive=True)}
    assert {script_pid, sleep_pid} <= tree and len(tree) >= 3  # guard, script, sleep
    return sweep, tree


def _wait_gone(pids: set[int]) -> list[int]:
    deadline = time.time() + 30
    while time.time() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.2)
    return sorted(p for p in pids if not _gone(p))


def test_kill_9_leaves_nothing_alive_a_second_sweep_is_refused_and_resume_reruns(
    tmp_path: Path,
) -> None:
    sweep, tree = _start_spawning_sweep(tmp_path)
    try:
        second = wattlab("sweep", "spawn.yaml", "--db", "k.db", cwd=tmp_path)
        assert second.returncode == 2 and "already running" in second.stderr
        os.kill(sweep.pid, signal.SIGKILL)  # the sweep alone: its tree must follow by itself
        sweep.wait()
        assert _wait_gone(tree) == [], "a process of the killed sweep's tree survived"
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    (tmp_path / "quick").write_text("")
    done = wattlab("sweep", "spawn.yaml", "--db", "k.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = rows(tmp_path / "k.db", "SELECT status, repetition FROM runs ORDER BY id")
    assert runs[0]["status"] == "abandoned"
    ok = sorted(r["repetition"] for r in runs if r["status"] == "ok")
    assert ok == [0, 1] and "running" not in {r["status"] for r in runs}


def test_a_stop_signal_stores_the_run_failed_and_the_sweep_resumes(tmp_path: Path) -> None:
    sweep, tree = _start_spawning_sweep(tmp_path)
    try:
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(timeout=60) == 128 + signal.SIGTERM
        assert _wait_gone(tree) == []
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    (run,) = rows(tmp_path / "k.db", "SELECT status, error FROM runs")
    assert run["status"] == "failed" and "interrupted by signal 15" in run["error"]
    (tmp_path / "quick").write_text("")
    done = wattlab("sweep", "spawn.yaml", "--db", "k.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = [r["status"] for r in rows(tmp_path / "k.db", "SELECT status FROM runs")]
    assert statuses.count("ok") == 2
