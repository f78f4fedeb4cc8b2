"""The `runs` rows of a command sweep's runs: claimed, finished ok, or failed.

The rows use the same columns as the built-in trainer's runs, so that `wattlab report` treats
them alike: ``model`` is the script's name (or the spec's ``label``), ``label`` the model and
the grid values, ``config_json`` the resolved command and its axes, and axes named like a runs
column (``batch_size``, ``precision``, ...) fill that column. The energy, time and CO2e are
those of the budget window: the marked block (``budget_window = 'marked'``) or, without a
mark, the whole process (``'whole process'``). Version 5 columns hold the exit code, the paths
of the kept output and the marks with the script's own clocks (``command_json``). The rows are
made of ``record``'s column groups, those of the worker's rows where a column means the same.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from wattlab.experiment.db.record import (
    ClaimColumns,
    CommandBudgetColumns,
    CommandColumns,
    CommandPointColumns,
    EnergyColumns,
    FailureColumns,
    GpuColumns,
    PhaseColumns,
    cpuinfo_model,
    estimate_assumptions,
    fingerprint_columns,
    idle_group,
    row_of,
    window_row,
)
from wattlab.experiment.runs.command_meter import CommandNotStarted, MeteredCommand
from wattlab.experiment.specs.command import CommandPoint
from wattlab.monitor import EnergyMonitor, utc_now_iso
from wattlab.monitor.carbon import window_co2e
from wattlab.processes import process_started_unix

LAUNCHER = "command"
MARKED = "marked"
WHOLE_PROCESS = "whole process"
STDERR_TAIL_CHARS = 2000
STDERR_TAIL_LINES = 20


def output_paths(db_path: str | Path, run_id: int) -> tuple[Path, Path]:
    """Where a run's stdout and stderr are kept: ``DB.runs/<run_id>.stdout`` / ``.stderr``."""
    db = Path(db_path).expanduser().resolve()
    folder = db.with_name(db.name + ".runs")
    return folder / f"{run_id}.stdout", folder / f"{run_id}.stderr"


def stderr_tail(path: Path) -> str:
    """The last lines of a kept stderr file (at most STDERR_TAIL_CHARS characters)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(size - 4 * STDERR_TAIL_CHARS, 0))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.rstrip().splitlines()[-STDERR_TAIL_LINES:]
    return "\n".join(lines)[-STDERR_TAIL_CHARS:]


def claim_row(
    point: CommandPoint, sweep: str, repetition: int, idle: dict[str, Any] | None
) -> dict[str, Any]:
    """The 'running' row claimed before the command starts."""
    identity = CommandPointColumns(
        sweep=sweep,
        config_hash=point.config_hash,
        repetition=repetition,
        config_json=point.config_json(),
        label=point.label,
        model=point.model,
        started_at=utc_now_iso(),
        cpu_model=cpuinfo_model(),
        launcher=LAUNCHER,
        command_json=_command(point),
    )
    claim = ClaimColumns(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        pid_started_unix=process_started_unix(os.getpid()),
    )
    code = fingerprint_columns(str(point.cwd) if point.cwd else None)  # the command's checkout
    return row_of([identity, point.columns, claim, code, idle_group(idle)])


def _command(point: CommandPoint) -> dict[str, Any]:
    return {"argv": point.argv, "cwd": point.cwd, "env": point.env}


def command_json(point: CommandPoint, result: MeteredCommand) -> dict[str, Any]:
    return {
        **_command(point),
        "marks": [s.to_dict() for s in result.segments],
        "channel_errors": result.channel_errors,
    }


def _failure(error: str) -> FailureColumns:
    return FailureColumns(status="failed", error=error, hostname=socket.gethostname())


def finished_row(
    point: CommandPoint,
    result: MeteredCommand,
    monitor: EnergyMonitor,
    stdout_path: Path,
    stderr_path: Path,
) -> dict[str, Any]:
    """The finished row: 'ok' with the budget window's figures when the command exited 0 and
    was measured, else 'failed' with the exit code and the tail of its stderr."""
    error = failure_text(result, stderr_path)
    budget, run = result.budget, result.run
    failed = error is not None or budget is None or run is None
    end = CommandColumns(
        status="failed" if failed else "ok",
        finished_at=utc_now_iso(),
        wall_s=run.duration_s if run else result.ended_unix - result.started_unix,
        exit_code=result.exit_code,
        stdout_path=str(stdout_path),
        stderr_path=str(stderr_path),
        budget_window=None if failed else MARKED if result.marked else WHOLE_PROCESS,
        command_json=command_json(point, result),
    )
    if error is not None or budget is None or run is None:
        return row_of([end, _failure(error or str(result.meter_error))])
    gpu_details = [m.info.details for m in monitor.meters if m.info.component.startswith("gpu")]
    energy = EnergyColumns.of(budget, wall_s=run.duration_s)
    for meter in monitor.meters:  # say what the estimates assumed (TDP, load, which memory)
        if meter.info.component in energy.components_json:
            assumed = estimate_assumptions(meter.info.details)
            energy.components_json[meter.info.component].update(assumed)
    utilization = [v for k, v in budget.utilization_percent.items() if k.startswith("gpu")]
    measured = CommandBudgetColumns(
        device="cuda" if gpu_details else "cpu",
        samples=result.samples,
        pue=window_co2e(budget).settings.pue,
        gpu_utilization_percent=sum(utilization) / len(utilization) if utilization else None,
        gpu_utilization_basis="sampled over the budget window" if utilization else None,
    )
    setup_s = teardown_s = None
    if result.marked and result.segments and result.segments[0].measurement is not None:
        first = result.segments[0].measurement
        setup_s = max(first.start_offset_s - run.start_offset_s, 0.0)
        teardown_s = max(run.duration_s - setup_s - budget.duration_s, 0.0)
    phases = PhaseColumns(
        phase_launch_s=None,
        phase_setup_s=setup_s,
        phase_data_s=None,
        phase_warmup_s=None,
        phase_budget_s=budget.duration_s,
        phase_eval_s=None,
        phase_teardown_s=teardown_s,
    )
    return row_of([end, GpuColumns.of(gpu_details), energy, measured, phases])


def not_started_row(
    point: CommandPoint, error: CommandNotStarted, stdout_path: Path, stderr_path: Path
) -> dict[str, Any]:
    """The 'failed' row of a run whose command could not be started (a null byte, an argument
    list too long for the system, a program gone): one sentence and a shell's exit code."""
    reason = " ".join(str(error).split())
    end = CommandColumns(
        status="failed",
        finished_at=utc_now_iso(),
        wall_s=0.0,
        exit_code=error.exit_code,
        stdout_path=str(stdout_path),
        stderr_path=str(stderr_path),
        budget_window=None,
        command_json=_command(point),
    )
    return row_of([end, _failure(f"the command could not be started: {reason}.")])


