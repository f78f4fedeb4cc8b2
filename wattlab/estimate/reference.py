"""The reference dataset: measured runs in ONE CSV, for fitting PRE and evaluating the methods.

Format: leading lines starting with ``#`` say how the data was measured (hardware, driver,
meters, dates, who); then a header and one row per run with the ``runs`` columns the estimators
need, plus ``epoch_energy_j`` and ``epoch_duration_s``: the run's per-epoch energies (J) and
durations (s) as space-separated numbers, epoch 1 first (empty when the run has no epoch
windows); optionally ``epoch_energy_gpu_j`` and ``epoch_energy_dram_j``, the same per
component. ``run_id`` is the run's id in the database it came from.
"""

from __future__ import annotations

import io
import json
import math
from importlib import resources
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from wattlab.errors import DataError
from wattlab.experiment.db.record import run_columns

# The runs table's columns a reference set keeps (`id` renamed `run_id`).
RUN_COLUMNS = (
    "run_id",
    *run_columns(
        "sweep",
        "status",
        "config_hash",
        "repetition",
        "label",
        "model",
        "stem",
        "dataset",
        "precision",
        "device",
        "gpus",
        "batch_size",
        "epochs",
        "samples",
        "power_limit_w",
        "power_limit_requested_w",
        "gpu_name",
        "gpu_tdp_w",
        "ram_gb",
        "train_size",
        "test_size",
        "image_size",
        "duration_s",
        "energy_total_j",
        "energy_gpu_j",
        "energy_cpu_j",
        "energy_dram_j",
        "energy_uncertainty_j",
        "provenance",
        "gpu_utilization_percent",
        "gpu_utilization_basis",
        "model_gflops_per_sample",
        "params",
        "accuracy",
        "projected_energy_j",
        "projection_error",
        "step_marks_json",
        "gpu_uuids",  # which physical card (a set measured on several cards says so)
        "projected_energy_low_j",  # STEP's calibrated interval (schema version 4 on)
        "projected_energy_high_j",
        "synthetic_version",  # the task and the recipe (schema version 7 on; empty: version 1)
        "recipe",
    ),
)
LIST_COLUMNS = ("epoch_energy_j", "epoch_duration_s")
# Optional per-epoch components (written when the windows have them), so every target
# (total, GPU, GPU + RAM) can be projected by STEP: list column -> windows column.
COMPONENT_LIST_COLUMNS = {
    "epoch_energy_gpu_j": "energy_gpu_j",
    "epoch_energy_dram_j": "energy_dram_j",
}
REQUIRED_COLUMNS = (
    "run_id",
    "status",
    "model",
    "precision",
    "gpus",
    "batch_size",
    "epochs",
    "samples",
    "gpu_name",
    "duration_s",
    "energy_total_j",
    *LIST_COLUMNS,
)
_TEXT_COLUMNS = {
    "sweep",
    "status",
    "config_hash",
    "label",
    "model",
    "stem",
    "dataset",
    "precision",
    "device",
    "gpu_name",
    "gpu_uuids",
    "provenance",
    "gpu_utilization_basis",
    "step_marks_json",
}
DEFAULT_REFERENCE_NAME = "h200-reference.csv"
# The shipped reference set: one CSV per GPU it was measured on (issue 47: the H100 beside the
# H200), read together.
DEFAULT_REFERENCE_NAMES = ("h200-reference.csv", "h100-reference.csv")


def default_reference_path() -> Path:
    """Where the shipped H200 reference data lives: ``wattlab/data/h200-reference.csv`` in the
    installed package (``default_reference_paths`` for every GPU's). It may not exist: check
    ``.exists()`` or call ``load_default_reference`` for a clear error."""
    return Path(str(resources.files("wattlab") / "data" / DEFAULT_REFERENCE_NAME))


def default_reference_paths() -> list[Path]:
    """The shipped reference CSVs that exist, the H200's first."""
    folder = resources.files("wattlab") / "data"
    paths = [Path(str(folder / name)) for name in DEFAULT_REFERENCE_NAMES]
    return [path for path in paths if path.is_file()]


def default_reference_bytes() -> bytes:
    """The shipped reference CSVs' bytes, in order (what a cached fit of them is keyed by)."""
    return b"".join(path.read_bytes() for path in default_reference_paths())


