"""`wattlab sweep`: a grid of runs with repetitions, resumable, one sweep at a time.

The plan comes first: every run with its place in the (possibly shuffled) order, runs already
stored as ok (skipped on resume), and configurations this machine cannot run (listed with the
reason, never dropped silently). Every configuration's input checks run before anything is
stored. Then the sweep takes its lock (a second sweep of the same name on the same database is
refused while the first lives), marks runs that a dead sweep left 'running' as 'abandoned'
(they run again), and runs the plan: single-process runs one after another in a warm worker
process (``warm``), multi-process runs under torchrun, each run with its own model, optimiser,
seed and windows. Before each run the GPUs' idle power and temperature are recorded; between
runs the spec's cool-down is taken. Every child dies with the sweep, so killing it at any moment
and running it again leaves every run present exactly once.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.experiment.options import WorkerOptions
from wattlab.train.config import RunConfig

if TYPE_CHECKING:
    import pandas as pd

    from wattlab.experiment.db.store import Store
    from wattlab.experiment.specs.command import CommandSweepSpec
    from wattlab.experiment.specs.trainer import SweepSpec


@dataclass
class MachineFacts:
    """What this machine can run: GPUs visible, and whether power limits may be set."""

    cuda_gpus: int
    can_set_power_limits: bool
    power_limit_reason: str = ""

    @classmethod
    def detect(cls) -> MachineFacts:
        try:
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except ImportError:
            gpus = 0
        reason = ""
        can_set = True
        from wattlab.power_limits import FORBID_ENV, power_limits_forbidden

        if gpus == 0:
            can_set, reason = False, "no CUDA GPU here"
        elif power_limits_forbidden():
            can_set, reason = False, f"forbidden on this machine ({FORBID_ENV}=1)"
        elif hasattr(os, "geteuid") and os.geteuid() != 0:
            can_set, reason = False, "setting GPU power limits needs root"
        return cls(cuda_gpus=gpus, can_set_power_limits=can_set, power_limit_reason=reason)

    @classmethod
    def cluster(cls) -> MachineFacts:
        """What a cluster's nodes offer, as far as planning goes: GPUs are SLURM's business
        (a task asks for them), power limits are not set on shared cluster nodes."""
        return cls(
            cuda_gpus=1 << 16,
            can_set_power_limits=False,
            power_limit_reason="not set on SLURM nodes by wattlab",
        )


@dataclass
class PlanEntry:
    order: int  # position in the run order (1-based)
    config: RunConfig
    repetition: int
    label: str
    config_hash: str
    action: str  # 'run' | 'done' | 'skip'
    reason: str = ""
    expected_s: float | None = None


@dataclass
class SweepPlan:
    name: str
    entries: list[PlanEntry]
    order_seed: int | None
    warmup_runs: int
    cooldown_s: float
    notes: list[str] = field(default_factory=list)
    cooldown_until_c: float | None = None

    @property
    def to_run(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.action == "run"]

    @property
    def expected_s(self) -> float | None:
        runs = self.to_run
        known = [e.expected_s for e in runs if e.expected_s is not None]
        if not runs:
            return 0.0
        if len(known) < len(runs):
            return None
        return sum(known) + self.cooldown_s * max(len(runs) - 1, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": self.name,
            "order_seed": self.order_seed,
            "warmup_runs": self.warmup_runs,
            "cooldown_s": self.cooldown_s,
            "cooldown_until_c": self.cooldown_until_c,
            "expected_s": self.expected_s,
            "runs": [
                {
                    "order": e.order,
                    "label": e.label,
                    "repetition": e.repetition,
                    "config_hash": e.config_hash,
                    "action": e.action,
                    "reason": e.reason,
                    "expected_s": e.expected_s,
                }
                for e in self.entries
            ],
            "notes": self.notes,
        }


def skip_reason(cfg: RunConfig, machine: MachineFacts) -> str:
    """Why this machine cannot run ``cfg`` ('' when it can)."""
    if cfg.device == "cuda":
        if machine.cuda_gpus == 0:
            return "no CUDA GPU here"
        if cfg.gpus > machine.cuda_gpus:
            return f"needs {cfg.gpus} GPUs, {machine.cuda_gpus} visible here"
        if cfg.has_power_limit and not machine.can_set_power_limits:
            return f"power limit: {machine.power_limit_reason}"
    return ""


def expected_duration_s(cfg: RunConfig, history: pd.DataFrame | None) -> float | None:
    """Expected wall time of a run, from earlier ok runs of the same configuration in the store,
    or else of the same model and device scaled by the number of samples. None if unknown."""
    if history is None or len(history) == 0:
        return None
    ok = history[history["status"] == "ok"]
    same = ok[ok["config_hash"] == cfg.config_hash()]
    if len(same):
        return (
            float(statistics.median(same["wall_s"].dropna()))
            if same["wall_s"].notna().any()
            else None
        )
    similar = ok[(ok["model"] == cfg.model) & (ok["device"] == cfg.device)]
    similar = similar[similar["samples"].fillna(0) > 0]
    if not len(similar):
        return None
    per_sample = statistics.median((similar["wall_s"] / similar["samples"]).dropna())
    samples = cfg.budget_samples
    if samples is None:
        assert cfg.epochs is not None  # a RunConfig holds exactly one of epochs, budget_samples
        train = cfg.train_samples or 50_000
        samples = cfg.epochs * (train // cfg.batch_size) * cfg.batch_size
    return float(per_sample * samples)


def check_spec_inputs(spec: SweepSpec, machine: MachineFacts, *, open_files: bool = True) -> None:
    """The input checks of every configuration this machine would run (the CLI calls it
    before the database is opened, so a bad input writes nothing)."""
    from wattlab.experiment.runs.checks import check_inputs

    for point in spec.points():
        config = spec.run_config(point)
        if not skip_reason(config, machine):
            check_inputs(config, open_files=open_files)


def make_plan(
    spec: SweepSpec, store: Store | None, machine: MachineFacts, *, register: bool = True
) -> SweepPlan:
    """The whole sweep, in run order, with what will run, what is done and what is skipped.

    Every configuration this machine would run passes the input checks first (batch against
    the training set, CodeCarbon importable, dataset readable): a ConfigError before anything
    is stored. ``register`` records the sweep in the store (a real sweep); without it (a dry
    run) nothing is written and ``store`` may be None (no database yet).
    """
    check_spec_inputs(spec, machine, open_files=register)  # a dry run opens no data file
    notes: list[str] = []
    if register:
        if store is None:
            raise ValueError("registering a sweep needs a store")
        order_seed = store.register_sweep(
            spec.name, spec.model_dump(mode="json"), spec.spec_hash(), spec.order_seed
        )
    else:
        order_seed = _dry_run_seed(spec, store, notes)
    planned = spec.expand(order_seed=order_seed)
    done = store.completed_keys(spec.name) if store is not None else set()
    history = store.runs() if store is not None else None
    entries = []
    for i, p in enumerate(planned, start=1):
        reason = skip_reason(p.config, machine)
        if (p.config_hash, p.repetition) in done:
            action, reason = "done", "already stored as ok"
        elif reason:
            action = "skip"
        else:
            action = "run"
        entries.append(
            PlanEntry(
                order=i,
                config=p.config,
                repetition=p.repetition,
                label=p.label,
                config_hash=p.config_hash,
                action=action,
                reason=reason,
                expected_s=expected_duration_s(p.config, history) if action == "run" else None,
            )
        )
    return SweepPlan(
        name=spec.name,
        entries=entries,
        order_seed=order_seed,
        warmup_runs=spec.warmup_runs,
        cooldown_s=float(spec.cooldown_s),
        notes=notes,
        cooldown_until_c=spec.cooldown_until_c,
    )


def _dry_run_seed(
    spec: SweepSpec | CommandSweepSpec, store: Store | None, notes: list[str]
) -> int | None:
    """The order seed a dry run shows, read from the store without writing to it."""
    record = store.sweep_record(spec.name) if store is not None else None
    if record is not None and record[0] == spec.spec_hash():
        return record[1]
    if record is not None:
        notes.append(
            f"the database already holds sweep {spec.name!r} with a different spec, so the "
            "sweep itself would be refused; use another --db or rename the sweep"
        )
    if spec.order_seed is None and spec.order == "random":
        from wattlab.experiment.specs.base import draw_order_seed

        notes.append(
            "the random order shown uses a seed drawn for this dry run; the sweep draws and "
            "records its own"
        )
        return draw_order_seed()
    return spec.order_seed


SWEEP_EVAL_SAMPLES = 4096  # inside sweeps, evaluate on the first 4096 test images (fixed)
COOLDOWN_POLL_S = 1.0


def cool_down(
    seconds: float,
    until_c: float | None,
    *,
    hottest_c: Callable[[], float | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Pause ``seconds``; with ``until_c``, end early once the hottest GPU is at or below it
    (without a reading the whole pause is taken). Returns the seconds paused."""
    if seconds <= 0:
        return 0.0
    start = clock()
    if until_c is None:
        sleep(seconds)
        return clock() - start
    if hottest_c is None:
        from wattlab.meters.idle import hottest_gpu_c

        hottest_c = hottest_gpu_c
    while True:
        left = seconds - (clock() - start)
        if left <= 0:
            break
        temperature = hottest_c()
        if temperature is not None and temperature <= until_c:
            break
        sleep(min(COOLDOWN_POLL_S, left))
    return clock() - start


