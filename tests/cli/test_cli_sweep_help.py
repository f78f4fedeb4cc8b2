"""`wattlab sweep --help` says what the sweep does (issue 48): one warm worker, not a process per
run, and every preset there is, the demo ones included."""

from __future__ import annotations

from pathlib import Path

from tests.in_process import wattlab_in_process
from wattlab.experiment.specs.base import PRESETS


def test_sweep_help_names_the_warm_worker_and_every_preset(tmp_path: Path) -> None:
    done = wattlab_in_process("sweep", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.replace("│", " ").split())
    assert "its own process" not in text
    assert "One warm worker process runs the one-process runs one after another" in text
    for name in PRESETS:
        assert name in text, name
