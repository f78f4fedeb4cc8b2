"""Terminal tables for people (rich). Every energy shows its provenance by share, in the words of
:mod:`wattlab.wording` (as the report says it); CO2e its range."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from wattlab.meters.base import MeterProblem
from wattlab.monitor import Measurement
from wattlab.monitor.carbon import fmt_energy, joules_to_kwh


def make_console(**kwargs: object):
    """A rich console for tables: the terminal's width, or 160 columns when the output is a
    file or a pipe (rich would squeeze tables into 80)."""
    import sys

    from rich.console import Console

    stream = kwargs.get("file") or sys.stdout
    width = None if getattr(stream, "isatty", lambda: False)() else 160
    return Console(highlight=False, width=width, **kwargs)  # type: ignore[arg-type]


def fmt_co2e(kg: float) -> str:
    if kg >= 1:
        return f"{kg:.3f} kg"
    if kg >= 1e-3:
        return f"{kg * 1e3:.2f} g"
    return f"{kg * 1e6:.1f} mg"


def measurement_table(m: Measurement, title: str):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("component")
    table.add_column("energy", justify="right")
    table.add_column("± (J)", justify="right")
    table.add_column("mean W", justify="right")
    table.add_column("provenance")
    for comp in sorted(m.energy_j):
        energy = m.energy_j[comp]
        note = m.provenance[comp].value
        if m.short_window.get(comp):
            note += " (short window: bridged with power)"
        if not m.in_total.get(comp, True):
            note += " (overlaps package+dram: not summed)"
        table.add_row(
            comp,
            fmt_energy(energy),
            f"{m.uncertainty_j.get(comp, 0.0):.1f}",
            f"{energy / m.duration_s:.1f}" if m.duration_s > 0 else "-",
            note,
        )
    table.add_row(
        "total",
        fmt_energy(m.total_energy_j),
        f"{m.total_uncertainty_j:.1f}",
        f"{m.mean_power_w:.1f}",
        m.energy_parts().short(),
        style="bold",
    )
    return table


def print_measurement(m: Measurement, title: str, problems: Sequence[MeterProblem] = ()) -> None:
    console = make_console()
    console.print(measurement_table(m, title))
    c = m.co2e
    console.print(
        f"duration {m.duration_s:.2f} s · energy {joules_to_kwh(m.total_energy_j):.6f} kWh "
        f"({m.energy_parts().phrase()}) · CO2e {fmt_co2e(c.value_kg)} "
        f"(range {fmt_co2e(c.low_kg)}–{fmt_co2e(c.high_kg)}) at {c.settings.describe()}"
    )
    idle_j, dynamic_j = m.idle_energy_j, m.dynamic_energy_j  # both None or both set
    if idle_j is not None and dynamic_j is not None:
        console.print(f"idle share {fmt_energy(idle_j)}, dynamic {fmt_energy(dynamic_j)}")
    for p in problems:
        console.print(f"note: {p.component}: {p.reason} Using {p.fallback}. Fix: {p.fix}")


def run_summary_line(row: dict) -> str:
    """One line per finished run: label, time, energy with provenance, CO2e range, accuracy."""
    if row.get("status") != "ok":
        return f"{row.get('label')}: FAILED — {row.get('error') or 'no error was stored'}"
    parts = [
        f"{row['label']}:",
        f"{row['duration_s']:.1f} s,",
        f"{fmt_energy(row['energy_total_j'])} ({_provenance_words(row)}),",
        f"CO2e {fmt_co2e(row['co2e_kg'])} [{fmt_co2e(row['co2e_low_kg'])}–"
        f"{fmt_co2e(row['co2e_high_kg'])}]",
    ]
    if row.get("accuracy") is not None:
        parts.append(f"acc {row['accuracy']:.3f}")
    if row.get("codecarbon_rel_error") is not None:
        versus = "" if _measured_any(row) else " vs our estimate"
        parts.append(f"CodeCarbon {row['codecarbon_rel_error']:+.1%}{versus}")
    if row.get("projection_error") is not None:
        parts.append(f"STEP {row['projection_error']:+.1%}")
    return " ".join(parts)


def _measured_any(row: dict) -> bool:
    """Whether any of the run's energy came from a counter or sampled power (else every figure
    was estimated, and CodeCarbon is being compared with another estimate)."""
    from wattlab.analysis.energy_shares import measured_share

    return measured_share([row]) > 0


def _provenance_words(row: dict) -> str:
    """A stored run's provenance by share: "96.2 % measured by GPU counters, 3.8 % estimated
    (CPU, RAM)"."""
    from wattlab.analysis.energy_shares import run_parts

    return run_parts(row).phrase()


