"""A stored run, typed: what a reader reads of one row of the ``runs`` table.

The store hands runs back as rows (``Store.runs()``: a DataFrame; ``Store.run_record``: a
dict); readers that look at ONE run read it as a :class:`StoredRun` instead of by string key,
so a misspelt or renamed column is a type error, not a silent ``None``::

    with open_store(db, readonly=True) as store:
        run = store.stored_run(7)              # or store.stored_runs(sweep="s1")
    if run is not None and run.energy_total_j is not None:
        print(run.label, run.energy_total_j / 3.6e6, "kWh")

Each field is named and typed after its column (units in the names, as in ``schema.sql``); a
missing column, SQL NULL, NaN or a value of the wrong kind reads as None; ``*_json`` columns are
decoded to dicts (None when empty or not a JSON object). Code that computes over the whole table
(groupby, medians) keeps its DataFrame but names columns through :class:`RunCol`, the one place
a reader spells a column name: a rename of a column is one change there (and in the
declaration of the table, ``record.RUN_COLUMNS``, which a test holds these against).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

import pandas as pd

from wattlab.experiment.db.record import RUN_COLUMNS


class RunCol:
    """The names of the ``runs`` columns that readers use, each spelt once; the field of
    :class:`StoredRun` for ``RunCol.X`` is ``x`` (the name in lower case)."""

    # identity
    ID: Final = "id"
    SWEEP: Final = "sweep"
    STATUS: Final = "status"
    ERROR: Final = "error"
    CONFIG_HASH: Final = "config_hash"
    REPETITION: Final = "repetition"
    CONFIG_JSON: Final = "config_json"
    LABEL: Final = "label"
    # the configuration
    MODEL: Final = "model"
    STEM: Final = "stem"
    DATASET: Final = "dataset"
    PRECISION: Final = "precision"
    DEVICE: Final = "device"
    GPUS: Final = "gpus"
    WORLD_SIZE: Final = "world_size"
    BATCH_SIZE: Final = "batch_size"
    EPOCHS: Final = "epochs"
    POWER_LIMIT_W: Final = "power_limit_w"
    POWER_LIMIT_REQUESTED_W: Final = "power_limit_requested_w"
    SAMPLES: Final = "samples"
    TOKENS: Final = "tokens"
    TRAIN_SIZE: Final = "train_size"
    TEST_SIZE: Final = "test_size"
    IMAGE_SIZE: Final = "image_size"
    MODEL_GFLOPS_PER_SAMPLE: Final = "model_gflops_per_sample"
    PARAMS: Final = "params"
    RECIPE: Final = "recipe"
    SYNTHETIC_VERSION: Final = "synthetic_version"
    # where and when
    STARTED_AT: Final = "started_at"
    FINISHED_AT: Final = "finished_at"
    HOSTNAME: Final = "hostname"
    GPU_NAME: Final = "gpu_name"
    DRIVER: Final = "driver"
    CPU_MODEL: Final = "cpu_model"
    GPU_TDP_W: Final = "gpu_tdp_w"
    RAM_GB: Final = "ram_gb"
    LAUNCHER: Final = "launcher"
    GPU_UUIDS: Final = "gpu_uuids"
    # the fingerprint (schema version 8)
    WATTLAB_VERSION: Final = "wattlab_version"
    CODE_COMMIT: Final = "code_commit"
    CODE_DIRTY: Final = "code_dirty"
    TORCH_VERSION: Final = "torch_version"
    CUDA_VERSION: Final = "cuda_version"
    CUDNN_VERSION: Final = "cudnn_version"
    # time and energy
    DURATION_S: Final = "duration_s"
    WALL_S: Final = "wall_s"
    ENERGY_TOTAL_J: Final = "energy_total_j"
    ENERGY_GPU_J: Final = "energy_gpu_j"
    ENERGY_CPU_J: Final = "energy_cpu_j"
    ENERGY_DRAM_J: Final = "energy_dram_j"
    ENERGY_OTHER_J: Final = "energy_other_j"
    ENERGY_UNCERTAINTY_J: Final = "energy_uncertainty_j"
    PROVENANCE: Final = "provenance"
    ENERGY_MEASURED_SHARE: Final = "energy_measured_share"
    COMPONENTS_JSON: Final = "components_json"
    GPU_UTILIZATION_PERCENT: Final = "gpu_utilization_percent"
    IDLE_POWER_W: Final = "idle_power_w"
    IDLE_TEMPERATURE_C: Final = "idle_temperature_c"
    IDLE_JSON: Final = "idle_json"
    BUDGET_WINDOW: Final = "budget_window"
    EXIT_CODE: Final = "exit_code"
    # carbon
    CO2E_KG: Final = "co2e_kg"
    CO2E_LOW_KG: Final = "co2e_low_kg"
    CO2E_HIGH_KG: Final = "co2e_high_kg"
    INTENSITY_KG_PER_KWH: Final = "intensity_kg_per_kwh"
    PUE: Final = "pue"
    # results
    ACCURACY: Final = "accuracy"
    F1_MACRO: Final = "f1_macro"
    TRAIN_LOSS: Final = "train_loss"
    # CodeCarbon beside the direct measurement
    CODECARBON_ENERGY_J: Final = "codecarbon_energy_j"
    CODECARBON_CO2E_KG: Final = "codecarbon_co2e_kg"
    CODECARBON_REL_ERROR: Final = "codecarbon_rel_error"
    CODECARBON_COMPONENTS_JSON: Final = "codecarbon_components_json"
    # STEP's projection
    PROJECTED_ENERGY_J: Final = "projected_energy_j"
    PROJECTED_DURATION_S: Final = "projected_duration_s"
    PROJECTION_ERROR: Final = "projection_error"


@dataclass(frozen=True)
class StoredRun:
    """One stored run (see the module docstring): every field None when its column is missing,
    NULL, NaN or not of its kind."""

    # identity
    id: int | None = None
    sweep: str | None = None
    status: str | None = None  # 'running' | 'ok' | 'failed' | 'abandoned'
    error: str | None = None
    config_hash: str | None = None
    repetition: int | None = None
    config_json: dict[str, Any] | None = None  # the full RunConfig (or a callback's settings)
    label: str | None = None
    # the configuration
    model: str | None = None
    stem: str | None = None
    dataset: str | None = None
    precision: str | None = None
    device: str | None = None  # 'cuda' | 'cpu'
    gpus: int | None = None
    world_size: int | None = None
    batch_size: int | None = None  # global batch
    epochs: float | None = None  # epochs done within the budget
    power_limit_w: float | None = None  # per GPU, in force
    power_limit_requested_w: float | None = None  # None: the default limit
    samples: int | None = None  # training images in the budget (all ranks)
    tokens: int | None = None  # a text model's training tokens (the Hugging Face callback)
    train_size: int | None = None
    test_size: int | None = None
    image_size: int | None = None
    model_gflops_per_sample: float | None = None
    params: int | None = None
    recipe: int | None = None
    synthetic_version: int | None = None
    # where and when
    started_at: str | None = None  # UTC ISO-8601
    finished_at: str | None = None
    hostname: str | None = None
    gpu_name: str | None = None  # comma-separated on mixed GPUs
    driver: str | None = None
    cpu_model: str | None = None
    gpu_tdp_w: float | None = None  # the GPU's default (maximum) limit, per GPU
    ram_gb: float | None = None
    launcher: str | None = None
    gpu_uuids: str | None = None  # comma-separated, job order
    # the fingerprint (schema version 8; None on older runs)
    wattlab_version: str | None = None
    code_commit: str | None = None  # HEAD of the git checkout the run started in
    code_dirty: int | None = None  # 1: uncommitted changes to tracked files
    torch_version: str | None = None
    cuda_version: str | None = None
    cudnn_version: str | None = None
    # time and energy
    duration_s: float | None = None  # the budget's training time
    wall_s: float | None = None  # the whole run
    energy_total_j: float | None = None  # the budget, all components, all ranks
    energy_gpu_j: float | None = None
    energy_cpu_j: float | None = None
    energy_dram_j: float | None = None
    energy_other_j: float | None = None
    energy_uncertainty_j: float | None = None
    provenance: str | None = None  # by share ("93.1 % measured, 6.9 % estimated"); older: weakest
    energy_measured_share: float | None = None  # schema 8: from counters or sampled power (0..1)
    components_json: dict[str, Any] | None = None  # {component: {energy_j, provenance, ...}}
    gpu_utilization_percent: float | None = None
    idle_power_w: float | None = None
    idle_temperature_c: float | None = None
    idle_json: dict[str, Any] | None = None  # per GPU, and "host": the load before the run
    budget_window: str | None = None  # a command's run: 'marked' | 'whole process'
    exit_code: int | None = None  # a command's run
    # carbon
    co2e_kg: float | None = None
    co2e_low_kg: float | None = None
    co2e_high_kg: float | None = None
    intensity_kg_per_kwh: float | None = None
    pue: float | None = None
    # results
    accuracy: float | None = None
    f1_macro: float | None = None
    train_loss: float | None = None
    # CodeCarbon beside the direct measurement
    codecarbon_energy_j: float | None = None
    codecarbon_co2e_kg: float | None = None
    codecarbon_rel_error: float | None = None
    codecarbon_components_json: dict[str, Any] | None = None  # {gpu_j, cpu_j, ram_j}
    # STEP's projection
    projected_energy_j: float | None = None
    projected_duration_s: float | None = None
    projection_error: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | sqlite3.Row | Any) -> StoredRun:
        """The run of one store row: a ``sqlite3.Row``, a dict (``Store.run_record``, a row a
        worker built) or a pandas Series (a row of ``Store.runs()``)."""
        if isinstance(row, sqlite3.Row):
            row = dict(zip(row.keys(), tuple(row), strict=True))
        values = {name: read(row.get(column)) for name, column, read in _READERS}
        return cls(**values)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any] | sqlite3.Row | Any]) -> list[StoredRun]:
        """The runs of several rows, in their order."""
        return [cls.from_row(r) for r in rows]

    @classmethod
    def from_frame(cls, frame: Any) -> list[StoredRun]:
        """The runs of a runs DataFrame (``Store.runs()`` or a selection of it), in its order."""
        present = set(frame.columns)
        converted = [
            [read(v) for v in frame[column].tolist()] if column in present else [None] * len(frame)
            for _, column, read in _READERS
        ]  # column by column: about half the time of from_row over to_dict's records
        return [cls(*values) for values in zip(*converted, strict=True)]

    @classmethod
    def in_frame(cls, frame: Any, run_id: int) -> StoredRun | None:
        """Run ``run_id`` of a runs DataFrame; None when the frame holds no such run."""
        if RunCol.ID not in frame.columns:
            return None
        match = frame[frame[RunCol.ID] == run_id]
        return None if match.empty else cls.from_row(match.iloc[0])

    @property
    def ok(self) -> bool:
        """Whether the run finished and was stored as 'ok'."""
        return self.status == "ok"


# --- conversion: the kind of each field follows the column's declared SQLite type -----------
def _missing(value: Any) -> bool:
    """None, NaN, pandas' NA or NaT (how a DataFrame holds SQL NULL)."""
    if value is None:
        return True
    if isinstance(value, (str, bytes, dict, list, tuple)):
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _as_float(value: Any) -> float | None:
    if isinstance(value, float):  # the common case first (numpy's float64 is one too)
        return None if math.isnan(value) else float(value)
    if _missing(value) or isinstance(value, (bytes, bool)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _as_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _as_float(value)
    if number is None or not math.isfinite(number) or number != int(number):
        return None  # NULL, NaN, infinite, or not a whole number
    return int(number)


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if _missing(value) or isinstance(value, bytes):
        return None
    return str(value)


def _as_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        decoded = json.loads(value)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


_BY_SQL_TYPE = {"INTEGER": _as_int, "REAL": _as_float, "TEXT": _as_text}
_SQL_TYPES = {c.name: c.sql_type for c in RUN_COLUMNS}


def _reader(column: str) -> Any:
    if column.endswith("_json"):
        return _as_object
    return _BY_SQL_TYPE[_SQL_TYPES[column]]


# (field, column, converter) for every field: the column is RunCol's constant of the field
_READERS = tuple(
    (f.name, getattr(RunCol, f.name.upper()), _reader(getattr(RunCol, f.name.upper())))
    for f in fields(StoredRun)
)


__all__ = ["RunCol", "StoredRun"]
