"""The results database: one SQLite file holding runs, their windows, power traces and sweeps.

The schema (``schema.sql``, version ``SCHEMA_VERSION``; an older file is migrated in place when
a command that writes opens it, and read through a migrated copy in memory by one that only
reads) is the contract between the runner, the analysis and the exports; its column names
carry their units (``energy_total_j``, ``duration_s``, ``power_w``). A run and all its rows are
written in ONE transaction, so a crash or SIGKILL leaves either the whole run or nothing. A run
may be claimed first (a 'running' row, ``claim_run``) and finished later (``finish_run``); a claim
left by a dead process becomes 'abandoned'. The file is opened in WAL mode with a busy
timeout, so several processes (parallel sweeps, a report reading while a sweep writes) can
share it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import enum
import json
import math
import os
import secrets
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db.errors import AlreadyStoredError, StoreLocked
from wattlab.experiment.db.record import added_in

if TYPE_CHECKING:
    from wattlab.experiment.db.stored_run import StoredRun

SCHEMA_VERSION = 10
# The columns each version added to `runs` (declared once, in wattlab.experiment.db.record).
_V2_RUN_COLUMNS = added_in(2)  # phases, idle readings, the claiming process
_V3_RUN_COLUMNS = added_in(3)  # how GPU utilisation was obtained, STEP's marks
_V4_RUN_COLUMNS = added_in(4)  # STEP's calibrated interval
_V5_RUN_COLUMNS = added_in(5)  # runs of a command sweep (wattlab.experiment.sweep.command_plan)
_V6_RUN_COLUMNS = added_in(6)  # when the claiming process started (pid reuse)
_V7_RUN_COLUMNS = added_in(7)  # the synthetic task's and the recipe's versions
_V8_RUN_COLUMNS = added_in(8)  # the measured share (provenance by share)
_V9_RUN_COLUMNS = added_in(9)  # the run's fingerprint: wattlab, code commit, torch, CUDA, cuDNN
_V10_RUN_COLUMNS = added_in(10)  # the training tokens of a text model
# version -> the run columns its successor added: opening an older database adds them (NULL)
_ADDED_RUN_COLUMNS = {
    1: _V2_RUN_COLUMNS,
    2: _V3_RUN_COLUMNS,
    3: _V4_RUN_COLUMNS,
    4: _V5_RUN_COLUMNS,
    5: _V6_RUN_COLUMNS,
    6: _V7_RUN_COLUMNS,
    7: _V8_RUN_COLUMNS,
    8: _V9_RUN_COLUMNS,
    9: _V10_RUN_COLUMNS,
}
# version -> the windows columns its successor added (7: per-epoch accuracy, epoch_eval rows)
_ADDED_WINDOW_COLUMNS: dict[int, tuple[tuple[str, str], ...]] = {6: (("accuracy", "REAL"),)}
RUN_STATUSES = ("running", "ok", "failed", "abandoned")
APP = "wattlab"
BUSY_TIMEOUT_S = 60.0  # how long a writer waits for another process's transaction

# Guard against storing the same sweep run twice as 'ok' (resume after a crash, two runners).
# NULL sweeps (lone `wattlab run`) are distinct in a SQLite unique index, so they never clash.
_OK_UNIQUE_INDEX = "runs_ok_unique"
_OK_UNIQUE_SQL = (
    f"CREATE UNIQUE INDEX IF NOT EXISTS {_OK_UNIQUE_INDEX} "
    "ON runs (sweep, config_hash, repetition) WHERE status = 'ok'"
)
# Created on open when missing (databases made before it existed); see schema.sql.
_JOBS_TABLE = "scheduler_jobs"
_JSON_COLUMNS = (
    "config_json",
    "components_json",
    "codecarbon_components_json",
    "spec_json",
    "idle_json",
    "step_marks_json",
    "command_json",
)
_SQLITE_MAGIC = b"SQLite format 3\x00"
_CHUNK = 500  # ids per IN (...) query, well under SQLite's parameter limit


def schema_sql() -> str:
    """The text of ``schema.sql`` shipped next to this module."""
    try:
        return resources.files("wattlab.experiment.db").joinpath("schema.sql").read_text("utf-8")
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        return (Path(__file__).parent / "schema.sql").read_text("utf-8")


def open_store(
    path: str | Path,
    *,
    create: bool = True,
    readonly: bool = False,
    merge_kept: bool | None = None,
) -> Store:
    """Open (and, with ``create``, initialise) the wattlab database at ``path``.

    Finished runs kept beside it while it was locked (``experiment.pending``) are merged by a
    writable open; ``merge_kept=True`` lets a reader merge them too (report, export: through a
    writable connection, when the database may be written), ``False`` leaves them alone
    silently; a reader by default only says in one line that they wait.

    An empty file counts as no database: ``create`` makes one in it, otherwise it is refused
    like a missing file. ``readonly`` opens an existing database without changing anything in
    it (for reports, exports and dry runs; a read-only file works). Raises DataError when the
    file is not a wattlab database, is damaged, has a newer schema, or is missing (or empty)
    while ``create`` is False.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a wattlab database; give a file for --db.")
    if readonly:
        create = False
    if path.exists() and _is_empty(path) and not create:
        raise DataError(
            f"{path} is an empty file, not a wattlab database; `wattlab run` or `wattlab sweep` "
            "creates the database in it."
        )
    if path.exists():
        _check_sqlite_header(path)
    elif not create:
        raise DataError(f"no wattlab database at {path}; check --db or run a sweep first.")
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DataError(
                f"cannot create the database {path}: {error.strerror or error}."
            ) from None
    new = create and not path.exists()
    try:
        conn = _connect(path, readonly=readonly)
    except sqlite3.Error as error:
        raise sqlite_error(path, error) from None
    try:
        version = _prepare_waiting(conn, path, create=create, readonly=readonly)
        if version < SCHEMA_VERSION:  # only a reader gets here: it never migrates the file
            conn = _in_memory_migrated(conn, path, version)
        if readonly:
            conn.execute("PRAGMA query_only = ON")
    except BaseException as error:
        conn.close()
        if new and "disk is full" in str(error) and _is_empty(path):
            with contextlib.suppress(OSError):  # the empty file a full disk left: no database
                path.unlink()
        raise
    store = Store(conn, path, schema_version=version)
    merge = (not readonly) if merge_kept is None else merge_kept
    if merge or merge_kept is None:
        _merge_kept_runs(store, readonly=readonly, merge=merge)
    if merge:
        _abandon_dead_claims(store, readonly=readonly)
    return store


