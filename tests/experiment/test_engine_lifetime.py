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
from wattlab.experiment.sweep.lock import SweepLock

HOLD = """
import sys, time
from wattlab.experiment.sweep.lock import SweepLock
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
from wattlab.experiment.runs.lifetime import preexec_pdeathsig
code = (
    "from wattlab.experiment.runs.lifetime import die_with_parent; import time; "
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


IGNORES_SIGTERM = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_child_that_ignores_a_forwarded_stop_is_killed_with_its_group_after_the_grace():
    from wattlab.experiment.runs.lifetime import wait_stopping

    child = subprocess.Popen(
        [sys.executable, "-c", IGNORES_SIGTERM],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        os.killpg(child.pid, signal.SIGTERM)  # what the runner forwards; both ignore or outlive it
        code = wait_stopping(child, [signal.SIGTERM], grace_s=0.5)
        assert code == -signal.SIGKILL
        deadline = time.time() + 10
        while not _gone(grandchild) and time.time() < deadline:
            time.sleep(0.1)
        assert _gone(grandchild)  # the whole group, not only the leader
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # with no stop asked for, it just waits and returns the exit code
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], start_new_session=True)
    assert wait_stopping(done, [], grace_s=0.0) == 3


@pytest.mark.slow
def test_sigterm_stops_a_run_whose_other_node_never_comes(tmp_path):
    """A node whose partner never comes: SIGTERM to its runner, while torchrun's agent waits in
    the rendezvous, stops the run (forwarded to the agent's group, which is killed if it has
    not stopped after ``STOP_GRACE_S``), stores it as failed and leaves nothing running."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    db = tmp_path / "w.db"
    argv = [
        sys.executable, "-m", "wattlab.cli", "run", "--device", "cpu",
        "--model", "mobilenet_v3_small", "--stem", "imagenet", "--train-samples", "128",
        "--test-samples", "64", "--epochs", "1", "--batch-size", "64",
        "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--db", str(db),
    ]  # fmt: skip
    runner = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        import psutil

        deadline = time.time() + 120
        agent = None
        while agent is None and time.time() < deadline and runner.poll() is None:
            for process in psutil.Process(runner.pid).children(recursive=True):
                try:
                    line = " ".join(process.cmdline())  # torchrun, or wattlab's launcher of it
                    if "torch.distributed.run" in line or "local_rendezvous" in line:
                        agent = process.pid
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.2)
        assert agent is not None, "torchrun's agent never started"
        time.sleep(3)  # into the rendezvous, waiting for node 1
        left = _descendants(runner.pid)
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=120)  # not the rendezvous' own 15-minute timeout
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode != 0
    deadline = time.time() + 10
    while any(not _gone(pid) for pid in left) and time.time() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in left), err.decode()[-2000:]
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT status, error FROM runs").fetchall()
    assert rows == [("failed", "interrupted by signal 15 before the run was stored")]
