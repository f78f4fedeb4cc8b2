"""Writing result files atomically: a reader never sees a half-written file."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError


def _clean(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN/Infinity as None, ready for JSON.
    The one JSON cleaner: every module that writes JSON uses this."""
    return _clean(value)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same folder and os.replace."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"cannot write {target}: the folder {folder} does not exist.")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def dump_json(data: Any, path: str | Path) -> None:
    """Write JSON to ``path`` atomically, or to standard output when path is ``-``."""
    text = json.dumps(_clean(data), indent=2, sort_keys=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(path, text)


def check_writable(path: str | Path | None) -> None:
    """Fail early (before any work) when an output file's folder does not exist."""
    if path is None or str(path) == "-":
        return
    folder = Path(path).parent
    if str(folder) and not folder.is_dir():
        raise ConfigError(f"cannot write {path}: the folder {folder} does not exist.")
