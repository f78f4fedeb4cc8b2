"""The run record: the `runs` table's columns declared once, and the row of a run built from it.

``RUN_COLUMNS`` declares every column of ``runs`` (name, SQLite type, the schema version that
added it) in the order of ``schema.sql``; the store's migrations are taken from it, and a test
holds it against ``schema.sql``. A row is made of typed column groups (``ConfigColumns``,
``EnergyColumns``, ...) whose field names are those columns: the worker (``build_run_row``,
``claim_row``, ``failed_row``), the framework callbacks (``callback_row``) and the command sweeps
(``command_record``) build their rows from the same groups. ``RunOutcome`` is what one run
came to, wherever it ran.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from wattlab.experiment.options import RunContext, WorkerOptions
    from wattlab.monitor import Measurement
    from wattlab.monitor.carbon import CarbonSettings
    from wattlab.train.config import RunConfig

MAX_TRACE_ROWS = 50_000
CODECARBON_WINDOW = "codecarbon"  # the window CodeCarbon's figure is compared with
EPOCH_EVAL_WINDOW = "epoch_eval"  # accuracy on the fixed subset after an epoch (its windows)


class RunColumn(NamedTuple):
    name: str
    sql_type: str  # as declared in schema.sql: INTEGER, REAL or TEXT
    since: int  # the schema version that added it


def _declare(since: int, *columns: tuple[str, str]) -> tuple[RunColumn, ...]:
    return tuple(RunColumn(name, sql_type, since) for name, sql_type in columns)


_INT, _REAL, _TEXT = "INTEGER", "REAL", "TEXT"
# Every column of `runs`, in schema.sql's order (tests/experiment/test_record.py holds the two
# together).
RUN_COLUMNS: tuple[RunColumn, ...] = (
    *_declare(
        1,
        ("id", _INT),
        ("sweep", _TEXT),
        ("status", _TEXT),
        ("error", _TEXT),
        ("config_hash", _TEXT),
        ("repetition", _INT),
        ("config_json", _TEXT),
        ("label", _TEXT),
        ("model", _TEXT),
        ("stem", _TEXT),
        ("dataset", _TEXT),
        ("precision", _TEXT),
        ("device", _TEXT),
        ("gpus", _INT),
        ("world_size", _INT),
        ("batch_size", _INT),
        ("epochs", _REAL),
        ("power_limit_w", _REAL),
        ("power_limit_requested_w", _REAL),
        ("samples", _INT),
        ("started_at", _TEXT),
        ("finished_at", _TEXT),
        ("hostname", _TEXT),
        ("gpu_name", _TEXT),
        ("gpu_uuids", _TEXT),
        ("driver", _TEXT),
        ("cpu_model", _TEXT),
        ("duration_s", _REAL),
        ("wall_s", _REAL),
        ("energy_total_j", _REAL),
        ("energy_gpu_j", _REAL),
        ("energy_cpu_j", _REAL),
        ("energy_dram_j", _REAL),
        ("energy_other_j", _REAL),
        ("energy_uncertainty_j", _REAL),
        ("provenance", _TEXT),
        ("components_json", _TEXT),
        ("co2e_kg", _REAL),
        ("co2e_low_kg", _REAL),
        ("co2e_high_kg", _REAL),
        ("intensity_kg_per_kwh", _REAL),
        ("pue", _REAL),
        ("accuracy", _REAL),
        ("f1_macro", _REAL),
        ("train_loss", _REAL),
        ("codecarbon_energy_j", _REAL),
        ("codecarbon_co2e_kg", _REAL),
        ("codecarbon_rel_error", _REAL),
        ("codecarbon_components_json", _TEXT),
        ("projected_energy_j", _REAL),
        ("projected_duration_s", _REAL),
        ("projection_error", _REAL),
        ("gpu_utilization_percent", _REAL),
        ("gpu_tdp_w", _REAL),
        ("ram_gb", _REAL),
        ("train_size", _INT),
        ("test_size", _INT),
        ("image_size", _INT),
        ("model_gflops_per_sample", _REAL),
        ("params", _INT),
    ),  # fmt: skip
    *_declare(
        2,
        ("pid", _INT),
        ("launcher", _TEXT),
        ("worker_run_index", _INT),
        ("phase_launch_s", _REAL),
        ("phase_setup_s", _REAL),
        ("phase_data_s", _REAL),
        ("phase_warmup_s", _REAL),
        ("phase_budget_s", _REAL),
        ("phase_eval_s", _REAL),
        ("phase_teardown_s", _REAL),
        ("idle_power_w", _REAL),
        ("idle_temperature_c", _REAL),
        ("idle_json", _TEXT),
    ),  # fmt: skip
    *_declare(3, ("gpu_utilization_basis", _TEXT), ("step_marks_json", _TEXT)),
    *_declare(
        4,
        ("projected_energy_low_j", _REAL),
        ("projected_energy_high_j", _REAL),
        ("projection_interval_basis", _TEXT),
    ),  # fmt: skip
    # runs of a command sweep (experiment/runs/command_record.py builds these)
    *_declare(
        5,
        ("exit_code", _INT),
        ("stdout_path", _TEXT),
        ("stderr_path", _TEXT),
        ("budget_window", _TEXT),
        ("command_json", _TEXT),
    ),  # fmt: skip
    # when the claiming process started (a pid reused by another program is not the claimer)
    *_declare(6, ("pid_started_unix", _REAL)),
    # the synthetic task and training recipe versions (issue 22; NULL task on CIFAR-10)
    *_declare(7, ("synthetic_version", _INT), ("recipe", _INT)),
    # the measured share of the budget's energy (issue 39: provenance by share, not weakest-of)
    *_declare(8, ("energy_measured_share", _REAL)),
    # the run's fingerprint: which wattlab, code and libraries (wattlab.experiment.db.fingerprint)
    *_declare(
        9,
        ("wattlab_version", _TEXT),
        ("code_commit", _TEXT),
        ("code_dirty", _INT),
        ("torch_version", _TEXT),
        ("cuda_version", _TEXT),
        ("cudnn_version", _TEXT),
    ),  # fmt: skip
    # the training tokens of a text model (the Hugging Face callback: issue 51's rate per token)
    *_declare(10, ("tokens", _INT)),
)
RUN_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in RUN_COLUMNS)


def added_in(version: int) -> tuple[tuple[str, str], ...]:
    """The (name, SQLite type) of the run columns schema ``version`` added (its migration)."""
    return tuple((c.name, c.sql_type) for c in RUN_COLUMNS if c.since == version)


def run_columns(*names: str) -> tuple[str, ...]:
    """``names``, each checked to be a declared column of `runs` (for modules that list some)."""
    unknown = [n for n in names if n not in RUN_COLUMN_NAMES]
    if unknown:
        raise ValueError(f"not columns of the runs table: {', '.join(unknown)}")
    return names


# --- the outcome of a run ---------------------------------------------------------------------
@dataclass(frozen=True)
class RunOutcome:
    """What one run came to: its id (None when nothing could be stored), its status, the error
    of a failure, the stored row (ok or failed) when there is one, whether a failure could be
    stored at all, and, for a command sweep's run, the command's exit code."""

    run_id: int | None
    status: str  # 'ok' | 'failed'
    error: str | None = None
    row: dict[str, Any] | None = None
    stored: bool = True  # False: a failure that could not be stored (nothing was written)
    exit_code: int | None = None  # a command sweep's run: its command's exit code


# --- column groups: a row is made of these; their field names are RUN_COLUMNS names -------------
@dataclass(frozen=True)
class ColumnGroup:
    def columns(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ConfigColumns(ColumnGroup):
    """What a wattlab run is, from its configuration and settings (ok and failed rows alike)."""

    sweep: str | None
    config_hash: str
    repetition: int
    config_json: dict[str, Any]
    label: str
    model: str
    stem: str
    dataset: str
    precision: str
    device: str
    gpus: int
    world_size: int
    batch_size: int
    power_limit_requested_w: float | None
    started_at: str
    finished_at: str
    intensity_kg_per_kwh: float
    pue: float
    launcher: str
    worker_run_index: int


@dataclass(frozen=True)
class TaskColumns(ColumnGroup):
    """Which synthetic task (None on a real dataset) and which training recipe the run used."""

    synthetic_version: int | None
    recipe: int


@dataclass(frozen=True)
class FingerprintColumns(ColumnGroup):
    """Which wattlab, code commit and libraries produced a run (schema version 8)."""

    wattlab_version: str
    code_commit: str | None
    code_dirty: int | None  # 1: the checkout had uncommitted changes to tracked files
    torch_version: str | None
    cuda_version: str | None
    cudnn_version: str | None


def fingerprint_columns(folder: str | None = None) -> FingerprintColumns:
    """This process's fingerprint: wattlab's version, the git checkout of ``folder`` (the
    current folder by default), and the torch, CUDA and cuDNN it has loaded."""
    from wattlab import __version__
    from wattlab.experiment.db.fingerprint import code_state, torch_versions

    code = code_state(folder)
    torch, cuda, cudnn = torch_versions()
    return FingerprintColumns(
        wattlab_version=__version__,
        code_commit=code.commit,
        code_dirty=None if code.dirty is None else int(code.dirty),
        torch_version=torch,
        cuda_version=cuda,
        cudnn_version=cudnn,
    )


@dataclass(frozen=True)
class IdleColumns(ColumnGroup):
    """GPU readings taken before the run: summed power, hottest GPU, and each GPU's values."""

    idle_power_w: float | None
    idle_temperature_c: float | None
    idle_json: dict[str, Any]


