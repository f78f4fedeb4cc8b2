"""`wattlab sweep`: a grid of runs with repetitions, resumable, one sweep at a time.

The plan comes first: every run with its place in the (possibly shuffled) order, runs already
stored as ok (skipped on resume), and configurations this machine cannot run (listed with the
reason, never dropped silently). Every configuration's input checks run before anything is
stored. Then the sweep takes its lock (a second sweep of the same name on the same database is
refused while the first lives), marks runs that a dead sweep left 'running' as 'abandoned'
(they run again), and runs the plan: single-process runs one after another in a warm worker
process (``warm``), multi-process runs under torchrun, each run with its own model, optimiser,
seed and windows. Before each run the GPUs' power and temperature are recorded; between
runs the spec's cool-down is taken. Every child dies with the sweep, so killing it at any moment
and running it again leaves every run present exactly once.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.experiment.options import WorkerOptions
from wattlab.experiment.sweep.driver import (  # noqa: F401  (importable from here, as before)
    PlanEntry,
    PlannedPoint,
    SweepPlan,
    build_plan,
    check_still_there,
    cool_down,
    drive,
)
from wattlab.train.config import RunConfig

if TYPE_CHECKING:
    import pandas as pd

    from wattlab.experiment.db.store import Store
    from wattlab.experiment.specs.command import CommandSweepSpec
    from wattlab.experiment.specs.trainer import PlannedRun, SweepSpec


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
    if cfg.budget_s is not None:  # a timed budget: its seconds, and the rest of a run around it
        rest = (similar["wall_s"] - similar["duration_s"]).dropna()
        return float(cfg.budget_s + (statistics.median(rest) if len(rest) else 0.0))
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


class TrainerRules:
    """The built-in trainer's part of planning: its input checks, and which points this
    machine cannot run (no GPU, too few GPUs, a power limit it may not set)."""

    def __init__(self, spec: SweepSpec, machine: MachineFacts) -> None:
        self.spec = spec
        self.machine = machine

    def check(self, *, open_files: bool) -> None:
        check_spec_inputs(self.spec, self.machine, open_files=open_files)

    def spec_dict(self) -> dict[str, Any]:
        return self.spec.model_dump(mode="json")

    def expand(self, order_seed: int | None) -> list[PlannedRun]:
        return self.spec.expand(order_seed=order_seed)

    def history(self, store: Store) -> pd.DataFrame | None:
        return store.runs()

    def skip_reason(self, point: PlannedPoint) -> str:
        return skip_reason(point.config, self.machine)

    def run_reason(self, point: PlannedPoint) -> str:
        return ""

    def expected_s(self, point: PlannedPoint, history: pd.DataFrame | None) -> float | None:
        return expected_duration_s(point.config, history)


def make_plan(
    spec: SweepSpec | CommandSweepSpec,
    store: Store | None,
    machine: MachineFacts | None = None,
    *,
    register: bool = True,
) -> SweepPlan:
    """The whole sweep, in run order, with what will run, what is done and what is skipped,
    for either spec shape (``driver.build_plan``).

    A trainer sweep's configurations this machine would run pass the input checks first
    (batch against the training set, CodeCarbon importable, dataset readable); a command
    sweep's program must exist: a ConfigError before anything is stored. ``register`` records
    the sweep in the store (a real sweep); without it (a dry run) nothing is written and
    ``store`` may be None (no database yet). ``machine``: what this machine can run (detected
    when not given).
    """
    from wattlab.experiment.specs.command import CommandSweepSpec

    if isinstance(spec, CommandSweepSpec):
        from wattlab.experiment.sweep.command_plan import CommandRules

        return build_plan(spec, store, CommandRules(spec), register=register)
    rules = TrainerRules(spec, machine or MachineFacts.detect())
    return build_plan(spec, store, rules, register=register)


SWEEP_EVAL_SAMPLES = 4096  # inside sweeps, evaluate on the first 4096 test images (fixed)


class TrainerKind:
    """The built-in trainer as a run kind: single-process runs share one warm worker process
    (``warm``; False: a process per run), multi-process runs go under torchrun; the untimed
    warm-up runs are stored in a throw-away database. ``launch`` replaces the launcher
    (tests)."""

    def __init__(
        self,
        opts: WorkerOptions,
        *,
        launch: Callable[[RunConfig, WorkerOptions], Any] | None = None,
        warm: bool = True,
    ) -> None:
        self.opts = opts
        self.warm = warm
        self._launch = launch
        self._stack = contextlib.ExitStack()
        self._worker: Any = None

    def __enter__(self) -> TrainerKind:
        from wattlab.experiment.runs.warm import WarmWorker

        if self._launch is None and self.warm:
            self._worker = self._stack.enter_context(WarmWorker())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def launch(self, config: RunConfig, opts: WorkerOptions) -> Any:
        if self._launch is not None:
            return self._launch(config, opts)
        from wattlab.experiment.runs.runner import run as run_one

        return run_one(config, opts, subprocess_launch=True, warm=self._worker)

    def prepare(self, todo: list[PlanEntry]) -> None:
        return None

    def warm_up(self, entry: PlanEntry) -> None:
        with tempfile.TemporaryDirectory(prefix="wattlab-warmup-") as tmp:
            warm_opts = replace(
                self.opts,
                db_path=str(Path(tmp) / "w.db"),
                sweep=None,
                progress=False,
                eval_samples=SWEEP_EVAL_SAMPLES,
            )
            self.launch(entry.config, warm_opts)

    def run(self, entry: PlanEntry, sweep: str, identity: tuple[int, int] | None) -> Any:
        run_opts = replace(
            self.opts,
            sweep=sweep,
            repetition=entry.repetition,
            eval_samples=SWEEP_EVAL_SAMPLES,
            db_identity=identity,
        )
        return self.launch(entry.config, run_opts)


def run_plan(
    plan: SweepPlan,
    opts: WorkerOptions,
    *,
    on_start: Callable[[PlanEntry], None] | None = None,
    on_finish: Callable[[PlanEntry, Any], None] | None = None,
    launch: Callable[[RunConfig, WorkerOptions], Any] | None = None,
    warm: bool = True,
    stop_at: float | None = None,
) -> list[tuple[PlanEntry, Any]]:
    """Run a trainer sweep's plan with the one sweep loop (``driver.drive``).

    ``warm``: single-process runs share one warm worker process (False: a process per run,
    the engine before the warm worker). ``launch`` replaces the launcher (tests). ``stop_at``:
    a ``time.monotonic()`` deadline after which no run starts.
    """
    kind = TrainerKind(opts, launch=launch, warm=warm)
    return drive(plan, kind, opts.db_path, on_start=on_start, on_finish=on_finish, stop_at=stop_at)
