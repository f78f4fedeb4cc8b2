"""Result files: one JSON cleaner, one atomic writer, and the checks that run before any work.

* ``jsonable`` turns numpy/pandas values into plain JSON values (NaN and infinity become null).
* ``write_atomic`` is the one writer of every output file (reports, figures, exports, JSON,
  result files). It writes a temporary file created with ``O_CREAT|O_EXCL|O_NOFOLLOW`` in the
  target's folder, fsyncs it and renames it into place, so a reader never sees half a file and
  nothing is ever written through a symbolic link: a target or an output folder that is a link
  is refused in one sentence. Every file it creates or replaces gets the mode a plain
  ``open()`` would give, ``0666 & ~umask`` (never the mode of the file it replaces, never a
  link target's, never set-id bits), not mkstemp's 0600.
* ``open_new_file`` opens a new file for streaming writes (a command's captured output) with
  the same rules: ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode ``0666 & ~umask``, no link followed.
* ``check_writable`` / ``check_output_dir`` prove, before anything runs, that an output can be
  created where it will be written (they create and remove a probe file), and refuse links.
* ``staged_folder`` writes a whole output folder (a report, an export) into a private folder
  beside it and moves it into place at the end, so that ``kill -9`` leaves no partial folder
  and no temporary file (a small cleaner process removes the private folder when wattlab dies).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from wattlab.errors import ConfigError, DataError, WattlabError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
NEW_FILE_MODE = 0o666  # the kernel applies the umask, as for a plain open()


def jsonable(value: object) -> Any:
    """``value`` as plain JSON data: numpy scalars and arrays become Python numbers and lists,
    NaN, infinity, None, pandas NA and NaT become null, mappings get string keys."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas missing values
        return None
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and hasattr(value, "dtype"):  # numpy arrays and scalars
        return jsonable(tolist())
    item = getattr(value, "item", None)
    if callable(item):  # other 0-d array-likes
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return value


def _folder(target: Path) -> Path:
    return target.parent if str(target.parent) else Path(".")


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _link_folder_sentence(folder: str | Path, shown: str | Path | None) -> str:
    return (
        f"cannot write into {shown or folder}: the folder {folder} is a symbolic link, and "
        "wattlab never writes through links; give the real folder."
    )


def _link_target_sentence(path: str | Path) -> str:
    return (
        f"cannot write {path}: it is a symbolic link, and wattlab never writes through "
        "links; remove it or give another name."
    )


def refuse_link_folder(
    folder: str | Path,
    shown: str | Path | None = None,
    *,
    error: type[WattlabError] = ConfigError,
) -> None:
    """An ``error`` (ConfigError unless told) when the output folder ``folder`` is itself a
    symbolic link."""
    if str(folder) not in ("", ".") and _is_link(Path(folder)):
        raise error(_link_folder_sentence(folder, shown))


def refuse_link_target(target: str | Path) -> None:
    """A ConfigError when the output file ``target`` exists as a link or as something other
    than a regular file (a FIFO, a device), or when its folder is a link."""
    path = Path(target)
    refuse_link_folder(_folder(path), path)
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(_link_target_sentence(path))
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"cannot write {path}: it is a folder; give a file name.")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"cannot write {path}: it exists and is not a regular file.")


def refuse_links_in(folder: str | Path, names: Iterable[str], what: str) -> None:
    """Before writing ``names`` into ``folder``: refuse the folder when it is a link, or when
    one of the files it would replace (a name, or a glob such as ``*.png``) is a link."""
    path = Path(folder)
    refuse_link_folder(path)
    if not path.is_dir():
        return
    for pattern in names:
        for entry in sorted(path.glob(pattern)):
            if _is_link(entry):
                raise ConfigError(
                    f"cannot write the {what} into {path}: {entry} is a symbolic link, and "
                    "wattlab never writes through links; remove it or choose another folder."
                )


NAME_PART_BYTES = 96  # the most bytes of one name in a file name wattlab makes of names


