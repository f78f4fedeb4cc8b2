"""Stored wattlab runs as MLflow runs (the ``mlflow`` extra).

    wattlab export --mlflow --tracking-uri sqlite:///mlflow.db --experiment energy
    wattlab run --model resnet18 --epochs 1 --mlflow          # each run as it is stored

Each wattlab run becomes one MLflow run named by its label: the configuration as params
(``config.*`` from the stored config, plus model, precision, device, gpus, batch size, ...);
energy per component kind, time, power, CO2e with its range, accuracy and loss as metrics (per
epoch and evaluation window as stepped metrics); provenance, config hash and the wattlab run id
as tags; a Markdown report of the run (``wattlab/run.md``, components with provenance and
windows) and its row as JSON (``wattlab/run.json``) as artifacts. A run already exported to the
same experiment (same tag ``wattlab.run_key``) is skipped, so exporting again adds only new runs;
a run still in flight (status 'running') waits for the next export.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError, DataError
from wattlab.integrations import require

DEFAULT_EXPERIMENT = "wattlab"
_STATUS = {"ok": "FINISHED", "failed": "FAILED", "abandoned": "KILLED"}
_BATCH = 100  # MLflow's per-request limit on params (and a safe size for metrics)
_PARAM_MAX = 500  # keep params short; the full config is in the run.json artifact

PARAM_COLUMNS = (
    "label",
    "sweep",
    "repetition",
    "config_hash",
    "model",
    "stem",
    "dataset",
    "precision",
    "device",
    "gpus",
    "world_size",
    "batch_size",
    "power_limit_w",
    "power_limit_requested_w",
    "gpu_name",
    "cpu_model",
    "hostname",
    "intensity_kg_per_kwh",
    "pue",
)
METRIC_COLUMNS = (
    "energy_total_j",
    "energy_gpu_j",
    "energy_cpu_j",
    "energy_dram_j",
    "energy_other_j",
    "energy_uncertainty_j",
    "duration_s",
    "wall_s",
    "co2e_kg",
    "co2e_low_kg",
    "co2e_high_kg",
    "accuracy",
    "f1_macro",
    "train_loss",
    "epochs",
    "samples",
    "gpu_utilization_percent",
    "codecarbon_energy_j",
    "codecarbon_rel_error",
    "projected_energy_j",
    "projection_error",
)
WINDOW_METRICS = ("energy_total_j", "energy_gpu_j", "duration_s", "mean_power_w")


def _mlflow() -> Any:
    return require("mlflow", "mlflow", "exporting to MLflow")


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, (str, bytes, bool)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _ms(iso: Any) -> int | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
        return
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    out[prefix] = text[:_PARAM_MAX]


def run_params(row: dict[str, Any]) -> dict[str, str]:
    """MLflow params of a stored run: the columns that describe it and its whole config."""
    params: dict[str, str] = {}
    for col in PARAM_COLUMNS:
        value = row.get(col)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            params[col] = str(value)[:_PARAM_MAX]
    config = row.get("config_json")
    if isinstance(config, str) and config:
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            config = None
    if isinstance(config, dict):
        _flatten("config", config, params)
    return params


def run_metrics(row: dict[str, Any]) -> dict[str, float]:
    """MLflow metrics of a stored run: its numeric result columns (units in the names)."""
    metrics = {}
    for col in METRIC_COLUMNS:
        number = _number(row.get(col))
        if number is not None:
            metrics[col] = number
    if metrics.get("duration_s") and "energy_total_j" in metrics:
        metrics["mean_power_w"] = metrics["energy_total_j"] / metrics["duration_s"]
    return metrics


def run_report(row: dict[str, Any], windows: list[dict[str, Any]]) -> str:
    """A short Markdown report of one run: totals, components with provenance, windows."""
    lines = [f"# {row.get('label')}", ""]
    lines.append(f"- wattlab run {row.get('id')}, status {row.get('status')}")
    if row.get("error"):
        lines.append(f"- error: {row.get('error')}")
    for col, unit in (("energy_total_j", "J"), ("duration_s", "s"), ("co2e_kg", "kg CO2e")):
        if _number(row.get(col)) is not None:
            lines.append(f"- {col}: {float(row[col]):.6g} {unit}")
    if _number(row.get("co2e_kg")) is not None:
        lines.append(
            f"- CO2e range {float(row['co2e_low_kg']):.3g}-{float(row['co2e_high_kg']):.3g} kg "
            f"at {row.get('intensity_kg_per_kwh')} kgCO2e/kWh, PUE {row.get('pue')}"
        )
    if row.get("provenance"):
        lines.append(f"- provenance of the total: {row['provenance']}")
    components = row.get("components_json")
    if isinstance(components, str) and components:
        components = json.loads(components)
    if components:
        lines += ["", "| component | energy J | provenance | uncertainty J |", "|---|---|---|---|"]
        for comp, info in components.items():
            lines.append(
                f"| {comp} | {info.get('energy_j', 0):.6g} | {info.get('provenance')} | "
                f"{info.get('uncertainty_j', 0):.3g} |"
            )
    if windows:
        lines += ["", "| window | epoch | duration s | energy J | mean W | provenance |"]
        lines.append("|---|---|---|---|---|---|")
        for w in windows:
            epoch = "" if _number(w.get("epoch")) is None else int(w["epoch"])
            lines.append(
                f"| {w.get('name')} | {epoch} | {float(w.get('duration_s') or 0):.3f} | "
                f"{float(w.get('energy_total_j') or 0):.6g} | "
                f"{float(w.get('mean_power_w') or 0):.4g} | {w.get('provenance')} |"
            )
    return "\n".join(lines) + "\n"


def _experiment_id(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if getattr(found, "lifecycle_stage", "active") != "active":
            raise ConfigError(
                f"the MLflow experiment {name!r} is deleted; restore it or give another "
                "--experiment."
            )
        return found.experiment_id
    return client.create_experiment(name)


CONNECT_TIMEOUT_S = 5.0  # a tracking server that does not answer a TCP connect in 5 s is down
HTTP_TIMEOUT_S = "15"  # MLflow's per-request timeout (its default is 120 s, with 7 retries)
HTTP_RETRIES = "1"


def check_tracking_uri(tracking_uri: str | None = None) -> None:
    """Before any work: the tracking store ``tracking_uri`` (else $MLFLOW_TRACKING_URI) can be
    used. An http(s) server must accept a TCP connection within CONNECT_TIMEOUT_S; a
    ``sqlite:///`` or ``file:`` store must lie in an existing folder. One sentence otherwise,
    never MLflow's own log lines. Without a URI, MLflow's local default is used."""
    import os
    import socket
    from urllib.parse import urlparse

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if not uri:
        return
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("http", "https"):
        try:
            port = parsed.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise ConfigError(f"the MLflow tracking URI {uri!r} has a bad port.") from None
        if not parsed.hostname:
            raise ConfigError(f"the MLflow tracking URI {uri!r} names no host.")
        try:
            socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ConfigError(
                f"cannot reach the MLflow tracking server {uri} ({reason}); start it or fix "
                "--tracking-uri / $MLFLOW_TRACKING_URI."
            ) from None
        return
    if scheme in ("sqlite", "file") or (not scheme and uri):
        if scheme == "sqlite":
            raw = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else ""
            if uri.startswith("sqlite:////"):
                raw = "/" + raw.lstrip("/")
            if not raw or raw == ":memory:":
                return
            folder = Path(raw).expanduser().parent
        else:
            raw = parsed.path if scheme == "file" else uri
            folder = Path(raw).expanduser().parent
        if not folder.is_dir():
            raise ConfigError(
                f"the MLflow tracking store {uri} lies in the folder {folder}, which does not "
                "exist; create it or fix --tracking-uri / $MLFLOW_TRACKING_URI."
            )


def _short_timeouts() -> None:
    """MLflow's HTTP timeout and retries, short unless the user set them."""
    import os

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_S)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_RETRIES)


