"""The `wattlab` command run inside the test's own process, for tests whose point is what a command
prints, writes and exits with, not the process around it (issue 39).

A fresh ``python -m wattlab.cli`` spends ~4.5 s of CPU importing torch (and ~1 s more on pandas,
scikit-learn and the CLI) that the test worker has already imported; the commands that count a
model's cost import torch even to answer in one line. Here the same entry point
(``wattlab.cli.app.main``: the one-line errors, their exit codes) runs with ``sys.argv``, the
working folder and the environment of the call, its stdout and stderr caught, and what it
changed put back (the folder, the environment, the signal handlers its ``main`` installs).

Tests of a fresh interpreter stay on subprocesses: signals, kill -9, what a process leaves
running, imports and extras that are missing (tests/cli/test_cli_smoke.py), hangs, and any
command that starts processes of its own (``sweep``, multi-process ``run``), whose children write
to the real stdout and stderr.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

_HANDLED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextlib.contextmanager
def _as_the_command(cwd: Path, env: Mapping[str, str] | None) -> Iterator[None]:
    handlers = {signum: signal.getsignal(signum) for signum in _HANDLED}
    before = Path.cwd()
    try:
        with mock.patch.dict(os.environ, env or {}):
            os.chdir(cwd)
            yield
    finally:
        os.chdir(before)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def wattlab_in_process(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``wattlab ARGS`` run in this process in ``cwd`` with ``env`` added to the environment,
    as a CompletedProcess (an exception the command lets out is a traceback on stderr and exit 1,
    as Python's own would be)."""
    from wattlab import stop_signals
    from wattlab.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    with (
        _as_the_command(Path(cwd), env),
        mock.patch.object(sys, "argv", ["wattlab", *args]),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            main()
        except SystemExit as leaving:
            exit_code = leaving.code
            if exit_code is None or isinstance(exit_code, int):
                code = exit_code or 0
            else:  # sys.exit("message"): the message on stderr, exit 1
                print(exit_code, file=sys.stderr)
                code = 1
        except Exception:  # noqa: BLE001 - what Python prints for an uncaught error
            traceback.print_exc()
            code = 1
        finally:
            stop_signals.RECEIVED.clear()
    return subprocess.CompletedProcess(["wattlab", *args], code, out.getvalue(), err.getvalue())
