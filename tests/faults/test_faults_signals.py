"""Second fault campaign, signals (issue #25 item 6): Ctrl-C at any moment is exit 130 and one
line; SIGHUP is SIGTERM; a signal during a run is 128 + N with the run stored failed naming
the signal; `monitor` stops the command's whole group, grandchildren included, on every way
out (SIGTERM, SIGINT, SIGHUP, kill -9 of wattlab)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import wattlab
from wattlab.experiment.db.store import open_store

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WATTLAB = [sys.executable, "-m", "wattlab.cli"]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


def _before_python(done: subprocess.CompletedProcess[str]) -> bool:
    """The signal came while Python itself was starting (importing `site`), before any line
    of wattlab ran: Python's own start-up, which no program can take over."""
    return "init_import_site" in done.stderr


def _assert_one_line_130(
    done: subprocess.CompletedProcess[str], what: str, *, command_ran: bool = False
) -> None:
    """130 and the one line; with ``command_ran`` (monitor: the signal reached the command,
    which died of it, and monitor exits with its code, 128 + 2) no line is fine too."""
    if _before_python(done):
        return
    assert "Traceback" not in done.stderr, f"{what}: {done.stderr[-2000:]}"
    # -2: the signal came before Python itself had started (no line is possible there)
    assert done.returncode in (130, -signal.SIGINT), f"{what}: rc {done.returncode}"
    if done.returncode == 130:
        lines = [line for line in done.stderr.splitlines() if line.startswith("wattlab:")]
        allowed = ([], ["wattlab: interrupted"]) if command_ran else (["wattlab: interrupted"],)
        assert lines in allowed, f"{what}: {done.stderr[-2000:]}"


