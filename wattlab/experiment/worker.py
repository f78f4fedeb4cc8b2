"""One training run inside one process (of torchrun's N): meter, train, gather, store.

Each rank meters its own GPU; the host's CPU/DRAM are metered by local rank 0 only, so nothing
is counted twice. Rank 0 gathers every rank's window measurements, combines them, and writes
the run with its windows and power trace to the store in one transaction.

Run by the runner as ``python -m torch.distributed.run ... -m wattlab.experiment.worker``,
by a sweep's warm worker (``wattlab.experiment.warm``), or called in-process (``execute``) for
a single-process run. It returns data (the stored row); printing is the caller's business.

Failure contract: the run is claimed (a 'running' row) before anything is measured; every
failure after that (meters, monitor, CodeCarbon, training) finishes the claim as 'failed' with
the error, and ``execute`` returns it with its id. A result that could not be stored says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattlab.errors import Interrupted
from wattlab.experiment.hosts import host_name, qualified, qualify_measurement, spans_several_nodes
from wattlab.monitor import EnergyMonitor, Measurement, combine_measurements, utc_now_iso
from wattlab.monitor.carbon import CarbonSettings, joules_to_kwh, window_co2e
from wattlab.processes import job_root_pid
from wattlab.train.config import RunConfig

MAX_TRACE_ROWS = 50_000


@dataclass
class WorkerOptions:
    """Everything besides the RunConfig that a worker needs."""

    db_path: str
    carbon: CarbonSettings = field(default_factory=CarbonSettings)
    interval_s: float = 0.1
    powercap_root: str | None = None
    cpu_tdp_w: float | None = None
    ram_measure: str = "system"  # what the RAM estimate counts: "system" or "process"
    repetition: int = 0
    sweep: str | None = None
    progress: bool = True
    codecarbon_country: str = "USA"
    result_file: str | None = None
    power_limit_requested_w: float | None = None
    run_id: int | None = None  # the claimed ('running') row; None: execute claims one
    launched_at_unix: float | None = None  # when the launch was asked for (time.time())
    launcher: str = "in-process"  # 'in-process' | 'torchrun' | 'warm-worker'
    worker_run_index: int = 0  # runs this process did before this one
    eval_samples: int | None = None  # evaluate on the first N test images only (sweeps)
    idle: dict[str, Any] | None = None  # GPU idle readings taken just before the run

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["carbon"] = self.carbon.to_dict()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerOptions:
        data = dict(data)
        data["carbon"] = CarbonSettings(**data["carbon"])
        return cls(**data)


@dataclass
class RunResult:
    """What ``execute`` did: the run's id (None when nothing could be stored), its status,
    the stored row (ok or failed) and the error message of a failure."""

    run_id: int | None
    status: str  # 'ok' | 'failed'
    row: dict[str, Any] | None = None
    error: str | None = None
    stored: bool = True  # False: the failure could not be written to the database


def window_key(name: str, epoch: int | None) -> str:
    return f"{name}:{epoch}" if epoch is not None else name


class _CodeCarbon:
    """CodeCarbon's OfflineEmissionsTracker over the budget window (never the online one)."""

    def __init__(self, country: str, interval_s: float) -> None:
        import logging

        from codecarbon import OfflineEmissionsTracker

        logging.getLogger("codecarbon").setLevel(logging.ERROR)  # its INFO lines are noise here

        self.tracker = OfflineEmissionsTracker(
            country_iso_code=country,
            measure_power_secs=max(interval_s, 0.5),
            save_to_file=False,
            log_level="error",
            tracking_mode="machine",
        )
        self.data: dict[str, float] | None = None

    def start(self) -> None:
        self.tracker.start()

    def stop(self) -> None:
        self.tracker.stop()
        data = self.tracker.final_emissions_data
        self.data = {
            "energy_j": float(data.energy_consumed) * 3.6e6,
            "gpu_j": float(data.gpu_energy) * 3.6e6,
            "cpu_j": float(data.cpu_energy) * 3.6e6,
            "ram_j": float(data.ram_energy) * 3.6e6,
        }


CODECARBON_WINDOW = "codecarbon"