def bounded_part(name: str, limit: int = NAME_PART_BYTES) -> str:
    """``name`` as one part of a file name wattlab makes (a lock, a temporary file, a side
    file), at most ``limit`` bytes: a longer name keeps its start and ends in 16 hex digits of a
    hash of the whole (so two long names that share a start still differ), never a file name
    the system refuses as too long."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= limit:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    head = raw[: limit - len(digest) - 1].decode("utf-8", "ignore")
    return f"{head}-{digest}"


def _new_temp(folder: Path, name: str, mode: int = NEW_FILE_MODE) -> tuple[int, Path]:
    """A new file beside the target: O_CREAT|O_EXCL|O_NOFOLLOW, a random name, mode
    ``mode & ~umask``."""
    for _attempt in range(100):
        tmp = folder / f".{bounded_part(name)}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, _NEW_FILE_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {folder}")


def write_atomic(
    path: str | Path,
    write: Callable[[BinaryIO], object],
    *,
    mode: int = NEW_FILE_MODE,
    replace_any: bool = False,
) -> Path:
    """Call ``write(handle)`` on a new temporary file beside ``path`` (opened binary), then
    flush it to disk and rename it over ``path``.

    Never follows a link: the temporary file is created with O_EXCL|O_NOFOLLOW, a target or a
    folder that is a symbolic link is refused (ConfigError), and the rename replaces a name,
    never a link's target. The file gets ``mode & ~umask`` (0666 & ~umask unless told; a cache
    entry asks for 0644), whatever the mode of the file it replaces. The temporary file is
    removed when ``write`` fails. ``replace_any`` (a cache entry, which is never an output a
    person named) lets the rename replace a link, FIFO or device at the target instead of
    refusing it; it is still never written through."""
    target = Path(path)
    folder = _folder(target)
    if not folder.is_dir():
        raise ConfigError(f"cannot write {target}: the folder {folder} does not exist.")
    if replace_any:
        refuse_link_folder(folder, target)
    else:
        refuse_link_target(target)
    try:
        fd, tmp = _new_temp(folder, target.name, mode)
    except OSError as error:
        raise ConfigError(f"cannot write {target}: {error.strerror or error}.") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:  # a full disk (ENOSPC), a quota, an I/O error
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"cannot write {target}: {error.strerror or error}; nothing of it was written."
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _remove_stale(name: str, folder_fd: int, shown: Path, error: type[WattlabError]) -> None:
    """Remove the regular file ``name`` left in the folder by an earlier attempt; a link there
    is refused (never followed, never removed), anything else is left for the open to refuse."""
    try:
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as problem:
        raise error(f"cannot write {shown}: {problem.strerror or problem}.") from None
    if stat.S_ISLNK(st.st_mode):
        raise error(_link_target_sentence(shown))
    if stat.S_ISREG(st.st_mode):
        try:
            os.unlink(name, dir_fd=folder_fd)  # removes the name, never what a link points at
        except FileNotFoundError:
            pass
        except OSError as problem:
            raise error(f"cannot write {shown}: {problem.strerror or problem}.") from None


def open_new_file(
    path: str | Path,
    *,
    replace_stale: bool = False,
    error: type[WattlabError] = ConfigError,
    read_back: bool = False,
) -> BinaryIO:
    """A new file at ``path``, opened binary for streaming writes, never through a link.

    The folder is opened with O_NOFOLLOW and the file created in it with
    O_CREAT|O_EXCL|O_NOFOLLOW, mode 0666 & ~umask, so neither a folder nor a file that is (or
    becomes) a symbolic link is ever followed. ``replace_stale`` first removes a regular file
    already at ``path``; otherwise an existing file is refused. Every refusal is one
    sentence, an ``error`` (ConfigError unless told). ``read_back`` opens it read-write (its
    descriptor can be read with ``os.pread``: a bounded output rewrites its own tail)."""
    target = Path(path)
    folder = _folder(target)
    refuse_link_folder(folder, target, error=error)
    try:
        folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as problem:
        if _is_link(folder):  # it became a link after the check
            raise error(_link_folder_sentence(folder, target)) from None
        raise error(f"cannot write {target}: {problem.strerror or problem}.") from None
    try:
        if replace_stale:
            _remove_stale(target.name, folder_fd, target, error)
        try:
            flags = ((_NEW_FILE_FLAGS & ~os.O_WRONLY) | os.O_RDWR) if read_back else _NEW_FILE_FLAGS
            fd = os.open(target.name, flags, NEW_FILE_MODE, dir_fd=folder_fd)
        except FileExistsError:
            if _is_link(target):
                raise error(_link_target_sentence(target)) from None
            if not target.is_file():
                raise error(
                    f"cannot write {target}: it exists and is not a regular file."
                ) from None
            raise error(
                f"cannot write {target}: it already exists; remove it or give another name."
            ) from None
        except OSError as problem:
            if _is_link(target):  # ELOOP: O_NOFOLLOW met a link
                raise error(_link_target_sentence(target)) from None
            raise error(f"cannot write {target}: {problem.strerror or problem}.") from None
    finally:
        os.close(folder_fd)
    return os.fdopen(fd, "wb")


@contextmanager
def text_handle(handle: BinaryIO) -> Iterator[io.TextIOWrapper]:
    """A UTF-8 text view of a binary ``handle`` that leaves it open afterwards."""
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
    try:
        yield text
    finally:
        text.flush()
        text.detach()


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically, flushed to disk before the rename."""
    data = text.encode("utf-8")

    def write(handle: BinaryIO) -> None:
        handle.write(data)

    return write_atomic(path, write)


