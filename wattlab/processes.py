"""Process checks shared by the run engine and the power-limit journal (a base utility)."""

from __future__ import annotations

import os
import signal

# SIGHUP (a closed terminal, a lost SSH session) stops wattlab the way SIGTERM does.
TERMINATE_SIGNALS: tuple[int, ...] = tuple(
    int(getattr(signal, name)) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
# Every signal that stops a run: Ctrl-C (SIGINT) and the terminating ones.
STOP_SIGNALS: tuple[int, ...] = (int(signal.SIGINT), *TERMINATE_SIGNALS)

# psutil's create_time() is computed from boot time and clock ticks; two readings of one
# process agree to within a tick, a different process with the same pid started later.
START_TIME_TOLERANCE_S = 1.0


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started_unix(pid: int) -> float | None:
    """When process ``pid`` started (s since the epoch), or None when it is gone or unknown."""
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # no such process, no permission, no psutil on this platform
        return None


def same_process_alive(pid: int, started_unix: float | None) -> bool:
    """Whether the process that was ``pid`` and started at ``started_unix`` still runs.

    A pid now held by a process that started at another time (the pid was reused by another
    program) counts as gone. Without a recorded start time only the pid is checked."""
    if not pid_alive(pid):
        return False
    if started_unix is None:
        return True
    now = process_started_unix(pid)
    if now is None:
        return pid_alive(pid)  # cannot tell: a live pid counts as the claimer
    return abs(now - float(started_unix)) <= START_TIME_TOLERANCE_S


def job_root_pid() -> int:
    """The process whose tree is the training job: the torchrun agent for a process it
    started (its tree holds every local rank), else this process."""
    return os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()
