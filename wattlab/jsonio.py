"""Result files: one JSON cleaner, one atomic writer, and the checks that run before any work.

* ``jsonable`` turns numpy/pandas values into plain JSON values (NaN and infinity become null).
* ``write_atomic`` writes through a temporary file in the target's folder and renames it into
  place, so a reader never sees half a file; the file gets the mode a plain ``open()`` would give
  (``0666 & ~umask``, or the mode of the file it replaces), not mkstemp's 0600.
* ``check_writable`` / ``check_output_dir`` prove, before anything runs, that an output can be
  created where it will be written (they create and remove a probe file).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError

_UMASK_LOCK = threading.Lock()


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


def _current_umask() -> int:
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _file_mode(target: Path) -> int:
    """The mode a plain open() would leave: the replaced file's, else 0666 & ~umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_current_umask()


def _folder(target: Path) -> Path:
    return target.parent if str(target.parent) else Path(".")


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path``.

    The temporary file is removed when ``write`` fails; the result honours the umask."""
    target = Path(path)
    folder = _folder(target)
    if not folder.is_dir():
        raise ConfigError(f"cannot write {target}: the folder {folder} does not exist.")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as error:
        raise ConfigError(f"cannot write {target}: {error.strerror or error}.") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, _file_mode(target))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically, flushed to disk before the rename."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    return write_atomic(path, write)


def dump_json(data: object, path: str | Path) -> None:
    """Write JSON to ``path`` atomically, or to standard output when path is ``-``."""
    text = json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
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