def check_still_there(db_path: str | Path, identity: tuple[int, int] | None = None) -> None:
    """Between a sweep's runs: the database is still there, and (given its ``identity``,
    ``store.file_identity`` when the sweep opened it) still the same file: a sweep never
    silently starts a new database, nor goes on in another file put in its place."""
    from wattlab.errors import WorkStopped
    from wattlab.experiment.db.store import check_identity

    if not Path(db_path).expanduser().is_file():
        raise WorkStopped(
            f"the database {db_path} vanished during the sweep (removed or moved), so the "
            "sweep stops here; put it back and run the sweep again to resume."
        )
    check_identity(Path(db_path).expanduser(), identity)


def run_plan(
    plan: SweepPlan,
    opts: WorkerOptions,
    *,
    on_start: Callable[[PlanEntry], None] | None = None,
    on_finish: Callable[[PlanEntry, Any], None] | None = None,
    launch: Callable[[RunConfig, WorkerOptions], Any] | None = None,
    warm: bool = True,
) -> list[tuple[PlanEntry, Any]]:
    """Run the plan's 'run' entries in order, holding the sweep's lock.

    ``warm``: single-process runs share one warm worker process (False: a process per run,
    the engine before the warm worker). ``launch`` replaces the launcher (tests).
    """
    from wattlab.experiment.db.store import open_store, pinned
    from wattlab.experiment.runs.runner import run as run_one
    from wattlab.experiment.runs.warm import WarmWorker
    from wattlab.experiment.sweep.lock import SweepLock

    db = Path(opts.db_path).expanduser()
    with SweepLock(opts.db_path, plan.name), pinned(db) as pin, WarmWorker() as worker:
        with open_store(opts.db_path) as store:
            abandoned = store.abandon_running(plan.name)
            identity = pin or store.identity  # every later run must find this very file
        if abandoned:
            plan.notes.append(
                f"{len(abandoned)} run(s) left running by a dead process marked abandoned "
                f"(ids {', '.join(map(str, abandoned))}); they run again."
            )

        def default_launch(cfg: RunConfig, o: WorkerOptions) -> Any:
            return run_one(cfg, o, subprocess_launch=True, warm=worker if warm else None)

        launch = launch or default_launch
        outcomes = []
        todo = plan.to_run
        if todo and plan.warmup_runs > 0:
            # untimed warm-up runs of the first configuration, stored in a throw-away database
            with tempfile.TemporaryDirectory(prefix="wattlab-warmup-") as tmp:
                for _ in range(plan.warmup_runs):
                    warm_opts = replace(
                        opts,
                        db_path=str(Path(tmp) / "w.db"),
                        sweep=None,
                        progress=False,
                        eval_samples=SWEEP_EVAL_SAMPLES,
                    )
                    launch(todo[0].config, warm_opts)
        for i, entry in enumerate(todo):
            check_still_there(opts.db_path, identity)
            with open_store(opts.db_path, create=False) as store:
                if (entry.config_hash, entry.repetition) in store.completed_keys(plan.name):
                    continue  # stored ok since the plan was made
            if i > 0:
                cool_down(plan.cooldown_s, plan.cooldown_until_c)
            if on_start:
                on_start(entry)
            run_opts = replace(
                opts,
                sweep=plan.name,
                repetition=entry.repetition,
                eval_samples=SWEEP_EVAL_SAMPLES,
                db_identity=identity,
            )
            outcome = launch(entry.config, run_opts)
            outcomes.append((entry, outcome))
            if on_finish:
                on_finish(entry, outcome)
        return outcomes