def load_default_reference() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Load the shipped reference data (every GPU's CSV, read together); DataError saying so
    when it is not there yet."""
    path = default_reference_path()
    if not path.is_file():
        raise DataError(
            f"the shipped reference data {path} does not exist yet (it is measured on an H200 "
            "and added to wattlab/data/); give your own runs with --db FILE or --data CSV."
        )
    parts = [load_reference_csv(p) for p in default_reference_paths()]
    if len(parts) == 1:
        return parts[0]
    runs = pd.concat([r for r, _ in parts], ignore_index=True)
    windows = pd.concat([w for _, w in parts if len(w)], ignore_index=True)
    if runs["run_id"].duplicated().any():
        raise DataError("the shipped reference CSVs share run ids; each GPU's must be its own.")
    return runs, windows


def _number_text(value: float) -> str:
    return f"{float(value):.10g}"


def write_reference_csv(
    runs_df: pd.DataFrame,
    windows_df: pd.DataFrame,
    path: str | Path,
    header_lines: list[str] | tuple[str, ...],
) -> Path:
    """Write runs (``runs`` table columns; ``id`` or ``run_id``) with their epoch windows
    (``windows`` rows named 'epoch') to one CSV, with ``header_lines`` as ``#`` comments."""
    runs = runs_df.copy()
    if "run_id" not in runs:
        if "id" not in runs:
            raise DataError("the runs to write need an 'id' or 'run_id' column.")
        runs["run_id"] = runs["id"]
    epochs = windows_df[windows_df["name"] == "epoch"] if len(windows_df) else windows_df
    energy_lists, duration_lists = [], []
    components = [
        (list_column, column)
        for list_column, column in COMPONENT_LIST_COLUMNS.items()
        if len(epochs) and column in epochs and epochs[column].notna().all()
    ]
    component_lists: dict[str, list[str]] = {list_column: [] for list_column, _ in components}
    for run_id in runs["run_id"]:
        rows = epochs[epochs["run_id"] == run_id].sort_values("epoch") if len(epochs) else epochs
        energy_lists.append(" ".join(_number_text(v) for v in rows.get("energy_total_j", [])))
        duration_lists.append(" ".join(_number_text(v) for v in rows.get("duration_s", [])))
        for list_column, column in components:
            component_lists[list_column].append(" ".join(_number_text(v) for v in rows[column]))
    out = runs.reindex(columns=list(RUN_COLUMNS))
    out["step_marks_json"] = [_compact_marks(cell) for cell in out["step_marks_json"]]
    out["epoch_energy_j"] = energy_lists
    out["epoch_duration_s"] = duration_lists
    for list_column, values in component_lists.items():
        out[list_column] = values
    from wattlab.jsonio import text_handle, write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(raw: BinaryIO) -> None:
        with text_handle(raw) as handle:
            for line in header_lines:
                for part in str(line).splitlines() or [""]:
                    handle.write(part if part.startswith("#") else f"# {part}".rstrip())
                    handle.write("\n")
            out.to_csv(handle, index=False, float_format="%.10g")

    write_atomic(path, write)
    return path


def _compact_marks(cell: object) -> str | None:
    """STEP's step-level marks as JSON with 7 significant digits (the file stays small)."""
    if isinstance(cell, str) and cell.strip():
        try:
            cell = json.loads(cell)
        except ValueError:
            return None
    if not isinstance(cell, dict):
        return None
    return json.dumps(
        {k: [float(f"{float(v):.7g}") for v in values] for k, values in cell.items()},
        separators=(",", ":"),
    )


def read_reference_header(path: str | Path) -> list[str]:
    """The ``#`` lines at the top of a reference CSV, without the leading '# '."""
    lines = _read(Path(path)).splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line[1:].strip())
    return header


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"reference data {str(path)!r} does not exist.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"reference data {str(path)!r} cannot be read: {error}.") from None


def _parse_list(text: object, run_id: object, column: str, *, zero_ok: bool = False) -> list[float]:
    if text is None or text is pd.NA or (isinstance(text, float) and math.isnan(text)):
        return []  # a run without epoch windows
    try:
        values = [float(v) for v in str(text).split()]
    except ValueError:
        raise DataError(
            f"run {run_id}: {column} must be space-separated numbers, got {str(text)[:40]!r}."
        ) from None
    if any(not (math.isfinite(v) and (v > 0 or (zero_ok and v == 0))) for v in values):
        kind = "a number >= 0" if zero_ok else "a positive number"
        raise DataError(f"run {run_id}: every value in {column} must be {kind}.")
    return values


