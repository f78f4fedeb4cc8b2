"""`--mlflow` on `run` and `sweep`: log stored runs to MLflow, warning (never failing) when the
tracking store refuses them, since the runs are safe in the database."""

from __future__ import annotations

import os
import sys


def log_to_mlflow(db: str, run_ids: list[int]) -> None:
    """Export these stored runs ($MLFLOW_TRACKING_URI, experiment $MLFLOW_EXPERIMENT_NAME or
    "wattlab"); print one line per run, or one warning on stderr when MLflow fails."""
    from wattlab.integrations.mlflow import DEFAULT_EXPERIMENT, export_store

    if not run_ids:
        return
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
    try:
        exported = export_store(db, run_ids=run_ids, experiment=experiment)
    except Exception as error:  # the run is safe in the database; MLflow can catch up later
        print(
            f"wattlab: warning: run(s) {run_ids} not logged to MLflow ({error}); they are in "
            f"{db}: `wattlab export --mlflow --db {db}` adds them later.",
            file=sys.stderr,
        )
        return
    for run_id, mlflow_id in exported:
        print(f"mlflow: wattlab run {run_id} -> {mlflow_id}", file=sys.stderr)