@dataclass(frozen=True)
class HostColumns(ColumnGroup):
    """Where a finished worker run ran: its processes, limits and hardware."""

    world_size: int
    status: str
    epochs: float
    power_limit_w: float | None
    samples: int
    hostname: str
    gpu_name: str | None
    gpu_uuids: str | None
    driver: str | None
    cpu_model: str


@dataclass(frozen=True)
class GpuColumns(ColumnGroup):
    """Which GPUs a run measured, from their meters' details (name, uuid, driver)."""

    gpu_name: str | None
    gpu_uuids: str | None
    driver: str | None

    @classmethod
    def of(cls, details: Iterable[Mapping[str, Any]]) -> GpuColumns:
        gpus = list(details)
        return cls(
            gpu_name=",".join(sorted({str(d.get("name")) for d in gpus})) or None,
            gpu_uuids=",".join(str(d.get("uuid")) for d in gpus) or None,
            driver=next((str(d.get("driver")) for d in gpus if d.get("driver")), None),
        )


@dataclass(frozen=True)
class EnergyColumns(ColumnGroup):
    """One window's time, energy by component kind, and CO2e (the budget, or a callback's)."""

    duration_s: float
    wall_s: float
    energy_total_j: float
    energy_gpu_j: float
    energy_cpu_j: float
    energy_dram_j: float
    energy_other_j: float
    energy_uncertainty_j: float
    provenance: str  # by share: "93.1 % measured, 6.9 % estimated"; one word when it is all
    components_json: dict[str, dict[str, Any]]
    energy_measured_share: float | None  # from a counter or sampled power (0..1)
    co2e_kg: float
    co2e_low_kg: float
    co2e_high_kg: float
    intensity_kg_per_kwh: float

    @classmethod
    def of(cls, window: Measurement, wall_s: float | None = None) -> EnergyColumns:
        from wattlab.monitor.carbon import window_co2e

        c = window_co2e(window)  # a traced intensity is weighted by the window's power
        components = component_energies(window)
        provenance, share = provenance_by_share(components, window.total_provenance.value)
        return cls(
            duration_s=window.duration_s,
            wall_s=window.duration_s if wall_s is None else wall_s,
            energy_total_j=window.total_energy_j,
            energy_gpu_j=window.gpu_energy_j,
            energy_cpu_j=window.cpu_energy_j,
            energy_dram_j=window.dram_energy_j,
            energy_other_j=window.other_energy_j,
            energy_uncertainty_j=window.total_uncertainty_j,
            provenance=provenance,
            components_json=components,
            energy_measured_share=share,
            co2e_kg=c.value_kg,
            co2e_low_kg=c.low_kg,
            co2e_high_kg=c.high_kg,
            intensity_kg_per_kwh=c.settings.intensity_kg_per_kwh,
        )