def dump_json(data: object, path: str | Path) -> None:
    """Write JSON to ``path`` atomically, or to standard output when path is ``-``."""
    text = json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"
    if str(path) == "-":
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as error:  # standard output on a full disk
            raise DataError(
                f"cannot write the JSON to standard output: {error.strerror or error}."
            ) from None
        return
    write_text_atomic(path, text)


def _probe(folder: Path, shown: str | Path) -> None:
    """Create and remove a file in ``folder``; a ConfigError naming ``shown`` if that fails."""
    try:
        fd, name = tempfile.mkstemp(prefix=".wattlab-probe.", suffix=".tmp", dir=folder)
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"cannot write {shown}: {reason} in the folder {folder}.") from None
    os.close(fd)
    os.unlink(name)


def check_writable(path: str | Path | None) -> None:
    """Fail before any work unless the output file ``path`` can be created ('-' and None pass).

    The folder must exist and take a new file (a probe file is created and removed), and the
    path must not be a folder."""
    if path is None or str(path) == "-":
        return
    target = Path(path)
    refuse_link_target(target)
    if str(path).endswith(os.sep) or target.is_dir():
        raise ConfigError(f"cannot write {path}: it is a folder; give a file name.")
    folder = _folder(target)
    if not folder.is_dir():
        if folder.exists():
            raise ConfigError(f"cannot write {path}: {folder} is not a folder.")
        raise ConfigError(f"cannot write {path}: the folder {folder} does not exist.")
    _probe(folder, path)


def check_output_dir(path: str | Path) -> None:
    """Fail before any work unless files can be written into the folder ``path``.

    Nothing is created: a missing folder is fine when its nearest existing parent is a
    writable folder (``output_folder`` creates it when the results are ready)."""
    target = Path(path)
    refuse_link_folder(target)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--out {path} is an existing file, not a folder; give a folder.")
    existing = target
    while not existing.exists():
        parent = existing.parent
        if parent == existing:
            break
        existing = parent
    if not existing.is_dir():
        raise ConfigError(f"cannot create the folder {path}: {existing} is not a folder.")
    _probe(existing, path)


@contextmanager
def output_folder(path: str | Path) -> Iterator[Path]:
    """Create the output folder ``path`` (with parents) for the block; when the block fails,
    remove what this call created, so a failed command leaves no folder behind."""
    target = Path(path)
    refuse_link_folder(target)
    first_new = None
    probe = target
    while not probe.exists():
        first_new = probe
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the folder {path}: {error.strerror or error}.") from None
    try:
        yield target
    except BaseException:
        if first_new is not None:
            shutil.rmtree(first_new, ignore_errors=True)
        raise


