"""`wattlab devices`: every meter this machine offers with its provenance, and for each one
missing, why and how to fix it (a table, or ``--json``)."""

from __future__ import annotations

from wattlab.cli.measurement import CPU_LOAD, RAM_MEASURE
from wattlab.cli.measurement import powercap_root as check_powercap_root
from wattlab.cli.options import CpuLoad, CpuTdp, JsonOut, PowercapRoot, RamMeasure


def devices(
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = RAM_MEASURE,
    cpu_load: CpuLoad = CPU_LOAD,
    json_path: JsonOut = None,
) -> None:
    """List every meter found, its provenance, and for anything missing why and how to fix it."""
    from wattlab.jsonio import dump_json
    from wattlab.meters.discover import describe_discovery, discover_meters

    discovery = discover_meters(
        powercap_root=check_powercap_root(powercap_root),
        cpu_tdp_w=cpu_tdp,
        ram_measure=ram_measure,
        cpu_load=cpu_load,
    )
    try:
        rows = describe_discovery(discovery)
    finally:
        discovery.close()
    if json_path:
        dump_json({"meters": rows}, json_path)
        if json_path == "-":
            return
    from rich.table import Table

    from wattlab.cli.render import make_console

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
    console = make_console()
    console.print(table)
    for row in problems:
        console.print(f"[bold]missing: {row.get('component')}[/bold] — {row.get('reason')}")
        console.print(f"  fix: {row.get('fix')}")
        console.print(f"  instead: {row.get('fallback')}")