@dataclass(frozen=True)
class ResultColumns(ColumnGroup):
    """What training reached, the budget's GPU use, and the facts PRE estimates from."""

    accuracy: float | None
    f1_macro: float | None
    train_loss: float | None
    gpu_utilization_percent: float | None
    gpu_utilization_basis: str | None
    gpu_tdp_w: float | None
    ram_gb: float | None
    train_size: int | None
    test_size: int | None
    image_size: int
    params: int | None
    model_gflops_per_sample: float | None


@dataclass(frozen=True)
class CodeCarbonColumns(ColumnGroup):
    """CodeCarbon's figure over the budget, and how far it is from ours."""

    codecarbon_energy_j: float
    codecarbon_co2e_kg: float
    codecarbon_rel_error: float | None
    codecarbon_components_json: dict[str, float]


@dataclass(frozen=True)
class ProjectionColumns(ColumnGroup):
    """STEP's live projection of the budget, its error, and its calibrated interval."""

    projected_energy_j: float
    projected_duration_s: float | None
    projection_error: float | None
    projected_energy_low_j: float | None
    projected_energy_high_j: float | None
    projection_interval_basis: str | None


@dataclass(frozen=True)
class PhaseColumns(ColumnGroup):
    """The run's wall time by phase (s)."""

    phase_launch_s: float | None
    phase_setup_s: float | None
    phase_data_s: float | None
    phase_warmup_s: float | None
    phase_budget_s: float | None
    phase_eval_s: float | None
    phase_teardown_s: float | None


