"""`wattlab monitor -- CMD`: run any command under the energy monitor and report its energy,
time and CO2e; the command's exit code is wattlab's."""

from __future__ import annotations

import typer

from wattlab.cli.measurement import CPU_LOAD, INTERVAL_S, RAM_MEASURE, MeasurementFlags
from wattlab.cli.options import (
    CarbonIntensity,
    CpuLoad,
    CpuTdp,
    CsvTraceOut,
    IdleBaseline,
    IntensityRange,
    IntensityTrace,
    Interval,
    JsonOut,
    PowercapRoot,
    PrometheusPort,
    Pue,
    RamMeasure,
    Region,
)
from wattlab.errors import WattlabError

# CMD's own options pass through untouched (everything after --)
CONTEXT_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def measured_command(args: list[str]) -> list[str]:
    """The command to measure from the words after the options; a WattlabError when there is
    none or it starts with what looks like a mistyped option of wattlab's."""
    from wattlab.errors import echo

    command = list(args)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise WattlabError(
            "give the command to measure after --, e.g. wattlab monitor -- python train.py."
        )
    if command[0].startswith("-") and command[0] != "-":
        raise WattlabError(
            f"unknown option {echo(command[0])}; put the command to measure after --."
        )
    return command


def monitor(
    ctx: typer.Context,
    # the measuring flags (cli.measurement.PARAMETERS), read through ctx.params
    interval: Interval = INTERVAL_S,
    json_path: JsonOut = None,
    csv_trace: CsvTraceOut = None,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = RAM_MEASURE,
    cpu_load: CpuLoad = CPU_LOAD,
    idle_s: IdleBaseline = 0.0,
    region: Region = None,
    intensity_trace: IntensityTrace = None,
    prometheus_port: PrometheusPort = None,
) -> None:
    """Run CMD (after --) and report its energy: `wattlab monitor -- python train.py`."""
    from wattlab.cli.watch import monitor_command

    command = measured_command(ctx.args)
    if csv_trace == "-":
        raise WattlabError("--csv-trace needs a file name; '-' (stdout) is for --json only.")
    # checked before the command starts, not after it ran
    measuring = MeasurementFlags.from_params(ctx.params).settings()
    code = monitor_command(
        command,
        interval_s=measuring.interval_s,
        carbon=measuring.carbon,
        json_path=json_path,
        csv_trace=csv_trace,
        powercap_root=measuring.powercap_root,
        cpu_tdp_w=measuring.cpu_tdp_w,
        ram_measure=measuring.ram_measure,
        cpu_load=measuring.cpu_load,
        idle_s=idle_s,
        prometheus_port=prometheus_port,
    )
    raise typer.Exit(code)