def print_run_row(row: dict) -> None:
    """The table printed at the end of `wattlab run`."""
    from rich.table import Table

    console = make_console()
    table = Table(title=f"wattlab run: {row['label']}")
    table.add_column("what")
    table.add_column("value", justify="right")
    comps = row.get("components_json") or {}
    table.add_row("samples (budget)", f"{row['samples']:,}")
    table.add_row("training time", f"{row['duration_s']:.2f} s")
    for comp, info in sorted(comps.items()):
        note = "" if info.get("in_total", True) else ", not summed"
        table.add_row(
            f"energy {comp}",
            f"{fmt_energy(info['energy_j'])} ({info['provenance']}{note})",
        )
    table.add_row(
        "energy total",
        f"{fmt_energy(row['energy_total_j'])} ± {row['energy_uncertainty_j']:.0f} J "
        f"({_provenance_words(row)})",
    )
    if row.get("samples"):
        table.add_row("energy per sample", f"{row['energy_total_j'] / row['samples'] * 1e3:.2f} mJ")
    table.add_row(
        "CO2e",
        f"{fmt_co2e(row['co2e_kg'])} (range {fmt_co2e(row['co2e_low_kg'])}–"
        f"{fmt_co2e(row['co2e_high_kg'])}; {row['intensity_kg_per_kwh']:g} kg/kWh, "
        f"PUE {row['pue']:g})",
    )
    if row.get("accuracy") is not None:
        table.add_row("test accuracy / macro F1", f"{row['accuracy']:.4f} / {row['f1_macro']:.4f}")
    if row.get("codecarbon_energy_j") is not None:
        table.add_row(
            "CodeCarbon energy",
            f"{fmt_energy(row['codecarbon_energy_j'])} ({row['codecarbon_rel_error']:+.2%} vs "
            + ("ours)" if _measured_any(row) else "our estimate)"),
        )
    if row.get("projected_energy_j") is not None:
        err = row.get("projection_error")
        low, high = row.get("projected_energy_low_j"), row.get("projected_energy_high_j")
        interval = ""
        if low is not None and high is not None:
            held = low <= row["energy_total_j"] <= high
            interval = f"; 90 % interval {fmt_energy(low)} to {fmt_energy(high)}, " + (
                "held" if held else "missed"
            )
        table.add_row(
            "STEP projection",
            f"{fmt_energy(row['projected_energy_j'])}"
            + (f" ({err:+.2%} vs measured{interval})" if err is not None else ""),
        )
    if row.get("power_limit_w") is not None:
        table.add_row("power limit in force", f"{row['power_limit_w']:g} W per GPU")
    console.print(table)


def print_power_limit_curve(run_id: int, curve) -> None:
    """The predicted energy and time of a run under each power limit, and its region."""
    from rich.table import Table

    run = curve.run
    table = Table(
        title=f"run {run_id} under power limits (predicted from its {run.source}, estimated)"
    )
    for name in ("limit W", "energy", "time s", "saved", "slower", "region", "case"):
        table.add_column(name, justify="left" if name in ("region", "case") else "right")
    for p in curve.points:
        table.add_row(
            f"{p.limit_w:.0f}",
            fmt_energy(p.energy_j),
            f"{p.duration_s:.1f}",
            f"{p.saving:+.1%}",
            f"{p.slowdown:+.1%}",
            "yes" if p.in_region else "",
            p.case,
        )
    console = make_console()
    console.print(table)
    console.print(
        f"region: saves >= {curve.min_saving:.0%} for <= {curve.max_slowdown:.0%} more time "
        "(wattlab's defaults; --min-saving, --max-slowdown)"
    )
    console.print(curve.summary())
    for note in curve.notes:
        console.print(f"note: {note}")


def written_after_work(data: object, path: str, done: str) -> bool:
    """Write the JSON output of work that has run (a run, a sweep, a probe); a failure (its
    folder removed meanwhile, a full disk) is one line on stderr naming what was done anyway,
    and False: the caller exits 1 (the work ran), never 2 (bad input, nothing ran)."""
    from wattlab.errors import WattlabError
    from wattlab.jsonio import dump_json

    try:
        dump_json(data, path)
    except WattlabError as failure:
        print(f"wattlab: error: {' '.join(str(failure).split())} ({done}).", file=sys.stderr)
        return False
    return True
