"""Meter another program from the outside: what `wattlab monitor` and command sweeps share.

``start_command`` starts a command (never through a shell) with its parent-death signal set;
``forwarding_signals`` passes SIGINT/SIGTERM on to it while we wait; ``exit_status`` turns a
``wait()`` code into a shell's (128 + N for signal N). ``meter_command`` runs a command under an
EnergyMonitor the caller has started: the whole process is the window ``run``; while it runs,
a ``BudgetServer`` listens on a Unix socket (``$WATTLAB_BUDGET_SOCKET``, see
``wattlab.budget_marks``) for the script's budget marks and opens and closes the window
``budget`` when the script says so. Several marked blocks in a row are added up
(``sum_in_sequence``).

The budget channel is a handshake: a mark is answered only after the window has been opened
(or closed), so the marked block runs entirely inside the window. The child's own clocks
(monotonic and wall) come with each mark and are kept beside the window.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from wattlab.budget_marks import ENV_BUDGET_SOCKET, MAX_MESSAGE_BYTES, MAX_SAMPLES, samples_problem
from wattlab.errors import WattlabError
from wattlab.meters.base import weakest
from wattlab.monitor import EnergyMonitor, Measurement
from wattlab.processes import STOP_SIGNALS

RUN_WINDOW = "run"
BUDGET_WINDOW = "budget"
GUARD_SCRIPT = Path(__file__).with_name("command_guard.py")


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` after which the child receives ``signum`` when this process dies, even
    by SIGKILL (Linux PR_SET_PDEATHSIG). SIGTERM, not SIGKILL, so that the measured command can
    clean up (a training script restoring its GPU power limits)."""
    from wattlab.experiment.runs.lifetime import set_parent_death_signal

    parent = os.getpid()

    def preexec() -> None:
        set_parent_death_signal(signum)
        if os.getppid() != parent:  # the parent died before prctl: the signal would not come
            os._exit(128 + int(signum))

    return preexec


def _guard_preexec(then: Callable[[], None]) -> Callable[[], None]:
    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the guard unblocks it
        then()

    return preexec


class CommandNotStarted(WattlabError):
    """The command could not be started; ``exit_code`` is a shell's (127 not found, 126 not
    executable)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_startable(command: list[str]) -> None:
    """CommandNotStarted (127 not found, 126 not executable) when ``command[0]`` cannot be
    run, checked here because a guard in between would only report it after it started."""
    import shutil

    program = command[0]
    if os.sep in program:
        if not os.path.exists(program):
            raise CommandNotStarted(f"{program}: command not found", 127)
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            raise CommandNotStarted(f"{program}: permission denied", 126)
        return
    if shutil.which(program) is None:
        raise CommandNotStarted(f"{program}: command not found", 127)


def start_command(command: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``command`` (the guard, ``guarded``) with the parent-death signal (SIGTERM) and
    SIGINT blocked until the guard unblocks it, so a Ctrl-C while its Python starts is not a
    KeyboardInterrupt traceback; CommandNotStarted when the program is missing or not
    executable."""
    popen.setdefault("preexec_fn", _guard_preexec(die_with_parent()))
    try:
        return subprocess.Popen(command, **popen)
    except FileNotFoundError:
        raise CommandNotStarted(f"{command[0]}: command not found", 127) from None
    except PermissionError:
        raise CommandNotStarted(f"{command[0]}: permission denied", 126) from None
    except OSError as error:
        raise CommandNotStarted(f"{command[0]}: {error.strerror or error}", 126) from None
    except ValueError as error:  # an argument or variable holding a null byte
        raise CommandNotStarted(f"{command[0]}: {error}", 126) from None


@contextlib.contextmanager
def forwarding_signals(
    send: Callable[[int], None], received: list[int] | None = None
) -> Iterator[list[int]]:
    """While in the block, SIGINT and SIGTERM are passed to ``send`` (and appended to the
    yielded list) instead of stopping us. Only in the main thread (elsewhere: no change)."""
    got: list[int] = [] if received is None else received
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def forward(signum: int, _frame: object) -> None:
        got.append(signum)
        send(signum)

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        yield got
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def exit_status(code: int) -> int:
    """A ``wait()`` code as a shell reports it: killed by signal N is 128 + N."""
    return 128 - code if code < 0 else code