def _abandon_dead_claims(store: Store, *, readonly: bool) -> None:
    """Mark every run of this host left 'running' by a process that is gone (a pid that no
    longer runs, or now runs another program) 'abandoned', whatever sweep it belongs to: any
    command that writes the database (or a report or export that may write it) does so, so no
    claim stays 'running' after a kill -9. A reader does it through a writable connection when
    it may write; a database it cannot write is left as it is. The ids end up in
    ``store.abandoned_at_open`` as (id, sweep)."""
    try:
        dead = store.dead_claims()
    except DataError:
        return
    if not dead:
        return
    try:
        if readonly:
            if not _writable(store.path) or store.file_schema_version < SCHEMA_VERSION:
                return  # a writer would migrate an older file: only a writing command does
            with open_store(store.path, merge_kept=False) as writer:
                _abandon_dead_claims(writer, readonly=False)
                store.abandoned_at_open = writer.abandoned_at_open
            return
        store.abandoned_at_open = store.abandon_dead_claims(dead)
    except DataError:  # locked or read-only now: the next writer does it
        return


def _merge_kept_runs(store: Store, *, readonly: bool, merge: bool) -> None:
    """Merge the finished runs kept beside the database while it was locked (one line each on
    stderr). A read-only opener merges them through a writable connection when it may write;
    otherwise (or without ``merge``) it says in one line that they are not in what it reads."""
    from wattlab.experiment.db.pending import merge_pending, pending_files

    kept = pending_files(store.path)
    if not kept:
        return
    try:
        if not merge:
            raise DataError("this command only reads")
        if readonly:
            if not _writable(store.path):
                raise DataError("the database is read-only")
            if store.file_schema_version < SCHEMA_VERSION:
                raise DataError(
                    f"the database uses schema version {store.file_schema_version}, which only "
                    "a command that writes migrates"
                )
            with open_store(store.path):  # merges them
                return
        lines = merge_pending(store)
    except DataError as error:
        sys.stderr.write(
            f"wattlab: {len(kept)} finished run(s) kept beside {store.path} are not merged yet "
            f"({' '.join(str(error).split())}); the next command that writes to it merges them.\n"
        )
        return
    for line in lines:
        sys.stderr.write(line + "\n")


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextmanager
def pinned(path: str | Path) -> Iterator[tuple[int, int] | None]:
    """The ``file_identity`` of the database at ``path``, with the file held open (read-only)
    for the block, so that its inode cannot be reused by a file put in its place (a removed
    file's inode number is free again once nothing holds it). Close the block only when this
    process holds no transaction on the file (closing a descriptor drops POSIX locks)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield None
        return
    try:
        st = os.fstat(fd)
        yield st.st_dev, st.st_ino
    finally:
        os.close(fd)


def check_identity(path: str | Path, identity: tuple[int, int] | None) -> None:
    """WorkStopped (one sentence, exit 1) when the database at ``path`` is gone or is not the
    file of ``identity`` (from ``file_identity`` when it was opened)."""
    from wattlab.errors import WorkStopped

    if identity is None:
        return
    now = file_identity(path)
    if now == identity:
        return
    how = "removed (or moved)" if now is None else "replaced by another file"
    raise WorkStopped(
        f"the database {path} was {how} while wattlab was using it, so nothing more is "
        "written to that path (a new file there holds none of this work); put the database "
        "back and run the command again to resume."
    )


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection to ``path``. A reader of a database it may write is opened read-write, so
    that closing the last connection cleans up the -wal/-shm files (query_only keeps it from
    writing); a reader of a read-only file or folder opens it read-only (``mode=ro``), and
    ``immutable=1`` when SQLite cannot create the WAL index (-shm) beside it."""
    if not readonly or _writable(path):
        return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:  # a WAL database whose -shm cannot be made here
        conn.close()
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        sys.stderr.write(
            f"wattlab: {path} is read-only and its write-ahead log {wal.name} cannot be read "
            "without its index; what it holds beyond the last checkpoint is not read.\n"
        )
    return sqlite3.connect(
        uri + "&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
    )


def _writable(path: Path) -> bool:
    """Whether this process can write ``path`` and create files beside it (-wal, -shm);
    a read-only mount fails even for root."""
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
        return False
    try:
        return not bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return True


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def sqlite_error(path: Path, error: BaseException) -> DataError:
    """One sentence for an SQLite failure on the database ``path``: which file, what is wrong,
    and how to check it."""
    lines = str(error).strip().splitlines()
    text = lines[0][:200] if lines else type(error).__name__
    low = text.lower()
    if (
        "readonly" in low
        or "read-only" in low
        or ("unable to open" in low and not _folder_writable(path.parent))
    ):
        return DataError(
            f"cannot write the database {path}: it (or its folder) is read-only ({text}); "
            "make it writable or give another --db."
        )
    if "full" in low or ("i/o error" in low and _disk_full(path.parent)):
        # SQLITE_FULL, or an I/O error from a disk (or quota) with no room left: SQLite says
        # "disk I/O error" when it cannot grow its WAL index (-shm) on a full disk
        return DataError(
            f"cannot write the database {path}: the disk is full ({text}); nothing of this "
            "write was stored, so free some space and run the command again."
        )
    if "locked" in low or "busy" in low:
        return StoreLocked(
            f"the database {path} stayed locked by another process for {BUSY_TIMEOUT_S:g} s "
            f"({text}); try again when that process is done.",
            waited_s=BUSY_TIMEOUT_S,
        )
    return DataError(
        f"the database {path} is damaged or unreadable ({text}); check it with "
        f"`sqlite3 {path} 'PRAGMA integrity_check'` and restore it from a copy, or use another "
        "--db."
    )