class MonitorWindows:
    """The training loop's WindowHooks, backed by an EnergyMonitor.

    With CodeCarbon, its tracker starts before the ``budget`` window opens and stops after it
    closes, so its start-up and shut-down never land in a measured window; a ``codecarbon``
    window opened right after ``start()`` returns and closed right before ``stop()`` is what
    CodeCarbon is compared with. Every rank opens it (the tracker runs on rank 0 only and reads
    the whole machine), so the combined window covers every GPU.
    """

    def __init__(
        self,
        monitor: EnergyMonitor,
        codecarbon: _CodeCarbon | None = None,
        codecarbon_window: bool | None = None,
        host: str | None = None,
    ) -> None:
        self.monitor = monitor
        self.codecarbon = codecarbon
        self.host = host  # set on multi-node runs: component names carry it (node-a/gpu:0)
        self.codecarbon_window = (
            codecarbon is not None if codecarbon_window is None else codecarbon_window
        )
        self.results: dict[str, Measurement] = {}
        self.samples: dict[str, int] = {}
        self.epoch_measurements: list[Measurement] = []

    def begin(self, name: str, epoch: int | None = None) -> None:
        if name == "budget" and self.codecarbon_window:
            if self.codecarbon is not None:
                self.codecarbon.start()
            self.monitor.begin_window(CODECARBON_WINDOW)
        self.monitor.begin_window(window_key(name, epoch))

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
        key = window_key(name, epoch)
        result = self._qualified(self.monitor.end_window(key))
        self.results[key] = result
        self.samples[key] = samples
        if name == "budget" and self.codecarbon_window:
            cc_window = self.monitor.end_window(CODECARBON_WINDOW)
            self.results[CODECARBON_WINDOW] = self._qualified(cc_window)
            self.samples[CODECARBON_WINDOW] = samples
            if self.codecarbon is not None:
                self.codecarbon.stop()
        if name == "epoch":
            self.epoch_measurements.append(result)

    def _qualified(self, measurement: Measurement) -> Measurement:
        """On a multi-node run, every component name carries this host."""
        return measurement if self.host is None else qualify_measurement(measurement, self.host)


def _local_payload(windows: MonitorWindows, monitor: EnergyMonitor) -> dict[str, Any]:
    infos = [
        {"component": m.info.component, "details": dict(m.info.details)} for m in monitor.meters
    ]
    trace = list(monitor.trace)
    if windows.host is not None:
        trace = [(t, qualified(windows.host, c), w) for t, c, w in trace]
    return {
        "hostname": host_name(),
        "results": windows.results,
        "samples": windows.samples,
        "meters": infos,
        "trace": trace,
        "problems": [p.__dict__ for p in (monitor.discovery.problems if monitor.discovery else [])],
    }


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


def _forward_gflops(cfg: RunConfig) -> float | None:
    """Forward GFLOPs per 32x32 image, counted with torch's FlopCounterMode on the CPU."""
    try:
        from wattlab.train.models import build_model, forward_flops_per_sample

        return forward_flops_per_sample(build_model(cfg.model, stem=cfg.stem)) / 1e9
    except Exception:  # a count is a convenience for PRE; never fail a finished run over it
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().total / 1e9
    except Exception:
        return None