def _interrupt_after(args: list[str], delay_s: float, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [*WATTLAB, *args], cwd=cwd, env=ENV, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


DELAYS_S = (0.15, 0.3, 0.45, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.5)


@pytest.mark.slow
def test_ctrl_c_during_report_start_up_is_130_and_one_line(tmp_path):
    db = tmp_path / "r.db"
    with open_store(db) as store:
        row = {"sweep": None, "config_hash": "h", "repetition": 0, "config_json": {},
               "label": "x", "status": "ok", "energy_total_j": 1.0, "duration_s": 1.0}  # fmt: skip
        store.insert_run(row)
    finished = 0
    for delay in DELAYS_S:
        done = _interrupt_after(["report", "--db", str(db), "--json", "-"], delay, tmp_path)
        if done.returncode == 0 or _before_python(done):  # the signal did not land in wattlab
            finished += 1
            continue
        _assert_one_line_130(done, f"report, Ctrl-C after {delay} s")
    assert finished < len(DELAYS_S), "no Ctrl-C landed while the report started"


@pytest.mark.slow
def test_ctrl_c_during_monitor_start_up_is_130_and_one_line(tmp_path):
    for delay in DELAYS_S:
        done = _interrupt_after(["monitor", "--", "sleep", "30"], delay, tmp_path)
        # the line also when the Ctrl-C reached the command (or its guard, still starting)
        _assert_one_line_130(done, f"monitor, Ctrl-C after {delay} s")


PACKAGE_DIR = Path(wattlab.__file__).resolve().parent  # wattlab's own code, and nothing else
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')


def _wattlab_frames(stderr: str) -> list[str]:
    """The traceback's frames in wattlab's own code: in the package's folder, not any path that
    happens to hold a folder called wattlab (a clone named wattlab keeps its .venv there)."""
    frames = []
    for line in stderr.splitlines():
        match = _FRAME.match(line)
        if match and Path(match["path"]).resolve().is_relative_to(PACKAGE_DIR):
            frames.append(line)
    return frames


def test_only_frames_in_the_package_count_as_wattlabs_own_code(tmp_path):
    """Issue 48: in a clone named wattlab, the venv's own frames (.../wattlab/.venv/...) counted
    as wattlab's, and a Ctrl-C during Python's start-up failed the test."""
    clone = tmp_path / "wattlab"
    venv_frame = f'  File "{clone}/.venv/lib/python3.11/site-packages/torch/__init__.py", line 9'
    assert _wattlab_frames(f"Traceback (most recent call last):\n{venv_frame}, in <module>\n") == []
    own = f'  File "{PACKAGE_DIR / "cli" / "app.py"}", line 3, in main'
    assert _wattlab_frames(f"Traceback (most recent call last):\n{own}\n") == [own]
    interrupted = subprocess.CompletedProcess(
        [],
        -signal.SIGINT,
        "",
        f"Traceback (most recent call last):\n{venv_frame}\nKeyboardInterrupt\n",
    )
    assert _before_wattlab(interrupted)


def _before_wattlab(done: subprocess.CompletedProcess[str]) -> bool:
    """The signal came while Python itself started (site, runpy finding the package): no line
    of wattlab's code had run, so nothing of wattlab is in the traceback and no line was said.
    Python's own start-up is out of any program's reach."""
    said = any(line.startswith("wattlab:") for line in done.stderr.splitlines())
    if said or _wattlab_frames(done.stderr):
        return False
    return "Traceback" in done.stderr or (done.returncode == -signal.SIGINT and not done.stderr)


FINE_DELAYS_S = tuple(round(0.02 + 0.01 * i, 2) for i in range(30))  # 0.02 to 0.31 s


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [["report", "--db", "r.db", "--json", "-"], ["monitor", "--", "sleep", "30"]],
    ids=["report", "monitor"],
)
def test_ctrl_c_at_every_moment_of_start_up_is_130_and_one_line(tmp_path, args):
    """Issue 33: in 4-5 of 10 tries a Ctrl-C during start-up printed a traceback (a SystemExit
    raised into a dataclass's __set_name__ became a RuntimeError) or ended by SIGINT (-2)
    after the line (Python does so once a KeyboardInterrupt went through an exec). Every
    moment after Python's own start-up must give the one line and exactly 130."""
    with open_store(tmp_path / "r.db") as store:
        row = {"sweep": None, "config_hash": "h", "repetition": 0, "config_json": {},
               "label": "x", "status": "ok", "energy_total_j": 1.0, "duration_s": 1.0}  # fmt: skip
        store.insert_run(row)
    landed = 0
    for delay in FINE_DELAYS_S:
        done = _interrupt_after(args, delay, tmp_path)
        if _before_wattlab(done) or done.returncode == 0:
            continue
        landed += 1
        assert "Traceback" not in done.stderr, f"{delay} s: {done.stderr[-2000:]}"
        assert done.returncode == 130, f"{delay} s: rc {done.returncode}: {done.stderr[-2000:]}"
        lines = [line for line in done.stderr.splitlines() if line.startswith("wattlab:")]
        assert lines == ["wattlab: interrupted"], f"{delay} s: {done.stderr[-2000:]}"
    assert landed >= len(FINE_DELAYS_S) // 2, "too few Ctrl-C landed in wattlab's start-up"