# Run by the cleaner: when wattlab ends without saying "done" (killed, even by SIGKILL: the
# pipe closes), remove the private folder. Standard library only, no site: starts in ms.
_CLEANER = (
    "import shutil, sys\n"
    "if sys.stdin.buffer.read() != b'done':\n"
    "    shutil.rmtree(sys.argv[1], ignore_errors=True)\n"
)


class _Cleaner:
    """A process that removes ``folder`` unless told ``done`` before this process ends."""

    def __init__(self, folder: Path) -> None:
        self._proc: subprocess.Popen[bytes] | None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _CLEANER, str(folder)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C at the terminal is wattlab's to handle
                close_fds=True,
            )
        except OSError:
            self._proc = None  # no cleaner: a kill -9 may then leave the private folder

    def done(self) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            self._proc.stdin.write(b"done")
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _publish(staging: Path, target: Path) -> None:
    """Move the finished files of ``staging`` into ``target``: the folder itself when
    ``target`` does not exist (one rename: it appears whole), else file by file (each rename
    replaces one whole file by another; the user's other files stay)."""
    if not target.exists():
        os.chmod(staging, 0o777 & ~_umask())  # a folder's usual mode, not mkdtemp's 0700
        try:
            os.rename(staging, target)
            return
        except OSError:  # made meanwhile: merge file by file
            pass
    refuse_link_folder(target)
    for entry in sorted(staging.iterdir()):
        os.replace(entry, target / entry.name)  # replaces a name, never follows a link
    staging.rmdir()


def _staging_folder(parent: Path, name: str) -> tuple[Path, _Cleaner]:
    """A new private folder ``.NAME.wattlab-PID-RANDOM.tmp`` (mode 0700) in ``parent``, and
    its cleaner. The cleaner starts before the folder is made, so no moment exists at which a
    kill -9 leaves the folder without one."""
    prefix = f".{bounded_part(name)}.wattlab-{os.getpid()}-"
    for _attempt in range(100):
        staging = parent / f"{prefix}{secrets.token_hex(6)}.tmp"
        cleaner = _Cleaner(staging)
        try:
            staging.mkdir(mode=0o700)
        except FileExistsError:  # another's: leave it, and its cleaner stands down
            cleaner.done()
            continue
        except BaseException:
            cleaner.done()
            raise
        return staging, cleaner
    raise FileExistsError(f"no free temporary name for {name} in {parent}")


@contextmanager
def staged_folder(path: str | Path) -> Iterator[Path]:
    """Yield a private folder to write the output folder ``path`` into; when the block ends
    well, move what it holds into ``path`` (``_publish``). The private folder
    (``.NAME.wattlab-PID-RANDOM.tmp``, mode 0700) lies beside ``path``, on the same file
    system, so the move is a rename. When the block fails, the private folder (and any
    parent this call created) is removed; when the process is killed, even by SIGKILL, a
    cleaner process removes it. So ``path`` is either absent, or whole (a new folder), or
    holds whole files only (an existing folder: each file the old one or the new one)."""
    target = Path(path)
    refuse_link_folder(target)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--out {target} is an existing file, not a folder; give a folder.")
    parent = _folder(target)
    first_new = None
    probe = parent
    while not probe.exists():
        first_new = probe
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging, cleaner = _staging_folder(parent, target.name)
    except OSError as error:
        raise ConfigError(f"cannot create the folder {path}: {error.strerror or error}.") from None
    try:
        yield staging
        try:
            _publish(staging, target)
        except OSError as error:
            raise DataError(
                f"cannot move the finished files into {target}: {error.strerror or error}."
            ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if first_new is not None:
            shutil.rmtree(first_new, ignore_errors=True)
        raise
    finally:
        cleaner.done()
