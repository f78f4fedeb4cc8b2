"""The `runs` rows of a command sweep's runs: claimed, finished ok, or failed.

The rows use the same columns as the built-in trainer's runs, so that `wattlab report` treats
them alike: ``model`` is the script's name (or the spec's ``label``), ``label`` the model and
the grid values, ``config_json`` the resolved command and its axes, and axes named like a runs
column (``batch_size``, ``precision``, ...) fill that column. The energy, time and CO2e are
those of the budget window: the marked block (``budget_window = 'marked'``) or, without a
mark, the whole process (``'whole process'``). Version 5 columns hold the exit code, the paths
of the kept output and the marks with the script's own clocks (``command_json``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from wattlab.experiment.command_meter import MeteredCommand
from wattlab.experiment.command_spec import CommandPoint
from wattlab.monitor import EnergyMonitor, Measurement, utc_now_iso
from wattlab.monitor.carbon import window_co2e

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


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def claim_row(
    point: CommandPoint, sweep: str, repetition: int, idle: dict[str, Any] | None
) -> dict[str, Any]:
    """The 'running' row claimed before the command starts."""
    powers = [v.get("power_w") for v in (idle or {}).values() if v.get("power_w") is not None]
    temps = [
        v.get("temperature_c") for v in (idle or {}).values() if v.get("temperature_c") is not None
    ]
    return {
        "sweep": sweep,
        "config_hash": point.config_hash,
        "repetition": repetition,
        "config_json": point.config_json(),
        "label": point.label,
        "model": point.model,
        **point.columns,
        "started_at": utc_now_iso(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "pid": os.getpid(),
        "launcher": LAUNCHER,
        "command_json": {"argv": point.argv, "cwd": point.cwd, "env": point.env},
        "idle_power_w": sum(powers) if powers else None,
        "idle_temperature_c": max(temps) if temps else None,
        "idle_json": idle or None,
    }


def _components(window: Measurement, monitor: EnergyMonitor) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {
        comp: {
            "energy_j": window.energy_j[comp],
            "provenance": window.provenance[comp].value,
            "uncertainty_j": window.uncertainty_j.get(comp, 0.0),
            "in_total": window.in_total.get(comp, True),
        }
        for comp in window.energy_j
    }
    for meter in monitor.meters:  # say which memory the RAM estimate counted
        measure = meter.info.details.get("ram_measure")
        if measure and meter.info.component in out:
            out[meter.info.component]["ram_measure"] = measure
    return out


def command_json(point: CommandPoint, result: MeteredCommand) -> dict[str, Any]:
    return {
        "argv": point.argv,
        "cwd": point.cwd,
        "env": point.env,
        "marks": [s.to_dict() for s in result.segments],
        "channel_errors": result.channel_errors,
    }


def finished_row(
    point: CommandPoint,
    result: MeteredCommand,
    monitor: EnergyMonitor,
    stdout_path: Path,
    stderr_path: Path,
) -> dict[str, Any]:
    """The finished row: 'ok' with the budget window's figures when the command exited 0 and
    was measured, else 'failed' with the exit code and the tail of its stderr."""
    common: dict[str, Any] = {
        "finished_at": utc_now_iso(),
        "exit_code": result.exit_code,
        "stdout_path": str(stdout_path),
        "stderr_path": str(stderr_path),
        "command_json": command_json(point, result),
        "wall_s": result.run.duration_s if result.run else result.ended_unix - result.started_unix,
    }
    error = failure_text(result, stderr_path)
    if error is not None or result.budget is None or result.run is None:
        return {**common, "status": "failed", "error": error or result.meter_error}
    budget, run = result.budget, result.run
    gpu_details = [m.info.details for m in monitor.meters if m.info.component.startswith("gpu")]
    c = window_co2e(budget)
    utilization = [v for k, v in budget.utilization_percent.items() if k.startswith("gpu")]
    row = {
        **common,
        "status": "ok",
        "error": None,
        "device": "cuda" if gpu_details else "cpu",
        "samples": result.samples,
        "gpu_name": ",".join(sorted({str(d.get("name")) for d in gpu_details})) or None,
        "gpu_uuids": ",".join(str(d.get("uuid")) for d in gpu_details) or None,
        "driver": next((str(d.get("driver")) for d in gpu_details if d.get("driver")), None),
        "duration_s": budget.duration_s,
        "energy_total_j": budget.total_energy_j,
        "energy_gpu_j": budget.gpu_energy_j,
        "energy_cpu_j": budget.cpu_energy_j,
        "energy_dram_j": budget.dram_energy_j,
        "energy_other_j": budget.other_energy_j,
        "energy_uncertainty_j": budget.total_uncertainty_j,
        "provenance": budget.total_provenance.value,
        "components_json": _components(budget, monitor),
        "co2e_kg": c.value_kg,
        "co2e_low_kg": c.low_kg,
        "co2e_high_kg": c.high_kg,
        "intensity_kg_per_kwh": c.settings.intensity_kg_per_kwh,
        "pue": c.settings.pue,
        "gpu_utilization_percent": sum(utilization) / len(utilization) if utilization else None,
        "gpu_utilization_basis": "sampled over the budget window" if utilization else None,
        "budget_window": MARKED if result.marked else WHOLE_PROCESS,
        "phase_budget_s": budget.duration_s,
    }
    if result.marked and result.segments and result.segments[0].measurement is not None:
        first = result.segments[0].measurement
        row["phase_setup_s"] = max(first.start_offset_s - run.start_offset_s, 0.0)
        row["phase_teardown_s"] = max(
            run.duration_s - row["phase_setup_s"] - budget.duration_s, 0.0
        )
    return row


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
    return None


def windows_and_trace(
    result: MeteredCommand, monitor: EnergyMonitor
) -> tuple[list[dict[str, Any]], list[tuple[float, str, float]]]:
    """The `windows` rows (``budget``, each marked block when there are several, ``run``) and
    the power trace of the run, in seconds from the process's start."""
    from wattlab.experiment.store import window_row

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