@pytest.mark.slow
def test_ctrl_c_while_the_guard_starts_is_130_without_a_traceback_and_no_command():
    """A Ctrl-C that reaches the guard's group while its Python is still importing waits
    (SIGINT blocked) and then stops it quietly: 130, no traceback, the command never runs."""
    from wattlab.experiment.runs.command_meter import guarded, start_command

    for delay_s in (0.0, 0.005, 0.01, 0.02, 0.03, 0.05) * 3:
        started = time.monotonic()
        child = start_command(
            guarded(["sleep", "30"]), start_new_session=True, stderr=subprocess.PIPE
        )
        time.sleep(delay_s)
        os.killpg(child.pid, signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert b"Traceback" not in err, (delay_s, err[-2000:])
        assert child.returncode == 130, (delay_s, child.returncode)
        assert time.monotonic() - started < 20, "the command ran on after the Ctrl-C"


HANDLES_CTRL_C = """
import signal, sys, time
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))  # a script that saves and exits cleanly
print("up", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_the_commands_own_code_when_it_handles_it(tmp_path):
    """The Ctrl-C reached wattlab and the command: one line; the exit code is the command's
    (it saved and exited 0), in the JSON too."""
    import json

    (tmp_path / "handles.py").write_text(HANDLES_CTRL_C)
    proc = subprocess.Popen(
        [*WATTLAB, "monitor", "--json", "m.json", "--", sys.executable, "handles.py"],
        cwd=tmp_path, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [line for line in err.splitlines() if line.startswith("wattlab:")] == [
        "wattlab: interrupted"
    ]
    assert json.loads((tmp_path / "m.json").read_text())["exit_code"] == 0


SPAWNS_A_GRANDCHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen(["sh", "-c", "sleep 40"])
print(grandchild.pid, flush=True)
time.sleep(60)
"""


def _monitor_with_grandchild(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """`wattlab monitor -- python -c SPAWNS_A_GRANDCHILD`, once the grandchild is up; with the
    pids of every process under wattlab."""
    import psutil

    (tmp_path / "spawn.py").write_text(SPAWNS_A_GRANDCHILD)
    proc = subprocess.Popen(
        [*WATTLAB, "monitor", "--", sys.executable, "spawn.py"], cwd=tmp_path, env=ENV,
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    grandchild_sh = int(proc.stdout.readline())
    deadline = time.time() + 30
    tree: list[int] = []
    while time.time() < deadline:
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        sleeps = [p for p in tree if p != grandchild_sh and _name(p) == "sleep"]
        if grandchild_sh in tree and sleeps:
            break
        time.sleep(0.1)
    assert grandchild_sh in tree and len(tree) >= 4, tree  # guard, script, sh, sleep
    return proc, tree


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL])
def test_monitor_stops_the_whole_group_grandchildren_included(tmp_path, signum):
    proc, tree = _monitor_with_grandchild(tmp_path)
    try:
        proc.send_signal(signum)
        proc.communicate(timeout=60)
        assert _wait_gone(tree) == [], f"outlived `wattlab monitor` after signal {signum}"
        if signum != signal.SIGKILL:
            assert proc.returncode == 128 + signum  # the command died of the forwarded signal
    finally:
        for pid in tree:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


TINY_SPEC = """
name: hup
base: {model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 2048,
       test_samples: 64, epochs: 50, batch_size: 16, warmup_steps: 1}
grid: {precision: [fp32]}
repetitions: 2
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_a_sweep_run_is_128_plus_n_and_stores_it_failed(tmp_path, signum):
    spec = tmp_path / "hup.yaml"
    spec.write_text(TINY_SPEC)
    db = tmp_path / "h.db"
    sweep = subprocess.Popen(
        [*WATTLAB, "sweep", str(spec), "--db", str(db)], cwd=tmp_path, env=ENV, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.time() + 300
        running = 0
        while time.time() < deadline and not running:
            time.sleep(0.3)
            if db.exists():
                try:
                    con = sqlite3.connect(db, timeout=5)
                    (running,) = con.execute(
                        "SELECT COUNT(*) FROM runs WHERE status = 'running'"
                    ).fetchone()
                    con.close()
                except sqlite3.OperationalError:
                    continue
        assert running, "the sweep did not start a run in time"
        time.sleep(3)  # into the training
        sweep.send_signal(signum)
        _, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, error FROM runs").fetchall()
    con.close()
    assert [status for status, _ in rows] == ["failed"], (rows, err[-3000:])
    assert f"signal {int(signum)}" in rows[0][1]
    if signum != signal.SIGINT:  # a sweep's stop line says what is true of it (issue 50)
        assert "is stored as failed (run the sweep again to resume)." in err, err[-2000:]


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), "interrupted"])
@pytest.mark.extra("train")
def test_a_stop_after_the_claim_before_signals_are_forwarded_stores_the_run_failed(tmp_path, stop):
    """The window between the claim and the launcher's forwarding handler: the stop still
    finishes the claim as failed, naming the signal; nothing stays 'running'."""
    from wattlab.errors import Interrupted
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.runs import runner
    from wattlab.train.config import make_run_config

    error = Interrupted(1) if stop == "interrupted" else stop
    signum = 1 if stop == "interrupted" else 2

    class StopsAtOnce:
        def run(self, cfg, opts, ctx, store):
            raise error

    db = tmp_path / "w.db"
    open_store(db).close()
    cfg = make_run_config(model="mobilenet_v3_small", device="cpu", epochs=1)
    with pytest.raises(type(error)):
        runner.run(cfg, WorkerOptions(db_path=str(db), sweep="s", progress=False),
                   warm=StopsAtOnce())  # fmt: skip
    with open_store(db, readonly=True) as store:
        runs = store.runs()
    assert runs["status"].tolist() == ["failed"]
    assert f"interrupted by signal {signum}" in runs["error"].iloc[0]


# --- a signal during `wattlab run` ---------------------------------------------------------
# a tiny CPU run with far more epochs than the test waits for
TINY_RUN_ARGS = ["--model", "mobilenet_v3_small", "--stem", "imagenet", "--device", "cpu",
            "--train-samples", "2048", "--test-samples", "64", "--epochs", "50",
            "--batch-size", "16", "--warmup-steps", "1", "--no-progress"]  # fmt: skip


def _running_rows(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(db, timeout=5)
        try:
            (running,) = con.execute(
                "SELECT COUNT(*) FROM runs WHERE status = 'running'"
            ).fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError:  # not created yet, or busy
        return 0
    return int(running)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_run_is_128_plus_n_and_stores_it_failed(tmp_path, signum):
    db = tmp_path / "r.db"
    run = subprocess.Popen(
        [*WATTLAB, "run", *TINY_RUN_ARGS, "--db", str(db)], cwd=tmp_path, env=ENV, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.time() + 40
        while time.time() < deadline and run.poll() is None and not _running_rows(db):
            time.sleep(0.2)
        assert _running_rows(db) == 1, "the run did not claim its row in time"
        time.sleep(2)  # into the training
        assert run.poll() is None, "the run ended before the signal"
        run.send_signal(signum)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("wattlab:")]
    assert len(lines) == 1, err[-2000:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, error FROM runs").fetchall()
    con.close()
    assert [status for status, _ in rows] == ["failed"], (rows, err[-2000:])
    assert f"signal {int(signum)}" in rows[0][1], rows
    if signum != signal.SIGINT:  # a lone run: no sweep to run again (issue 50)
        assert (
            lines[0]
            == f"wattlab: stopped by signal {int(signum)}; a run cut short is stored as failed."
        )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_the_warm_worker_imports_is_answered_not_swallowed(signum):
    """torch's C start-up imports numpy and drops whatever that raises, a KeyboardInterrupt
    included: a Ctrl-C forwarded while the worker imported was lost and the worker trained on
    (CI saw a sweep hang past 120 s). The worker now starts with the stop signals blocked and
    raises one that came meanwhile once its imports are done: 128 + N, whenever it came."""
    from wattlab.experiment.runs.warm import _preexec_worker

    worker = subprocess.Popen(
        [*WATTLAB[:1], "-m", "wattlab.experiment.runs.warm"], env=ENV, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=_preexec_worker, start_new_session=True,
    )  # fmt: skip
    try:
        worker.send_signal(signum)  # it is still starting: its imports take seconds
        time.sleep(0.5)
        out, err = worker.communicate(timeout=120)  # its input ends: it would leave with 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err and out == ""  # no job was read: nothing to answer


LOSES_CTRL_C = """
import os, pathlib, signal
from torch import nn

def deaf_cnn(num_classes):
    if os.environ.get("WATTLAB_PARENT_PID"):  # in the sweep's worker, not its checks
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as if a library swallowed it
        pathlib.Path("deaf.pid").write_text(str(os.getpid()))
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, num_classes))
"""


@pytest.mark.slow
def test_a_warm_worker_that_does_not_stop_on_ctrl_c_is_killed_and_its_run_stored_failed(
    tmp_path,
):
    """Whatever the worker makes of a forwarded Ctrl-C, the sweep stops: STOP_GRACE_S after
    the signal it kills the worker's process group, stores the run failed naming the signal
    and exits 130 in one line."""
    from wattlab.experiment.runs.lifetime import STOP_GRACE_S

    (tmp_path / "deaf.py").write_text(LOSES_CTRL_C)
    spec = tmp_path / "deaf.yaml"
    spec.write_text(
        TINY_SPEC.replace(
            "model: mobilenet_v3_small, stem: imagenet", "model_factory: deaf.py:deaf_cnn"
        ).replace("epochs: 50", "epochs: 5000")  # minutes of training for a worker left alone
    )
    db = tmp_path / "d.db"
    sweep = subprocess.Popen(
        [*WATTLAB, "sweep", str(spec), "--db", str(db)], cwd=tmp_path, env=ENV, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    marker = tmp_path / "deaf.pid"
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not marker.exists() and sweep.poll() is None:
            time.sleep(0.2)
        assert marker.exists(), "the worker did not build the model in time"
        time.sleep(1)  # into the training
        worker = int(marker.read_text())
        sent = time.monotonic()
        sweep.send_signal(signal.SIGINT)
        _, err = sweep.communicate(timeout=120)
        took_s = time.monotonic() - sent
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "wattlab: interrupted" in err
    assert took_s >= STOP_GRACE_S  # it was given its grace, then killed
    assert not _wait_gone([worker], 10.0), "the worker outlived the sweep"
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, error FROM runs").fetchall()
    con.close()
    assert [status for status, _ in rows] == ["failed"], rows
    assert "signal 2" in rows[0][1] and "killed" in rows[0][1], rows


@pytest.mark.extra("train")
def test_a_ctrl_c_swallowed_before_a_run_stops_it_before_its_claim(tmp_path):
    """`wattlab run` imports torch after its handlers are in place; a Ctrl-C whose
    KeyboardInterrupt torch's start-up ate is raised before the run is claimed."""
    from wattlab import stop_signals
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.runs import runner
    from wattlab.train.config import make_run_config

    class MustNotRun:
        ran = False

        def run(self, cfg, opts, ctx, store):
            MustNotRun.ran = True
            raise AssertionError("the run started")

    db = tmp_path / "w.db"
    open_store(db).close()
    cfg = make_run_config(model="mobilenet_v3_small", device="cpu", epochs=1)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stop_signals.install()
    try:
        try:  # a library's import, eating the interrupt
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass
        with pytest.raises(KeyboardInterrupt):
            runner.run(cfg, WorkerOptions(db_path=str(db), sweep="s", progress=False),
                       warm=MustNotRun())  # fmt: skip
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        stop_signals.RECEIVED.clear()
    assert not MustNotRun.ran
    with open_store(db, readonly=True) as store:
        assert store.runs().empty  # nothing claimed, nothing left running


