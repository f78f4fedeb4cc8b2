"""One sweep at a time per database and sweep name: an exclusive ``flock`` on a lock file.

The kernel drops the lock when its holder dies (SIGKILL included), so a dead holder needs no
clean-up: the next sweep takes the lock over. A live holder is named in one sentence. The lock
file ``<db>.<sweep>.sweep-lock`` sits next to the database; a sweep that ends removes it (and
its twin in the per-user folder) while it still holds the lock, and a sweep that takes a lock
checks, once it holds it, that the file is still the one at the path (else it opens the new
one): so a finished sweep leaves no lock file and two sweeps never hold two files of one name.
Every part of a lock file's name made of a name (the database's, the sweep's) is bounded
(``bounded_part``): a long name is cut and ends in a hash of the whole, never too long a file
name.
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
from wattlab.jsonio import bounded_part


def lock_path(db_path: str | Path, sweep: str) -> Path:
    db = Path(db_path).expanduser()
    return db.with_name(f"{bounded_part(db.name)}.{bounded_part(sweep)}.sweep-lock")


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
    _identity_folder()  # the per-user lock folder can be made, before anything is written
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
        self._identity_path: Path | None = None

    def acquire(self) -> SweepLock:
        try:
            import fcntl  # noqa: F401
        except ImportError:  # not POSIX: no lock (documented)
            return self
        fd = self._take(self.path)
        try:
            self._identity_path = identity_lock_path(self.db_path, self.sweep)
            self._identity_fd = self._take(self._identity_path)
        except BaseException:
            _remove_held(fd, self.path)
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
        """Open ``path`` (never through a link) and hold an exclusive flock on it; when the
        file held is no longer the one at ``path`` (a sweep that ended removed it meanwhile),
        take the one there now."""
        for _ in range(100):
            fd = self._take_once(path)
            if _is_at(fd, path):
                return fd
            os.close(fd)
        raise ConfigError(
            f"the sweep lock {path} keeps changing under this sweep; another sweep "
            f"{self.sweep!r} seems to be starting and ending on {self.db_path}; try again."
        )

    def _take_once(self, path: Path) -> int:
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
        """Remove both lock files, still holding their locks (a sweep that opened one meanwhile
        finds it gone and takes a new one), then drop the locks."""
        for fd, path in ((self._identity_fd, self._identity_path), (self._fd, self.path)):
            if fd is not None:
                _remove_held(fd, path)
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


def _is_at(fd: int, path: Path | None) -> bool:
    """Whether the open file ``fd`` is the file at ``path`` now."""
    if path is None:
        return False
    try:
        held, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def _remove_held(fd: int, path: Path | None) -> None:
    """Remove the lock file ``path`` while ``fd`` holds its lock, when it is still that file."""
    if path is not None and _is_at(fd, path):
        try:
            os.unlink(path)
        except OSError:
            pass