def _client(tracking_uri: str | None) -> Any:
    _mlflow()
    check_tracking_uri(tracking_uri)
    _short_timeouts()
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient(tracking_uri=tracking_uri)
    except Exception as error:  # bad scheme, unreachable store: one sentence for people
        raise ConfigError(
            f"cannot open the MLflow tracking store {tracking_uri!r}: {error}".rstrip(".") + "."
        ) from None


def export_rows(
    rows: Iterable[dict[str, Any]],
    windows_by_run: dict[int, list[dict[str, Any]]],
    *,
    db_path: str | Path,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> list[tuple[int, str | None]]:
    """Create one MLflow run per stored run; return (wattlab id, MLflow run id or None when
    it was exported before)."""
    from mlflow.entities import Metric, Param

    client = _client(tracking_uri)
    try:
        experiment_id = _experiment_id(client, experiment)
    except ConfigError:
        raise
    except Exception as error:  # the store cannot be reached or created
        raise ConfigError(
            f"cannot use the MLflow experiment {experiment!r} at {tracking_uri!r}: {error}"
        ) from None
    db_key = str(Path(db_path).expanduser().resolve())
    done: list[tuple[int, str | None]] = []
    for row in rows:
        run_id = int(row["id"])
        key = f"{db_key}#{run_id}#{row.get('started_at')}"
        existing = client.search_runs(
            [experiment_id], filter_string=f"tags.`wattlab.run_key` = '{_quote(key)}'"
        )
        if existing:
            done.append((run_id, None))
            continue
        windows = windows_by_run.get(run_id, [])
        tags = {
            "wattlab.run_id": str(run_id),
            "wattlab.run_key": key,
            "wattlab.db": db_key,
            "wattlab.status": str(row.get("status")),
            "wattlab.provenance": str(row.get("provenance")),
            "wattlab.config_hash": str(row.get("config_hash")),
        }
        start_ms = _ms(row.get("started_at")) or int(time.time() * 1000)
        end_ms = _ms(row.get("finished_at")) or start_ms
        run = client.create_run(
            experiment_id, start_time=start_ms, tags=tags, run_name=str(row.get("label"))
        )
        mlflow_id = run.info.run_id
        params = [Param(k, v) for k, v in run_params(row).items()]
        metrics = [Metric(k, v, end_ms, 0) for k, v in run_metrics(row).items()]
        epoch_index = 0
        for w in windows:
            name = str(w.get("name"))
            if name not in ("epoch", "eval"):
                continue
            step = int(w["epoch"]) if _number(w.get("epoch")) is not None else epoch_index
            epoch_index += 1
            for col in WINDOW_METRICS:
                number = _number(w.get(col))
                if number is not None:
                    metrics.append(Metric(f"{name}_{col}", number, end_ms, step))
        for i in range(0, max(len(params), len(metrics)), _BATCH):
            client.log_batch(
                mlflow_id, metrics=metrics[i : i + _BATCH], params=params[i : i + _BATCH]
            )
        client.set_tag(mlflow_id, "mlflow.note.content", f"wattlab run {run_id} ({db_key})")
        client.log_text(mlflow_id, run_report(row, windows), "wattlab/run.md")
        client.log_dict(mlflow_id, _json_row(row), "wattlab/run.json")
        status = _STATUS.get(str(row.get("status")), "FAILED")
        client.set_terminated(mlflow_id, status=status, end_time=end_ms)
        done.append((run_id, mlflow_id))
    return done


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in row.items():
        if key.endswith("_json") and isinstance(value, str) and value:
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        number = _number(value)
        if number is None and isinstance(value, float):
            value = None  # NaN
        elif hasattr(value, "item"):
            value = value.item()
        out[key] = value
    return out


def export_store(
    db_path: str | Path,
    *,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    sweep: str | None = None,
    run_ids: Iterable[int] | None = None,
) -> list[tuple[int, str | None]]:
    """Export the runs of a wattlab database (one sweep's, or the given ids) to MLflow."""
    from wattlab.experiment.db.store import open_store

    _mlflow()  # say which extra is missing before touching anything
    check_tracking_uri(tracking_uri)  # a closed port or a missing folder fails at once
    if not Path(db_path).expanduser().exists():
        raise DataError(f"no wattlab database at {db_path}; run `wattlab run` first.")
    with open_store(db_path, readonly=True) as store:
        runs = store.runs(sweep=sweep)
        runs = runs[runs["status"] != "running"]  # in flight: exported once it has finished
        if run_ids is not None:
            wanted = {int(i) for i in run_ids}
            runs = runs[runs["id"].isin(wanted)]
        if sweep is not None and runs.empty:
            raise DataError(store.unknown_sweep(sweep))
        windows = store.windows([int(i) for i in runs["id"]])
    rows = [{k: (None if _is_nan(v) else v) for k, v in r.items()} for r in runs.to_dict("records")]
    by_run: dict[int, list[dict[str, Any]]] = {}
    for w in windows.to_dict("records"):
        by_run.setdefault(int(w["run_id"]), []).append(w)
    return export_rows(
        rows, by_run, db_path=db_path, tracking_uri=tracking_uri, experiment=experiment
    )


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
