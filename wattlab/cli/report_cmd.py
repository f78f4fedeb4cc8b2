"""`wattlab report`: the report of stored runs (report.md, report.html, summary.json and the
figures) and its per-configuration table, or the analysis of a Zeus-style power-limit profile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from wattlab.cli.options import (
    BaselineW,
    Db,
    JsonOut,
    MaxPenalty,
    MinSaving,
    ReportDir,
    TargetAccuracy,
)
from wattlab.errors import WattlabError


def report(
    db: Db = "wattlab.db",
    sweep_name: Annotated[
        Optional[str], typer.Option("--sweep", help="Report one sweep's runs.")
    ] = None,
    out: ReportDir = None,
    baseline: Annotated[
        Optional[str],
        typer.Option(
            "--baseline",
            help="Reference configuration, KEY=VALUE,... (e.g. gpus=1,precision=fp32).",
        ),
    ] = None,
    min_saving: MinSaving = 0.03,
    max_penalty: MaxPenalty = 0.02,
    import_profile: Annotated[
        Optional[str],
        typer.Option(
            "--import-profile",
            help="Analyse a Zeus-style power-limit profile CSV instead of the database.",
        ),
    ] = None,
    baseline_w: BaselineW = None,
    advice: Annotated[
        bool,
        typer.Option(
            "--advice/--no-advice",
            help="Add the Advice section: what `wattlab advise` would change (fits PRE once).",
        ),
    ] = False,
    json_path: JsonOut = None,
    target_accuracy: TargetAccuracy = None,
    pareto_axes: Annotated[
        Optional[str],
        typer.Option(
            "--pareto-axes",
            help="The Pareto front's axes: energy,time (default) or energy,time,accuracy; "
            "with accuracy the finding names the compared configurations' accuracies.",
        ),
    ] = None,
) -> None:
    """Tables, figures and the operating region: report.md and a self-contained report.html."""
    from wattlab.analysis.report_files import REPORT_FILES
    from wattlab.analysis.tradeoffs import parse_pareto_axes
    from wattlab.jsonio import dump_json, refuse_links_in, staged_folder

    axes = parse_pareto_axes(pareto_axes)

    if out is None and json_path is None:
        raise WattlabError("give --out DIR for the report, or --json PATH for the summary.")
    if import_profile is not None:
        from wattlab.analysis.profile_report import write_profile_report
        from wattlab.analysis.profiles import analyze_profile, load_zeus_profile

        profile = load_zeus_profile(import_profile)
        analysis = analyze_profile(profile, min_saving, max_penalty, baseline_w)
        if out is not None:
            refuse_links_in(out, REPORT_FILES, "report")
            with staged_folder(out) as staging:  # moved into place whole, or not at all
                paths = write_profile_report(profile, analysis, staging)
            print(f"report: {Path(out) / paths.html.name}")
        if json_path:
            dump_json(analysis, json_path)
        elif out is not None:
            _print_profile(analysis)
        return
    from wattlab.analysis.report import analyze_runs, write_report
    from wattlab.experiment.store import open_store, without_finite_energy

    if not Path(db).exists():
        raise WattlabError(f"no database at {db}; run `wattlab run` or `wattlab sweep` first.")
    with open_store(db, readonly=True, merge_kept=True) as store, store.snapshot():
        runs = store.runs(sweep=sweep_name)
        windows = store.windows()
        trace = store.trace()
        scheduler_jobs = store.scheduler_jobs()
        spec = store.sweep_spec(sweep_name) if sweep_name is not None else None
    if sweep_name is not None and len(runs) == 0:
        raise WattlabError(f"the database {db} holds no runs of sweep {sweep_name!r}.")
    runs, no_energy = without_finite_energy(runs)
    if no_energy:  # an ok run without a finite energy cannot be compared: named, left out
        shown = ", ".join(map(str, no_energy[:20])) + (" ..." if len(no_energy) > 20 else "")
        print(
            f"wattlab: run {shown} "
            + ("is stored ok but holds" if len(no_energy) == 1 else "are stored ok but hold")
            + " no finite energy (NULL, NaN or infinite in energy_total_j); left out of "
            "this report.",
            file=sys.stderr,
        )
    if out is not None:
        refuse_links_in(out, REPORT_FILES, "report")  # before any work: a link is refused
        # written into a private folder beside it, then moved into place: a killed report
        # leaves no folder with some of its files, and no temporary file
        with staged_folder(out) as staging:
            paths = write_report(
                runs,
                windows,
                trace,
                staging,
                sweep=sweep_name,
                baseline=baseline,
                min_saving=min_saving,
                max_penalty=max_penalty,
                scheduler_jobs=scheduler_jobs,
                spec=spec,
                advice=advice,
                target_accuracy=target_accuracy,
                pareto_axes=axes,
            )
        summary = paths.summary
        if json_path != "-":
            print(
                f"report: {Path(out) / paths.html.name}\n        {Path(out) / paths.markdown.name}"
            )
    else:
        _, summary = analyze_runs(
            runs,
            sweep=sweep_name,
            baseline=baseline,
            min_saving=min_saving,
            max_penalty=max_penalty,
            spec=spec,
            windows=windows,
            target_accuracy=target_accuracy,
            pareto_axes=axes,
        )
    if json_path:
        dump_json(summary, json_path)
    if json_path != "-":
        _print_summary(summary)


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    from wattlab.cli.render import fmt_energy

    table = Table(title=f"{summary.get('sweep') or 'all runs'}: per configuration (medians)")
    for col in (
        "configuration",
        "n",
        "time s",
        "energy",
        "Δtime",
        "Δenergy",
        "CO2e [range]",
        "provenance",
        "pareto",
        "region",
    ):
        table.add_column(col)
    for c in summary.get("configurations", []):
        table.add_row(
            str(c["label"]) + (" (baseline)" if c.get("is_baseline") else ""),
            str(c["n"]),
            f"{c['time_s']:.1f}",
            fmt_energy(c["energy_j"]),
            f"{c['time_change']:+.1%}" if c.get("time_change") is not None else "",
            f"{c['energy_change']:+.1%}" if c.get("energy_change") is not None else "",
            _co2e_cell(c),
            str(c.get("provenance")),
            "★" if c.get("pareto") else "",
            "✓" if c.get("operating_region") else "",
        )
    from wattlab.cli.render import make_console

    make_console().print(table)
    if summary.get("budget_windows"):  # runs of a command sweep: what their window holds
        print(summary["budget_windows"]["sentence"])


def _co2e_cell(config: dict[str, Any]) -> str:
    """``CO2e [low–high]``, or empty when the runs carry no CO2e (e.g. CPU-only estimates)."""
    from wattlab.cli.render import fmt_co2e

    values: list[float] = []
    for key in ("co2e_kg", "co2e_low_kg", "co2e_high_kg"):
        value = config.get(key)
        if value is None or value != value:  # None or NaN
            return ""
        values.append(float(value))
    return f"{fmt_co2e(values[0])} [{fmt_co2e(values[1])}–{fmt_co2e(values[2])}]"


def _print_profile(analysis: dict[str, Any]) -> None:
    print(
        f"baseline {analysis['baseline_w']:g} W; pareto {analysis['pareto']}; "
        f"operating region {analysis['operating_region']}"
    )
    for lim in analysis["limits"]:
        print(
            f"  {lim['power_limit_w']:>5g} W  time {lim['time_s']:.2f} s "
            f"({lim['time_change']:+.2%})  energy {lim['energy_j']:.0f} J "
            f"({lim['energy_change']:+.2%})"
        )
