"""Smoke tests of the whole command line in whatever Python runs them: every command's --help and
one cheap invocation of its default path, each in a fresh subprocess of this interpreter.

They hold for the versions the main .venv installs, at the floors pyproject.toml declares (the
lowest-direct job of `make test`) and in a GPU image's own Python with its own packages:
``PYTHONPATH=$PWD python3 -m pytest -q tests/cli/test_cli_smoke.py``. A smoke test passes when
the command exits with the code it promises and prints no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

COMMANDS = (
    (),
    ("devices",),
    ("monitor",),
    ("run",),
    ("sweep",),
    ("report",),
    ("estimate",),
    ("estimate", "evaluate"),
    ("estimate", "power-limits"),
    ("advise",),
    ("advise", "evaluate"),
    ("export",),
    ("power",),
    ("power", "restore"),
)


def wattlab(args: list[str], cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("WATTLAB_CACHE_DIR", str(cwd / "cache"))
    env["WATTLAB_FORBID_POWER_LIMITS"] = "1"
    env["COLUMNS"] = "120"
    return subprocess.run(
        [sys.executable, "-m", "wattlab.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def no_traceback(result: subprocess.CompletedProcess) -> None:
    said = result.stdout + result.stderr
    assert "Traceback (most recent call last)" not in said, said[-3000:]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "wattlab")
def test_every_command_has_help(command: tuple[str, ...], tmp_path: Path) -> None:
    result = wattlab([*command, "--help"], tmp_path)
    no_traceback(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Usage" in result.stdout


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_devices_default_path(tmp_path: Path) -> None:
    result = wattlab(["devices", "--json", "-"], tmp_path)
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert '"meters"' in result.stdout or '"components"' in result.stdout or "{" in result.stdout


def test_monitor_default_path(tmp_path: Path) -> None:
    result = wattlab(["monitor", "--", sys.executable, "-c", "pass"], tmp_path)
    no_traceback(result)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sweep_default_path_plans_a_preset(tmp_path: Path) -> None:
    result = wattlab(["sweep", "quickstart", "--db", str(tmp_path / "w.db"), "--dry-run"], tmp_path)
    no_traceback(result)
    if _has("torch"):
        assert result.returncode == 0, result.stdout + result.stderr
    else:  # one sentence naming the extra, exit 2
        assert result.returncode in (0, 2), result.stdout + result.stderr


def test_report_and_export_on_a_missing_database_are_one_sentence(tmp_path: Path) -> None:
    for args in (["report", "--db", "nothing.db"], ["export", "--db", "nothing.db"]):
        result = wattlab(args, tmp_path)
        no_traceback(result)
        assert result.returncode == 2, result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.slow  # a first estimate may fit PRE
def test_estimate_default_path(tmp_path: Path) -> None:
    result = wattlab(
        ["estimate", "--model", "resnet18", "--epochs", "2", "--gpu-name", "H200"], tmp_path, 900
    )
    no_traceback(result)
    if _has("torch") and _has("torchvision"):
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode == 2, result.stdout + result.stderr


def test_power_restore_default_path(tmp_path: Path) -> None:
    env_state = tmp_path / "state"
    env_state.mkdir()
    result = wattlab(["power", "restore"], tmp_path)
    no_traceback(result)
    assert result.returncode in (0, 2), result.stdout + result.stderr
