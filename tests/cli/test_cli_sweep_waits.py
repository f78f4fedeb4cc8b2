"""A sweep's long silent waits get a line, on a terminal and off one: the untimed warm-up run
before the first run, and the cool-down before every later run (how long, until what, why)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from wattlab.cli.sweep_view import cool_down_line, warm_up_line
from wattlab.experiment.specs.command import CommandSweepSpec
from wattlab.experiment.sweep.plan import SweepPlan

pytestmark = pytest.mark.slow  # command sweeps

ROOT = Path(__file__).resolve().parents[2]
SPEC = """\
name: waits
command: [{python}, -c, "pass"]
label: probe
env: {{N: "{{n}}"}}
grid: {{n: [1, 2]}}
repetitions: 1
order: sequential
cooldown_s: 1
"""
WARM_UP = "warm-up: 1 untimed run of probe n=1 first, not stored (warmup_runs in the spec)"
PAUSE = (
    "cooling down 1 s before the next run, so that every run starts from an idle GPU "
    "(cooldown_s in the spec)"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def _spec(folder: Path) -> Path:
    path = folder / "spec.yaml"
    path.write_text(SPEC.format(python=json.dumps(sys.executable)))
    return path


def test_off_a_terminal_the_warm_up_and_each_cool_down_say_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "sweep", str(_spec(tmp_path)), "--db", "w.db"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines()]
    assert lines.count(WARM_UP) == 1 and lines.count(PAUSE) == 1, lines  # 2 runs: 1 pause
    first, second = (
        i for i, line in enumerate(lines) if line.startswith("[") and " rep 0 " in line
    )
    assert first < lines.index(PAUSE) < second, lines  # said between the runs, before the wait


def test_on_a_terminal_the_same_lines_show(tmp_path: Path) -> None:
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "wattlab.cli", "sweep", str(_spec(tmp_path)), "--db", "w.db"],
        cwd=tmp_path, env=_env(), stdin=child, stdout=child, stderr=child, close_fds=True,
    )  # fmt: skip
    os.close(child)
    chunks = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child side closed: the sweep is over
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert process.wait(timeout=60) == 0
    text = ANSI.sub("\n", b"".join(chunks).decode(errors="replace"))
    lines = [line.strip() for line in text.splitlines()]
    assert WARM_UP in lines and PAUSE in lines, lines


def test_what_the_lines_say_follows_the_plan() -> None:
    def plan(**changes: object) -> SweepPlan:
        spec = {"name": "w", "command": ["true", "{n}"], "grid": {"n": [1, 2]}, **changes}
        from wattlab.experiment.sweep.command_plan import make_command_plan

        return make_command_plan(CommandSweepSpec.from_dict(spec), None, register=False)

    default = plan()
    assert cool_down_line(default) == PAUSE.replace("1 s", "10 s")  # the command default
    assert warm_up_line(default) == WARM_UP.replace("probe n=1", default.to_run[0].label)
    assert cool_down_line(plan(cooldown_s=0)) is None and warm_up_line(plan(warmup_runs=0)) is None
    assert cool_down_line(plan(cooldown_s=90, cooldown_until_c=45)) == (
        "cooling down for up to 90 s, until every GPU is at or below 45 C, so that every run "
        "starts from an idle GPU (cooldown_s, cooldown_until_c in the spec)"
    )
    runs = warm_up_line(plan(warmup_runs=2))
    assert runs is not None and runs.startswith("warm-up: 2 untimed runs of ")
