"""`wattlab export`: the database's runs, windows, trace and sweeps tables as CSV, JSON or
Parquet files, and/or each stored run as an MLflow run (``--mlflow``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from wattlab.cli.choices import ExportFormat, choice_callback
from wattlab.cli.options import Db, ExportDir, SweepName
from wattlab.errors import WattlabError


def export(
    out: ExportDir = None,
    db: Db = "wattlab.db",
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="csv | parquet | json",
            callback=choice_callback("--format", ExportFormat),
        ),
    ] = "csv",
    sweep_name: SweepName = None,
    mlflow: Annotated[
        bool, typer.Option("--mlflow", help="Export each run as an MLflow run.")
    ] = False,
    tracking_uri: Annotated[
        Optional[str],
        typer.Option(
            "--tracking-uri",
            help="MLflow store, e.g. sqlite:///mlflow.db ($MLFLOW_TRACKING_URI).",
        ),
    ] = None,
    experiment: Annotated[
        str, typer.Option("--experiment", help="MLflow experiment name.")
    ] = "wattlab",
) -> None:
    """Write the runs, windows, trace and sweeps tables as files for pandas users, and/or
    turn each stored run into an MLflow run (--mlflow)."""
    from wattlab.experiment.db.export import TABLES, export_tables
    from wattlab.experiment.db.store import open_store
    from wattlab.jsonio import refuse_links_in, staged_folder

    if out is None and not mlflow:
        raise WattlabError("give --out DIR for the table files, or --mlflow, or both.")
    if not mlflow and (tracking_uri is not None or experiment != "wattlab"):
        raise WattlabError("--tracking-uri and --experiment need --mlflow.")
    if mlflow:
        from wattlab.integrations.mlflow import export_store

        exported = export_store(
            db, tracking_uri=tracking_uri, experiment=experiment, sweep=sweep_name
        )
        new = [(r, m) for r, m in exported if m is not None]
        for run_id, mlflow_id in new:
            print(f"mlflow: wattlab run {run_id} -> {mlflow_id}")
        print(
            f"mlflow: {len(new)} run(s) exported to experiment {experiment!r}, "
            f"{len(exported) - len(new)} already there."
        )
    if out is None:
        return
    refuse_links_in(out, [f"{name}.{str(fmt).lower()}" for name in TABLES], "export")
    # written into a private folder beside it, then moved into place (see jsonio.staged_folder)
    with open_store(db, readonly=True, merge_kept=True) as store, staged_folder(out) as staging:
        paths = export_tables(store, staging, fmt, sweep=sweep_name)
    for path in paths:
        print(Path(out) / path.name)
