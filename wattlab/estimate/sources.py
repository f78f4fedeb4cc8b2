"""Where the estimate commands' measured runs come from: a results database (``--db``), a
reference CSV (``--data``), or, with neither, the H200 reference shipped with the package; and
PRE's fit on that source, deferred until it is needed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from wattlab.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

    from wattlab.estimate.pre import PreModel

PreFit = Callable[[], "tuple[PreModel | None, str]"]


def _check_db(db: str) -> None:
    if not Path(db).exists():
        raise DataError(f"no database at {db}.")


def measured_runs(db: str | None, data: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, windows): a database's ok runs and all its windows, a reference CSV's, or the
    shipped reference's. ConfigError for both sources at once; DataError for a missing
    database or a missing or malformed CSV."""
    if db is not None and data is not None:
        raise ConfigError("give --db or --data, not both.")
    if db is not None:
        from wattlab.experiment.db.store import open_store

        _check_db(db)
        with open_store(db, readonly=True) as store, store.snapshot():
            return store.runs(status="ok"), store.windows()
    from wattlab.estimate.reference import load_default_reference, load_reference_csv

    if data is not None:
        return load_reference_csv(data)
    return load_default_reference()


def measured_traces(db: str | None) -> pd.DataFrame | None:
    """The power trace of a database's runs (what published STEP segments), None without one."""
    if db is None:
        return None
    from wattlab.experiment.db.store import open_store

    _check_db(db)
    with open_store(db, readonly=True) as store:
        return store.trace()


def pre_fit(db: str | None, data: str | None) -> tuple[PreFit | None, str | None]:
    """PRE's fit on the chosen source (kept on disk by ``wattlab.estimate.pre_cache``), to be
    called once the configuration is checked; or None and a note when the shipped reference
    is missing (the other methods still estimate)."""
    from wattlab.estimate import pre_cache
    from wattlab.estimate.reference import default_reference_path, load_default_reference

    if db is not None:
        runs_df, _ = measured_runs(db, data)
        return (lambda: pre_cache.fit_runs(runs_df)), None
    if data is None and not default_reference_path().is_file():
        try:
            load_default_reference()
        except DataError as error:
            return None, str(error)
    return (lambda: pre_cache.fit_reference(data)), None
