"""Files in a cache folder that other users may be able to write: read only what is the user's own.

``$WATTLAB_CACHE_DIR`` may point at a folder others can write (a lab's shared cache on a
cluster). The two caches in it (the synthetic data, ``wattlab.train.data``, and the fitted PRE,
``wattlab.estimate.pre_cache``) therefore trust nothing they did not write themselves:

* ``open_entry`` opens a cache entry only when the folder is a real folder (not a symbolic
  link) and the entry is a regular file (never a link, FIFO or device: it is opened with
  ``O_NOFOLLOW|O_NONBLOCK`` and checked with ``fstat`` on what was opened), owned by this user,
  writable by nobody else (no group or other write bit) and at most ``max_bytes`` long.
  Anything else is a miss with a reason, which the caller says in one line (``note``) before
  it regenerates or refits.
* ``write_entry`` writes through ``jsonio.write_atomic``: a new temporary file with a random
  name created ``O_CREAT|O_EXCL|O_NOFOLLOW`` (so a planted link or file is never written
  through), renamed into place, with mode ``0644 & ~umask`` (writable by its owner only, so
  the user's own entries pass ``open_entry``). A failure means no cache, never an error.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from wattlab.errors import WattlabError

ENTRY_MODE = 0o644  # & ~umask: nobody but the owner may write a cache entry
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


CACHE_ENV = "WATTLAB_CACHE_DIR"
OFF_VALUES = ("", "off", "0", "none")  # WATTLAB_CACHE_DIR set to one of these: no cache at all


def cache_folder(env: Mapping[str, str] | None = None) -> Path | None:
    """The cache folder every cache of wattlab uses: $WATTLAB_CACHE_DIR, else
    $XDG_CACHE_HOME/wattlab, else ~/.cache/wattlab; None when $WATTLAB_CACHE_DIR is ``off``
    (or empty, ``0``, ``none``): then no cache reads or writes a file."""
    env = os.environ if env is None else env
    raw = env.get(CACHE_ENV)
    if raw is not None:
        return None if raw.strip().lower() in OFF_VALUES else Path(raw).expanduser()
    base = env.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "wattlab"


def can_write_in(folder: Path) -> bool:
    """Whether a cache entry could be written in ``folder`` (or the folder made): the folder,
    or the nearest one above it that exists, takes new files (not read-only, nor a read-only
    mount)."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        return False
    try:
        return not bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return True


class Untrusted(Exception):
    """A cache entry (or its folder) that is not read; the message says why, as a phrase."""


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:g} MiB"


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold cache entries (a link, not a folder); None when it can or
    does not exist yet."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"the cache folder {folder} cannot be read ({error.strerror or error})"
    if stat.S_ISLNK(st.st_mode):
        return f"the cache folder {folder} is a symbolic link, which wattlab does not follow"
    if not stat.S_ISDIR(st.st_mode):
        return f"the cache path {folder} is not a folder"
    return None


def _entry_problem(st: os.stat_result, max_bytes: int) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_size > max_bytes:
        return f"it is larger than a cache entry can be ({_mib(max_bytes)})"
    return None


def open_entry(path: Path, max_bytes: int) -> BinaryIO | None:
    """The cache entry ``path`` opened for reading, or None when there is none; ``Untrusted``
    (with the reason) when it is there but not to be read. Never blocks, never follows a link."""
    problem = folder_problem(path.parent)
    if problem is not None:
        raise Untrusted(problem)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as error:
        if os.path.islink(path):  # ELOOP: O_NOFOLLOW met a link
            raise Untrusted("it is a symbolic link") from None
        raise Untrusted(f"it cannot be opened ({error.strerror or error})") from None
    try:
        problem = _entry_problem(os.fstat(fd), max_bytes)
        if problem is not None:
            raise Untrusted(problem)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_entry(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of the cache entry ``path`` (at most ``max_bytes``, checked again while
    reading), None when there is none; ``Untrusted`` as ``open_entry``."""
    handle = open_entry(path, max_bytes)
    if handle is None:
        return None
    with handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Untrusted(f"it is larger than a cache entry can be ({_mib(max_bytes)})")
    return data


def head_of(path: Path, n_bytes: int) -> bytes | None:
    """The first ``n_bytes`` of ``path`` when it is a regular file of this user's (the check
    before pruning an entry); None otherwise."""
    try:
        handle = open_entry(path, max_bytes=2**62)
    except Untrusted:
        return None
    if handle is None:
        return None
    with handle:
        return handle.read(n_bytes)


def write_entry(path: Path, write: Callable[[BinaryIO], object]) -> Path | None:
    """Write the cache entry ``path`` atomically (see the module's doc); None when it cannot
    be written (the folder is a link or read-only, the disk is full)."""
    from wattlab.jsonio import write_atomic

    if folder_problem(path.parent) is not None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, write, mode=ENTRY_MODE, replace_any=True)
    except (OSError, WattlabError):
        return None


def note(path: Path, why: str, then: str) -> None:
    """One line on stderr: the cache entry ``path`` was not used, ``why``, and ``then``."""
    print(
        f"wattlab: the cache file {path} was not used: {why}; {then}.", file=sys.stderr, flush=True
    )


__all__ = [
    "ENTRY_MODE",
    "Untrusted",
    "folder_problem",
    "head_of",
    "note",
    "open_entry",
    "read_entry",
    "write_entry",
]
