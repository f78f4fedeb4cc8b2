"""Third fault campaign (issue 33), command sweeps: a run whose argv cannot be started, or whose
budget mark carries absurd samples, is refused before its claim or stored failed with one
sentence, never left `running`; a command's kept output is bounded; nothing the command starts
outlives the sweep, and the guard does not linger once the command's group is gone.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wattlab.experiment.specs.command import CommandPoint

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _rows(db: Path, sql: str = "SELECT * FROM runs ORDER BY id") -> list[dict]:
    if not db.exists():
        return []
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql)]
    finally:
        con.close()


def _spec(folder: Path, command: list[str], grid: dict, name: str = "s") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "command": command, "grid": grid,
                                "repetitions": 1, "order": "sequential", "warmup_runs": 0,
                                "cooldown_s": 0}))  # fmt: skip
    return path


def _sweep(folder: Path, spec: Path, db: str = "c.db", timeout: float = 300):
    return subprocess.run(
        [*WATTLAB, "sweep", str(spec), "--db", db, "--cpu-tdp", "65"],
        cwd=folder, capture_output=True, text=True, timeout=timeout, env=ENV,
    )  # fmt: skip


def _one_sentence(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("wattlab: error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


# -- argv that cannot be started: refused before the claim ----------------------------------------


@pytest.mark.slow  # a CLI subprocess each
@pytest.mark.parametrize(
    ("grid", "words"),
    [
        ({"x": ["a\x00b"]}, "null"),
        ({"x": ["y" * 300_000]}, "too long"),  # one argument beyond Linux's 128 KiB
        ({"x": ["y" * 100_000], "z": ["w" * 100_000]}, "too long"),  # noqa: E202
    ],
    ids=["nul-byte", "one-argument-too-long", "argv-too-long"],
)
def test_an_argv_that_cannot_start_is_refused_before_any_claim(
    tmp_path: Path, grid: dict, words: str
) -> None:
    placeholders = [f"{{{axis}}}" for axis in grid]
    if words == "too long" and len(grid) > 1:  # the whole argv too long: repeat the axes
        placeholders = placeholders * 12
    spec = _spec(tmp_path, [sys.executable, "-c", "pass", *placeholders], grid)
    done = _sweep(tmp_path, spec)
    assert done.returncode == 2, done.stderr[-3000:]
    assert words in _one_sentence(done.stderr)
    assert _rows(tmp_path / "c.db") == []  # nothing claimed, nothing left running


def _point(argv: list[str]) -> CommandPoint:
    return CommandPoint(axes={"x": 1}, argv=argv, env={}, cwd=None, model="x", label="x x=1",
                        config_hash="f00d", columns={})  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([sys.executable, "-c", "pass", "a\x00b"], "null byte"),
        ([sys.executable, "-c", "pass", *(["y" * 100_000] * 40)], "too long"),
    ],
    ids=["nul-byte", "argv-too-long"],
)
def test_a_run_that_cannot_start_is_stored_failed_not_left_running(
    tmp_path: Path, argv: list[str], words: str
) -> None:
    """Past the plan's checks (a point made by hand), the run is stored failed, in one
    sentence, with a shell's exit code: never left `running`, never a traceback."""
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.sweep.command_plan import CommandOptions, run_point

    db = tmp_path / "c.db"
    with open_store(db) as store:
        store.register_sweep("s", {"kind": "command"}, "h", 0)
    outcome = run_point(_point(argv), 0, "s", CommandOptions(str(db), cpu_tdp_w=65.0))
    (run,) = _rows(db)
    assert run["status"] == "failed" and outcome.status == "failed"
    assert run["exit_code"] == 126
    assert words in run["error"] and "\n" not in run["error"], run["error"]


# -- budget samples: a whole number the database can hold ------------------------------------------

MARKED = """
import wattlab
with wattlab.budget(samples={samples}):
    sum(range(1000))
"""


@pytest.mark.slow  # a sweep each
@pytest.mark.parametrize(
    "samples",
    ["10**40", "float('inf')", "float('nan')", "-5", "2**63"],
)
def test_absurd_budget_samples_are_stored_failed_in_one_sentence(
    tmp_path: Path, samples: str
) -> None:
    (tmp_path / "mark.py").write_text(MARKED.format(samples=samples))
    spec = _spec(tmp_path, [sys.executable, "mark.py", "{x}"], {"x": [1]})
    done = _sweep(tmp_path, spec)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]
    (run,) = _rows(tmp_path / "c.db")
    assert run["status"] == "failed", run
    assert "samples" in run["error"] and "\n" not in run["error"], run["error"]
    assert run["samples"] is None


# -- a command's output is kept, bounded: its tail ------------------------------------------------

LOUD = """
import sys
line = b"x" * 1023 + b"\\n"
out = sys.stdout.buffer
for i in range({lines}):
    out.write(line)
out.write(b"the last line\\n")
out.flush()
sys.stderr.write("bye\\n")
"""


def test_a_commands_kept_output_is_capped_to_its_tail_and_says_so(tmp_path: Path) -> None:
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.sweep.command_plan import CommandOptions, run_point

    (tmp_path / "loud.py").write_text(LOUD.format(lines=20 * 1024))  # 20 MiB
    db = tmp_path / "c.db"
    with open_store(db) as store:
        store.register_sweep("s", {"kind": "command"}, "h", 0)
    opts = CommandOptions(str(db), cpu_tdp_w=65.0, keep_output_bytes=2**20)
    point = _point([sys.executable, str(tmp_path / "loud.py")])
    outcome = run_point(point, 0, "s", opts)
    assert outcome.status == "ok", outcome
    (run,) = _rows(db)
    kept = Path(run["stdout_path"]).read_bytes()
    assert len(kept) <= 2**20 + 200, len(kept)
    first, _, rest = kept.partition(b"\n")
    assert b"kept only the last 1 MiB" in first and b"dropped" in first, first
    assert rest.endswith(b"x\nthe last line\n")
    assert Path(run["stderr_path"]).read_bytes() == b"bye\n"  # small output: kept whole


