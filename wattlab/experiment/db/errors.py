"""The store's own errors, a leaf that every module of the database room may import (the
store raises them, the side files of ``pending`` and the executors catch them)."""

from __future__ import annotations

from wattlab.errors import DataError


class AlreadyStoredError(DataError):
    """The same (sweep, config_hash, repetition) is already stored with status 'ok'.

    A sweep runner treats it as "this run is already done" (another process finished it).
    """


class StoreLocked(DataError):
    """Another process held the database for longer than the store's busy timeout
    (``waited_s``); nothing was written."""

    def __init__(self, message: str, waited_s: float) -> None:
        super().__init__(message)
        self.waited_s = waited_s
