"""Finished runs kept beside the database while it stayed locked, merged by the next writer.

When another process holds the database for longer than ``store.BUSY_TIMEOUT_S``, a finished
run is not thrown away: ``keep_finished`` writes it (row, windows, trace) to a side file
``<db>.pending-<id>-<token>.json`` next to the database, through the one link-refusing writer.
The next command that opens the database for writing calls ``merge_pending``, which stores
each file's run in one transaction and then removes the file, so each is merged exactly once:
a claimed run whose row is already finished is not stored again, and an unclaimed sweep run
already stored 'ok' is refused by the store's unique guard.
"""

from __future__ import annotations

import glob
import json
import secrets
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from wattlab.errors import DataError
from wattlab.experiment.db.errors import AlreadyStoredError, StoreLocked
from wattlab.jsonio import bounded_part, dump_json, jsonable

FORMAT = "wattlab-pending-run-1"


class RunWriter(Protocol):
    """What this module needs of an open database (``store.Store``): its file and its three
    ways of storing a finished run. The store imports this module, not the other way round."""

    path: Path

    def insert_run(
        self,
        run: dict[str, Any],
        windows: Sequence[dict[str, Any]] = ...,
        trace: Iterable[tuple[float, str, float]] = ...,
    ) -> int: ...

    def finish_run(
        self,
        run_id: int,
        run: dict[str, Any],
        windows: Sequence[dict[str, Any]] = ...,
        trace: Iterable[tuple[float, str, float]] = ...,
    ) -> int: ...

    def merge_finished(
        self,
        run_id: int | None,
        run: dict[str, Any],
        windows: Sequence[dict[str, Any]] = ...,
        trace: Iterable[tuple[float, str, float]] = ...,
    ) -> int | None: ...


def pending_files(db_path: str | Path) -> list[Path]:
    """The side files of finished runs that wait to be merged into ``db_path``, oldest name
    first."""
    db = Path(db_path).expanduser()
    found: set[str] = set()
    for name in {bounded_part(db.name), db.name}:  # the whole name: files of wattlab <= 0.2
        found.update(glob.glob(str(db.parent / f"{glob.escape(name)}.pending-*.json")))
    return sorted(Path(p) for p in found if not Path(p).is_symlink())


def keep_finished(
    db_path: str | Path,
    run_id: int | None,
    run: dict[str, Any],
    windows: Sequence[dict[str, Any]] = (),
    trace: Iterable[tuple[float, str, float]] = (),
) -> Path:
    """Write a finished run to a new side file beside ``db_path``; return the file."""
    db = Path(db_path).expanduser()
    which = run_id if run_id is not None else "new"
    name = f"{bounded_part(db.name)}.pending-{which}-{secrets.token_hex(4)}"
    path = db.with_name(name + ".json")
    dump_json(
        {
            "format": FORMAT,
            "run_id": run_id,
            "run": jsonable(run),
            "windows": jsonable(list(windows)),
            "trace": [[float(t), str(c), float(p)] for t, c, p in trace],
        },
        path,
    )
    return path


def store_finished(
    store: RunWriter,
    run_id: int | None,
    row: dict[str, Any],
    windows: Sequence[dict[str, Any]] = (),
    trace: Sequence[tuple[float, str, float]] = (),
) -> int | None:
    """Store a finished run (finish its claim ``run_id``, or insert it); when the database
    stays locked past the store's busy timeout, keep it in a side file beside the database
    and say so in one line on stderr, so that a finished run is never lost to a lock.
    Returns the run's id (None for an unclaimed run that was kept)."""
    try:
        if run_id is None:
            return store.insert_run(row, windows, trace)
        return store.finish_run(run_id, row, windows, trace)
    except StoreLocked as error:
        kept = keep_finished(store.path, run_id, row, windows, trace)
        sys.stderr.write(
            f"wattlab: {store.path} stayed locked by another process for {error.waited_s:g} s; "
            f"the finished run is kept in {kept}, and the next command that writes to the "
            "database merges it.\n"
        )
        return run_id


def merge_pending(store: RunWriter) -> list[str]:
    """Store every side file's run in ``store`` (each in one transaction), remove the file,
    and return one line per file for the person at the terminal."""
    lines = []
    for path in pending_files(store.path):
        data = _read(path)
        run_id = data.get("run_id")
        try:
            trace = [(float(t), str(c), float(p)) for t, c, p in data.get("trace", [])]
        except (TypeError, ValueError):
            raise DataError(
                f"{path} is a damaged kept run (its trace); move it away to go on without it."
            ) from None
        try:
            stored = store.merge_finished(
                None if run_id is None else int(run_id), data["run"], data["windows"], trace
            )
        except AlreadyStoredError:
            stored = None
        except (ValueError, TypeError, KeyError) as error:  # columns this wattlab lacks
            raise DataError(
                f"cannot merge the kept run {path} ({error}); move it away to go on without it."
            ) from None
        path.unlink(missing_ok=True)
        if stored is None:
            lines.append(f"wattlab: {path.name} was already in {store.path}; removed it.")
        else:
            lines.append(
                f"wattlab: merged run {stored}, kept in {path.name} while {store.path} was "
                "locked, into the database."
            )
    return lines


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(
            f"cannot read the kept run {path} ({error}); move it away to go on without it."
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(
            f"{path} is not a kept wattlab run (format {FORMAT!r} expected); move it away."
        )
    if not isinstance(data.get("run"), dict) or not isinstance(data.get("windows"), list):
        raise DataError(f"{path} is a damaged kept run (no run row or windows); move it away.")
    return data