@pytest.mark.slow  # a sweep
def test_a_sweep_keeps_at_most_the_default_tail_of_a_huge_output(tmp_path: Path) -> None:
    from wattlab.experiment.runs.command_output import KEEP_OUTPUT_BYTES

    lines = (KEEP_OUTPUT_BYTES * 3) // 1024  # three times what is kept
    (tmp_path / "loud.py").write_text(LOUD.format(lines=lines))
    spec = _spec(tmp_path, [sys.executable, "loud.py", "{x}"], {"x": [1]})
    done = _sweep(tmp_path, spec)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = _rows(tmp_path / "c.db")
    path = Path(run["stdout_path"])
    assert path.stat().st_size <= KEEP_OUTPUT_BYTES + 200
    with path.open("rb") as handle:
        assert b"dropped" in handle.readline()
        handle.seek(-14, os.SEEK_END)
        assert handle.read() == b"the last line\n"


# -- nothing outlives the sweep, and the guard does not linger ------------------------------------

ESCAPE = """
import os, pathlib, subprocess, sys, time
folder = pathlib.Path(sys.argv[1])
# a grandchild in a session of its own, and one more below it
escaped = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"],
    start_new_session=True)
time.sleep(0.5)
(folder / "pids").write_text(f"{os.getpid()} {escaped.pid}")
if sys.argv[2] == "exit":
    sys.exit(0)
time.sleep(300)
"""


def _tree_of(pid: int) -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process(pid).children(recursive=True)}


def _alive(pids: set[int]) -> set[int]:
    import psutil

    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_gone(pids: set[int], timeout_s: float = 30.0) -> set[int]:
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline and _alive(pids):
        time.sleep(0.1)
    return _alive(pids)


def _escaping_sweep(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], set[int]]:
    import time

    (tmp_path / "escape.py").write_text(ESCAPE)
    spec = _spec(tmp_path, [sys.executable, "escape.py", str(tmp_path), "{mode}"],
                 {"mode": [mode]})  # fmt: skip
    sweep = subprocess.Popen(
        [*WATTLAB, "sweep", str(spec), "--db", "c.db", "--cpu-tdp", "65"],
        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.time() + 300
    while not (tmp_path / "pids").exists() and time.time() < deadline:
        assert sweep.poll() is None, sweep.stderr.read() if sweep.stderr else ""
        time.sleep(0.1)
    time.sleep(0.5)  # the escaped process has started its own child
    script, escaped = map(int, (tmp_path / "pids").read_text().split())
    return sweep, {script, escaped}


def _kill_all(pids: set[int]) -> None:
    """Clean up after a failed test: what survived is killed (by its pid)."""
    import signal

    for pid in _alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _whole_tree(started: set[int], sweep_pid: int | None = None) -> set[int]:
    tree = set(started) | (_tree_of(sweep_pid) if sweep_pid else set())
    for pid in list(tree):
        if _alive({pid}):
            tree |= _tree_of(pid)
    return tree


@pytest.mark.slow  # a sweep
def test_a_setsid_grandchild_dies_with_a_killed_sweep(tmp_path: Path) -> None:
    import signal

    sweep, started = _escaping_sweep(tmp_path, "stay")
    tree = _whole_tree(started, sweep.pid)
    try:
        assert len(tree) >= 4  # guard, script, escaped, its sleep
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
        assert _wait_gone(tree) == set(), "a process the command started outlived the sweep"
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        _kill_all(tree)


@pytest.mark.slow  # a sweep
def test_a_setsid_grandchild_left_by_a_finished_command_is_stopped(tmp_path: Path) -> None:
    sweep, started = _escaping_sweep(tmp_path, "exit")
    tree = _whole_tree(started)
    try:
        sweep.communicate(timeout=300)
        assert _wait_gone(tree, 10) == set(), "the command's setsid grandchild outlived its run"
    finally:
        _kill_all(tree)


@pytest.mark.slow  # a sweep
def test_the_guard_ends_at_once_when_the_sweep_is_killed_and_the_command_stops(
    tmp_path: Path,
) -> None:
    """The command stops on SIGTERM at once; the guard must not wait out its grace period."""
    import signal
    import time

    import psutil

    (tmp_path / "pids").write_text("")
    spec = _spec(tmp_path, ["sleep", "{s}"], {"s": [300]})
    sweep = subprocess.Popen(
        [*WATTLAB, "sweep", str(spec), "--db", "c.db", "--cpu-tdp", "65"],
        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.time() + 300
        tree: set[int] = set()
        while time.time() < deadline:
            tree = _tree_of(sweep.pid)
            names = {psutil.Process(p).name() for p in _alive(tree)}
            if "sleep" in names:
                break
            time.sleep(0.1)
        assert tree, "the command never started"
        time.sleep(0.5)
        os.kill(sweep.pid, signal.SIGKILL)
        killed = time.monotonic()
        sweep.wait()
        assert _wait_gone(tree, 30) == set()
        assert time.monotonic() - killed < 2.5, "the guard waited out its grace period"
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
