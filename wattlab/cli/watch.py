"""Measure another program: `wattlab monitor -- CMD ARGS...`.

The command runs as a child process (never through a shell) under the command guard
(``experiment/runs/command_guard.py``) in a session and process group of its own; SIGINT,
SIGTERM and SIGHUP are forwarded to that whole group (grandchildren included), with one line
on stderr; its exit code becomes ours (128 + N when it died of signal N).
A command that cannot be started exits 127 (126 when it is not executable), like a shell. When
wattlab dies, even by SIGKILL, the guard gets SIGTERM (PR_SET_PDEATHSIG) and stops the whole
group; when the command exits, what it left in its group is killed: nothing outlives us.
With ``--json -`` the child's stdout goes to stderr, so stdout holds only the JSON. A meter that
fails while the command runs (a RAPL counter turning to garbage) is recorded in the JSON under
``error``; the command's exit code is still ours.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wattlab.errors import WattlabError
from wattlab.experiment.runs.command_meter import (
    CommandNotStarted,
    check_startable,
    die_with_parent,
    exit_status,
    forwarding_signals,
    guarded,
    start_command,
)
from wattlab.jsonio import check_writable, dump_json, write_text_atomic
from wattlab.monitor import EnergyMonitor, Measurement
from wattlab.monitor.carbon import CarbonSettings


def trace_csv(samples: list[tuple[float, str, float]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["t_s", "component", "power_w"])
    for t, comp, power in samples:
        writer.writerow([f"{t:.4f}", comp, f"{power:.3f}"])
    return out.getvalue()


def monitor_command(
    command: list[str],
    *,
    interval_s: float = 0.1,
    carbon: CarbonSettings | None = None,
    json_path: str | None = None,
    csv_trace: str | None = None,
    powercap_root: Path | None = None,
    cpu_tdp_w: float | None = None,
    ram_measure: str = "system",
    cpu_load: str = "machine",
    idle_s: float = 0.0,
    print_table: bool = True,
    prometheus_port: int | None = None,
) -> int:
    """Run ``command`` under an EnergyMonitor; write/print the result; return its exit code."""
    check_writable(json_path)
    check_writable(csv_trace)
    mon = EnergyMonitor(
        interval_s=interval_s,
        carbon=carbon,
        sync=None,  # the child's GPU work is not ours to wait for; its exit ends it
        # "process": wattlab's own tree, which holds the command (its child)
        discover_kwargs={
            "powercap_root": powercap_root,
            "cpu_tdp_w": cpu_tdp_w,
            "ram_measure": ram_measure,
            "cpu_load": cpu_load,
        },
        prometheus_port=prometheus_port,
    )
    stops: list[int] = []  # stop signals we forwarded to the command
    mon.start()
    if mon.exporter is not None:
        print(f"wattlab: Prometheus metrics at {mon.exporter.url}", file=sys.stderr, flush=True)
    try:
        if idle_s > 0:
            mon.measure_idle(idle_s)
        mon.begin_window("command")
        # With the JSON on stdout, the command's own output goes to stderr.
        child_stdout = sys.stderr.fileno() if json_path == "-" else None
        try:
            check_startable(command)
            # under the guard, in a session of its own: a signal to us (SIGINT, SIGTERM,
            # SIGHUP) goes to the command's whole group, grandchildren included, and the
            # guard stops that group when we die, even by SIGKILL
            child = start_command(guarded(command), stdout=child_stdout, start_new_session=True)
        except CommandNotStarted as failure:
            mon.end_window("command")
            print(f"wattlab: {failure}", file=sys.stderr)
            return failure.exit_code
        try:
            with forwarding_signals(lambda signum: _signal_group(child.pid, signum), stops):
                exit_code = child.wait()
        finally:
            _signal_group(child.pid, signal.SIGKILL)  # whatever it left behind in its group
            if child.poll() is None:
                child.kill()
                child.wait()
        result: Measurement | None = None
        error: str | None = None
        try:
            result = mon.end_window("command")
        except WattlabError as failure:  # a meter failed: keep the command's exit code
            error = str(failure)
    finally:
        mon.stop()
    exit_code = exit_status(exit_code)  # killed by a signal: reported the way a shell does
    code = _report(
        mon, command, exit_code, result, error,
        json_path=json_path, csv_trace=csv_trace, print_table=print_table, interval_s=interval_s,
    )  # fmt: skip
    if stops:  # Ctrl-C (or SIGTERM/SIGHUP) reached us and went to the command: one line; the
        # exit code stays the command's (130 when it died of Ctrl-C, its own when it handled it)
        from wattlab.stop_signals import stopped_line

        print(stopped_line(stops[0])[0], file=sys.stderr)
    return code


def _report(
    mon: EnergyMonitor,
    command: list[str],
    exit_code: int,
    result: Measurement | None,
    error: str | None,
    *,
    json_path: str | None,
    csv_trace: str | None,
    print_table: bool,
    interval_s: float,
) -> int:
    """Write the JSON and the trace, print the table; the exit code (the command's, or 1 when
    an output could not be written)."""
    problems = mon.discovery.problems if mon.discovery else []
    if json_path:
        data: dict[str, Any] = result.to_dict() if result is not None else {"energy_j": None}
        data["command"] = command
        data["exit_code"] = exit_code
        data["interval_s"] = interval_s
        data["missing_meters"] = [
            {"component": p.component, "reason": p.reason, "fix": p.fix, "fallback": p.fallback}
            for p in problems
        ]
        # how each estimated component was modelled (e.g. which memory the RAM estimate counts)
        data["meters"] = {
            m.info.component: {"provenance": m.info.provenance.value, "how": m.info.description}
            for m in mon.meters
        }
        if error is not None:
            data["error"] = error
        if not _written(lambda: dump_json(data, json_path)):
            return exit_code or 1
    if result is None:
        print(f"wattlab: the energy could not be measured: {error}", file=sys.stderr)
        return exit_code
    if csv_trace and not _written(lambda: write_text_atomic(csv_trace, trace_csv(result.samples))):
        return exit_code or 1
    if print_table and json_path != "-":
        from wattlab.cli.render import print_measurement

        print_measurement(result, title=f"wattlab monitor: {' '.join(command)}", problems=problems)
    return exit_code


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _written(write: Callable[[], object]) -> bool:
    """Write an output after the command ran; on failure (a full disk) say so in one line.
    The command has run, so this is exit code 1 (or the command's own), not 2."""
    try:
        write()
    except WattlabError as failure:
        print(f"wattlab: error: {' '.join(str(failure).split())}", file=sys.stderr)
        return False
    return True


__all__ = ["Measurement", "die_with_parent", "monitor_command", "trace_csv"]
