"""Outputs never follow links (issue 25): a command sweep's captured output.

A run's stdout and stderr go to ``DB.runs/<id>.stdout`` and ``.stderr``, paths anyone can
predict. A link planted there, or a ``DB.runs`` folder that is a link, is refused in one
sentence and its target stays as it was. Each test drives the real sweep on the CPU with a
small ``python -c`` command.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from wattlab.errors import DataError

# writes a marker (so a test sees whether the command ran) and prints a line to each stream
SCRIPT = (
    "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran'); "
    "print('out', sys.argv[2]); print('err', file=sys.stderr)"
)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    victim.chmod(0o640)
    return victim


def _untouched(victim: Path) -> bool:
    return victim.read_bytes() == b"precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o640


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _sweep(tmp_path: Path) -> tuple[Path, object]:
    """A one-run command sweep registered in ``tmp_path/s.db``, and its plan."""
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.specs.command import CommandSweepSpec
    from wattlab.experiment.sweep.command_plan import make_command_plan

    spec = CommandSweepSpec.from_dict(
        {
            "name": "links",
            "command": [sys.executable, "-c", SCRIPT, str(tmp_path / "ran"), "{n}"],
            "grid": {"n": [1]},
            "repetitions": 1,
            "order": "sequential",
            "warmup_runs": 0,
            "cooldown_s": 0,
        }
    )
    db = tmp_path / "s.db"
    with open_store(db) as store:
        plan = make_command_plan(spec, store)
    return db, plan


def _run(db: Path, plan: object) -> list:
    from wattlab.experiment.sweep.command_plan import CommandOptions, run_command_plan

    opts = CommandOptions(db_path=str(db), interval_s=0.05, cpu_tdp_w=65.0, grace_s=1.0)
    return run_command_plan(plan, opts)  # type: ignore[arg-type]


def _statuses(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [row[0] for row in con.execute("SELECT status FROM runs ORDER BY id")]
    finally:
        con.close()


def test_a_link_at_the_predicted_stdout_path_is_refused(tmp_path: Path) -> None:
    from wattlab.experiment.runs.command_record import output_paths

    victim = _victim(tmp_path)
    db, plan = _sweep(tmp_path)
    stdout_path, stderr_path = output_paths(db, 1)  # the first run's id
    stdout_path.parent.mkdir()
    stdout_path.symlink_to(victim)
    with pytest.raises(DataError, match=r"1\.stdout: it is a symbolic link") as refused:
        _run(db, plan)
    assert "\n" not in str(refused.value)
    assert _untouched(victim) and stdout_path.is_symlink()
    assert not stderr_path.exists() and not (tmp_path / "ran").exists()  # the command never ran


def test_a_runs_folder_that_is_a_link_is_refused_before_any_run(tmp_path: Path) -> None:
    from wattlab.experiment.runs.command_record import output_paths

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    db, plan = _sweep(tmp_path)
    folder = output_paths(db, 1)[0].parent
    folder.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(DataError, match=r"s\.db\.runs is a symbolic link"):
        _run(db, plan)
    assert list(elsewhere.iterdir()) == [] and folder.is_symlink()
    assert _statuses(db) == [] and not (tmp_path / "ran").exists()  # nothing claimed or run


def test_a_stale_output_file_is_replaced_with_normal_permissions(tmp_path: Path) -> None:
    from wattlab.experiment.runs.command_record import output_paths

    db, plan = _sweep(tmp_path)
    stdout_path, stderr_path = output_paths(db, 1)
    stdout_path.parent.mkdir()
    stdout_path.write_bytes(b"left by an earlier database\n")
    stdout_path.chmod(0o600)
    outcomes = _run(db, plan)
    assert [outcome.status for _entry, outcome in outcomes] == ["ok"]
    assert stdout_path.read_text() == "out 1\n" and stderr_path.read_text() == "err\n"
    for path in (stdout_path, stderr_path):
        assert not path.is_symlink()
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()
