"""Third fault campaign (issue 33), `kill -9` of a writer: `wattlab report` and `wattlab export`
killed at random moments leave either no output folder or a whole one (a new folder appears at
once, complete), never a folder with some of its files, and no temporary file or folder
behind; into an existing folder every file is whole (the old one or the new one)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.experiment.test_store import WINDOWS, make_run
from wattlab.experiment.db.store import open_store

pytestmark = pytest.mark.slow  # the CLI, killed many times

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WATTLAB = [sys.executable, "-m", "wattlab.cli"]
TRIES = 8


def _database(folder: Path) -> Path:
    db = folder / "r.db"
    with open_store(db) as store:
        for i, batch in enumerate((32, 64, 128, 256)):
            for rep in range(3):
                run = make_run(config_hash=f"c{i}", repetition=rep, batch_size=batch,
                               label=f"resnet18 bs{batch}", energy_total_j=1000.0 + 50 * i + rep,
                               duration_s=10.0 + i, gpus=1, precision="fp32")  # fmt: skip
                trace = [(0.5 * t, "gpu:0", 100.0 + t) for t in range(40)]
                store.insert_run(run, WINDOWS, trace)
    return db


def _complete(args: list[str], cwd: Path) -> float:
    """Run it whole once; how long it took."""
    started = time.monotonic()
    done = subprocess.run([*WATTLAB, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return time.monotonic() - started


def _killed(args: list[str], cwd: Path, after_s: float) -> None:
    proc = subprocess.Popen([*WATTLAB, *args], cwd=cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(after_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _leftovers(folder: Path, expected: set[str]) -> set[str]:
    """Names under ``folder`` (recursively, hidden ones included) beyond ``expected``, once any
    cleaner is done."""
    deadline = time.time() + 30  # a cleaner is a process: on a loaded runner it starts late
    while True:
        try:
            found = {str(p.relative_to(folder)) for p in folder.rglob("*")} - expected
        except FileNotFoundError as gone:  # a cleaner removes a staging folder as we walk it
            found = {f"{gone.filename} (being removed)"}
        if not found or time.time() > deadline:
            return found
        time.sleep(0.1)


def _whole_png(data: bytes) -> bool:
    return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")


def _check_whole(folder: Path) -> None:
    for path in folder.iterdir():
        data = path.read_bytes()
        if path.suffix == ".png":
            assert _whole_png(data), f"{path.name} is not whole"
        elif path.suffix == ".json":
            json.loads(data)
        elif path.suffix in (".svg", ".html"):
            assert data.rstrip().endswith(b"</svg>" if path.suffix == ".svg" else b"</html>"), (
                f"{path.name} is not whole"
            )
        elif path.suffix == ".csv":
            assert data.endswith(b"\n"), f"{path.name} is not whole"


@pytest.mark.parametrize(
    ("command", "out"),
    [(["report", "--db", "r.db", "--out", "rep"], "rep"),
     (["export", "--db", "r.db", "--out", "tables"], "tables")],
    ids=["report", "export"],
)  # fmt: skip
def test_kill_9_leaves_no_folder_or_a_whole_one_and_nothing_else(
    tmp_path: Path, command: list[str], out: str
) -> None:
    _database(tmp_path)
    full = _complete(command, tmp_path)
    whole = {p.name for p in (tmp_path / out).iterdir()}
    assert len(whole) >= 4
    base = {"r.db", "r.db-wal", "r.db-shm"}  # SQLite's own log and index may stay after a kill
    rng = random.Random(33)
    for attempt in range(TRIES):
        import shutil

        shutil.rmtree(tmp_path / out)
        after = rng.uniform(0.3, full * 1.1)
        _killed(command, tmp_path, after)
        kept = tmp_path / out
        if kept.exists():
            names = {p.name for p in kept.iterdir()}
            assert names == whole, f"try {attempt} ({after:.2f} s): {sorted(whole - names)} missing"
            _check_whole(kept)
            expected = base | {out} | {f"{out}/{n}" for n in whole}
        else:
            expected = base
        assert _leftovers(tmp_path, expected) == set(), f"try {attempt} ({after:.2f} s)"
        if not kept.exists():
            kept.mkdir()  # for the next try's rmtree


@pytest.mark.parametrize(
    ("command", "out"),
    [(["report", "--db", "r.db", "--out", "rep"], "rep"),
     (["export", "--db", "r.db", "--out", "tables"], "tables")],
    ids=["report", "export"],
)  # fmt: skip
def test_kill_9_into_an_existing_folder_leaves_whole_files_and_nothing_else(
    tmp_path: Path, command: list[str], out: str
) -> None:
    _database(tmp_path)
    full = _complete(command, tmp_path)
    folder = tmp_path / out
    (folder / "my-notes.txt").write_text("mine\n")
    names = {p.name for p in folder.iterdir()}
    base = {"r.db", "r.db-wal", "r.db-shm"}  # SQLite's own log and index may stay after a kill
    rng = random.Random(34)
    for attempt in range(TRIES):
        after = rng.uniform(0.3, full * 1.1)
        _killed(command, tmp_path, after)
        expected = base | {out} | {f"{out}/{n}" for n in names}
        assert _leftovers(tmp_path, expected) == set(), f"try {attempt} ({after:.2f} s)"
        assert {p.name for p in folder.iterdir()} == names
        assert (folder / "my-notes.txt").read_text() == "mine\n"
        _check_whole(folder)


_KILLED_AT_MKDIR = """
import os, signal, sys
from pathlib import Path
from wattlab import jsonio

made = Path.mkdir

def mkdir_then_die(self, *args, **kwargs):
    made(self, *args, **kwargs)
    if self.name.endswith(".tmp"):  # the private folder now exists: die at once
        os.kill(os.getpid(), signal.SIGKILL)

Path.mkdir = mkdir_then_die
with jsonio.staged_folder(sys.argv[1]) as staging:
    (staging / "a.txt").write_text("never published")
"""


def test_a_kill_9_the_moment_the_private_folder_exists_leaves_nothing(tmp_path: Path) -> None:
    # the cleaner is started before the private folder is made: no moment is left uncovered
    done = subprocess.run([sys.executable, "-c", _KILLED_AT_MKDIR, str(tmp_path / "out")],
                          env=ENV, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert _leftovers(tmp_path, set()) == set()