def _folder_writable(folder: Path) -> bool:
    """Whether new files can be made in ``folder`` (not read-only, nor on a read-only mount)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        return not bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return True


def _disk_full(folder: Path, *, probe: bool = True) -> bool:
    """Whether the file system of ``folder`` has no room left: under 1 MiB free, or (with
    ``probe``, after a write failed) a small new file there cannot be written (No space left
    on device, or a quota exceeded)."""
    import errno

    try:
        info = os.statvfs(folder)
        if info.f_bavail * info.f_frsize < 1 << 20:
            return True
    except (OSError, AttributeError):
        pass
    if not probe:
        return False
    probe_file = folder / f".wattlab-space-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(
            probe_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        )
    except OSError as error:
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    try:
        os.write(fd, b"\0" * 65536)
        os.fsync(fd)
        return False
    except OSError as error:
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe_file)


def check_writable_database(path: str | Path) -> None:
    """Before any work: the database at ``path`` can be written (or created), is wattlab's and
    passes SQLite's quick check. Nothing is written; a missing database is not created, but its
    folder must exist."""
    path = Path(path).expanduser()
    if path.exists() and not _is_empty(path):
        with open_store(path, readonly=True, merge_kept=False) as store:  # changes nothing
            store.check_intact()
        for target in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))):
            if target.exists() and not os.access(target, os.R_OK | os.W_OK):
                raise DataError(
                    f"cannot write the database {path}: {target} is read-only; make it "
                    "writable or give another --db."
                )
    folder = path.parent
    if not folder.is_dir():
        raise DataError(f"cannot create the database {path}: {folder} does not exist.")
    # SQLite writes its -wal and -shm files beside the database, so the folder must take files.
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DataError(
            f"cannot write the database {path}: its folder {folder} is read-only; make it "
            "writable or give another --db."
        )
    if _disk_full(folder, probe=False):
        raise sqlite_error(path, sqlite3.OperationalError("database or disk is full"))


def _check_sqlite_header(path: Path) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror or error}.") from None
    if head and head != _SQLITE_MAGIC:
        raise DataError(f"{path} is not a wattlab database (not a SQLite file).")


def _prepare_waiting(
    conn: sqlite3.Connection, path: Path, *, create: bool, readonly: bool = False
) -> int:
    """``_prepare``, tried again while another process holds the lock, up to BUSY_TIMEOUT_S:
    SQLite's busy handler does not cover every step (switching a new database to WAL while
    another connection creates it answers "database is locked" at once)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause_s = 0.01
    while True:
        try:
            return _prepare(conn, path, create=create, readonly=readonly)
        except StoreLocked:
            if time.monotonic() + pause_s >= deadline:
                raise
            if conn.in_transaction:
                conn.rollback()
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.5)


def _prepare(conn: sqlite3.Connection, path: Path, *, create: bool, readonly: bool = False) -> int:
    """Validate (or create) the schema, then switch on WAL, foreign keys and the ok guard
    (only the checks when ``readonly``). A writer migrates an older file in place (one line on
    stderr); a reader changes nothing. Returns the file's schema version (SCHEMA_VERSION once a
    writer migrated it)."""
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            if not create:
                raise DataError(f"{path} is not a wattlab database (it is empty).")
            _create_schema(conn)
            tables = {"meta"}
        if "meta" not in tables:
            raise DataError(f"{path} is not a wattlab database (it has no wattlab meta table).")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError:  # a foreign table that happens to be called meta
            meta = {}
        if meta.get("app") != APP:
            raise DataError(f"{path} is not a wattlab database (its meta table is not wattlab's).")
        raw_version = meta.get("schema_version", "")
        try:
            version = int(raw_version)
        except ValueError:
            raise DataError(
                f"{path} has an unreadable schema_version {raw_version!r}; "
                f"this wattlab reads version {SCHEMA_VERSION}."
            ) from None
        if version > SCHEMA_VERSION:
            raise DataError(
                f"{path} uses database schema version {version}, but this wattlab supports "
                f"version {SCHEMA_VERSION}; upgrade wattlab to open it."
            )
        if version < SCHEMA_VERSION and version not in _ADDED_RUN_COLUMNS:
            raise DataError(
                f"{path} uses database schema version {version}, which this wattlab cannot read; "
                f"it supports version {SCHEMA_VERSION}."
            )
        if readonly:
            return version  # an older file is read through a migrated copy in memory
        if version < SCHEMA_VERSION and _migrate(conn, version):
            sys.stderr.write(
                f"wattlab: migrated {path} from database schema version {version} to "
                f"{SCHEMA_VERSION}; a wattlab that reads only version {version} can no longer "
                "open it.\n"
            )
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        _ensure_jobs_table(conn)
        has_guard = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='index' AND name=?", (_OK_UNIQUE_INDEX,)
        ).fetchone()
        if not has_guard:
            try:
                conn.execute(_OK_UNIQUE_SQL)
            except sqlite3.IntegrityError:
                raise DataError(
                    f"{path} holds the same sweep run twice with status 'ok'; "
                    "remove the duplicate rows before using it."
                ) from None
        return SCHEMA_VERSION
    except sqlite3.DatabaseError as error:
        raise sqlite_error(path, error) from None


