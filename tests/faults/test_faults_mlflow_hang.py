"""Second fault campaign, MLflow (issue #25): a tracking server that accepts the connection
but never answers fails within a bounded time (short HTTP timeout and retries), in one
sentence, exit 2; it never hangs for minutes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wattlab.experiment.db.store import open_store

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
ROOT = Path(__file__).resolve().parents[2]
SERVER_LIFE_S = 120.0  # the silent server stops itself after this, whatever the test does
DEADLINE_S = 60.0  # the promise: an unanswered tracking server fails well before this


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts connections and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + SERVER_LIFE_S
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # timeout: look at the stop flag again
                continue
            self.accepted.append(conn)  # held open, never answered
        self._close_all()

    def _close_all(self) -> None:
        for conn in self.accepted:
            conn.close()
        self.sock.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _db_with_one_run(path: Path) -> Path:
    with open_store(path) as store:
        row = {"sweep": None, "config_hash": "h", "repetition": 0, "config_json": {},
               "label": "x", "status": "ok", "energy_total_j": 10.0, "duration_s": 1.0}  # fmt: skip
        store.insert_run(row, [{"name": "budget", "duration_s": 1.0}], [(0.1, "cpu", 1.0)])
    return path


@pytest.mark.slow
def test_export_to_a_silent_tracking_server_fails_fast_in_one_sentence(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    db = _db_with_one_run(tmp_path / "m.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        env.pop(name, None)  # wattlab's own short defaults, not the caller's
    server = SilentServer()
    try:
        uri = f"http://127.0.0.1:{server.port}"
        started_s = time.monotonic()
        try:
            done = subprocess.run(
                [*WATTLAB, "export", "--db", str(db), "--mlflow", "--tracking-uri", uri],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=DEADLINE_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"export to a silent tracking server ran past {DEADLINE_S} s")
        took_s = time.monotonic() - started_s
    finally:
        server.close()
    assert server.accepted, "the export never reached the silent server"
    assert took_s < DEADLINE_S
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("wattlab:")]
    assert len(lines) == 1, done.stderr[-2000:]
    assert uri in lines[0], lines[0]
