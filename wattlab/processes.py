"""Process checks shared by the run engine and the power-limit journal (a base utility)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_root_pid() -> int:
    """The process whose tree is the training job: the torchrun agent for a process it
    started (its tree holds every local rank), else this process."""
    return os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()
