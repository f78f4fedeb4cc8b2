"""One sweep at a time per database and sweep name: an exclusive ``flock`` on a lock file.

The kernel drops the lock when its holder dies (SIGKILL included), so a dead holder needs no
clean-up: the next sweep takes the lock over. A live holder is named in one sentence. The lock
file ``<db>.<sweep>.sweep-lock`` sits next to the database and is left in place (removing a
lock file others may hold open would let two sweeps in).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError, DataError


def lock_path(db_path: str | Path, sweep: str) -> Path:
    db = Path(db_path).expanduser()
    return db.with_name(f"{db.name}.{sweep}.sweep-lock")


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

    def acquire(self) -> SweepLock:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock (documented)
            return self
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
        flags |= getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o666)
        except OSError as error:
            if self.path.is_symlink():
                raise ConfigError(
                    f"the sweep lock {self.path} is a symbolic link, and wattlab never writes "
                    "through links; remove it, then run the sweep again."
                ) from None
            raise DataError(
                f"cannot create the sweep lock {self.path} ({error.strerror or error}); "
                "check that the database's folder is writable."
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(
                f"the sweep lock {self.path} is not a regular file; remove it, then run the "
                "sweep again."
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
            raise ConfigError(
                f"sweep {self.sweep!r} is already running on {self.db_path} in {who}; wait for "
                "it to finish or stop it, then run this again to resume."
            ) from None
        from wattlab.monitor import utc_now_iso

        info = {"pid": os.getpid(), "hostname": socket.gethostname(), "since": utc_now_iso()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

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
