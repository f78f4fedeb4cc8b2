"""What the framework callbacks share: per-process metering, rank combination, metrics, records.

Under DDP (torchrun, accelerate, Lightning's strategies) every process meters its own GPU, only
the first process of each machine meters the host's CPU and memory, and every window is
gathered to the main process, which combines the parts (a component metered twice is an error)
and is the only one that logs or writes. Single-process training is the same with one part.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wattlab.meters.base import Meter, Provenance
from wattlab.monitor import EnergyMonitor, Measurement, combine_measurements, utc_now_iso
from wattlab.monitor.carbon import CarbonSettings, window_co2e
from wattlab.processes import job_root_pid

Gather = Callable[[Any], "list[Any] | None"]
# Under a command sweep (`command:` in the spec), the callbacks' `train` window is the script's
# budget mark, as `with wattlab.budget():` would be (see wattlab.budget_marks).
BUDGET_MARK_WINDOW = "train"


@dataclass(frozen=True)
class RankInfo:
    """Where this process stands in a distributed job (all 0 / 1 when it is alone)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> RankInfo:
        """RANK / LOCAL_RANK / WORLD_SIZE as torchrun and accelerate set them."""
        env = dict(os.environ if env is None else env)
        return cls(
            rank=int(env.get("RANK", 0)),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            world_size=int(env.get("WORLD_SIZE", 1)),
        )


def torch_gather(obj: Any) -> list[Any] | None:
    """Every process's ``obj`` on the main process (None elsewhere); ``[obj]`` when alone.

    A collective when torch.distributed is initialised: every process must call it.
    """
    try:
        import torch.distributed as tdist
    except ImportError:
        return [obj]
    if not (tdist.is_available() and tdist.is_initialized()) or tdist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, obj)
    return out if tdist.get_rank() == 0 else None


class CallbackSettings:
    """What the framework callbacks (Transformers, Lightning) are configured with, and the
    TrainingMeter they build from it at the start of training.

    Args:
        db: store the run in this wattlab database (main process only); None stores nothing.
        carbon: intensity and PUE (e.g. ``settings_from_flags(region="FRA")``).
        interval_s: power sampling period (s).
        powercap_root, cpu_tdp_w, ram_measure, cpu_load: as for ``wattlab devices``.
        prometheus_port: also serve the live meters to Prometheus (main process).
        meters: meters to use instead of discovering this process's own (tests, custom rigs).
        gather: how windows reach the main process (default: torch.distributed when
            initialised).
        sweep: the sweep name to store the run under.
    """

    def __init__(
        self,
        db: str | Path | None = None,
        *,
        carbon: CarbonSettings | None = None,
        interval_s: float = 0.1,
        powercap_root: str | Path | None = None,
        cpu_tdp_w: float | None = None,
        ram_measure: str = "system",
        cpu_load: str = "machine",
        prometheus_port: int | None = None,
        meters: Sequence[Meter] | None = None,
        gather: Gather | None = None,
        sweep: str | None = None,
    ) -> None:
        self.db = db
        self.carbon = carbon or CarbonSettings()
        self.interval_s = interval_s
        self.powercap_root = powercap_root
        self.cpu_tdp_w = cpu_tdp_w
        self.ram_measure = ram_measure
        self.cpu_load = cpu_load
        self.prometheus_port = prometheus_port
        self.meters = meters
        self.gather = gather
        self.sweep = sweep

    def new_training_meter(self, rank: RankInfo, device: Any) -> TrainingMeter:
        """A TrainingMeter for this process (``device``: its torch.device)."""
        return TrainingMeter(
            rank,
            device.type,
            gpu_index=device.index,
            meters=self.meters,
            interval_s=self.interval_s,
            carbon=self.carbon,
            powercap_root=self.powercap_root,
            cpu_tdp_w=self.cpu_tdp_w,
            gather=self.gather,
            prometheus_port=self.prometheus_port,
            ram_measure=self.ram_measure,
            cpu_load=self.cpu_load,
        )