def sum_in_sequence(parts: list[Measurement], name: str) -> Measurement:
    """One Measurement of windows taken one after another by the same meters: durations,
    energies and uncertainties add up; each component keeps its weakest provenance; the mean
    utilisation is weighted by readings. (``combine_measurements`` is for parallel parts.)"""
    if not parts:
        raise ValueError("no measurements to add up")
    first = parts[0]
    if len(parts) == 1:
        return Measurement(**{**first.__dict__, "name": name})
    components = list(dict.fromkeys(c for p in parts for c in p.energy_j))
    readings = {c: sum(p.utilization_readings.get(c, 0) for p in parts) for c in components}
    utilization = {
        c: sum(
            p.utilization_percent[c] * p.utilization_readings.get(c, 0)
            for p in parts
            if c in p.utilization_percent
        )
        / readings[c]
        for c in components
        if readings[c] > 0
    }
    return Measurement(
        name=name,
        started_at=first.started_at,
        duration_s=sum(p.duration_s for p in parts),
        energy_j={c: sum(p.energy_j.get(c, 0.0) for p in parts) for c in components},
        provenance={
            c: weakest([p.provenance[c] for p in parts if c in p.provenance]) for c in components
        },
        uncertainty_j={c: sum(p.uncertainty_j.get(c, 0.0) for p in parts) for c in components},
        in_total={c: all(p.in_total.get(c, True) for p in parts) for c in components},
        short_window={c: any(p.short_window.get(c, False) for p in parts) for c in components},
        samples=sorted(s for p in parts for s in p.samples),
        idle_power_w=dict(first.idle_power_w),
        carbon=first.carbon,
        start_offset_s=first.start_offset_s,
        utilization_percent=utilization,
        utilization_readings={c: n for c, n in readings.items() if n > 0},
    )


# --- the budget channel ----------------------------------------------------------------------
@dataclass
class BudgetSegment:
    """One marked block: the meter's window and the child's own clocks at its two marks."""

    measurement: Measurement | None = None
    begin: dict[str, Any] = field(default_factory=dict)  # the child's begin message
    end: dict[str, Any] | None = None  # its end message; None: the process ended first
    samples: int | None = None

    def to_dict(self) -> dict[str, Any]:
        child_s = None
        if self.end is not None:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                child_s = float(self.end["monotonic_s"]) - float(self.begin["monotonic_s"])
        return {
            "begin_wall": self.begin.get("wall"),
            "end_wall": self.end.get("wall") if self.end else None,
            "child_duration_s": child_s,
            "window_duration_s": self.measurement.duration_s if self.measurement else None,
            "samples": self.samples,
            "ended_by": "mark" if self.end is not None else "process exit",
            "pid": self.begin.get("pid"),
        }


