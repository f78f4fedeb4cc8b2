"""`wattlab report`: the report of stored runs (report.md, report.html, summary.json and the
figures) and its per-configuration table, or the analysis of a Zeus-style power-limit profile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from wattlab.cli.choices import StatementFormat, TrainingType, optional_choice_callback
from wattlab.cli.options import (
    BaselineW,
    CarbonIntensity,
    Db,
    IntensityRange,
    JsonOut,
    MaxPenalty,
    MinSaving,
    Pue,
    Region,
    ReportDir,
    TargetAccuracy,
    bounded,
)
from wattlab.errors import WattlabError

RunId = Annotated[
    Optional[int],
    typer.Option(
        "--run", help="Report (or state) this one stored run.", callback=bounded("--run", "run_id")
    ),
]
ConfigFilter = Annotated[
    Optional[str],
    typer.Option(
        "--config",
        help="Report (or state) one configuration's runs, KEY=VALUE,... as for --baseline "
        "(e.g. precision=amp-bf16,batch_size=512).",
    ),
]
Statement = Annotated[
    bool,
    typer.Option(
        "--statement",
        help="Write statement.md into --out: a paragraph a paper can quote and the Hugging Face "
        "model-card block (instead of the full report).",
    ),
]
StatementFormatOption = Annotated[
    Optional[str],
    typer.Option(
        "--format",
        help="With --statement: statement (statement.md: the paragraph and the Hugging Face "
        "block, the default) or eu-gpai (eu-gpai.md: the energy and compute items of the EU "
        "GPAI code of practice's Model Documentation Form).",
        callback=optional_choice_callback("--format", StatementFormat),
    ),
]
TrainingTypeOption = Annotated[
    Optional[str],
    typer.Option(
        "--training-type",
        help="The model card's training_type: pre-training or fine-tuning.",
        callback=optional_choice_callback("--training-type", TrainingType),
    ),
]


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
    run_id: RunId = None,
    config: ConfigFilter = None,
    statement: Statement = False,
    region: Region = None,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    training_type: TrainingTypeOption = None,
    statement_format: StatementFormatOption = None,
) -> None:
    """Tables, figures and the operating region: report.md and a self-contained report.html;
    with --statement, the energy statement (statement.md)."""
    from wattlab.analysis.report_files import REPORT_FILES
    from wattlab.analysis.tradeoffs import parse_pareto_axes
    from wattlab.jsonio import dump_json, refuse_links_in, staged_folder

    axes = parse_pareto_axes(pareto_axes)
    pricing = {
        "--region": region,
        "--carbon-intensity": carbon_intensity,
        "--intensity-range": intensity_range,
        "--pue": pue,
        "--training-type": training_type,
        "--format": statement_format,
    }
    given = [flag for flag, value in pricing.items() if value is not None]
    if given and not statement:
        raise WattlabError(
            f"{' and '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} to the energy "
            "statement; add --statement."
        )
    if statement and import_profile is not None:
        raise WattlabError("--statement states stored runs; leave out --import-profile.")
    if statement and out is None and json_path is None:
        raise WattlabError("give --out DIR for statement.md (or --json PATH for its facts).")
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
    from wattlab.experiment.db.store import open_store, without_finite_energy

    if not Path(db).exists():
        raise WattlabError(f"no database at {db}; run `wattlab run` or `wattlab sweep` first.")
    with open_store(db, readonly=True, merge_kept=True) as store, store.snapshot():
        runs = store.runs(sweep=sweep_name)
        windows = store.windows()
        trace = store.trace()
        scheduler_jobs = store.scheduler_jobs()
        spec = store.sweep_spec(sweep_name) if sweep_name is not None else None
        if sweep_name is not None and len(runs) == 0:
            raise WattlabError(store.unknown_sweep(sweep_name))
    _, no_energy = without_finite_energy(runs)  # the analysis leaves them out and names them
    if no_energy:  # an ok run without a finite energy cannot be compared: named, left out
        shown = ", ".join(map(str, no_energy[:20])) + (" ..." if len(no_energy) > 20 else "")
        print(
            f"wattlab: run {shown} "
            + ("is stored ok but holds" if len(no_energy) == 1 else "are stored ok but hold")
            + " no finite energy (NULL, NaN or infinite in energy_total_j); left out of "
            "this report.",
            file=sys.stderr,
        )
    if config is not None:
        from wattlab.analysis.baseline import select_config

        runs = select_config(runs, config)
    if statement:
        _write_statement(
            runs,
            out=out,
            json_path=json_path,
            run_id=run_id,
            sweep=sweep_name,
            carbon=(region, carbon_intensity, intensity_range, pue),
            training_type=training_type,
            windows=windows,
            form=statement_format or "statement",
            db=db,
        )
        return
    if run_id is not None:
        runs = _one_run(runs, run_id, db)
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


def _one_run(runs: Any, run_id: int, db: str) -> Any:
    """The rows of run ``run_id``; a usage error naming the database when it has none."""
    import pandas as pd

    ids = pd.to_numeric(runs["id"], errors="coerce") if "id" in runs.columns else None
    chosen = runs[ids == run_id] if ids is not None else runs.iloc[0:0]
    if chosen.empty:
        raise WattlabError(f"the database {db} holds no run {run_id} (in this selection).")
    return chosen


def _write_statement(
    runs: Any,
    *,
    out: str | None,
    json_path: str | None,
    run_id: int | None,
    sweep: str | None,
    carbon: tuple[Optional[str], Optional[float], Optional[str], Optional[float]],
    training_type: str | None,
    windows: Any = None,
    form: str = "statement",
    db: str | None = None,
) -> None:
    """statement.md into ``out`` (and its facts as JSON), printed as well unless the JSON goes
    to stdout; with ``form`` "eu-gpai", eu-gpai.md and its facts instead."""
    import shlex
    import sys

    from wattlab.analysis.statement import energy_statement, write_statement
    from wattlab.jsonio import dump_json, output_folder
    from wattlab.monitor.carbon import settings_from_flags

    region, intensity, intensity_range, pue = carbon
    settings = None
    if any(v is not None for v in carbon):
        settings = settings_from_flags(
            intensity_kg_per_kwh=intensity, intensity_range=intensity_range, pue=pue, region=region
        )
    command = "wattlab " + shlex.join(sys.argv[1:])
    stated = energy_statement(
        runs,
        run_id=run_id,
        carbon=settings,
        region=region,
        training_type=training_type,
        command=command,
        what=f"sweep {sweep}" if sweep else None,
        windows=windows,
    )
    if form == "eu-gpai":
        from wattlab.analysis.eu_gpai import eu_gpai_form, write_form

        filled = eu_gpai_form(stated, runs, db=db)
        if out is not None:
            with output_folder(out):  # removed again if writing fails
                path = write_form(filled, out)
            if json_path != "-":
                print(f"eu-gpai form: {path}")
        if json_path:
            dump_json(filled.facts, json_path)
        if json_path != "-":
            print()
            print(filled.markdown(), end="")
        return
    if out is not None:
        with output_folder(out):  # removed again if writing fails
            path = write_statement(stated, out)
        if json_path != "-":
            print(f"statement: {path}")
    if json_path:
        dump_json(
            {**stated.facts, "paragraph": stated.paragraph, "model_card": stated.model_card},
            json_path,
        )
    if json_path != "-":
        print()
        print(stated.paragraph)
        print()
        print(stated.model_card, end="")


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
            f"{c['time_s']:.1f}" if c.get("time_s") is not None else "n/a",
            fmt_energy(c["energy_j"]) if c.get("energy_j") is not None else "n/a",
            f"{c['time_change']:+.1%}" if c.get("time_change") is not None else "",
            f"{c['energy_change']:+.1%}" if c.get("energy_change") is not None else "",
            _co2e_cell(c),
            str(c.get("provenance_shares") or c.get("provenance")),
            "★" if c.get("pareto") else "",
            "✓" if c.get("operating_region") else "",
        )
    from wattlab.cli.render import make_console

    make_console().print(table)
    if summary.get("budget_windows"):  # runs of a command sweep: what their window holds
        print(summary["budget_windows"]["sentence"])
    for run in (summary.get("runs") or {}).get("left_out") or []:
        print(
            f"left out: run {run['run_id']} ({run['label']}), stored as ok, has no usable energy "
            f"or time: {run['reason']}."
        )


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