def _ensure_jobs_table(conn: sqlite3.Connection) -> None:
    """Add the scheduler_jobs table to a database created before it existed."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (_JOBS_TABLE,)
    ).fetchone()
    if exists:
        return
    statement = schema_sql().split(f"CREATE TABLE IF NOT EXISTS {_JOBS_TABLE}", 1)[1]
    statement = statement.split(";", 1)[0]
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_JOBS_TABLE}{statement}")


def _migrate(conn: sqlite3.Connection, from_version: int) -> bool:
    """Bring a database from ``from_version`` to SCHEMA_VERSION by adding each later version's
    run columns (2: phases, idle readings, the claiming process; 3: how GPU utilisation was
    obtained, STEP's marks; 4: STEP's calibrated interval; 5: a command run's exit code,
    output files, budget window and marks; 6: when the claiming process started; 7: the
    synthetic task's and recipe's versions, the windows' per-epoch accuracy; 8: the measured
    share, filled for the stored runs from their components, whose provenance becomes the
    provenance by share; 9: the run's
    fingerprint; 10: a text model's training tokens), in one transaction; a second
    process migrating the same file waits, then finds it done. Returns whether this call
    migrated it."""
    conn.execute("BEGIN IMMEDIATE")
    migrated = False
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is not None and str(version[0]) == str(from_version):
            migrated = True
            have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
            for step in range(from_version, SCHEMA_VERSION):
                for name, kind in _ADDED_RUN_COLUMNS[step]:
                    if name not in have:
                        conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
            have_w = {r[1] for r in conn.execute("PRAGMA table_info(windows)")}
            for step in range(from_version, SCHEMA_VERSION):
                for name, kind in _ADDED_WINDOW_COLUMNS.get(step, ()):
                    if name not in have_w:
                        conn.execute(f"ALTER TABLE windows ADD COLUMN {name} {kind}")
            if from_version < 8:
                _fill_measured_share(conn)
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return migrated


def _in_memory_migrated(conn: sqlite3.Connection, path: Path, version: int) -> sqlite3.Connection:
    """A reader's view of an older database: a copy in memory (SQLite's backup API), migrated
    there, so that the file itself, its folder and its disk stay as they are (a read-only or
    full disk included). ``conn`` is closed."""
    memory = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.backup(memory)
        conn.close()
        _migrate(memory, version)
    except sqlite3.DatabaseError as error:
        memory.close()
        raise sqlite_error(path, error) from None
    except BaseException:
        memory.close()
        raise
    return memory


def _fill_measured_share(conn: sqlite3.Connection) -> None:
    """Schema 8's data step: each stored run's measured share and provenance by share, from its
    per-component energies (``components_json``); a run without them keeps its word, and its
    share is what the word says (1 measured or sampled, 0 estimated, NULL unknown)."""
    from wattlab.experiment.db.record import provenance_by_share

    rows = conn.execute("SELECT id, components_json, provenance FROM runs").fetchall()
    for run_id, cell, word in rows:
        components = None
        if isinstance(cell, str) and cell.strip():
            with contextlib.suppress(ValueError):
                components = json.loads(cell)
        text: str | None
        text, share = provenance_by_share(
            components if isinstance(components, dict) else None, word
        )
        if word is None and not components:
            text = None  # a claim or a failure: nothing to say
        conn.execute(
            "UPDATE runs SET provenance = ?, energy_measured_share = ? WHERE id = ?",
            (text, share, run_id),
        )


def _create_schema(conn: sqlite3.Connection) -> None:
    # The whole schema and the meta rows in one write transaction: a second process creating
    # the same file waits, then finds everything in place (IF NOT EXISTS / OR IGNORE).
    script = (
        "BEGIN IMMEDIATE;\n"
        + schema_sql()
        + "\nINSERT OR IGNORE INTO meta (key, value) VALUES ('app', 'wattlab');\n"
        + "INSERT OR IGNORE INTO meta (key, value) "
        + f"VALUES ('schema_version', '{SCHEMA_VERSION}');\n"
        + _OK_UNIQUE_SQL
        + ";\nCOMMIT;\n"
    )
    try:
        conn.executescript(script)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _inserted_id(cursor: sqlite3.Cursor) -> int:
    """The id SQLite gave the row an INSERT just wrote."""
    if cursor.lastrowid is None:
        raise DataError("SQLite gave no id for the inserted run.")
    return int(cursor.lastrowid)


def _plain(column: str, value: Any) -> Any:
    """A value SQLite can bind: dicts in *_json columns become JSON, numpy scalars Python ones."""
    if column.endswith("_json") and not isinstance(value, (str, bytes)) and value is not None:
        if hasattr(value, "model_dump"):  # a pydantic model such as RunConfig
            value = value.model_dump(mode="json")
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        return value.item()
    return value


class Store:
    """An open wattlab database. Use ``open_store`` to get one; close it (or use ``with``)."""

    def __init__(
        self, conn: sqlite3.Connection, path: Path, *, schema_version: int = SCHEMA_VERSION
    ) -> None:
        self._conn = conn
        self.path = path
        # the file's own schema version: older when a reader reads a migrated copy in memory
        self.file_schema_version = schema_version
        self.identity = file_identity(path)  # the file opened: checked before every write
        self._intact = False  # set once quick_check passed (before the first write)
        # (id, sweep) of the runs a dead process left 'running', marked abandoned at open
        self.abandoned_at_open: list[tuple[int, str | None]] = []
        with self._sql():
            self._columns = {
                t: self._table_columns(t)
                for t in ("runs", "windows", "trace", "sweeps", _JOBS_TABLE)
            }

    @contextmanager
    def _sql(self) -> Iterator[None]:
        """Turn an SQLite failure (damaged file, read-only, locked) into one DataError."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as error:
            cause = error.__cause__ if isinstance(error, pd.errors.DatabaseError) else error
            raise sqlite_error(self.path, cause or error) from None

    def check_intact(self) -> None:
        """Raise DataError unless SQLite's ``PRAGMA quick_check`` passes (done once per open
        store before its first write: a damaged database is never written into)."""
        if self._intact:
            return
        try:
            rows = [str(r[0]) for r in self._conn.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as error:  # so damaged that the check itself fails
            raise sqlite_error(
                self.path, sqlite3.DatabaseError(f"PRAGMA quick_check: {error}")
            ) from None
        if rows != ["ok"]:
            problems = [
                line
                for row in rows
                for line in row.splitlines()
                if line.strip() and not line.startswith("***")
            ]
            first = problems[0] if problems else "no result"
            raise sqlite_error(
                self.path,
                sqlite3.DatabaseError(f"PRAGMA quick_check: {first}, {len(problems)} problem(s)"),
            )
        self._intact = True

    def check_same_file(self) -> None:
        """WorkStopped (one sentence) when the file at ``path`` is no longer the one this store
        opened: removed (SQLite would write into the unlinked file, lost at close) or replaced
        by another (which holds none of this sweep: its runs would land beside nothing)."""
        check_identity(self.path, self.identity)

    def require_sweep(self, sweep: str | None) -> None:
        """Before a sweep's run is claimed: WorkStopped (one sentence) unless this database
        holds the sweep (another database was put in the place of the sweep's)."""
        if sweep is not None and self.sweep_record(sweep) is None:
            from wattlab.errors import WorkStopped

            raise WorkStopped(
                f"the database {self.path} holds no sweep {sweep!r}: it was replaced during "
                "the sweep, so no run of it is stored there; put the sweep's database back "
                "and run the sweep again to resume."
            )

    def _begin_write(self) -> None:
        """BEGIN IMMEDIATE, once the file is known to be the one opened."""
        self.check_same_file()
        self._conn.execute("BEGIN IMMEDIATE")

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def columns(self, table: str) -> tuple[str, ...]:
        """The column names of ``table`` (runs, windows, trace or sweeps), in schema order."""
        return self._columns[table]

    def _table_columns(self, table: str) -> tuple[str, ...]:
        return tuple(r[1] for r in self._conn.execute(f"PRAGMA table_info({table})"))

    # -- writing ---------------------------------------------------------------------------
    def insert_run(
        self,
        run: dict[str, Any],
        windows: Sequence[dict[str, Any]] = (),
        trace: Iterable[tuple[float, str, float]] = (),
        *,
        job: dict[str, Any] | None = None,
    ) -> int:
        """Store one run, its windows and its power trace in ONE transaction; return its id.

        ``run`` and each window use the schema's column names (``id``/``run_id`` are assigned
        here); an unknown name is a ValueError. ``trace`` rows are ``(t_s, component, power_w)``:
        seconds from the run's start, a component name such as ``gpu:0``, watts. Raises
        AlreadyStoredError when the same (sweep, config_hash, repetition) is already 'ok'.

        ``job`` (a ``scheduler_jobs`` row without ``run_id``) records the scheduler job that ran
        it in the same transaction; a ``result_id`` stored before raises AlreadyStoredError, so
        merging one result file twice stores nothing the second time.
        """
        run_cols = self._checked_columns("runs", run, forbidden=("id",))
        status = run.get("status")
        if status not in ("ok", "failed"):
            raise ValueError(f"run status must be 'ok' or 'failed', got {status!r}")
        window_rows = list(windows)
        for window in window_rows:
            self._checked_columns("windows", window, forbidden=("run_id",))
        job_cols = [] if job is None else self._checked_columns(_JOBS_TABLE, job, ("run_id",))

        self.check_intact()
        with self._sql():
            return self._insert_run(run, run_cols, window_rows, trace, job, job_cols)

    def _insert_run(
        self,
        run: dict[str, Any],
        run_cols: list[str],
        window_rows: list[dict[str, Any]],
        trace: Iterable[tuple[float, str, float]],
        job: dict[str, Any] | None = None,
        job_cols: Sequence[str] = (),
    ) -> int:
        conn = self._conn
        self._begin_write()
        try:
            placeholders = ", ".join("?" for _ in run_cols)
            cursor = conn.execute(
                f"INSERT INTO runs ({', '.join(run_cols)}) VALUES ({placeholders})",
                [_plain(c, run[c]) for c in run_cols],
            )
            run_id = _inserted_id(cursor)
            self._insert_children(run_id, window_rows, trace)
            if job is not None:
                conn.execute(
                    f"INSERT INTO {_JOBS_TABLE} (run_id, {', '.join(job_cols)}) "
                    f"VALUES (?, {', '.join('?' for _ in job_cols)})",
                    [run_id, *(_plain(c, job[c]) for c in job_cols)],
                )
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as error:
            conn.execute("ROLLBACK")
            if f"UNIQUE constraint failed: {_JOBS_TABLE}." in str(error):
                raise AlreadyStoredError(
                    f"the result {job.get('result_id') if job else None!r} is already stored."
                ) from None
            if "UNIQUE constraint failed: runs." in str(error):
                raise AlreadyStoredError(
                    f"sweep {run.get('sweep')!r} already holds an ok run of config "
                    f"{run.get('config_hash')} repetition {run.get('repetition', 0)}."
                ) from None
            raise
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return run_id

    def claim_run(self, run: dict[str, Any]) -> int:
        """Store a run that is starting, with status 'running'; return its id.

        ``finish_run`` turns it into 'ok' or 'failed'. If the process dies first, the row stays
        'running' until ``abandon_running`` marks it 'abandoned' (never reused).
        """
        row = {**run, "status": "running"}
        cols = self._checked_columns("runs", row, forbidden=("id",))
        conn = self._conn
        try:
            self._begin_write()
        except sqlite3.OperationalError as error:
            raise DataError(
                f"cannot write to the database {self.path} ({error}); check that the file "
                "and its folder are writable."
            ) from None
        try:
            cursor = conn.execute(
                f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                [_plain(c, row[c]) for c in cols],
            )
            run_id = _inserted_id(cursor)
            conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise DataError(
                f"cannot write to the database {self.path} ({error}); check that the file "
                "and its folder are writable."
            ) from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return run_id

    def finish_run(
        self,
        run_id: int,
        run: dict[str, Any],
        windows: Sequence[dict[str, Any]] = (),
        trace: Iterable[tuple[float, str, float]] = (),
    ) -> int:
        """Complete a claimed ('running') run: its columns, windows and trace in ONE transaction.

        ``run['status']`` is 'ok' or 'failed'. Raises DataError when the run is no longer
        'running' (a resumed sweep marked it abandoned) and AlreadyStoredError as insert_run.
        """
        cols = self._checked_columns("runs", run, forbidden=("id",))
        status = run.get("status")
        if status not in ("ok", "failed"):
            raise ValueError(f"a finished run's status must be 'ok' or 'failed', got {status!r}")
        window_rows = list(windows)
        for window in window_rows:
            self._checked_columns("windows", window, forbidden=("run_id",))
        with self._sql():
            return self._finish_run(run_id, run, cols, window_rows, trace)

    def _finish_run(
        self,
        run_id: int,
        run: dict[str, Any],
        cols: list[str],
        window_rows: list[dict[str, Any]],
        trace: Iterable[tuple[float, str, float]],
        *,
        statuses: tuple[str, ...] = ("running",),
    ) -> int:
        conn = self._conn
        self._begin_write()
        try:
            cursor = conn.execute(
                f"UPDATE runs SET {', '.join(f'{c} = ?' for c in cols)} "
                f"WHERE id = ? AND status IN ({', '.join('?' for _ in statuses)})",
                [*(_plain(c, run[c]) for c in cols), run_id, *statuses],
            )
            if cursor.rowcount != 1:
                raise DataError(
                    f"run {run_id} is no longer 'running' in {self.path} (a resumed sweep "
                    "marked it abandoned); its result was not stored."
                )
            self._insert_children(run_id, window_rows, trace)
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as error:
            conn.execute("ROLLBACK")
            if "UNIQUE constraint failed: runs." in str(error):
                raise AlreadyStoredError(
                    f"sweep {run.get('sweep')!r} already holds an ok run of config "
                    f"{run.get('config_hash')} repetition {run.get('repetition', 0)}."
                ) from None
            raise
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return run_id

    def merge_finished(
        self,
        run_id: int | None,
        run: dict[str, Any],
        windows: Sequence[dict[str, Any]] = (),
        trace: Iterable[tuple[float, str, float]] = (),
    ) -> int | None:
        """Store a finished run kept in a side file (``experiment.pending``): finish its claim
        when that is still 'running' or was marked 'abandoned' meanwhile, insert it when it
        had no claim (or the claim is gone); return its id, or None when the claim is already
        finished (the file was merged before)."""
        if run_id is not None:
            with self._sql():
                row = self._conn.execute(
                    "SELECT status FROM runs WHERE id = ?", (int(run_id),)
                ).fetchone()
            if row is not None and row[0] in ("ok", "failed"):
                return None
            if row is not None:
                cols = self._checked_columns("runs", run, forbidden=("id",))
                window_rows = list(windows)
                self.check_intact()
                with self._sql():
                    return self._finish_run(
                        int(run_id),
                        run,
                        cols,
                        window_rows,
                        trace,
                        statuses=("running", "abandoned"),
                    )
        return self.insert_run(run, windows, trace)

    def _insert_children(
        self,
        run_id: int,
        window_rows: Sequence[dict[str, Any]],
        trace: Iterable[tuple[float, str, float]],
    ) -> None:
        conn = self._conn
        for window in window_rows:
            cols = list(window)
            conn.execute(
                f"INSERT INTO windows (run_id, {', '.join(cols)}) "
                f"VALUES (?, {', '.join('?' for _ in cols)})",
                [run_id, *(_plain(c, window[c]) for c in cols)],
            )
        conn.executemany(
            "INSERT INTO trace (run_id, t_s, component, power_w) VALUES (?, ?, ?, ?)",
            (
                (run_id, _plain("t_s", t_s), component, _plain("power_w", power_w))
                for t_s, component, power_w in trace
            ),
        )

    def abandon_running(
        self,
        sweep: str | None,
        *,
        hostname: str | None = None,
        dead_pids: Iterable[int] = (),
        dead_ids: Iterable[int] = (),
    ) -> list[int]:
        """Mark runs left 'running' by dead processes as 'abandoned'; return their ids.

        With a ``sweep`` name: every 'running' row of that sweep (call it holding the sweep's
        lock, so no live process can be running one). With ``sweep=None``: the lone runs of
        ``hostname`` whose pid is in ``dead_pids`` or whose id is in ``dead_ids`` (a claim whose
        pid now belongs to another process, see ``running_lone_claims``).
        """
        conn = self._conn
        self._begin_write()
        try:
            params: list[object]
            if sweep is not None:
                params = [sweep]
                where = "sweep = ? AND status = 'running'"
            else:
                pids = sorted({int(p) for p in dead_pids})
                ids = sorted({int(i) for i in dead_ids})
                if not (pids or ids) or hostname is None:
                    conn.execute("COMMIT")
                    return []
                pid_marks = ", ".join("?" for _ in pids) or "NULL"
                id_marks = ", ".join("?" for _ in ids) or "NULL"
                where = (
                    "sweep IS NULL AND status = 'running' AND hostname = ? "
                    f"AND (pid IN ({pid_marks}) OR id IN ({id_marks}))"
                )
                params = [hostname, *pids, *ids]
            ids = [int(r[0]) for r in conn.execute(f"SELECT id FROM runs WHERE {where}", params)]
            if ids:
                conn.execute(
                    f"UPDATE runs SET status = 'abandoned', error = ?, finished_at = ? "
                    f"WHERE {where}",
                    ["abandoned: the process running it died before it finished", _now_utc()]
                    + list(params),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return ids

    def dead_claims(self) -> list[int]:
        """Ids of the runs claimed on this host and left 'running' by a process that is gone
        (its pid no longer runs, or now runs a program started at another time)."""
        from wattlab.experiment.hosts import host_name
        from wattlab.processes import same_process_alive

        with self._sql():
            rows = self._conn.execute(
                "SELECT id, pid, pid_started_unix FROM runs "
                "WHERE status = 'running' AND hostname = ? AND pid IS NOT NULL",
                (host_name(),),
            ).fetchall()
        return [
            int(i)
            for i, pid, started in rows
            if not same_process_alive(int(pid), None if started is None else float(started))
        ]

    def abandon_dead_claims(self, dead_ids: Iterable[int]) -> list[tuple[int, str | None]]:
        """Mark the runs ``dead_ids`` (from ``dead_claims``) 'abandoned' when they are still
        'running'; return (id, sweep) of each one marked."""
        ids = sorted({int(i) for i in dead_ids})
        if not ids:
            return []
        conn = self._conn
        marks = ", ".join("?" for _ in ids)
        where = f"status = 'running' AND id IN ({marks})"
        with self._sql():
            self._begin_write()
            try:
                marked = [
                    (int(i), None if sw is None else str(sw))
                    for i, sw in conn.execute(f"SELECT id, sweep FROM runs WHERE {where}", ids)
                ]
                if marked:
                    conn.execute(
                        f"UPDATE runs SET status = 'abandoned', error = ?, finished_at = ? "
                        f"WHERE {where}",
                        [
                            "abandoned: the process running it died before it finished",
                            _now_utc(),
                            *ids,
                        ],
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return marked

    def running_lone_runs(self, hostname: str) -> list[tuple[int, int | None]]:
        """(id, pid) of lone runs ('running', no sweep) claimed on ``hostname``."""
        return [(i, p) for i, p, _ in self.running_lone_claims(hostname)]

    def running_lone_claims(self, hostname: str) -> list[tuple[int, int | None, float | None]]:
        """(id, pid, pid_started_unix) of lone runs ('running', no sweep) claimed on
        ``hostname``; the start time is None for claims made before schema version 6."""
        rows = self._conn.execute(
            "SELECT id, pid, pid_started_unix FROM runs "
            "WHERE sweep IS NULL AND status = 'running' AND hostname = ?",
            (hostname,),
        )
        return [
            (int(i), None if p is None else int(p), None if t is None else float(t))
            for i, p, t in rows
        ]

    def _checked_columns(
        self, table: str, row: dict[str, Any], forbidden: tuple[str, ...]
    ) -> list[str]:
        allowed = set(self._columns[table]) - set(forbidden)
        unknown = sorted(str(k) for k in row if k not in allowed)
        if unknown:
            raise ValueError(
                f"unknown {table} column(s) {unknown}; the schema has {sorted(allowed)}"
            )
        return list(row)

    def register_sweep(
        self, name: str, spec_json: dict[str, Any], spec_hash: str, order_seed: int | None
    ) -> int | None:
        """Record a sweep's spec, or confirm a resumed one; return the stored order seed.

        The first call stores the spec and ``order_seed`` (drawn at random when None, so a
        random order can always be reproduced); a later call with the same ``spec_hash`` is a
        resume and returns the seed stored the first time, whatever ``order_seed`` says. A
        different ``spec_hash`` under the same name is a ConfigError.
        """
        self.check_intact()
        with self._sql():
            return self._register_sweep(name, spec_json, spec_hash, order_seed)

    def sweep_record(self, name: str) -> tuple[str, int | None] | None:
        """(spec_hash, order_seed) of the registered sweep ``name``, or None; reads only."""
        with self._sql():
            row = self._conn.execute(
                "SELECT spec_hash, order_seed FROM sweeps WHERE name = ?", (name,)
            ).fetchone()
        if row is None:
            return None
        return str(row[0]), None if row[1] is None else int(row[1])

    def _register_sweep(
        self, name: str, spec_json: dict[str, Any], spec_hash: str, order_seed: int | None
    ) -> int | None:
        conn = self._conn
        self._begin_write()
        try:
            row = conn.execute(
                "SELECT spec_hash, order_seed FROM sweeps WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                if order_seed is None:
                    order_seed = secrets.randbelow(2**31)
                conn.execute(
                    "INSERT INTO sweeps (name, spec_json, spec_hash, order_seed, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (name, _plain("spec_json", spec_json), spec_hash, order_seed, _now_utc()),
                )
                stored_seed = order_seed
            elif row[0] != spec_hash:
                raise ConfigError(
                    f"the database already holds sweep {name!r} with a different spec; "
                    "use another --db or rename the sweep."
                )
            else:
                stored_seed = row[1]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return None if stored_seed is None else int(stored_seed)

    # -- reading ---------------------------------------------------------------------------
    @contextmanager
    def snapshot(self) -> Iterator[Store]:
        """``with store.snapshot():`` every read inside sees one state of the database (one
        read transaction: in WAL mode a writer meanwhile neither waits nor shows), so runs,
        windows and traces read together always belong together."""
        if self._conn.in_transaction:
            yield self
            return
        with self._sql():
            self._conn.execute("BEGIN DEFERRED")
            self._conn.execute("SELECT count(*) FROM meta").fetchone()  # the snapshot starts
        try:
            yield self
        finally:
            if self._conn.in_transaction:
                with self._sql():
                    self._conn.execute("COMMIT")

    def runs(self, sweep: str | None = None, status: str | None = None) -> pd.DataFrame:
        """All runs (optionally of one sweep and/or one status), oldest first."""
        where, params = [], []
        if sweep is not None:
            where.append("sweep = ?")
            params.append(sweep)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        return self._frame(sql + " ORDER BY id", params, "runs")

    def run_record(self, run_id: int) -> dict[str, Any] | None:
        """One run as a plain dict, shaped like the row a worker stores: ``*_json`` columns
        decoded to objects, SQL NULL as None. None when there is no run ``run_id``."""
        with self._sql():
            cursor = self._conn.execute("SELECT * FROM runs WHERE id = ?", (int(run_id),))
            values = cursor.fetchone()
            names = [d[0] for d in cursor.description]
        if values is None:
            return None
        record = dict(zip(names, values, strict=True))
        for column in _JSON_COLUMNS:
            cell = record.get(column)
            if isinstance(cell, str) and cell.strip():
                with contextlib.suppress(ValueError):
                    record[column] = json.loads(cell)
        return record

    def stored_runs(self, sweep: str | None = None, status: str | None = None) -> list[StoredRun]:
        """``runs(sweep, status)`` as typed runs (``stored_run.StoredRun``), oldest first."""
        from wattlab.experiment.db.stored_run import StoredRun

        return StoredRun.from_frame(self.runs(sweep, status))

    def stored_run(self, run_id: int) -> StoredRun | None:
        """Run ``run_id`` as a typed run (``stored_run.StoredRun``); None when there is none."""
        from wattlab.experiment.db.stored_run import StoredRun

        record = self.run_record(run_id)
        return None if record is None else StoredRun.from_row(record)

    def windows(
        self, run_ids: Iterable[int] | None = None, *, as_stored: bool = False
    ) -> pd.DataFrame:
        """Measurement windows (durations in s, energies in J, power in W) of the given runs,
        with each window's ``provenance`` by share and its ``energy_measured_share`` (0..1)
        from its energy by kind and its run's components (``record.window_provenance``: a
        window stored before schema 8 said only the weakest word). ``as_stored``: the table's
        rows as they are (to copy them into another database)."""
        from wattlab.experiment.db.record import window_provenance

        frame = self._by_run("windows", run_ids)
        if as_stored:
            return frame
        ids = sorted({int(i) for i in frame["run_id"].dropna()}) if len(frame) else []
        components: dict[int, Any] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            with self._sql():
                rows = self._conn.execute(
                    f"SELECT id, components_json FROM runs WHERE id IN ({marks})", chunk
                ).fetchall()
            for run_id, cell in rows:
                with contextlib.suppress(ValueError, TypeError):
                    components[int(run_id)] = json.loads(cell) if cell else None
        said = [
            window_provenance(w, components.get(int(w["run_id"]))) for w in frame.to_dict("records")
        ]
        frame["provenance"] = pd.Series([t for t, _ in said], index=frame.index, dtype=object)
        frame["energy_measured_share"] = pd.Series(
            [s for _, s in said], index=frame.index, dtype=float
        )
        return frame

    def trace(self, run_ids: Iterable[int] | None = None) -> pd.DataFrame:
        """Power traces: ``t_s`` (s from the run's start), ``component``, ``power_w`` (W)."""
        return self._by_run("trace", run_ids)

    def sweeps(self) -> pd.DataFrame:
        """Registered sweeps: name, spec_json, spec_hash, order_seed, created_at."""
        return self._frame("SELECT * FROM sweeps ORDER BY created_at, name", [], "sweeps")

    def sweep_names(self) -> list[str]:
        """Every sweep this database knows (registered, or named by a run), sorted."""
        with self._sql():
            rows = self._conn.execute(
                "SELECT sweep FROM runs WHERE sweep IS NOT NULL UNION SELECT name FROM sweeps"
            ).fetchall()
        return sorted({str(r[0]) for r in rows})

    def unknown_sweep(self, name: str) -> str:
        """One sentence for a sweep name this database does not hold, listing the ones it does."""
        known = self.sweep_names()
        listed = ", ".join(known) if known else "none (only lone `wattlab run` runs)"
        return f"the database {self.path} holds no runs of sweep {name!r}; its sweeps: {listed}."

    def sweep_spec(self, name: str) -> dict[str, Any] | None:
        """The stored spec of sweep ``name`` as a dict, or None when there is no such sweep."""
        with self._sql():
            row = self._conn.execute(
                "SELECT spec_json FROM sweeps WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def scheduler_jobs(self) -> pd.DataFrame:
        """Scheduler jobs behind runs: run_id, job_id, result_id, state, consumed_energy_j, ..."""
        if not self._columns[_JOBS_TABLE]:  # an older database opened read-only
            return pd.DataFrame(columns=["run_id", "job_id", "result_id", "consumed_energy_j"])
        return self._frame(f"SELECT * FROM {_JOBS_TABLE} ORDER BY run_id", [], _JOBS_TABLE)

    def stored_result_ids(self) -> set[str]:
        """The ids of every result file already merged into this database."""
        if not self._columns[_JOBS_TABLE]:
            return set()
        return {str(r[0]) for r in self._conn.execute(f"SELECT result_id FROM {_JOBS_TABLE}")}

    def completed_keys(self, sweep: str) -> set[tuple[str, int]]:
        """(config_hash, repetition) of the sweep's runs stored with status 'ok'."""
        with self._sql():
            rows = self._conn.execute(
                "SELECT config_hash, repetition FROM runs WHERE sweep = ? AND status = 'ok'",
                (sweep,),
            ).fetchall()
        return {(str(h), int(r)) for h, r in rows}

    def _by_run(self, table: str, run_ids: Iterable[int] | None) -> pd.DataFrame:
        order = " ORDER BY run_id, rowid"
        if run_ids is None:
            return self._frame(f"SELECT * FROM {table}{order}", [], table)
        ids = sorted({int(i) for i in run_ids})
        frames = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT * FROM {table} WHERE run_id IN ({marks}){order}"
            frames.append(self._frame(sql, chunk, table))
        if not frames:
            return self._frame(f"SELECT * FROM {table} WHERE 0", [], table)
        if len(frames) == 1:
            return frames[0]
        return pd.concat(frames, ignore_index=True)

    def _frame(self, sql: str, params: list[Any], table: str) -> pd.DataFrame:
        with self._sql():
            frame = pd.read_sql_query(sql, self._conn, params=params)
        return frame.reindex(columns=list(self._columns[table]))


def without_finite_energy(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """``runs`` less its 'ok' runs whose ``energy_total_j`` is missing, NaN or infinite (a
    database edited by hand, or written by another tool), and those runs' ids. An ok run is
    measured by definition; one without a finite energy cannot be compared, so a reader
    leaves it out and says so rather than fail on it."""
    if runs.empty or "energy_total_j" not in runs.columns or "status" not in runs.columns:
        return runs, []
    energy = pd.to_numeric(runs["energy_total_j"], errors="coerce")
    bad = (runs["status"] == "ok") & ~energy.apply(
        lambda v: isinstance(v, float) and math.isfinite(v)
    )
    ids = [int(v) for v in runs.loc[bad, "id"]] if "id" in runs.columns else []
    return runs.loc[~bad], ids