class TrainingMeter:
    """Named windows over this process's meters, combined across processes on the main one.

    Args:
        rank: this process's place in the job.
        device_type: "cuda" meters this process's GPU (``gpu_index``); anything else none.
        meters: meters to use instead of discovering them (the caller keeps ownership).
        gather: how windows reach the main process (default: torch.distributed when
            initialised).
    """

    def __init__(
        self,
        rank: RankInfo,
        device_type: str = "cpu",
        *,
        gpu_index: int | None = None,
        meters: Sequence[Meter] | None = None,
        interval_s: float = 0.1,
        carbon: CarbonSettings | None = None,
        powercap_root: str | Path | None = None,
        cpu_tdp_w: float | None = None,
        gather: Gather | None = None,
        prometheus_port: int | None = None,
        ram_measure: str = "system",
        cpu_load: str = "machine",
    ) -> None:
        self.rank = rank
        self.device_type = device_type
        self.gpu_index = rank.local_rank if gpu_index is None else gpu_index
        self._meters = list(meters) if meters is not None else None
        self.interval_s = interval_s
        self.carbon = carbon or CarbonSettings()
        self.powercap_root = powercap_root
        self.cpu_tdp_w = cpu_tdp_w
        self.ram_measure = ram_measure
        self.cpu_load = cpu_load
        self.gather = gather or torch_gather
        self.prometheus_port = prometheus_port
        self.monitor: EnergyMonitor | None = None
        self.results: dict[str, Measurement] = {}  # combined, on the main process only
        self.local_results: dict[str, Measurement] = {}
        self.trace: list[tuple[float, str, float]] = []
        self.started_at: str | None = None
        self._discovery: Any = None
        self._open: set[str] = set()
        self._budget_mark: Any = None  # the `train` window as a command sweep's budget mark

    @property
    def started(self) -> bool:
        return self.monitor is not None and self.monitor.started

    def start(self) -> None:
        """Open this process's meters and start sampling. Idempotent."""
        if self.started:
            return
        if self._meters is not None:
            meters: Any = self._meters
        else:
            from wattlab.meters.discover import discover_meters

            cuda = self.device_type == "cuda"
            self._discovery = discover_meters(
                include_gpus=cuda,
                gpu_indices=[self.gpu_index] if cuda else None,
                include_host=self.rank.is_local_main,
                powercap_root=Path(self.powercap_root) if self.powercap_root else None,
                cpu_tdp_w=self.cpu_tdp_w,
                ram_measure=self.ram_measure,
                ram_pid=job_root_pid(),
                cpu_load=self.cpu_load,
                cpu_pid=job_root_pid(),
            )
            meters = self._discovery
        self.monitor = EnergyMonitor(
            meters,
            interval_s=self.interval_s,
            carbon=self.carbon,
            prometheus_port=self.prometheus_port if self.rank.is_main else None,
        )
        self.monitor.start()
        self.started_at = utc_now_iso()

    def stop(self) -> None:
        """Stop sampling and close the meters this object opened. Idempotent."""
        if self.monitor is not None:
            self.monitor.stop()
            self.trace = list(self.monitor.trace)  # readable until the next start()
        self._open.clear()
        if self._budget_mark is not None:  # training raised inside its `train` window
            from wattlab.budget_marks import close_budget_mark

            close_budget_mark(self._budget_mark)
            self._budget_mark = None
        if self._discovery is not None:
            self._discovery.close()
            self._discovery = None

    @property
    def problems(self) -> list[Any]:
        return list(self._discovery.problems) if self._discovery is not None else []

    def begin(self, name: str) -> None:
        assert self.monitor is not None, "start() the TrainingMeter first"
        if name == BUDGET_MARK_WINDOW and self._budget_mark is None:
            from wattlab.budget_marks import open_budget_mark

            self._budget_mark = open_budget_mark()  # None unless a command sweep runs us
        self.monitor.begin_window(name)
        self._open.add(name)

    def open_names(self) -> set[str]:
        """The windows this process has open."""
        return set(self._open)

    def is_open(self, name: str) -> bool:
        return name in self._open

    def end(self, name: str) -> Measurement | None:
        """Close ``name`` on every process; the combined Measurement on main, None elsewhere.

        A collective under DDP: every process must close the same window.
        """
        assert self.monitor is not None, "start() the TrainingMeter first"
        self._open.discard(name)
        local = self.monitor.end_window(name)
        if name == BUDGET_MARK_WINDOW and self._budget_mark is not None:
            from wattlab.budget_marks import close_budget_mark

            close_budget_mark(self._budget_mark)
            self._budget_mark = None
        self.local_results[name] = local
        parts = self.gather(local)
        if parts is None or not self.rank.is_main:
            return None
        combined = combine_measurements(list(parts), name=name)
        self.results[name] = combined
        return combined


# --- metrics for trackers -------------------------------------------------------------------
def window_metrics(m: Measurement, prefix: str) -> dict[str, float]:
    """Plain numbers for a tracker's log, names with units: energy per component kind and per
    provenance (so every joule says where it came from), time, power and CO2e."""
    c = window_co2e(m)
    by_provenance = {p.value: 0.0 for p in Provenance}
    for comp, energy_j in m.energy_j.items():
        if m.in_total.get(comp, True):
            by_provenance[m.provenance[comp].value] += energy_j
    metrics = {
        f"{prefix}/energy_j": m.total_energy_j,
        f"{prefix}/energy_gpu_j": m.gpu_energy_j,
        f"{prefix}/energy_cpu_j": m.cpu_energy_j,
        f"{prefix}/energy_dram_j": m.dram_energy_j,
        f"{prefix}/energy_uncertainty_j": m.total_uncertainty_j,
        f"{prefix}/duration_s": m.duration_s,
        f"{prefix}/power_w": m.mean_power_w,
        f"{prefix}/co2e_kg": c.value_kg,
        f"{prefix}/co2e_low_kg": c.low_kg,
        f"{prefix}/co2e_high_kg": c.high_kg,
        f"{prefix}/intensity_kg_per_kwh": c.settings.intensity_kg_per_kwh,
    }
    for prov, energy_j in by_provenance.items():
        metrics[f"{prefix}/energy_{prov}_j"] = energy_j
    return metrics


# --- a run in the wattlab database ----------------------------------------------------------
def config_hash(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_row(
    *,
    config: dict[str, Any],
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
    (built from the same column groups as a wattlab run's, ``wattlab.experiment.db.record``)."""
    from wattlab.experiment.db.record import callback_row

    return callback_row(
        config=config,
        config_hash=config_hash(config),
        label=label,
        train=train,
        started_at=started_at,
        model=model,
        precision=precision,
        device=device,
        world_size=world_size,
        batch_size=batch_size,
        epochs=epochs,
        samples=samples,
        accuracy=accuracy,
        train_loss=train_loss,
        sweep=sweep,
        tokens=tokens,
    )


def store_run(
    db_path: str | Path,
    row: dict[str, Any],
    windows: Sequence[dict[str, Any]],
    trace: Sequence[tuple[float, str, float]],
) -> int:
    """Write one run, its windows and trace in one transaction; return its id."""
    from wattlab.experiment.db.store import open_store

    with open_store(db_path) as store:
        return store.insert_run(row, windows, trace)
