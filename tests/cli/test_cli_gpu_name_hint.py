"""`estimate` and `advise` without --gpu-name (issue 48): a user of a machine without a GPU is
told what to give, in one sentence: a GPU's name, with an example that works and the names
the shipped table knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.in_process import wattlab_in_process
from wattlab.estimate.specs import gpu_specs, lookup_gpu


@pytest.mark.parametrize("command", ["estimate", "advise"])
def test_no_gpu_name_says_what_to_give(tmp_path: Path, command: str) -> None:
    done = wattlab_in_process(command, "--model", "resnet18", "--epochs", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "also on a machine without one" in lines[0]
    assert "e.g. --gpu-name H200" in lines[0] and lookup_gpu("H200").name == "NVIDIA H200"
    for spec in gpu_specs():
        assert spec.name.removeprefix("NVIDIA ") in lines[0]
