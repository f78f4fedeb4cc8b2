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
not started at all (exit 130).

A grandchild that leaves the group (``setsid``, a daemon's double fork) is caught too: on Linux
the guard is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a process whose parent dies is
re-parented to the guard rather than to init; whenever the guard stops (the command exited, or
the sweep died) it kills every process re-parented to it, again until none is left. The grace
period ends as soon as nothing of the command is left: the guard checks the processes
themselves (``/proc``), not ``Popen.poll``, which cannot see a child that the main thread is
already waiting for.
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
PR_SET_CHILD_SUBREAPER = 36
ORPHAN_ROUNDS = 50  # kill what was re-parented to us, this many rounds at most (a chain)


def _become_subreaper() -> bool:
    """Make orphaned descendants (a ``setsid`` grandchild whose parent died) our children
    instead of init's (Linux); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of ``/proc/PID``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _left_behind() -> list[int]:
    """Live processes of the command: our group's members and our children (what was
    re-parented to us included), the guard itself left out; zombies count as gone."""
    me, group = os.getpid(), os.getpgrp()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        seen = _stat(name)
        if seen is not None and seen[0] not in ("Z", "X") and (seen[1] == me or seen[2] == group):
            found.append(int(name))
    return found


def _reap() -> None:
    """Collect the exit status of every child that has ended (they would stay zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_left_behind(signum: int = signal.SIGKILL) -> None:
    """Kill what the command left: a killed process's own children are re-parented to us (we
    are a subreaper), so go round until nothing is left."""
    for _round in range(ORPHAN_ROUNDS):
        pids = _left_behind()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        _reap()


def _stop_group(child: subprocess.Popen[bytes] | None) -> None:
    """The sweep is gone: SIGTERM to the group and to what was re-parented to us, a grace
    period that ends as soon as none of it is left, then SIGKILL to all of it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for pid in _left_behind():  # what left the group (setsid) and was re-parented to us
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + GRACE_S
    while _left_behind() and time.monotonic() < deadline:
        time.sleep(0.05)
    _kill_left_behind()
    os.killpg(group, signal.SIGKILL)  # ends the guard too


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: command_guard.py PARENT_PID -- CMD [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[0])
    command = argv[2:]
    _become_subreaper()
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
    if not stopping.is_set():
        _kill_left_behind()  # what the command left (in its group, or re-parented to us)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