@dataclass(frozen=True)
class StepMarksColumns(ColumnGroup):
    step_marks_json: dict[str, list[float]]


@dataclass(frozen=True)
class ClaimColumns(ColumnGroup):
    """Who claimed a run that is starting."""

    hostname: str
    pid: int
    pid_started_unix: float | None


def claim_columns() -> ClaimColumns:
    """This host and process as the claimer of a run: its pid and when the process started."""
    from wattlab.experiment.hosts import host_name
    from wattlab.processes import process_started_unix

    return ClaimColumns(
        hostname=host_name(), pid=os.getpid(), pid_started_unix=process_started_unix(os.getpid())
    )


@dataclass(frozen=True)
class FailureColumns(ColumnGroup):
    status: str
    error: str
    hostname: str


@dataclass(frozen=True)
class CallbackColumns(ColumnGroup):
    """What a framework-driven run is (a Trainer's or Lightning's), before its energy."""

    sweep: str | None
    status: str
    config_hash: str
    repetition: int
    config_json: dict[str, Any]
    label: str
    model: str | None
    precision: str | None
    device: str
    gpus: int
    world_size: int
    batch_size: int | None
    epochs: float | None
    samples: int | None
    started_at: str
    finished_at: str
    hostname: str
    cpu_model: str


@dataclass(frozen=True)
class CallbackResultColumns(ColumnGroup):
    pue: float
    accuracy: float | None
    train_loss: float | None
    tokens: int | None = None  # a text model's training tokens (schema 10)


@dataclass(frozen=True)
class CommandPointColumns(ColumnGroup):
    """What a command sweep's run is when it is claimed: its grid point and its command."""

    sweep: str
    config_hash: str
    repetition: int
    config_json: dict[str, Any]
    label: str
    model: str
    started_at: str
    cpu_model: str | None
    launcher: str
    command_json: dict[str, Any]  # argv, cwd, env (CommandColumns adds the marks)


@dataclass(frozen=True)
class CommandColumns(ColumnGroup):
    """How a command sweep's run ended (the schema version 5 columns, with its status and end):
    its exit code, where its output is kept, which window is the budget, the command and marks."""

    status: str
    finished_at: str
    wall_s: float
    exit_code: int
    stdout_path: str
    stderr_path: str
    budget_window: str | None  # None when the run failed
    command_json: dict[str, Any]


@dataclass(frozen=True)
class CommandBudgetColumns(ColumnGroup):
    """What a command run's budget window shows beside its energy (ok rows only)."""

    device: str
    samples: int | None
    pue: float
    gpu_utilization_percent: float | None
    gpu_utilization_basis: str | None


# Every group a row is built from (the test checks that their fields are declared columns).
COLUMN_GROUPS: tuple[type[ColumnGroup], ...] = (
    ConfigColumns,
    TaskColumns,
    FingerprintColumns,
    IdleColumns,
    HostColumns,
    EnergyColumns,
    ResultColumns,
    CodeCarbonColumns,
    ProjectionColumns,
    PhaseColumns,
    StepMarksColumns,
    ClaimColumns,
    FailureColumns,
    CallbackColumns,
    CallbackResultColumns,
    GpuColumns,
    CommandPointColumns,
    CommandColumns,
    CommandBudgetColumns,
)


def row_of(groups: Iterable[ColumnGroup | Mapping[str, Any] | None]) -> dict[str, Any]:
    """The `runs` row of these groups (or rows already built), in order: a later group's value
    of a column wins, in the earlier one's place; None groups are left out."""
    row: dict[str, Any] = {}
    for group in groups:
        if isinstance(group, ColumnGroup):
            row.update(group.columns())
        elif group is not None:
            row.update(group)
    return row


