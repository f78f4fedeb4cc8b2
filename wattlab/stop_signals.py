"""Stop signals of the `wattlab` command: one line and 128 + N at any moment (a base utility).

``install`` makes Ctrl-C raise KeyboardInterrupt and SIGTERM/SIGHUP raise ``Interrupted``, and
notes each signal in ``RECEIVED``; whatever a library then makes of that exception (an import
half done, an error of another type), the command ends with ``exit_stopped``: one line on
stderr and 130 (Ctrl-C) or 128 + N. ``wattlab/__init__.py`` installs them first thing when the
process is the `wattlab` command (``is_the_command``), in a mode that leaves at once
(``os._exit`` after the line: nothing has started yet, and an exception raised into an import
can be turned by Python into another one, such as the RuntimeError of a class's
``__set_name__``), so a signal during the imports is one line too; the app's ``main`` then
installs the raising handlers, once the CLI is imported.

Python itself exits by SIGINT (status -2, not 130) when a KeyboardInterrupt once went through
an ``exec`` of a string (dataclasses and namedtuples do that while they are imported), even if
it was caught afterwards. So after ``exit_stopped`` the process leaves with ``os._exit`` and its
code from an exit hook registered first (it runs after every other exit hook).
Importing wattlab as a library changes no signal handler.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # C module: imports at once (``signal`` is slow)
import atexit
import os
import sys
from types import FrameType

RECEIVED: list[int] = []  # stop signals that arrived, in order
_EXIT_CODE: list[int] = []  # the code exit_stopped chose: the last exit hook leaves with it
_HOOKED: list[bool] = []
_INSTALLED_AT: list[int] = []  # len(RECEIVED) when the raising handlers were last installed
_AT_STAKE: list[str] = []  # what a stop now leaves behind (``at_stake``): said after the signal
SWEEP_AT_STAKE = "a run cut short is stored as failed (run the sweep again to resume)"
RUN_AT_STAKE = "a run cut short is stored as failed"


def is_the_command() -> bool:
    """Whether this process is the `wattlab` command (the console script or -m wattlab.cli)."""
    argv = list(getattr(sys, "orig_argv", []) or [])
    if "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        return module in ("wattlab.cli", "wattlab.cli.app")
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "wattlab"


def _on_interrupt(signum: int, _frame: FrameType | None) -> None:
    RECEIVED.append(signum)
    raise KeyboardInterrupt


def _on_terminate(signum: int, _frame: FrameType | None) -> None:
    from wattlab.errors import Interrupted

    RECEIVED.append(signum)
    raise Interrupted(signum)


def _exit_at_start_up(signum: int, _frame: FrameType | None) -> None:
    """Nothing has started yet (only imports): say the line and leave at once."""
    RECEIVED.append(signum)
    ignore_more()
    line, code = stopped_line(signum)
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass
    os._exit(code)


def _leave_with_code() -> None:
    """The last exit hook: after ``exit_stopped``, leave with its code (see the module doc)."""
    if not _EXIT_CODE:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(_EXIT_CODE[0])


def install(*, at_start_up: bool = False) -> None:
    """Ctrl-C raises KeyboardInterrupt; SIGTERM and SIGHUP raise Interrupted; each is noted in
    RECEIVED. ``at_start_up`` (the imports, before the CLI's main can catch anything): each
    exits at once with its one line. Main thread only (elsewhere nothing changes)."""
    interrupt = _exit_at_start_up if at_start_up else _on_interrupt
    terminate = _exit_at_start_up if at_start_up else _on_terminate
    if not _HOOKED:  # first: it runs after every exit hook registered later
        atexit.register(_leave_with_code)
        _HOOKED.append(True)
    if not at_start_up:
        _INSTALLED_AT[:] = [len(RECEIVED)]
    try:
        _signal.signal(_signal.SIGINT, interrupt)
        for name in ("SIGTERM", "SIGHUP"):
            if hasattr(_signal, name):
                _signal.signal(getattr(_signal, name), terminate)
    except ValueError:  # not the main thread: signal handlers can only be set there
        return


def ignore_more() -> None:
    """On the way out after a stop signal: a second Ctrl-C does not cut the one line short."""
    try:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            if hasattr(_signal, name):
                _signal.signal(getattr(_signal, name), _signal.SIG_IGN)
    except ValueError:  # not the main thread
        return


def at_stake(sentence: str | None) -> None:
    """From now on, a stop signal's line also says ``sentence`` (what the command leaves behind:
    ``SWEEP_AT_STAKE`` once a sweep starts storing runs, ``RUN_AT_STAKE`` for `wattlab run`);
    None: nothing is said beyond the signal (every other command, e.g. `advise --probe`,
    `compare`, `monitor`, which store nothing)."""
    _AT_STAKE[:] = [sentence] if sentence else []


def stopped_line(signum: int) -> tuple[str, int]:
    """The one line and the exit code of a command stopped by ``signum``."""
    if signum == _signal.SIGINT:
        return "wattlab: interrupted", 130
    after = f"; {_AT_STAKE[0]}" if _AT_STAKE else ""
    return f"wattlab: stopped by signal {signum}{after}.", 128 + signum


def exit_stopped(signum: int) -> None:
    """Say in one line that ``signum`` stopped the command, and exit with its code."""
    ignore_more()
    line, code = stopped_line(signum)
    _EXIT_CODE.append(code)
    try:
        print(line, file=sys.stderr, flush=True)
    finally:
        sys.exit(code)


def raise_if_swallowed() -> None:
    """Raise a stop signal that arrived since ``install`` but did not stop us, because a
    library swallowed its exception (torch's C start-up imports numpy and drops whatever that
    raises, a KeyboardInterrupt included). A long loop calls it between its steps, so such a
    Ctrl-C still stops the command there. A no-op where ``install`` was not called (a library)."""
    if not _INSTALLED_AT or len(RECEIVED) <= _INSTALLED_AT[0]:
        return
    signum = RECEIVED[-1]
    if signum == _signal.SIGINT:
        raise KeyboardInterrupt
    from wattlab.errors import Interrupted

    raise Interrupted(signum)