# -- issue #50 item 7: the line says what a stop leaves behind only where it is true -----------
def test_the_stop_line_speaks_of_stored_runs_only_where_runs_are_stored(monkeypatch) -> None:
    from wattlab import stop_signals

    monkeypatch.setattr(stop_signals, "_AT_STAKE", [])
    line, code = stop_signals.stopped_line(signal.SIGTERM)
    assert (line, code) == ("wattlab: stopped by signal 15.", 143)  # compare, advise, monitor
    stop_signals.at_stake(stop_signals.SWEEP_AT_STAKE)
    line, _ = stop_signals.stopped_line(signal.SIGTERM)
    assert line == (
        "wattlab: stopped by signal 15; a run cut short is stored as failed (run the sweep "
        "again to resume)."
    )
    stop_signals.at_stake(stop_signals.RUN_AT_STAKE)
    assert "sweep" not in stop_signals.stopped_line(signal.SIGHUP)[0]
    assert stop_signals.stopped_line(signal.SIGINT) == ("wattlab: interrupted", 130)


@pytest.mark.parametrize("after_s", [0.5, 4.0])  # during the imports, and once it measures
def test_sigterm_to_monitor_says_nothing_of_stored_runs(tmp_path, after_s) -> None:
    proc = subprocess.Popen(
        [*WATTLAB, "monitor", "--", "sleep", "30"], cwd=tmp_path, env=ENV, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        time.sleep(after_s)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err
    assert "stopped by signal 15" in err and "stored" not in err and "sweep" not in err, err
