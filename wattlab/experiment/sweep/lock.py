"""One sweep at a time per database and sweep name: an exclusive ``flock`` on a lock file.

The kernel drops the lock when its holder dies (SIGKILL included), so a dead holder needs no
clean-up: the next sweep takes the lock over. A live holder is named in one sentence. The lock
file ``<db>.<sweep>.sweep-lock`` sits next to the database and is left in place (removing a
lock file others may hold open would let two sweeps in).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError, DataError


def lock_path(db_path: str | Path, sweep: str) -> Path:
    db = Path(db_path).expanduser()
    return db.with_name(f"{db.name}.{sweep}.sweep-lock")


def identity_lock_path(db_path: str | Path, sweep: str) -> Path:
    """The lock that names the database file by device and inode, whatever path reaches it."""
    db = Path(db_path).expanduser()
    try:
        info = os.stat(db)  # follows links: the file itself
        key = f"{info.st_dev}-{info.st_ino}"
    except OSError:  # not created yet: its real folder and its name
        folder = os.stat(os.path.realpath(db.parent))
        name = hashlib.sha256(db.name.encode()).hexdigest()[:16]
        key = f"{folder.st_dev}-{folder.st_ino}-{name}"
    digest = hashlib.sha256(sweep.encode()).hexdigest()[:16]
    return _identity_folder() / f"{key}.{digest}.sweep-lock"


def _identity_folder() -> Path:
    """A folder of this user's in the temporary directory (0700, never a link)."""
    folder = Path(tempfile.gettempdir()) / f"wattlab-sweep-locks-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError as error:
        raise DataError(
            f"cannot create the sweep lock folder {folder} ({error.strerror or error}); "
            "check the temporary directory (TMPDIR)."
        ) from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError(
            f"the sweep lock folder {folder} is not a folder of this user's (a link, or "
            "another user's); remove it, then run the sweep again."
        )
    return folder


def check_lock_path(db_path: str | Path, sweep: str) -> None:
    """Before anything is written: the lock file, when it exists, is a regular file and not a
    symbolic link (the lock is opened with O_NOFOLLOW, so a link is never written through)."""
    path = lock_path(db_path, sweep)
    if path.is_symlink():
        raise ConfigError(
            f"the sweep lock {path} is a symbolic link, and wattlab never writes through links; "
            "remove it, then run the sweep again."
        )
    if path.exists() and not path.is_file():
        raise ConfigError(
            f"the sweep lock {path} is not a regular file; remove it, then run the sweep again."
        )


class SweepLock:
    """``with SweepLock(db, name):`` holds the sweep; a second holder gets a ConfigError."""

    def __init__(self, db_path: str | Path, sweep: str) -> None:
        self.path = lock_path(db_path, sweep)
        self.sweep = sweep
        self.db_path = str(db_path)
        self._fd: int | None = None
        self._identity_fd: int | None = None

    def acquire(self) -> SweepLock:
        try:
            import fcntl  # noqa: F401
        except ImportError:  # not POSIX: no lock (documented)
            return self
        fd = self._take(self.path)
        try:
            self._identity_fd = self._take(identity_lock_path(self.db_path, self.sweep))
        except BaseException:
            os.close(fd)
            raise
        from wattlab.monitor import utc_now_iso

        info = {"pid": os.getpid(), "hostname": socket.gethostname(), "since": utc_now_iso()}
        for held in (fd, self._identity_fd):
            os.ftruncate(held, 0)
            os.pwrite(held, json.dumps({**info, "db": self.db_path}).encode(), 0)
        self._fd = fd
        return self

    def _take(self, path: Path) -> int:
        """Open ``path`` (never through a link) and hold an exclusive flock on it."""
        import fcntl

        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
        flags |= getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as error:
            if path.is_symlink():
                raise ConfigError(
                    f"the sweep lock {path} is a symbolic link, and wattlab never writes "
                    "through links; remove it, then run the sweep again."
                ) from None
            raise DataError(
                f"cannot create the sweep lock {path} ({error.strerror or error}); "
                "check that the database's folder is writable."
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(
                f"the sweep lock {path} is not a regular file; remove it, then run the sweep again."
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            who = (
                f"process {holder.get('pid')} on {holder.get('hostname')} "
                f"(since {holder.get('since')})"
                if holder
                else "another process"
            )
            through = holder.get("db")
            same = (
                f" (as {through}, the same database file)"
                if through and through != self.db_path
                else ""
            )
            raise ConfigError(
                f"sweep {self.sweep!r} is already running on {self.db_path} in {who}{same}; "
                "wait for it to finish or stop it, then run this again to resume."
            ) from None
        return fd

    def release(self) -> None:
        for fd in (self._identity_fd, self._fd):
            if fd is not None:
                os.close(fd)  # closing the descriptor drops the flock
        self._fd = self._identity_fd = None

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
