"""Measure another program: `wattlab monitor -- CMD ARGS...`.

The command runs as a child process (never through a shell); SIGINT and SIGTERM are forwarded
to it; its exit code becomes ours. A command that cannot be started exits 127 (126 when it is
not executable), like a shell. On Linux the child gets SIGTERM when wattlab dies, even by
SIGKILL (PR_SET_PDEATHSIG), so it never outlives its parent. With ``--json -`` the child's
stdout goes to stderr, so stdout holds only the JSON. A meter that fails while the command runs
(a RAPL counter turning to garbage) is recorded in the JSON under ``error``; the command's exit
code is still ours.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wattlab.errors import WattlabError
from wattlab.jsonio import check_writable, dump_json, write_text_atomic
from wattlab.monitor import EnergyMonitor, Measurement
from wattlab.monitor.carbon import CarbonSettings


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` after which the child receives ``signum`` when this process dies, even
    by SIGKILL (Linux PR_SET_PDEATHSIG). SIGTERM, not SIGKILL, so that the measured command can
    clean up (a training script restoring its GPU power limits)."""
    from wattlab.experiment.lifetime import set_parent_death_signal

    parent = os.getpid()

    def preexec() -> None:
        set_parent_death_signal(signum)
        if os.getppid() != parent:  # the parent died before prctl: the signal would not come
            os._exit(128 + int(signum))

    return preexec


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
        },
        prometheus_port=prometheus_port,
    )
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
            child = subprocess.Popen(command, stdout=child_stdout, preexec_fn=die_with_parent())
        except FileNotFoundError:
            mon.end_window("command")
            print(f"wattlab: {command[0]}: command not found", file=sys.stderr)
            return 127
        except PermissionError:
            mon.end_window("command")
            print(f"wattlab: {command[0]}: permission denied", file=sys.stderr)
            return 126
        except OSError as os_error:
            mon.end_window("command")
            print(f"wattlab: {command[0]}: {os_error.strerror or os_error}", file=sys.stderr)
            return 126

        def forward(signum: int, _frame: object) -> None:
            child.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            exit_code = child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        result: Measurement | None = None
        error: str | None = None
        try:
            result = mon.end_window("command")
        except WattlabError as failure:  # a meter failed: keep the command's exit code
            error = str(failure)
    finally:
        mon.stop()
    if exit_code < 0:  # killed by a signal: report it the way a shell does
        exit_code = 128 - exit_code
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
        dump_json(data, json_path)
    if result is None:
        print(f"wattlab: the energy could not be measured: {error}", file=sys.stderr)
        return exit_code
    if csv_trace:
        write_text_atomic(csv_trace, trace_csv(result.samples))
    if print_table and json_path != "-":
        from wattlab.cli.render import print_measurement

        print_measurement(result, title=f"wattlab monitor: {' '.join(command)}", problems=problems)
    return exit_code


__all__ = ["Measurement", "monitor_command", "trace_csv"]