def refused_row(row: dict[str, Any], error: str) -> dict[str, Any]:
    """``row`` turned 'failed' with ``error`` (another process stored this run meanwhile)."""
    return row_of([row, _failure(error)])


def failure_text(result: MeteredCommand, stderr_path: Path) -> str | None:
    """Why the run failed, in one paragraph (None when it did not)."""
    if result.interrupted_by is not None:
        return f"interrupted by signal {result.interrupted_by} before the command finished"
    if result.exit_code != 0:
        code = result.exit_code
        how = f" (killed by signal {code - 128})" if 128 < code < 160 else ""
        tail = stderr_tail(stderr_path)
        return f"the command exited with code {code}{how}" + (
            f"; the end of its stderr:\n{tail}" if tail else "; its stderr is empty"
        )
    if result.run is None or result.budget is None:
        return f"the energy could not be measured: {result.meter_error}"
    if result.samples_error is not None:
        return f"{result.samples_error}, so the run cannot be stored."
    return None


def windows_and_trace(
    result: MeteredCommand, monitor: EnergyMonitor
) -> tuple[list[dict[str, Any]], list[tuple[float, str, float]]]:
    """The `windows` rows (``budget``, each marked block when there are several, ``run``) and
    the power trace of the run, in seconds from the process's start."""
    if result.run is None or result.budget is None:
        return [], []
    run = result.run
    origin = run.start_offset_s

    def shifted(row: dict[str, Any]) -> dict[str, Any]:
        if row.get("start_s") is not None:
            row["start_s"] = max(float(row["start_s"]) - origin, 0.0)
        return row

    samples = result.samples
    rows = [shifted(window_row("budget", None, result.budget, samples))]
    measured = [s for s in result.segments if s.measurement is not None]
    if len(measured) > 1:
        rows += [
            shifted(window_row("mark", i, s.measurement, s.samples))
            for i, s in enumerate(measured, start=1)
            if s.measurement is not None
        ]
    rows.append(shifted(window_row("run", None, run, samples)))
    trace = [
        (t - origin, comp, power)
        for t, comp, power in monitor.trace
        if origin <= t <= origin + run.duration_s
    ]
    return rows, trace
