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


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity; the machine's count without one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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


# Linux's MAX_ARG_STRLEN (32 pages): the longest single argument or environment string execve
# takes, its terminating NUL included.
MAX_ARG_BYTES = 32 * 4096
# room for what wattlab adds to a command's argv and environment (its guard, the budget socket)
EXEC_MARGIN_BYTES = 4096


def exec_limit_bytes() -> int:
    """The most bytes of arguments and environment (strings and pointers) execve takes here."""
    try:
        limit = int(os.sysconf("SC_ARG_MAX"))
    except (AttributeError, OSError, ValueError):
        limit = -1
    return limit if limit > 0 else 2 * 1024 * 1024


def argv_problem(argv: list[str], env: dict[str, str] | None = None) -> str | None:
    """Why ``argv`` (with ``env`` added to this process's environment) cannot be started, as a
    phrase: a null byte, one argument longer than the kernel takes, or all of them together
    beyond ``exec_limit_bytes``; None when it can."""
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            return f"argument {i} holds a null byte, which no program argument can"
        size = len(arg.encode("utf-8", "surrogateescape")) + 1
        if size > MAX_ARG_BYTES:
            return (
                f"argument {i} is {size:,} bytes long, too long to start a program with "
                f"(one argument may be at most {MAX_ARG_BYTES:,} bytes)"
            )
    environment = {**os.environ, **(env or {})}
    for key, value in (env or {}).items():
        if "\x00" in key or "\x00" in value:
            return f"the environment variable {key!r} holds a null byte"
    strings = [*argv, *(f"{k}={v}" for k, v in environment.items())]
    total = sum(len(s.encode("utf-8", "surrogateescape")) + 1 + 8 for s in strings) + 16
    limit = exec_limit_bytes()
    if total + EXEC_MARGIN_BYTES > limit:
        return (
            f"its arguments and environment are {total:,} bytes, too long to start a program "
            f"with (this system takes {limit - EXEC_MARGIN_BYTES:,})"
        )
    return None