class BudgetServer:
    """Listens on a Unix socket for ``wattlab.budget`` marks and turns them into windows of
    ``monitor`` (started by the caller). ``env`` holds the variable to pass to the command."""

    def __init__(self, monitor: EnergyMonitor, folder: str | Path) -> None:
        self.monitor = monitor
        self.path = str(Path(folder) / "budget.sock")
        self.segments: list[BudgetSegment] = []
        self.errors: list[str] = []
        self.samples_errors: list[str] = []  # samples a mark gave that no run can keep
        self._depth = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(8)
        self._listener.setblocking(False)
        self._stop = threading.Event()
        self._conns: dict[socket.socket, bytes] = {}
        self._thread = threading.Thread(target=self._serve, name="wattlab-budget", daemon=True)

    @property
    def env(self) -> dict[str, str]:
        return {ENV_BUDGET_SOCKET: self.path}

    def start(self) -> BudgetServer:
        self._thread.start()
        return self

    def close(self) -> list[BudgetSegment]:
        """Stop listening; a block still open (the process ended inside it) ends now."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for conn in list(self._conns):
            conn.close()
        self._conns.clear()
        self._listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if self._depth > 0:
            self._depth = 1
            self._end({}, closing=True)
        return self.segments

    def _serve(self) -> None:
        while not self._stop.is_set():
            watched = [self._listener, *self._conns]
            try:
                ready, _, _ = select.select(watched, [], [], 0.05)
            except (OSError, ValueError):
                return
            for sock in ready:
                if sock is self._listener:
                    with contextlib.suppress(BlockingIOError, OSError):
                        conn, _ = self._listener.accept()
                        conn.setblocking(True)
                        self._conns[conn] = b""
                    continue
                self._receive(sock)

    def _receive(self, conn: socket.socket) -> None:
        try:
            chunk = conn.recv(MAX_MESSAGE_BYTES)
        except OSError:
            chunk = b""
        if not chunk:  # the child closed its end (a block ended, or the process died)
            self._conns.pop(conn, None)
            conn.close()
            return
        buffer = self._conns.get(conn, b"") + chunk
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            answer = self._handle(line)
            with contextlib.suppress(OSError):
                conn.sendall(answer.encode() + b"\n")
        if len(buffer) > MAX_MESSAGE_BYTES:
            buffer = b""
        self._conns[conn] = buffer

    def _handle(self, line: bytes) -> str:
        try:
            message = json.loads(line.decode())
            kind = message["mark"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            self.errors.append(f"an unreadable budget mark {line[:80]!r}")
            return "error: unreadable mark"
        try:
            if kind == "begin":
                self._begin(message)
            elif kind == "end":
                problem = self._end(message)
                if problem is not None:  # the window is closed; the run will be failed
                    return f"error: {problem}"
            else:
                self.errors.append(f"an unknown budget mark {kind!r}")
                return f"error: unknown mark {kind!r}"
        except WattlabError as error:  # a meter failed while opening or closing the window
            self.errors.append(str(error))
            return f"error: {error}"
        return "ok"

    def _begin(self, message: dict[str, Any]) -> None:
        self._depth += 1
        if self._depth == 1:
            index = len(self.segments) + 1
            self.monitor.begin_window(f"{BUDGET_WINDOW}:{index}", sync=False)
            self.segments.append(BudgetSegment(begin=message))

    def _end(self, message: dict[str, Any], *, closing: bool = False) -> str | None:
        """Close the block (the window when it is the outermost); the phrase saying why its
        samples cannot be kept (``samples_problem``), also kept in ``samples_errors``."""
        if self._depth == 0:
            self.errors.append("a budget end mark without a begin mark")
            return None
        self._depth -= 1
        segment = self.segments[-1]
        samples = message.get("samples")
        problem = samples_problem(samples)
        if problem is not None:
            self.samples_errors.append(problem)
        elif samples is not None:
            segment.samples = (segment.samples or 0) + int(samples)
        if self._depth == 0:
            name = f"{BUDGET_WINDOW}:{len(self.segments)}"
            segment.measurement = self.monitor.end_window(name, sync=False)
            segment.end = None if closing else message
        return problem


# --- one metered command ---------------------------------------------------------------------
@dataclass
class MeteredCommand:
    """What one metered command came to.

    ``run`` is the whole process (None when a meter failed); ``budget`` the marked window
    (the segments combined) or, without a mark, the whole process again; ``marked`` says which.
    """

    exit_code: int
    run: Measurement | None
    budget: Measurement | None
    marked: bool
    segments: list[BudgetSegment]
    started_unix: float
    ended_unix: float
    interrupted_by: int | None = None
    meter_error: str | None = None
    channel_errors: list[str] = field(default_factory=list)
    samples_errors: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int | None:
        counts = [s.samples for s in self.segments if s.samples is not None]
        return sum(counts) if counts else None

    @property
    def samples_error(self) -> str | None:
        """Why the marks' samples cannot be kept (one given out of range, or a sum beyond
        MAX_SAMPLES); None when they can."""
        if self.samples_errors:
            return self.samples_errors[0]
        total = self.samples
        if total is not None and total > MAX_SAMPLES:
            return f"the budget marks' samples add up to {total}, more than {MAX_SAMPLES}"
        return None


def guarded(command: list[str]) -> list[str]:
    """``command`` run under the guard (see ``command_guard``): nothing outlives the sweep."""
    return [sys.executable, "-I", "-S", str(GUARD_SCRIPT), str(os.getpid()), "--", *command]


def meter_command(
    command: list[str],
    monitor: EnergyMonitor,
    *,
    stdout: IO[bytes] | int | None = None,
    stderr: IO[bytes] | int | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    grace_s: float = 10.0,
) -> MeteredCommand:
    """Run ``command`` under its guard, in a process group of its own, metered by ``monitor``
    (started), with the budget channel open. SIGINT/SIGTERM sent to us go to the whole group;
    after ``grace_s`` the group is killed. When the command has exited, whatever it left
    running in its group is killed. Raises CommandNotStarted only if the guard cannot start."""
    from wattlab.experiment.runs.lifetime import wait_stopping

    with tempfile.TemporaryDirectory(prefix="wattlab-cmd-") as folder:
        server = BudgetServer(monitor, folder).start()
        child_env = {**os.environ, **(env or {}), **server.env}
        started_unix = time.time()
        monitor.begin_window(RUN_WINDOW, sync=False)
        try:
            child = start_command(
                guarded(command),
                stdout=stdout,
                stderr=stderr,
                cwd=cwd,
                env=child_env,
                start_new_session=True,
            )
        except BaseException:
            server.close()
            monitor.end_window(RUN_WINDOW, sync=False)
            raise

        def send(signum: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

        try:
            with forwarding_signals(send) as received:
                code = wait_stopping(child, received, grace_s)
        finally:
            with contextlib.suppress(ProcessLookupError):  # what the command left behind
                os.killpg(child.pid, signal.SIGKILL)
            if child.poll() is None:
                child.kill()
                child.wait()
        segments = server.close()
        ended_unix = time.time()
        meter_error: str | None = None
        run: Measurement | None = None
        try:
            run = monitor.end_window(RUN_WINDOW, sync=False)
        except WattlabError as failure:
            meter_error = str(failure)
    measured = [s.measurement for s in segments if s.measurement is not None]
    budget: Measurement | None
    if measured:
        budget = sum_in_sequence(measured, BUDGET_WINDOW)
    else:
        budget = run
    return MeteredCommand(
        exit_code=exit_status(code),
        run=run,
        budget=budget,
        marked=bool(measured),
        segments=segments,
        started_unix=started_unix,
        ended_unix=ended_unix,
        interrupted_by=received[0] if received else None,
        meter_error=meter_error or (server.errors[0] if server.errors and not measured else None),
        channel_errors=list(server.errors),
        samples_errors=list(server.samples_errors),
    )
