"""`wattlab export`: the database's tables as CSV, JSON or Parquet files for pandas users.

Each table becomes one file named after it (``runs.csv``, ``windows.csv``, ``trace.csv``,
``sweeps.csv``) with exactly the schema's column names and units. Files are written to a
temporary name and renamed into place (``wattlab.jsonio.write_atomic``), so a reader never
sees half a file; they get the mode a plain open() would give (the umask is honoured).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db.store import Store
from wattlab.extras import require
from wattlab.jsonio import refuse_links_in, text_handle, write_atomic

FORMATS = ("csv", "parquet", "json")
TABLES = ("runs", "windows", "trace", "sweeps")


def export_tables(
    store: Store, out_dir: str | Path, fmt: str = "csv", sweep: str | None = None
) -> list[Path]:
    """Write runs, windows, trace and sweeps into ``out_dir``; return the files written.

    ``fmt`` is csv, parquet (needs pyarrow) or json (a list of records; read it back with
    ``pd.read_json(path, orient="records", convert_dates=False)``). With ``sweep``, only
    that sweep's runs, their windows and traces, and its spec are written.
    """
    fmt = str(fmt).lower()
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose csv, parquet or json.")
    if fmt == "parquet":
        _require_pyarrow()
    with store.snapshot():  # runs, windows and traces of one moment, never torn
        tables = _tables(store, sweep)
    out = Path(out_dir).expanduser()
    refuse_links_in(out, [f"{name}.{fmt}" for name in TABLES], "export")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create the export folder {out}: {error.strerror}.") from None
    written = []
    for name in TABLES:
        path = out / f"{name}.{fmt}"
        write_atomic(path, _writer(tables[name], fmt))
        written.append(path)
    return written


def _require_pyarrow() -> None:
    require("pyarrow", "parquet", "parquet export", instead="use csv or json")


def _tables(store: Store, sweep: str | None) -> dict[str, pd.DataFrame]:
    if sweep is None:
        return {
            "runs": store.runs(),
            "windows": store.windows(),
            "trace": store.trace(),
            "sweeps": store.sweeps(),
        }
    sweeps = store.sweeps()
    runs = store.runs(sweep=sweep)
    if sweep not in set(sweeps["name"]) and runs.empty:
        known = ", ".join(sorted(sweeps["name"])) or "none"
        raise DataError(f"{store.path} holds no sweep named {sweep!r}; sweeps: {known}.")
    ids = [int(i) for i in runs["id"]]
    return {
        "runs": runs,
        "windows": store.windows(ids),
        "trace": store.trace(ids),
        "sweeps": sweeps[sweeps["name"] == sweep].reset_index(drop=True),
    }


def _writer(frame: pd.DataFrame, fmt: str) -> Callable[[BinaryIO], None]:
    """Write ``frame`` into the open temporary file the one writer hands over."""

    def write(handle: BinaryIO) -> None:
        if fmt == "parquet":
            frame.to_parquet(handle, index=False)
            return
        with text_handle(handle) as text:
            if fmt == "csv":
                frame.to_csv(text, index=False)
            else:
                frame.to_json(text, orient="records", indent=1)

    return write
