"""The guard between a command sweep and the command it runs: nothing outlives the sweep.

Run as a script (``python -I -S command_guard.py PARENT_PID -- CMD ARGS...``; standard library
only, so it starts in milliseconds and loads nothing of wattlab). The sweep starts it as the
leader of a new process group, with a parent-death signal (SIGTERM). The guard starts the
command in its own group and waits for it; its exit code is the command's (128 + N when the
command died of signal N, 127 when the program is not found, 126 when it cannot be executed).

When the sweep dies (SIGKILL included), the kernel sends the guard SIGTERM; a thread watching
the parent's pid is the second line. The guard then sends SIGTERM to its whole group (the
command and every child it started), waits up to ``GRACE_S`` for the command, and SIGKILLs the
group, itself included. SIGINT and SIGTERM that the sweep forwards to the group reach the
command directly; the guard only waits. The guard starts with SIGINT blocked, so a Ctrl-C that
comes while Python starts is held until the guard's handler is in place; the command is then
not started at all (exit 130). A grandchild that leaves the group (``setsid``)
escapes this guard.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 5.0  # after the sweep died: how long the command may take to stop on SIGTERM
WATCH_PERIOD_S = 0.2


def _stop_group(child: subprocess.Popen[bytes] | None) -> None:
    """The sweep is gone: SIGTERM to the group, a grace period, then SIGKILL to all of it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + GRACE_S
    while child is not None and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(group, signal.SIGKILL)  # ends the guard too


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: command_guard.py PARENT_PID -- CMD [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[0])
    command = argv[2:]
    child: subprocess.Popen[bytes] | None = None
    stopping = threading.Event()

    def parent_gone(_signum: int = 0, _frame: object = None) -> None:
        if not stopping.is_set():
            stopping.set()
            _stop_group(child)

    interrupted: list[int] = []

    def ignore(signum: int, _frame: object) -> None:
        interrupted.append(signum)  # forwarded to the whole group: the command gets it too

    signal.signal(signal.SIGINT, ignore)
    # we were started with SIGINT blocked (``command_meter.start_command``), so a Ctrl-C while
    # Python started waited instead of printing a KeyboardInterrupt traceback; now it is ours
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, lambda s, f: parent_gone() if os.getppid() != parent else None)
    if os.getppid() != parent:  # the sweep died before the handler was in place
        parent_gone()

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                parent_gone()
            time.sleep(WATCH_PERIOD_S)

    threading.Thread(target=watch, name="wattlab-guard-watch", daemon=True).start()
    if interrupted:  # Ctrl-C came before the command started: it never starts
        return 128 + signal.SIGINT
    try:
        child = subprocess.Popen(command)
    except FileNotFoundError:
        print(f"wattlab: {command[0]}: command not found", file=sys.stderr, flush=True)
        return 127
    except PermissionError:
        print(f"wattlab: {command[0]}: permission denied", file=sys.stderr, flush=True)
        return 126
    except OSError as error:
        print(f"wattlab: {command[0]}: {error.strerror or error}", file=sys.stderr, flush=True)
        return 126
    if interrupted:  # came while it was being started: it may have missed it, so pass it on
        try:
            os.kill(child.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
