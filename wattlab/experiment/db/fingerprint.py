"""A run's fingerprint: which wattlab, which code and which libraries produced it.

Stored with every run (schema version 8) so that ``wattlab compare`` can say what differs
between two sets of runs. Everything here only reads: the version strings of modules already
loaded (torch is never imported for this), and ``git rev-parse HEAD`` / ``git status`` of the
folder the run started in, each bounded by a short timeout. A value that cannot be read is None.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 5.0  # a git call that takes longer is given up (the value is then None)


@dataclass(frozen=True)
class CodeState:
    """The git checkout a run started in: its HEAD commit, and whether tracked files had
    uncommitted changes (None when not in a checkout or git cannot be run)."""

    commit: str | None
    dirty: bool | None


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # read only: no index refresh written
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def code_state(folder: str | Path | None = None) -> CodeState:
    """The commit and dirtiness of the git checkout holding ``folder`` (the current folder by
    default)."""
    where = Path(folder) if folder is not None else Path.cwd()
    head = _git(where, "rev-parse", "--verify", "HEAD")
    if head is None or not head.strip():
        return CodeState(None, None)
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    return CodeState(head.strip(), None if status is None else bool(status.strip()))


def torch_versions() -> tuple[str | None, str | None, str | None]:
    """(torch, CUDA it was built with, cuDNN) of the torch this process has loaded; (None, None,
    None) when torch is not loaded (it is not imported here)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, None, None
    version = getattr(torch, "__version__", None)
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    cudnn: str | None = None
    try:
        number = torch.backends.cudnn.version()
        cudnn = None if number is None else str(number)
    except Exception:  # no cuDNN in this build
        cudnn = None
    return (
        None if version is None else str(version),
        None if cuda is None else str(cuda),
        cudnn,
    )
