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


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: NaN/Infinity and pandas' missing markers become None (JSON has no
    NaN), numpy scalars and arrays become Python numbers and lists, containers recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas.NA / pandas.NaT
        return None
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:  # numpy arrays
        return jsonable(value.tolist())
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return jsonable(value.item())
    return value


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
    text = json.dumps(jsonable(data), indent=2, sort_keys=False) + "\n"
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
