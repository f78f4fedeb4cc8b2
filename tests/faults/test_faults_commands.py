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

from wattlab.experiment.command_spec import CommandPoint

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
    from wattlab.experiment.command_sweep import CommandOptions, run_point
    from wattlab.experiment.store import open_store

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
