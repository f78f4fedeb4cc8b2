"""A command's stdout or stderr kept in a file, bounded: its tail, and a line saying what was cut.

A command sweep keeps each run's output in ``DB.runs/ID.stdout`` and ``.stderr``. A command can
print without end (a progress bar per step, a debug loop), so the file holds at most the last
``keep_bytes`` of the stream (``KEEP_OUTPUT_BYTES`` unless told; the tail is what people read,
and what a failed run's error quotes). The command writes into a pipe; a thread copies it into
the file and, each time the file holds twice the bound, rewrites it in place as one line

    [wattlab kept only the last 16 MiB of this output;   123,456,789 bytes before them were
    dropped]  (one line in the file)

followed by the last ``keep_bytes`` of the output (its first line may start mid-line). The
line has a fixed width, so the file on disk is bounded at every moment (at most twice the
bound while the command runs, the bound plus the line once it ended), and a file that was cut
always says so, even when the sweep was killed.
"""

from __future__ import annotations

import os
import threading
from typing import BinaryIO

KEEP_OUTPUT_BYTES = 16 * 2**20
CHUNK_BYTES = 1 << 16
JOIN_TIMEOUT_S = 10.0  # after the command's group is gone, the pipe is at its end at once


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:g} MiB" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"


class KeptOutput:
    """Keep what is written into ``write_fd`` (give it to the command as stdout or stderr)
    in ``handle``'s file (opened read-write: ``open_new_file(..., read_back=True)``), bounded
    to its last ``keep_bytes``. ``close()`` after the command
    and everything it started are gone."""

    def __init__(self, handle: BinaryIO, keep_bytes: int = KEEP_OUTPUT_BYTES) -> None:
        if keep_bytes < 1:
            raise ValueError("keep_bytes must be at least 1")
        self.handle = handle
        self.keep_bytes = int(keep_bytes)
        self.dropped_bytes = 0
        self._fd = handle.fileno()
        self._head = 0  # bytes of the line at the top (0 until something is dropped)
        self._size = 0  # bytes in the file
        self._read_fd, self.write_fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, name="wattlab-output", daemon=True)
        self._thread.start()

    def header(self) -> bytes:
        return (
            f"[wattlab kept only the last {_mib(self.keep_bytes)} of this output; "
            f"{self.dropped_bytes:>20,} bytes before them were dropped]\n"
        ).encode()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, CHUNK_BYTES)
            except OSError:
                break
            if not chunk:
                break
            try:
                self._write(chunk)
            except OSError:  # a full disk: keep reading, so the command is never blocked
                continue
        os.close(self._read_fd)

    def _write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            written = os.pwrite(self._fd, view, self._size)
            self._size += written
            view = view[written:]
        if self._size - self._head >= 2 * self.keep_bytes:
            self._cut()

    def _cut(self) -> None:
        """Rewrite the file as the line and the last ``keep_bytes`` of the output."""
        body = self._size - self._head
        if body <= self.keep_bytes:
            return
        tail = os.pread(self._fd, self.keep_bytes, self._size - self.keep_bytes)
        self.dropped_bytes += body - len(tail)
        head = self.header()
        os.pwrite(self._fd, head + tail, 0)
        self._head = len(head)
        self._size = self._head + len(tail)
        os.ftruncate(self._fd, self._size)

    def close(self) -> None:
        """Close our end of the pipe, wait for the copy to end, then cut the file to its
        bound. The handle stays open (its owner closes it)."""
        try:
            os.close(self.write_fd)
        except OSError:
            pass
        self._thread.join(JOIN_TIMEOUT_S)
        if not self._thread.is_alive():
            try:
                self._cut()
            except OSError:
                pass


__all__ = ["KEEP_OUTPUT_BYTES", "KeptOutput"]
