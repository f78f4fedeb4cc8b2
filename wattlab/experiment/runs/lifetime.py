"""Nothing outlives its parent: child processes die with the process that started them.

Linux: ``PR_SET_PDEATHSIG`` asks the kernel to send a signal to a process when its parent
dies (SIGKILL of the parent included). It is set in the child between fork and exec
(``preexec_pdeathsig``, for torchrun's agent) and again by every worker at start-up
(``die_with_parent``), because torchrun starts its workers itself. The signal follows the
*thread* that forked the child, so a worker also watches its parent's pid from a daemon thread
(``watch_parent``) as a second line, which also covers systems without prctl.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

from wattlab.processes import pid_alive

PR_SET_PDEATHSIG = 1
PARENT_WATCH_PERIOD_S = 0.5
STOP_GRACE_S = 10.0  # after a forwarded SIGINT/SIGTERM, how long a child may take to stop
ENV_PARENT_PID = "WATTLAB_PARENT_PID"  # the pid a child must outlive no longer than


def set_parent_death_signal(signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux only).

    Returns True when it was set. Async-signal-safe enough to run between fork and exec.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def preexec_pdeathsig() -> None:
    """``subprocess.Popen(preexec_fn=...)``: the child gets SIGKILL when we die."""
    set_parent_death_signal(signal.SIGKILL)


def watch_parent(
    parent_pid: int | None = None, period_s: float = PARENT_WATCH_PERIOD_S
) -> threading.Thread:
    """A daemon thread that kills this process once ``parent_pid`` (default: the parent now)
    is gone or we were re-parented (to init or a subreaper)."""
    expected_ppid = os.getppid()
    watched = parent_pid if parent_pid is not None else expected_ppid

    def watch() -> None:
        while True:
            if os.getppid() != expected_ppid or not pid_alive(watched):
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(period_s)

    thread = threading.Thread(target=watch, name="wattlab-parent-watch", daemon=True)
    thread.start()
    return thread


def die_with_parent() -> None:
    """For a process wattlab started: die when its parent (or ``$WATTLAB_PARENT_PID``) dies.

    Sets the parent-death signal, then checks that the parent did not die before it was set
    (the race between fork and prctl), then starts the parent watch.
    """
    expected = os.environ.get(ENV_PARENT_PID)
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)
    watch_parent()
    if expected and expected.isdigit():
        pid = int(expected)
        if pid != os.getppid():
            watch_parent(pid)


def wait_stopping(
    child: subprocess.Popen, received: list[int], grace_s: float = STOP_GRACE_S
) -> int:
    """Wait for ``child`` (a process-group leader) and return its exit code. Once a stop signal
    has been forwarded to it (``received`` is not empty), give it ``grace_s`` seconds to store
    its run as failed and exit, then SIGKILL its whole process group: a torchrun agent blocked
    in a rendezvous whose other node is gone never runs its Python signal handler, and would
    otherwise keep us waiting until its rendezvous timed out."""
    deadline: float | None = None
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if received and deadline is None:
            deadline = time.monotonic() + grace_s
        if deadline is not None and time.monotonic() >= deadline:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return child.wait()
