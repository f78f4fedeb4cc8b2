"""What a run is given: the settings a command chose (frozen) and the run's own context.

``WorkerOptions`` holds what the user asked for (database, carbon, meters, sweep identity); it
never changes during a run (``dataclasses.replace`` makes a variant). ``RunContext`` holds
what the runner learns while it prepares one run (the power limit set, the GPUs' idle readings,
the claimed row, who launched it); the runner returns a new one at each step and passes it on
explicitly, to the worker in the same process or through JSON to another process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from wattlab.monitor.carbon import CarbonSettings


@dataclass(frozen=True)
class WorkerOptions:
    """The settings a run (or each run of a sweep) is measured and stored with."""

    db_path: str
    carbon: CarbonSettings = field(default_factory=CarbonSettings)
    interval_s: float = 0.1
    powercap_root: str | None = None
    cpu_tdp_w: float | None = None
    ram_measure: str = "system"  # what the RAM estimate counts: "system" or "process"
    cpu_load: str = "machine"  # whose load the CPU estimate counts: "machine" or "process"
    repetition: int = 0
    sweep: str | None = None
    progress: bool = True
    codecarbon_country: str = "USA"
    eval_samples: int | None = None  # evaluate on the first N test images only (sweeps)
    # (device, inode) of the database file the sweep opened: a run stores into no other file
    db_identity: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["carbon"] = self.carbon.to_dict()
        data["db_identity"] = None if self.db_identity is None else list(self.db_identity)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerOptions:
        """The settings in ``data``; keys that are not settings (a run context's) are ignored."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        kept["carbon"] = CarbonSettings(**data["carbon"])
        identity = kept.get("db_identity")
        kept["db_identity"] = None if identity is None else (int(identity[0]), int(identity[1]))
        return cls(**kept)


@dataclass(frozen=True)
class RunContext:
    """What the runner found out about one run before it started (``replace`` to change)."""

    run_id: int | None = None  # the claimed ('running') row; None: execute claims one
    launched_at_unix: float | None = None  # when the launch was asked for (time.time())
    launcher: str = "in-process"  # 'in-process' | 'torchrun' | 'warm-worker'
    worker_run_index: int = 0  # runs this process did before this one
    power_limit_requested_w: float | None = None
    idle: dict[str, Any] | None = None  # GPU idle readings taken just before the run
    result_file: str | None = None  # where a worker process writes its outcome (JSON)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunContext:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
