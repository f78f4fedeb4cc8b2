"""The Makefile installs torch once (issue 39): an environment that already has torch keeps it.

The real `make` runs the demo's install step against a stand-in interpreter that records how it
was called and says whether "torch" is importable, so nothing is installed here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _stand_in_venv(tmp_path: Path, *, has_torch: bool) -> tuple[Path, Path]:
    venv = tmp_path / "env"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls.log"
    python = venv / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case "$*" in\n'
        f'  "-c import torch, torchvision") exit {0 if has_torch else 1} ;;\n'
        '  "-c import torch; print(torch.__version__)") echo 2.99.0 ;;\n'
        "esac\n"
        "exit 0\n"
    )
    python.chmod(0o755)
    return venv, log


def _install(venv: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.wattlab-demo-installed"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The Makefile and pyproject.toml (the stamp's prerequisites) in a folder of their own."""
    where = tmp_path / "clone"
    where.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, where / name)
    return where


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_an_environment_with_torch_keeps_it(tmp_path: Path, clone: Path) -> None:
    venv, log = _stand_in_venv(tmp_path, has_torch=True)
    done = _install(venv, clone)
    assert done.returncode == 0, done.stderr
    calls = log.read_text()
    assert "torch==" not in calls  # no second torch
    assert "-m pip install -q -e .[train,codecarbon]" in calls
    assert f"torch: 2.99.0 already in {venv}, kept" in done.stdout
    assert (venv / ".wattlab-demo-installed").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_an_environment_without_torch_gets_torch_spec(tmp_path: Path, clone: Path) -> None:
    venv, log = _stand_in_venv(tmp_path, has_torch=False)
    done = _install(venv, clone)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    torch_line = next(i for i, c in enumerate(calls) if "torch==" in c)
    extras_line = calls.index("-m pip install -q -e .[train,codecarbon]")
    assert torch_line < extras_line  # TORCH_SPEC first, so pip keeps that build
