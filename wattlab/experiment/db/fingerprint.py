"""A run's fingerprint: which wattlab, which code and which libraries produced it.

Stored with every run (schema version 8) so that ``wattlab compare`` can say what differs
between two sets of runs. Everything here only reads: the version strings of modules already
loaded (torch is never imported for this), and ``git rev-parse HEAD`` / ``git status`` of the
folder the run started in, each bounded by a short timeout (the whole process group: nothing git
starts outlives it), with the checkout's configured commands (fsmonitor, hooks, filters, pager)
and the system's git configuration off. A value that cannot be read is None.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 5.0  # a git call that takes longer is given up (the value is then None)


@dataclass(frozen=True)
class CodeState:
    """The git checkout a run started in: its HEAD commit, and whether tracked files had
    uncommitted changes (None when not in a checkout or git cannot be run)."""

    commit: str | None
    dirty: bool | None


# Git reads a checkout's own configuration, which may name commands (core.fsmonitor, hooks, a
# filter's clean command, a pager); a fingerprint only reads, so all of them are switched off.
_QUIET_GIT = (
    "--no-optional-locks",  # no index refresh written back
    "--no-pager",
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.untrackedCache=false",
    "-c", "core.pager=cat",
    "-c", "diff.external=",
    "-c", "status.submoduleSummary=false",
    "-c", "submodule.recurse=false",
)  # fmt: skip
_GIT_ENV = {
    # not the system's configuration; the user's own (~/.gitconfig) is kept for its
    # safe.directory (a checkout owned by someone else stays refused unless the user allowed
    # it), and the -c settings above override every level
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EXTERNAL_DIFF": "",
    "GIT_PAGER": "cat",
}


def _git(folder: Path, *args: str, timeout_s: float | None = None) -> str | None:
    """``git -C folder ARGS`` with every configured command off, its whole process group killed
    when it outlives the timeout (nothing it started outlives it); its stdout, or None."""
    try:
        return _run_bounded(
            ["git", *_QUIET_GIT, "-C", str(folder), *args],
            GIT_TIMEOUT_S if timeout_s is None else timeout_s,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _run_bounded(argv: list[str], timeout_s: float) -> str | None:
    """Run ``argv`` in a session of its own and return its stdout (None: it failed or outlived
    ``timeout_s``). Its whole process group is then killed with SIGKILL, while the child is
    not yet reaped (a zombie still holds its pid, so the group's id cannot have been given to
    another process): nothing it started in its group outlives the call."""
    env = {**os.environ, **_GIT_ENV}
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(name, None)  # the checkout of the folder named, not one the environment names
    deadline = time.monotonic() + timeout_s
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    ) as child:
        try:
            out = _read_until(child, deadline)
            exited = out is not None and _exited_unreaped(child.pid, deadline)
        finally:
            _kill_group(child.pid)
            child.wait()
    if not exited or child.returncode != 0 or out is None:
        return None
    return out.decode("utf-8", errors="replace")


def _read_until(child: subprocess.Popen[bytes], deadline: float) -> bytes | None:
    """The child's whole stdout, or None when it is not closed by ``deadline``."""
    assert child.stdout is not None
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _exited_unreaped(pid: int, deadline: float) -> bool:
    """Wait until ``pid`` has exited, without reaping it (WNOWAIT), up to ``deadline``."""
    if not hasattr(os, "waitid"):  # no such call here: its stdout closed, so take it as done
        return True
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def code_state(folder: str | Path | None = None) -> CodeState:
    """The commit and dirtiness of the git checkout holding ``folder`` (the current folder by
    default)."""
    where = Path(folder) if folder is not None else Path.cwd()
    head = _git(where, "rev-parse", "--verify", "HEAD")
    if head is None or not head.strip():
        return CodeState(None, None)
    filters = _filters_off(where)
    status = _git(
        where, *filters, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules"
    )
    return CodeState(head.strip(), None if status is None else bool(status.strip()))


def _filters_off(where: Path) -> tuple[str, ...]:
    """``-c filter.NAME.clean= ...`` for every filter driver the checkout configures: `git
    status` would otherwise run a modified file through its clean command."""
    listed = _git(where, "config", "--name-only", "--get-regexp", r"^filter\.")
    names = {line.rsplit(".", 1)[0] for line in (listed or "").splitlines() if line.strip()}
    off: list[str] = []
    for name in sorted(names):
        for key in ("clean", "smudge", "process"):
            off += ["-c", f"{name}.{key}="]
        off += ["-c", f"{name}.required=false"]
    return tuple(off)


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
