"""Nothing outlives its parent: the sweep lock, the parent-death signal, a killed sweep."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.sweep_lock import SweepLock

HOLD = """
import sys, time
from wattlab.experiment.sweep_lock import SweepLock
lock = SweepLock(sys.argv[1], "s").acquire()
print("held", flush=True)
time.sleep(120)
"""


def _hold_lock(db: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_live_holder_refuses_a_second_sweep_and_a_dead_one_is_taken_over(tmp_path: Path):
    db = tmp_path / "l.db"
    holder = _hold_lock(db)
    try:
        with pytest.raises(ConfigError, match=rf"already running .* process {holder.pid}"):
            SweepLock(db, "s").acquire()
        with SweepLock(db, "other"):  # another sweep name on the same database is free
            pass
    finally:
        holder.kill()
        holder.wait()
    with SweepLock(db, "s"):  # the dead holder's lock is ours now
        with pytest.raises(ConfigError, match="already running"):
            SweepLock(db, "s").acquire()


CHILD_OF_CHILD = """
import subprocess, sys, time
from wattlab.experiment.lifetime import preexec_pdeathsig
code = (
    "from wattlab.experiment.lifetime import die_with_parent; import time; "
    "die_with_parent(); time.sleep(120)"
)
grandchild = subprocess.Popen([sys.executable, "-c", code], preexec_fn=preexec_pdeathsig)
print(grandchild.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie has finished; only its exit status is left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_parent_killed_by_sigkill():
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD_OF_CHILD], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    grandchild = int(parent.stdout.readline())
    assert not _gone(grandchild)
    parent.kill()
    parent.wait()
    deadline = time.time() + 10
    while not _gone(grandchild) and time.time() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)


def _descendants(pid: int) -> set[int]:
    import psutil

    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


TINY_SPEC = """
name: tiny
base: {model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 256,
       test_samples: 128, epochs: 1, batch_size: 64, warmup_steps: 1}
grid: {precision: [fp32]}
repetitions: 3
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", ["tiny"])
def test_kill_9_of_a_sweep_leaves_nothing_running_and_resume_runs_each_once(tmp_path, spec_name):
    """SIGKILL of `wattlab sweep` (the sweep process alone) mid-run: 5 s later no process it
    started is alive; the resumed sweep marks the run in flight abandoned and stores every
    planned run as ok exactly once, in an intact database."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY_SPEC)
    db = tmp_path / "k.db"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "wattlab.cli", "sweep", str(spec), "--db", str(db)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 600
    ok = running = 0
    while time.time() < deadline and not (ok >= 1 and running >= 1):
        time.sleep(0.3)
        if db.exists():
            try:
                con = sqlite3.connect(db, timeout=5)
                counts = dict(con.execute("SELECT status, COUNT(*) FROM runs GROUP BY status"))
                con.close()
            except sqlite3.OperationalError:
                continue
            ok, running = counts.get("ok", 0), counts.get("running", 0)
    children = _descendants(sweep.pid)
    os.kill(sweep.pid, signal.SIGKILL)  # the sweep alone: its children must follow by themselves
    sweep.wait()
    assert ok >= 1 and running >= 1, "the sweep did not reach its second run in time"
    assert children, "the sweep had started no worker"
    time.sleep(5)
    alive = [pid for pid in children if not _gone(pid)]
    assert alive == [], f"still running 5 s after the sweep was killed: {alive}"
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "sweep", str(spec), "--db", str(db)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    con = sqlite3.connect(db)
    reps = con.execute(
        "SELECT repetition, COUNT(*) FROM runs WHERE status='ok' GROUP BY repetition"
    ).fetchall()
    assert sorted(reps) == [(0, 1), (1, 1), (2, 1)]
    statuses = [s for (s,) in con.execute("SELECT status FROM runs")]
    assert "abandoned" in statuses and "running" not in statuses
    errors = [e for (e,) in con.execute("SELECT error FROM runs WHERE error IS NOT NULL")]
    assert not any("AlreadyStored" in e for e in errors)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