def build_run_row(
    cfg: RunConfig,
    opts: WorkerOptions,
    payloads: list[dict[str, Any]],
    train_result: Any,
    started_at: str,
    codecarbon: dict[str, float] | None,
    projection: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[tuple[float, str, float]]]:
    """Combine every rank's windows into the `runs` row, `windows` rows and trace rows."""
    from wattlab.experiment.store import window_row

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
    c = window_co2e(budget)  # a traced intensity is weighted by the budget's power
    components = {
        comp: {
            "energy_j": budget.energy_j[comp],
            "provenance": budget.provenance[comp].value,
            "uncertainty_j": budget.uncertainty_j.get(comp, 0.0),
            "in_total": budget.in_total.get(comp, True),
        }
        for comp in budget.energy_j
    }
    for payload in payloads:  # say which memory the RAM estimate counted
        for meter in payload["meters"]:
            measure = meter["details"].get("ram_measure")
            for comp in components:  # multi-node names carry the host: node-a/ram:estimated
                if measure and comp.rsplit("/", 1)[-1] == meter["component"]:
                    components[comp]["ram_measure"] = measure
    limits = [d.get("power_limit_w") for d in gpu_details if d.get("power_limit_w") is not None]
    tdps = [
        d.get("default_power_limit_w")
        for d in gpu_details
        if d.get("default_power_limit_w") is not None
    ]
    row: dict[str, Any] = {
        **config_columns(cfg, opts, started_at),
        "world_size": len(payloads),  # every process on every node
        "status": "ok",
        "epochs": float(train_result.epochs_completed),
        "power_limit_w": max(limits) if limits else None,
        "samples": int(train_result.samples),
        "hostname": ",".join(hostnames),
        "gpu_name": ",".join(sorted({str(d.get("name")) for d in gpu_details})) or None,
        "gpu_uuids": ",".join(str(d.get("uuid")) for d in gpu_details) or None,
        "driver": next((str(d.get("driver")) for d in gpu_details if d.get("driver")), None),
        "cpu_model": _cpu_model(),
        "duration_s": budget.duration_s,
        "wall_s": whole.duration_s,
        "energy_total_j": budget.total_energy_j,
        "energy_gpu_j": budget.gpu_energy_j,
        "energy_cpu_j": budget.cpu_energy_j,
        "energy_dram_j": budget.dram_energy_j,
        "energy_other_j": budget.other_energy_j,
        "energy_uncertainty_j": budget.total_uncertainty_j,
        "provenance": budget.total_provenance.value,
        "components_json": components,
        "co2e_kg": c.value_kg,
        "co2e_low_kg": c.low_kg,
        "co2e_high_kg": c.high_kg,
        "intensity_kg_per_kwh": c.settings.intensity_kg_per_kwh,
        "accuracy": train_result.accuracy,
        "f1_macro": train_result.f1_macro,
        "train_loss": train_result.train_loss,
        "gpu_utilization_percent": utilization_percent,
        "gpu_utilization_basis": utilization_basis,
        "gpu_tdp_w": max(tdps) if tdps else None,
        "ram_gb": _ram_gb(),
        "train_size": getattr(train_result, "train_size", None),
        "test_size": getattr(train_result, "test_samples", None),
        "image_size": 32,
        "params": getattr(train_result, "params", None),
        "model_gflops_per_sample": _forward_gflops(cfg),
    }
    if codecarbon is not None:
        cc_energy_j = codecarbon["energy_j"]
        row["codecarbon_energy_j"] = cc_energy_j
        row["codecarbon_co2e_kg"] = (
            joules_to_kwh(cc_energy_j) * c.settings.pue * c.settings.intensity_kg_per_kwh
        )
        compared = combined.get(CODECARBON_WINDOW, budget)  # the window CodeCarbon measured
        total = compared.total_energy_j
        row["codecarbon_rel_error"] = (cc_energy_j - total) / total if total > 0 else None
        row["codecarbon_components_json"] = {k: codecarbon[k] for k in ("gpu_j", "cpu_j", "ram_j")}
    if projection is not None and getattr(projection, "energy_j", None) is not None:
        row["projected_energy_j"] = projection.energy_j
        row["projected_duration_s"] = getattr(projection, "duration_s", None)
        total = budget.total_energy_j
        row["projection_error"] = (projection.energy_j - total) / total if total > 0 else None
        row["projected_energy_low_j"] = getattr(projection, "interval_low_j", None)
        row["projected_energy_high_j"] = getattr(projection, "interval_high_j", None)
        row["projection_interval_basis"] = getattr(projection, "interval_basis", None)
    windows = []
    for key, m in combined.items():
        name, _, epoch = key.partition(":")
        samples = sum(p["samples"].get(key, 0) for p in payloads[:1])
        windows.append(window_row(name, int(epoch) if epoch else None, m, samples))
    trace = sorted(s for p in payloads for s in p["trace"])
    if len(trace) > MAX_TRACE_ROWS:
        step = -(-len(trace) // MAX_TRACE_ROWS)
        trace = trace[::step]
    return row, windows, trace


def _write_result_file(path: str | None, data: dict[str, Any]) -> None:
    if path:
        from wattlab.jsonio import dump_json

        dump_json(data, path)


def _failure_message(error: BaseException) -> str:
    if isinstance(error, Interrupted):
        return str(error)  # "interrupted by signal 15"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted by signal 2 (Ctrl-C)"
    return f"{type(error).__name__}: {error}"


def _process_start_unix() -> float | None:
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:
        return None


def phase_columns(
    opts: WorkerOptions, started_unix: float, setup_s: float, train_result: Any, teardown_s: float
) -> dict[str, float | None]:
    """The run's wall time by phase (s): launch, set-up, data, warm-up, budget, eval, teardown.

    The tools started around the budget window (CodeCarbon) count as set-up and teardown, so
    the budget phase is the budget window and nothing else."""
    launched = opts.launched_at_unix if opts.launched_at_unix is not None else None
    if launched is None and opts.launcher == "in-process":
        launched = _process_start_unix()
    phases = dict(getattr(train_result, "phases", {}) or {})
    return {
        "phase_launch_s": max(started_unix - launched, 0.0) if launched is not None else None,
        "phase_setup_s": setup_s + phases.get("setup", 0.0) + phases.get("budget_open", 0.0),
        "phase_data_s": phases.get("data"),
        "phase_warmup_s": phases.get("warmup"),
        "phase_budget_s": phases.get("budget"),
        "phase_eval_s": phases.get("eval"),
        "phase_teardown_s": teardown_s + phases.get("budget_close", 0.0),
    }


def execute(
    cfg: RunConfig,
    opts: WorkerOptions,
    *,
    dataset: Any = None,
    claim: bool = True,
    leave_group_open: bool = False,
) -> RunResult:
    """Run training under the monitor in this process (one rank); rank 0 stores the run.

    Rank 0 claims the run (unless ``opts.run_id`` names a claimed one) before anything else,
    then builds the meters, the monitor and the CodeCarbon tracker inside the same ``try`` as
    training, so any failure finishes the claim as 'failed'. Returns a RunResult (rank 0: the
    stored row; other ranks: no row). A SIGINT/SIGTERM (KeyboardInterrupt, Interrupted) is
    stored as failed and re-raised. ``dataset`` reuses data a warm worker already holds.

    Distributed, every rank meets at a last barrier once rank 0 has stored the run, and then
    leaves the process group, or with ``leave_group_open`` (the torchrun worker's ``main``,
    which ends the process with ``os._exit`` right after, whatever happened) does not: gloo's
    teardown can abort a process whose peer is tearing down at the same moment.
    """
    from wattlab.experiment.store import open_store

    started_unix = time.time()
    t0 = time.perf_counter()
    started_at = utc_now_iso()
    is_main = os.environ.get("RANK", "0") == "0"
    store = None
    dist = None
    discovery = None
    monitor = None
    run_id = opts.run_id
    try:
        if is_main:
            store = open_store(opts.db_path)
            if run_id is None and claim:
                run_id = store.claim_run(claim_row(cfg, opts, started_at))
        from wattlab.meters.discover import discover_meters
        from wattlab.train.distributed import barrier, gather_objects, init_distributed
        from wattlab.train.loop import run_training

        dist = init_distributed(cfg.device)
        discovery = discover_meters(
            include_gpus=cfg.device == "cuda",
            gpu_indices=[dist.local_rank] if cfg.device == "cuda" else None,
            include_host=dist.is_local_main,
            powercap_root=Path(opts.powercap_root) if opts.powercap_root else None,
            cpu_tdp_w=opts.cpu_tdp_w,
            ram_measure=opts.ram_measure,
            ram_pid=job_root_pid(),
        )
        monitor = EnergyMonitor(discovery, interval_s=opts.interval_s, carbon=opts.carbon)
        tracker = (
            _CodeCarbon(opts.codecarbon_country, opts.interval_s)
            if cfg.codecarbon and dist.is_main
            else None
        )
        windows = MonitorWindows(
            monitor,
            tracker,
            codecarbon_window=cfg.codecarbon,
            host=host_name() if spans_several_nodes() else None,
        )
        progress = _Progress(cfg, monitor, windows, enabled=opts.progress and dist.is_main)
        projector = _make_projector(cfg, dist, monitor, progress.note)
        monitor.start()
        setup_s = time.perf_counter() - t0
        try:
            with progress:
                result = run_training(
                    cfg,
                    dist,
                    windows=windows,
                    on_epoch=lambda stats: _on_epoch(stats, windows, projector, progress, dist),
                    dataset=dataset,
                    eval_samples=opts.eval_samples,
                    on_mark=projector.mark if isinstance(projector, _LiveMarks) else None,
                )
        finally:
            monitor.stop()
            discovery.close()
            discovery = None
        payload = _local_payload(windows, monitor)
        payloads = gather_objects(payload, dist)
        if not dist.is_main:
            barrier(dist)  # rank 0 has stored the run
            return RunResult(None, "ok")
        assert store is not None and payloads is not None
        row, window_rows, trace = build_run_row(
            cfg,
            opts,
            payloads,
            result,
            started_at,
            tracker.data if tracker else None,
            projector.projection if projector else None,
        )
        teardown_s = time.perf_counter() - result.eval_end_perf_s
        row.update(phase_columns(opts, started_unix, setup_s, result, teardown_s))
        if isinstance(projector, _LiveMarks):
            row["step_marks_json"] = projector.marks()
        if run_id is None:
            run_id = store.insert_run(row, window_rows, trace)
        else:
            store.finish_run(run_id, row, window_rows, trace)
        _write_result_file(opts.result_file, {"run_id": run_id, "status": "ok"})
        _last_barrier(dist)  # the run is stored: a rank lost now cannot fail it
        return RunResult(run_id, "ok", {"id": run_id, **row})
    except BaseException as error:
        message = _failure_message(error)
        if discovery is not None:
            try:
                if monitor is not None:
                    monitor.stop()
                discovery.close()
            except Exception:
                pass
        outcome = RunResult(None, "failed", None, message, stored=False)
        if is_main:
            outcome = _store_failure(store, cfg, opts, started_at, run_id, message)
            _write_result_file(
                opts.result_file,
                {
                    "run_id": outcome.run_id,
                    "status": "failed",
                    "error": message,
                    "stored": outcome.stored,
                },
            )
        if isinstance(error, (KeyboardInterrupt, Interrupted, SystemExit)) or not isinstance(
            error, Exception
        ):
            raise
        if not is_main:
            raise  # the runner stores the failure when a rank dies
        return outcome
    finally:
        if store is not None:
            store.close()
        if dist is not None and dist.distributed and not leave_group_open:
            from wattlab.train.distributed import shutdown_distributed

            shutdown_distributed()


def _store_failure(
    store: Any,
    cfg: RunConfig,
    opts: WorkerOptions,
    started_at: str,
    run_id: int | None,
    message: str,
) -> RunResult:
    """Finish the claim (or insert a row) as failed; say so when nothing could be stored."""
    from wattlab.experiment.store import open_store

    row = failed_row(cfg, opts, started_at, message)
    try:
        if store is None:
            store = open_store(opts.db_path)
        if run_id is None:
            run_id = store.insert_run(row)
        else:
            store.finish_run(run_id, row)
    except Exception as store_error:
        return RunResult(
            run_id,
            "failed",
            None,
            f"{message} (and the failure could not be stored: {store_error})",
            stored=False,
        )
    return RunResult(run_id, "failed", {"id": run_id, **row}, message)


def claim_row(cfg: RunConfig, opts: WorkerOptions, started_at: str) -> dict[str, Any]:
    """The 'running' row that claims a run before it starts (see Store.claim_run)."""
    row = config_columns(cfg, opts, started_at)
    row.pop("finished_at", None)
    return {**row, "hostname": host_name(), "pid": os.getpid()}


def config_columns(cfg: RunConfig, opts: WorkerOptions, started_at: str) -> dict[str, Any]:
    """The `runs` columns that come from the configuration alone (ok and failed rows alike)."""
    return {
        "sweep": opts.sweep,
        "config_hash": cfg.config_hash(),
        "repetition": opts.repetition,
        "config_json": cfg.model_dump(),
        "label": cfg.label(),
        "model": cfg.model,
        "stem": cfg.stem,
        "dataset": cfg.dataset,
        "precision": cfg.precision,
        "device": cfg.device,
        "gpus": cfg.gpus if cfg.device == "cuda" else 0,
        "world_size": cfg.world_size,
        "batch_size": cfg.batch_size,
        "power_limit_requested_w": opts.power_limit_requested_w,
        "started_at": started_at,
        "finished_at": utc_now_iso(),
        "intensity_kg_per_kwh": opts.carbon.intensity_kg_per_kwh,
        "pue": opts.carbon.pue,
        "launcher": opts.launcher,
        "worker_run_index": opts.worker_run_index,
        **idle_columns(opts.idle),
    }


def idle_columns(idle: dict[str, Any] | None) -> dict[str, Any]:
    """GPU readings taken before the run: summed power, hottest GPU, and each GPU's values."""
    if not idle:
        return {}
    powers = [v.get("power_w") for v in idle.values() if v.get("power_w") is not None]
    temps = [v.get("temperature_c") for v in idle.values() if v.get("temperature_c") is not None]
    return {
        "idle_power_w": sum(powers) if powers else None,
        "idle_temperature_c": max(temps) if temps else None,
        "idle_json": idle,
    }


def failed_row(cfg: RunConfig, opts: WorkerOptions, started_at: str, error: str) -> dict[str, Any]:
    return {
        **config_columns(cfg, opts, started_at),
        "status": "failed",
        "error": error[-4000:],
        "hostname": host_name(),
    }


class _LiveMarks:
    """STEP from step-level marks (``--project-after`` a fraction): at each mark, the clock and
    the meters' cumulative energy since the budget began (single process only)."""

    def __init__(self, fraction: float, monitor: EnergyMonitor, note: Any) -> None:
        from wattlab.step_projection import MarkProjector

        self.projector = MarkProjector(fraction)
        self.monitor = monitor
        self.note = note
        self.calibration = _step_calibration(note)  # read now, not inside the budget window
        self.projection = None
        self.origin: tuple[float, float] | None = None

    def _energy_j(self) -> float:
        return sum(
            float(m.energy_j()) for m in self.monitor.meters if m.info.details.get("in_total", True)
        )

    def marks(self) -> dict[str, list[float]]:
        """Every mark of the budget (samples done; s and J since the budget began), so STEP
        can be re-run and judged later at any fraction (``runs.step_marks_json``)."""
        p = self.projector
        return {
            "samples": list(p.samples),
            "time_s": list(p.times_s),
            "energy_j": list(p.energies_j),
        }

    def mark(self, samples_done: int, budget_samples: int) -> None:
        now, energy = time.perf_counter(), self._energy_j()
        if self.origin is None or samples_done == 0:
            self.origin = (now, energy)
        t0, e0 = self.origin
        result = self.projector.add_mark(samples_done, budget_samples, now - t0, energy - e0)
        if result is not None:
            result = result.with_interval(self.calibration)
            self.projection = result
            self.note(result.describe())


def _step_calibration(note: Any) -> Any:
    """The shipped STEP calibration (wattlab/data/step-calibration.csv), or None with a note
    saying why the projection has only its band."""
    from wattlab.errors import DataError
    from wattlab.step_calibration import load_step_calibration

    try:
        return load_step_calibration()
    except DataError as exc:
        note(f"STEP: no calibrated interval ({exc})")
        return None


def _make_projector(cfg: RunConfig, dist: Any, monitor: Any = None, note: Any = None) -> Any:
    if cfg.project_after is None:
        return None
    if cfg.project_after < 1:
        return _LiveMarks(cfg.project_after, monitor, note or (lambda text: None))
    from wattlab.step_projection import StepProjector

    total_epochs = cfg.epochs if cfg.epochs is not None else None
    if total_epochs is None:
        return None

    class _Live:
        def __init__(self) -> None:
            self.projector = StepProjector(total_epochs, project_after=int(cfg.project_after))
            self.projection = None

    return _Live()


def _on_epoch(stats: Any, windows: MonitorWindows, live: Any, progress: Any, dist: Any) -> None:
    progress.epoch_done(stats)
    if live is None or isinstance(live, _LiveMarks) or not windows.epoch_measurements:
        return
    from wattlab.train.distributed import gather_objects

    last = windows.epoch_measurements[-1]
    parts = gather_objects(last, dist)  # a collective: every rank takes part
    if not dist.is_main or parts is None:
        return
    epoch = combine_measurements(parts)
    projection = live.projector.add_epoch(epoch.total_energy_j, epoch.duration_s)
    if projection is not None and live.projection is None:
        live.projection = projection
        progress.note(
            f"STEP after epoch {len(windows.epoch_measurements)}: {projection.describe()}"
        )


class _Progress:
    """A rich progress bar on rank 0: epoch, loss, watts and joules so far (this host)."""

    def __init__(
        self, cfg: RunConfig, monitor: EnergyMonitor, windows: MonitorWindows, enabled: bool
    ) -> None:
        self.cfg = cfg
        self.monitor = monitor
        self.windows = windows
        interactive = sys.stderr.isatty() or bool(os.environ.get("WATTLAB_PROGRESS"))
        self.enabled = enabled and interactive
        self.plain = enabled and not self.enabled
        self.bar: Any = None
        self.task: Any = None
        self.t0 = time.perf_counter()

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            total = self.cfg.epochs or 1
            self.task = self.bar.add_task(self.cfg.label(), total=total, info="warming up")
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def epoch_done(self, stats: Any) -> None:
        energy = sum(m.total_energy_j for m in self.windows.epoch_measurements)
        duration = sum(m.duration_s for m in self.windows.epoch_measurements)
        watts = energy / duration if duration > 0 else 0.0
        info = (
            f"epoch {stats.epoch} loss {stats.train_loss:.3f} "
            f"{watts:.0f} W {energy / 1e3:.2f} kJ (rank 0's meters)"
        )
        if self.bar is not None:
            self.bar.update(self.task, completed=stats.epoch, info=info)
        elif self.plain:
            print(f"[{self.cfg.label()}] {info}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text)
        elif self.plain:
            print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wattlab-worker")
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--options-json", required=True)
    args = parser.parse_args(argv)
    from wattlab.experiment.lifetime import die_with_parent

    die_with_parent()  # torchrun's agent started us: die with it (and with the runner)
    _terminate_as_interrupt()
    cfg = RunConfig(**json.loads(Path(args.config_json).read_text()))
    opts = WorkerOptions.from_json(json.loads(Path(args.options_json).read_text()))
    try:
        result = execute(cfg, opts, leave_group_open=True)
    except Interrupted as stop:
        return 128 + stop.signum
    except Exception:
        traceback.print_exc()
        return 1
    code = 0 if result.status == "ok" else 1
    if _group_left_open():
        _exit_without_teardown(code)
    return code


def _last_barrier(dist: Any) -> None:
    """Rank 0's meeting with the other ranks after storing the run. A rank lost by now (its
    process died at the end) is said on stderr; the stored run stays as it is."""
    from wattlab.train.distributed import barrier

    try:
        barrier(dist)
    except Exception as error:  # noqa: BLE001 - gloo/NCCL raise RuntimeError subclasses
        print(
            f"wattlab: the run is stored; a rank was lost after it ({error})",
            file=sys.stderr,
            flush=True,
        )


def _group_left_open() -> bool:
    import torch.distributed as tdist

    return tdist.is_available() and tdist.is_initialized()


def _exit_without_teardown(code: int) -> None:
    """End a rank whose run is done and stored (every rank passed the last barrier) without
    destroying the gloo/NCCL process group or finalising the interpreter: gloo's teardown
    aborts now and then ("terminate called without an active exception", then SIGABRT or
    SIGSEGV) while its peer tears down too, which failed a finished run and left the other
    node waiting for minutes. The files are closed; only the streams need flushing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _terminate_as_interrupt() -> None:
    """SIGTERM raises Interrupted in the main thread, so the run in flight is stored failed."""
    import signal

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    sys.exit(main())