def load_reference_csv(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a reference CSV into (runs_df, windows_df) with the database tables' columns:
    runs get ``id`` (= run_id); windows get one 'epoch' row per listed epoch (run_id, epoch,
    duration_s, energy_total_j, mean_power_w; start_s and samples are not stored).
    Malformed files raise DataError."""
    path = Path(path)
    lines = _read(path).splitlines()
    body = "\n".join(line for line in lines if not line.startswith("#"))
    if not body.strip():
        raise DataError(f"reference data {str(path)!r} has no header row or runs.")
    try:
        runs = pd.read_csv(
            io.StringIO(body),
            dtype={
                c: "string" for c in _TEXT_COLUMNS | set(LIST_COLUMNS) | set(COMPONENT_LIST_COLUMNS)
            },
        )
    except (pd.errors.ParserError, ValueError) as error:
        raise DataError(f"reference data {str(path)!r} is not a valid CSV: {error}.") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in runs.columns]
    if missing:
        raise DataError(f"reference data {str(path)!r} lacks the columns {', '.join(missing)}.")
    numeric = [c for c in RUN_COLUMNS if c in runs.columns and c not in _TEXT_COLUMNS]
    for column in numeric:
        converted = pd.to_numeric(runs[column], errors="coerce")
        bad = converted.isna() & runs[column].notna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise DataError(
                f"reference data {str(path)!r}: column {column} must be numeric, got "
                f"{runs[column].iloc[row]!r} in data row {row + 1}."
            )
        runs[column] = converted
    if runs["run_id"].isna().any() or runs["run_id"].duplicated().any():
        raise DataError(f"reference data {str(path)!r}: run_id must be present and unique.")
    for column in _TEXT_COLUMNS & set(runs.columns):
        runs[column] = runs[column].astype(object).where(runs[column].notna(), None)
    runs["run_id"] = runs["run_id"].astype(int)
    windows = []
    for _, run in runs.iterrows():
        run_id = int(run["run_id"])
        energies = _parse_list(run["epoch_energy_j"], run_id, "epoch_energy_j")
        durations = _parse_list(run["epoch_duration_s"], run_id, "epoch_duration_s")
        if len(energies) != len(durations):
            raise DataError(
                f"run {run_id}: epoch_energy_j has {len(energies)} values but epoch_duration_s "
                f"has {len(durations)}."
            )
        parts = {}
        for list_column, column in COMPONENT_LIST_COLUMNS.items():
            if list_column not in runs.columns:
                continue
            values = _parse_list(run[list_column], run_id, list_column, zero_ok=True)
            if len(values) != len(energies):
                raise DataError(
                    f"run {run_id}: {list_column} has {len(values)} values but epoch_energy_j "
                    f"has {len(energies)}."
                )
            parts[column] = values
        for epoch, (energy_j, duration_s) in enumerate(
            zip(energies, durations, strict=True), start=1
        ):
            windows.append(
                {
                    **{column: values[epoch - 1] for column, values in parts.items()},
                    "run_id": run_id,
                    "name": "epoch",
                    "epoch": epoch,
                    "start_s": None,  # not stored in the CSV
                    "duration_s": duration_s,
                    "samples": None,
                    "energy_total_j": energy_j,
                    "mean_power_w": energy_j / duration_s,
                    "provenance": run.get("provenance"),
                    "short_window": 0,
                }
            )
    runs = runs.drop(columns=[c for c in (*LIST_COLUMNS, *COMPONENT_LIST_COLUMNS) if c in runs])
    runs.insert(0, "id", runs["run_id"])
    columns = [
        "run_id",
        "name",
        "epoch",
        "start_s",
        "duration_s",
        "samples",
        "energy_total_j",
        *[c for c in COMPONENT_LIST_COLUMNS.values() if any(c in w for w in windows[:1])],
        "mean_power_w",
        "provenance",
        "short_window",
    ]
    return runs.reset_index(drop=True), pd.DataFrame(windows, columns=columns)