# --- the pieces of a row ----------------------------------------------------------------------
def window_row(name: str, epoch: int | None, m: Measurement, samples: int | None) -> dict[str, Any]:
    """One ``windows`` row (durations in s, energies in J, power in W) of a measurement."""
    return {
        "name": name,
        "epoch": epoch,
        "start_s": m.start_offset_s,
        "duration_s": m.duration_s,
        "samples": samples,
        "energy_total_j": m.total_energy_j,
        "energy_gpu_j": m.gpu_energy_j,
        "energy_cpu_j": m.cpu_energy_j,
        "energy_dram_j": m.dram_energy_j,
        "energy_other_j": m.other_energy_j,
        "mean_power_w": m.mean_power_w,
        "provenance": provenance_by_share(component_energies(m), m.total_provenance.value)[0],
        "short_window": int(m.is_short),
    }


def provenance_by_share(
    components: Mapping[str, Any] | None, fallback: object
) -> tuple[str, float | None]:
    """A window's provenance by share and its measured share, from its components (those
    summed into the total): ("93.1 % measured, 6.9 % estimated", 0.931); one word when one
    provenance holds all the energy (``wattlab.wording.EnergyParts.short``). Without components
    with energy: ``fallback``'s word, and its share when the word says it (1 for measured or
    sampled, 0 for estimated, None when unknown)."""
    from wattlab.wording import EnergyParts, provenance_of

    triples: list[tuple[object, object, float]] = []
    for name, info in (components or {}).items():
        if isinstance(info, Mapping) and info.get("in_total", True) is not False:
            energy = info.get("energy_j")
            if isinstance(energy, int | float):
                triples.append((name, info.get("provenance"), float(energy)))
    parts = EnergyParts.of_components(triples)
    if parts.shares():
        return parts.short(), parts.measured_share()
    word = provenance_of(fallback)
    return word, {"measured": 1.0, "sampled": 1.0, "estimated": 0.0}.get(word)


# a stored window's energy columns and the component kinds each one sums (Measurement's totals)
WINDOW_KIND_COLUMNS = (
    ("energy_gpu_j", ("gpu",)),
    ("energy_cpu_j", ("cpu",)),
    ("energy_dram_j", ("dram", "ram")),
    ("energy_other_j", None),  # every other kind
)


def _stored_share(stored: object) -> tuple[str | None, float | None]:
    """A stored provenance as it is, and the measured share it states: 1 or 0 for one word,
    the measured and sampled percentages of a by-share text, None when it says none."""
    import re

    if not isinstance(stored, str):
        return None, None
    word = {"measured": 1.0, "sampled": 1.0, "estimated": 0.0}
    if stored in word:
        return stored, word[stored]
    shares = re.findall(r"([0-9.]+) % (measured|sampled|estimated)", stored)
    if not shares:
        return stored, None
    return stored, sum(float(v) for v, w in shares if w != "estimated") / 100.0


def window_provenance(
    window: Mapping[str, Any], components: Mapping[str, Any] | None
) -> tuple[str | None, float | None]:
    """A stored window's provenance by share and its measured share, from its energy by kind
    (GPU, CPU, DRAM/RAM, other) and its run's components (``components_json``): each kind's
    energy is split over the run's components of that kind in proportion to their energy, each
    with its provenance (a meter's provenance holds for the whole run). Windows stored before
    schema 8 said the weakest word ("estimated" for a window 95 % measured); this is what
    they measured. Without the run's components, or with window energy of a kind the run has
    no component of: the window's stored provenance, and the share it states."""
    from wattlab.wording import component_kind

    stored = window.get("provenance")
    by_kind: dict[str, list[tuple[str, Any, float]]] = {}
    for name, info in (components or {}).items():
        if isinstance(info, Mapping) and info.get("in_total", True) is not False:
            energy = info.get("energy_j")
            if isinstance(energy, int | float) and energy > 0:
                by_kind.setdefault(component_kind(name), []).append(
                    (str(name), info.get("provenance"), float(energy))
                )
    named = {k for column, kinds in WINDOW_KIND_COLUMNS if kinds for k in kinds}
    triples: dict[str, tuple[object, float]] = {}
    for column, kinds in WINDOW_KIND_COLUMNS:
        value = window.get(column)
        energy = float(value) if isinstance(value, int | float) and value == value else 0.0
        if energy <= 0:
            continue
        parts = [
            p for k, ps in by_kind.items() if (k in kinds if kinds else k not in named) for p in ps
        ]
        whole = sum(e for _, _, e in parts)
        if whole <= 0:
            return _stored_share(stored)
        for name, provenance, e in parts:
            triples[name] = (provenance, energy * e / whole)
    if not triples:
        return _stored_share(stored)
    return provenance_by_share(
        {n: {"provenance": p, "energy_j": e} for n, (p, e) in triples.items()}, stored
    )


