"""The `wattlab` command line: parse, call one function, print. No logic a test would want.

Bad input raises a WattlabError; ``main`` prints its one sentence and exits with code 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from wattlab.errors import WattlabError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Measure, compare and predict the energy, time and CO2e of deep-learning training.",
)

# --- shared options ----------------------------------------------------------------------
JsonOpt = typer.Option(None, "--json", help="Write a machine-readable result here ('-' = stdout).")
IntensityOpt = typer.Option(
    None, "--carbon-intensity", help="kgCO2e per kWh (default 0.20, the reference study's)."
)
RangeOpt = typer.Option(
    None, "--intensity-range", help="LOW:HIGH kgCO2e/kWh for the sensitivity range (0.10:0.30)."
)
PueOpt = typer.Option(None, "--pue", help="Power usage effectiveness of the facility (1.0).")
PowercapOpt = typer.Option(
    None,
    "--powercap-root",
    help="Where the powercap sysfs is mounted (default $WATTLAB_POWERCAP_ROOT or "
    "/sys/class/powercap).",
)
CpuTdpOpt = typer.Option(None, "--cpu-tdp", help="CPU TDP in W for the CPU estimate.")


def _powercap_root(value: str | None) -> Path | None:
    root = value or os.environ.get("WATTLAB_POWERCAP_ROOT")
    if root is None:
        return None
    path = Path(root)
    if not path.is_dir():
        raise WattlabError(f"the powercap root {root} does not exist or is not a folder.")
    return path


def _console():
    from rich.console import Console

    return Console(stderr=False, highlight=False)


# --- devices -----------------------------------------------------------------------------
@app.command()
def devices(
    powercap_root: str | None = PowercapOpt,
    cpu_tdp: float | None = CpuTdpOpt,
    json_path: str | None = JsonOpt,
) -> None:
    """List every meter found, its provenance, and for anything missing why and how to fix it."""
    from wattlab.jsonio import check_writable, dump_json
    from wattlab.meters.discover import describe_discovery, discover_meters

    check_writable(json_path)
    discovery = discover_meters(powercap_root=_powercap_root(powercap_root), cpu_tdp_w=cpu_tdp)
    try:
        rows = describe_discovery(discovery)
    finally:
        discovery.close()
    if json_path:
        dump_json({"meters": rows}, json_path)
        if json_path == "-":
            return
    from rich.table import Table

    table = Table(title="wattlab meters on this machine")
    for col in ("component", "source", "provenance", "description"):
        table.add_column(col)
    problems = []
    for row in rows:
        if row.get("reason"):
            problems.append(row)
            continue
        table.add_row(
            str(row.get("component", "")),
            str(row.get("source", "")),
            str(row.get("provenance", "")),
            str(row.get("description", "")),
        )
    console = _console()
    console.print(table)
    for row in problems:
        console.print(f"[bold]missing: {row.get('component')}[/bold] — {row.get('reason')}")
        console.print(f"  fix: {row.get('fix')}")
        console.print(f"  instead: {row.get('fallback')}")


# --- monitor -----------------------------------------------------------------------------
@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def monitor(
    ctx: typer.Context,
    interval: float = typer.Option(0.1, "--interval", help="Sampling period in seconds."),
    json_path: str | None = JsonOpt,
    csv_trace: str | None = typer.Option(
        None, "--csv-trace", help="Write the power trace (t_s, component, power_w) as CSV."
    ),
    carbon_intensity: float | None = IntensityOpt,
    intensity_range: str | None = RangeOpt,
    pue: float | None = PueOpt,
    powercap_root: str | None = PowercapOpt,
    cpu_tdp: float | None = CpuTdpOpt,
    idle_s: float = typer.Option(
        0.0, "--idle-baseline", help="Seconds of idle measurement before CMD (0 = none)."
    ),
) -> None:
    """Run CMD (after --) and report its energy: `wattlab monitor -- python train.py`."""
    from wattlab.carbon import settings_from_flags
    from wattlab.watch import monitor_command

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise WattlabError(
            "give the command to measure after --, e.g. wattlab monitor -- python train.py."
        )
    if command[0].startswith("-") and command[0] != "-":
        raise WattlabError(f"unknown option {command[0]!r}; put the command to measure after --.")
    carbon = settings_from_flags(carbon_intensity, intensity_range, pue)
    code = monitor_command(
        command,
        interval_s=interval,
        carbon=carbon,
        json_path=json_path,
        csv_trace=csv_trace,
        powercap_root=_powercap_root(powercap_root),
        cpu_tdp_w=cpu_tdp,
        idle_s=idle_s,
    )
    raise typer.Exit(code)


def main() -> None:
    """Console entry point: WattlabError -> one sentence on stderr, exit code 2."""
    try:
        app()
    except WattlabError as error:
        print(f"wattlab: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("wattlab: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
