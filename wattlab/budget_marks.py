"""``with wattlab.budget(samples=N):`` marks a script's budget window for the meter around it.

A command that `wattlab sweep` runs (a spec with ``command:``) is metered from the outside,
like `wattlab monitor`. Without a mark, the whole process is the window: interpreter start,
imports and data loading included. A script marks the part that is the training budget::

    import wattlab

    data = load_data()                     # outside the window
    with wattlab.budget(samples=len(data) * epochs) as mark:
        train(model, data)                 # the measured budget
        mark.samples = steps_done * batch  # or set the samples at the end

The channel: the meter passes the path of a Unix socket in ``$WATTLAB_BUDGET_SOCKET``. On entry
the script sends ``begin`` (with its monotonic and wall clocks) and waits until the meter has
opened its window; on exit it sends ``end`` (and the samples) and waits until the meter has
closed it, so the window holds exactly the block. Several blocks in a row are added up; a block
inside another counts once. Under torchrun only rank 0 marks.

Outside wattlab (no ``$WATTLAB_BUDGET_SOCKET``), ``budget()`` does nothing and costs nothing.
If the meter cannot be reached, the block runs unmarked and one warning goes to stderr.
This module needs only the standard library: the script does not import the meters.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENV_BUDGET_SOCKET = "WATTLAB_BUDGET_SOCKET"
MAX_SAMPLES = 2**63 - 1  # the most a database column (SQLite INTEGER) holds
ACK_TIMEOUT_S = 30.0  # how long a mark waits for the meter to open or close its window
MAX_MESSAGE_BYTES = 4096


class BudgetMark:
    """What ``with wattlab.budget() as mark`` yields: set ``mark.samples`` (training samples
    in the budget, all ranks) before the block ends if they were not known at its start."""

    def __init__(self, samples: int | None = None) -> None:
        self.samples = samples
        self.marked = False  # whether a meter is recording this block
        self._conn: socket.socket | None = None
        self._buffer = b""

    # -- the channel ---------------------------------------------------------------------------
    def _send(self, kind: str) -> bool:
        """Send one mark and wait for the meter's answer; False (after one warning) on failure."""
        assert self._conn is not None
        message = {
            "mark": kind,
            "pid": os.getpid(),
            "monotonic_s": time.monotonic(),
            "wall": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds"),
            "samples": self.samples if kind == "end" else None,
        }
        try:
            self._conn.sendall(json.dumps(message).encode() + b"\n")
            while b"\n" not in self._buffer:
                chunk = self._conn.recv(MAX_MESSAGE_BYTES)
                if not chunk:
                    raise ConnectionError("the meter closed the channel")
                self._buffer += chunk
        except OSError as error:
            _warn(f"the budget {kind} mark did not reach the meter ({error})")
            self._close()
            return False
        line, _, self._buffer = self._buffer.partition(b"\n")
        if line.strip() != b"ok":
            _warn(f"the meter refused the budget {kind} mark: {line.decode(errors='replace')}")
            return False
        return True

    def _open(self, path: str) -> None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(ACK_TIMEOUT_S)
        try:
            conn.connect(path)
        except OSError as error:
            conn.close()
            _warn(f"cannot reach the meter at {path} ({error}); the budget is not marked")
            return
        self._conn = conn
        self.marked = self._send("begin")

    def _finish(self) -> None:
        if self._conn is not None and self.marked:
            self._send("end")
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def samples_problem(value: object) -> str | None:
    """Why ``value`` is not a count of samples (a whole number from 0 to MAX_SAMPLES; a float
    that is a whole number counts), as one phrase; None when it is one (or is None)."""
    if value is None:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        whole = value == int(value)
        value = int(value) if whole else value
    if not whole or not 0 <= value <= MAX_SAMPLES:  # type: ignore[operator]
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        return f"the budget mark's samples {shown} is not a whole number from 0 to {MAX_SAMPLES}"
    return None


def _warn(text: str) -> None:
    print(f"wattlab.budget: {text}.", file=sys.stderr, flush=True)


def _marks_here() -> str | None:
    """The meter's socket when this process should mark (rank 0 of a distributed job)."""
    path = os.environ.get(ENV_BUDGET_SOCKET)
    if not path or os.environ.get("RANK", "0") != "0":
        return None
    return path


def under_meter() -> bool:
    """Whether a wattlab meter is waiting for this process's budget marks."""
    return _marks_here() is not None


@contextmanager
def budget(samples: int | None = None) -> Iterator[BudgetMark]:
    """Mark the block as the run's budget window for the wattlab meter running this script.

    ``samples``: training samples processed in the block (all ranks), for energy per sample;
    may also be set on the yielded mark before the block ends. Does nothing outside wattlab.
    """
    mark = BudgetMark(samples)
    path = _marks_here()
    if path is not None:
        mark._open(path)
    try:
        yield mark
    finally:
        mark._finish()


def open_budget_mark(samples: int | None = None) -> BudgetMark | None:
    """Begin a budget mark without a ``with`` block (the framework callbacks' ``train``
    window); close it with ``close_budget_mark``. None outside wattlab."""
    path = _marks_here()
    if path is None:
        return None
    mark = BudgetMark(samples)
    mark._open(path)
    return mark


def close_budget_mark(mark: BudgetMark | None, samples: int | None = None) -> None:
    """End a mark ``open_budget_mark`` began (None: nothing to do)."""
    if mark is None:
        return
    if samples is not None:
        mark.samples = samples
    mark._finish()


__all__ = [
    "ENV_BUDGET_SOCKET",
    "MAX_SAMPLES",
    "BudgetMark",
    "budget",
    "close_budget_mark",
    "open_budget_mark",
    "samples_problem",
    "under_meter",
]