# what a modelled meter assumed, kept with its component in components_json (issue 39)
ASSUMPTION_KEYS = ("ram_measure", "tdp_w", "tdp_source", "utilisation", "cpu_model", "logical_cpus")


def estimate_assumptions(details: Mapping[str, Any]) -> dict[str, Any]:
    """The assumptions among a meter's details (:data:`ASSUMPTION_KEYS`), for its component."""
    return {k: details[k] for k in ASSUMPTION_KEYS if details.get(k) is not None}


def component_energies(window: Measurement) -> dict[str, dict[str, Any]]:
    """``components_json``: each component's energy, provenance, uncertainty and whether it
    counts in the total."""
    return {
        comp: {
            "energy_j": window.energy_j[comp],
            "provenance": window.provenance[comp].value,
            "uncertainty_j": window.uncertainty_j.get(comp, 0.0),
            "in_total": window.in_total.get(comp, True),
        }
        for comp in window.energy_j
    }


def cpuinfo_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (None where it has none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return cpuinfo_model() or platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        import psutil

        return float(psutil.virtual_memory().total / 1e9)
    except Exception:
        return None


def _forward_gflops(cfg: RunConfig) -> float | None:
    """Forward GFLOPs per image at the run's size, counted with torch's FlopCounterMode on the
    CPU."""
    try:
        from wattlab.train.config import NUM_CLASSES
        from wattlab.train.models import build_model, forward_flops_per_sample

        model = build_model(
            cfg.model,
            stem=cfg.stem,
            num_classes=NUM_CLASSES[cfg.dataset],
            image_size=cfg.image_size,
        )
        return forward_flops_per_sample(model, image_size=cfg.image_size) / 1e9
    except Exception:  # a count is a convenience for PRE; never fail a finished run over it
        return None


def _budget_utilization(budget: Measurement) -> tuple[float | None, str | None]:
    """The GPUs' mean utilisation over the budget window, sampled by the monitor, and a line
    saying how (for Green Algorithms, which multiplies TDP by it)."""
    mean, readings, gpus = budget.gpu_utilization()
    if mean is None:
        return None, None
    return mean, (
        f"sampled: {readings} NVML readings over the {budget.duration_s:.1f} s budget window "
        f"({gpus} GPU{'s' if gpus != 1 else ''})"
    )


def _process_start_unix() -> float | None:
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:
        return None


# --- the worker's rows ------------------------------------------------------------------------
def config_columns(
    cfg: RunConfig, opts: WorkerOptions, ctx: RunContext, started_at: str
) -> dict[str, Any]:
    """The `runs` columns that come from the configuration alone (ok and failed rows alike)."""
    from wattlab.monitor import utc_now_iso

    config = ConfigColumns(
        sweep=opts.sweep,
        config_hash=cfg.config_hash(),
        repetition=opts.repetition,
        config_json=cfg.model_dump(),
        label=cfg.label(),
        model=cfg.model,
        stem=cfg.stem,
        dataset=cfg.dataset,
        precision=cfg.precision,
        device=cfg.device,
        gpus=cfg.gpus if cfg.device == "cuda" else 0,
        world_size=cfg.world_size,
        batch_size=cfg.batch_size,
        power_limit_requested_w=ctx.power_limit_requested_w,
        started_at=started_at,
        finished_at=utc_now_iso(),
        intensity_kg_per_kwh=opts.carbon.intensity_kg_per_kwh,
        pue=opts.carbon.pue,
        launcher=ctx.launcher,
        worker_run_index=ctx.worker_run_index,
    )
    task = TaskColumns(
        synthetic_version=cfg.synthetic_version if cfg.dataset == "synthetic" else None,
        recipe=cfg.recipe,
    )
    return row_of([config, task, fingerprint_columns(), idle_group(ctx.idle)])


def idle_group(idle: Mapping[str, Any] | None) -> IdleColumns | None:
    """The GPUs' idle readings as columns (None when there are none)."""
    if not idle:
        return None
    powers = [v.get("power_w") for v in idle.values() if v.get("power_w") is not None]
    temps = [v.get("temperature_c") for v in idle.values() if v.get("temperature_c") is not None]
    return IdleColumns(
        idle_power_w=sum(powers) if powers else None,
        idle_temperature_c=max(temps) if temps else None,
        idle_json=dict(idle),
    )


def idle_columns(idle: Mapping[str, Any] | None) -> dict[str, Any]:
    """GPU readings taken before the run: summed power, hottest GPU, and each GPU's values."""
    return row_of([idle_group(idle)])


def claim_row(
    cfg: RunConfig, opts: WorkerOptions, ctx: RunContext, started_at: str
) -> dict[str, Any]:
    """The 'running' row that claims a run before it starts (see Store.claim_run)."""
    row = config_columns(cfg, opts, ctx, started_at)
    row.pop("finished_at", None)
    return row_of([row, claim_columns()])


def failed_row(
    cfg: RunConfig, opts: WorkerOptions, ctx: RunContext, started_at: str, error: str
) -> dict[str, Any]:
    """The row of a run that failed with ``error`` (its last 4000 characters)."""
    from wattlab.experiment.hosts import host_name

    failure = FailureColumns(status="failed", error=error[-4000:], hostname=host_name())
    return row_of([config_columns(cfg, opts, ctx, started_at), failure])


def phase_columns(
    ctx: RunContext, started_unix: float, setup_s: float, train_result: Any, teardown_s: float
) -> dict[str, float | None]:
    """The run's wall time by phase (s): launch, set-up, data, warm-up, budget, eval, teardown.

    The tools started around the budget window (CodeCarbon) count as set-up and teardown, so
    the budget phase is the budget window and nothing else."""
    launched = ctx.launched_at_unix
    if launched is None and ctx.launcher == "in-process":
        launched = _process_start_unix()
    phases = dict(getattr(train_result, "phases", {}) or {})
    return PhaseColumns(
        phase_launch_s=max(started_unix - launched, 0.0) if launched is not None else None,
        phase_setup_s=setup_s + phases.get("setup", 0.0) + phases.get("budget_open", 0.0),
        phase_data_s=phases.get("data"),
        phase_warmup_s=phases.get("warmup"),
        phase_budget_s=phases.get("budget"),
        phase_eval_s=phases.get("eval"),
        phase_teardown_s=teardown_s + phases.get("budget_close", 0.0),
    ).columns()


def _codecarbon_group(
    codecarbon: Mapping[str, float], settings: CarbonSettings, compared: Measurement
) -> CodeCarbonColumns:
    from wattlab.monitor.carbon import joules_to_kwh

    cc_energy_j = codecarbon["energy_j"]
    total = compared.total_energy_j
    return CodeCarbonColumns(
        codecarbon_energy_j=cc_energy_j,
        codecarbon_co2e_kg=(
            joules_to_kwh(cc_energy_j) * settings.pue * settings.intensity_kg_per_kwh
        ),
        codecarbon_rel_error=(cc_energy_j - total) / total if total > 0 else None,
        codecarbon_components_json={k: codecarbon[k] for k in ("gpu_j", "cpu_j", "ram_j")},
    )


def _projection_group(projection: Any, budget: Measurement) -> ProjectionColumns | None:
    energy_j = getattr(projection, "energy_j", None) if projection is not None else None
    if energy_j is None:
        return None
    total = budget.total_energy_j
    return ProjectionColumns(
        projected_energy_j=energy_j,
        projected_duration_s=getattr(projection, "duration_s", None),
        projection_error=(energy_j - total) / total if total > 0 else None,
        projected_energy_low_j=getattr(projection, "interval_low_j", None),
        projected_energy_high_j=getattr(projection, "interval_high_j", None),
        projection_interval_basis=getattr(projection, "interval_basis", None),
    )


def build_run_row(
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext,
    payloads: list[dict[str, Any]],
    train_result: Any,
    started_at: str,
    codecarbon: dict[str, float] | None,
    projection: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[tuple[float, str, float]]]:
    """Combine every rank's windows into the `runs` row, `windows` rows and trace rows."""
    from wattlab.monitor import combine_measurements
    from wattlab.monitor.carbon import window_co2e

    keys = list(payloads[0]["results"].keys())
    combined: dict[str, Measurement] = {}
    for key in keys:
        parts = [p["results"][key] for p in payloads if key in p["results"]]
        combined[key] = combine_measurements(parts)
    budget = combined["budget"]
    whole = combined.get("run", budget)
    gpu_details = [
        m["details"] for p in payloads for m in p["meters"] if m["component"].startswith("gpu")
    ]
    hostnames = sorted({p["hostname"] for p in payloads})
    utilization_percent, utilization_basis = _budget_utilization(budget)
    energy = EnergyColumns.of(budget, wall_s=whole.duration_s)
    components = energy.components_json
    for payload in payloads:  # say what the estimates assumed (TDP, load, which memory)
        for meter in payload["meters"]:
            for comp in components:  # multi-node names carry the host: node-a/ram:estimated
                if comp.rsplit("/", 1)[-1] == meter["component"]:
                    components[comp].update(estimate_assumptions(meter["details"]))
    limits = [d.get("power_limit_w") for d in gpu_details if d.get("power_limit_w") is not None]
    tdps = [
        d.get("default_power_limit_w")
        for d in gpu_details
        if d.get("default_power_limit_w") is not None
    ]
    gpus = GpuColumns.of(gpu_details)
    host = HostColumns(
        world_size=len(payloads),  # every process on every node
        status="ok",
        epochs=float(train_result.epochs_completed),
        power_limit_w=max(limits) if limits else None,
        samples=int(train_result.samples),
        hostname=",".join(hostnames),
        gpu_name=gpus.gpu_name,
        gpu_uuids=gpus.gpu_uuids,
        driver=gpus.driver,
        cpu_model=cpu_model(),
    )
    result = ResultColumns(
        accuracy=train_result.accuracy,
        f1_macro=train_result.f1_macro,
        train_loss=train_result.train_loss,
        gpu_utilization_percent=utilization_percent,
        gpu_utilization_basis=utilization_basis,
        gpu_tdp_w=max(tdps) if tdps else None,
        ram_gb=_ram_gb(),
        train_size=getattr(train_result, "train_size", None),
        test_size=getattr(train_result, "test_samples", None),
        image_size=cfg.image_size,
        params=getattr(train_result, "params", None),
        model_gflops_per_sample=_forward_gflops(cfg),
    )
    settings = window_co2e(budget).settings
    row = row_of(
        [
            config_columns(cfg, opts, ctx, started_at),
            host,
            energy,
            result,
            None
            if codecarbon is None  # compared with the window CodeCarbon measured
            else _codecarbon_group(codecarbon, settings, combined.get(CODECARBON_WINDOW, budget)),
            _projection_group(projection, budget),
        ]
    )
    windows = []
    epoch_accuracy = {
        s.epoch: s.eval_accuracy for s in getattr(train_result, "per_epoch", None) or []
    }
    for key, m in combined.items():
        name, _, epoch = key.partition(":")
        samples = sum(p["samples"].get(key, 0) for p in payloads[:1])
        window = window_row(name, int(epoch) if epoch else None, m, samples)
        if name == EPOCH_EVAL_WINDOW and epoch:
            window["accuracy"] = epoch_accuracy.get(int(epoch))
        windows.append(window)
    trace = sorted(s for p in payloads for s in p["trace"])
    if len(trace) > MAX_TRACE_ROWS:
        step = -(-len(trace) // MAX_TRACE_ROWS)
        trace = trace[::step]
    return row, windows, trace


# --- the framework callbacks' row -------------------------------------------------------------
def callback_row(
    *,
    config: dict[str, Any],
    config_hash: str,
    label: str,
    train: Measurement,
    started_at: str,
    model: str | None,
    precision: str | None,
    device: str,
    world_size: int,
    batch_size: int | None,
    epochs: float | None,
    samples: int | None,
    accuracy: float | None = None,
    train_loss: float | None = None,
    sweep: str | None = None,
    tokens: int | None = None,
) -> dict[str, Any]:
    """The `runs` row of a framework-driven run: the config as given, the train window's energy
    (``tokens``: a text model's training tokens, when the framework counted them)."""
    from wattlab.monitor import utc_now_iso
    from wattlab.monitor.carbon import window_co2e

    gpus = sum(1 for comp in train.energy_j if comp.startswith("gpu:"))
    identity = CallbackColumns(
        sweep=sweep,
        status="ok",
        config_hash=config_hash,
        repetition=0,
        config_json=config,
        label=label,
        model=model,
        precision=precision,
        device=device,
        gpus=gpus if device == "cuda" else 0,
        world_size=world_size,
        batch_size=batch_size,
        epochs=epochs,
        samples=samples,
        started_at=started_at,
        finished_at=utc_now_iso(),
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
    )
    result = CallbackResultColumns(
        pue=window_co2e(train).settings.pue, accuracy=accuracy, train_loss=train_loss, tokens=tokens
    )
    return row_of([identity, fingerprint_columns(), EnergyColumns.of(train), result])
