"""A sweep of your own command: the plan, and the runs metered like `wattlab monitor`.

The same guarantees as a built-in sweep (``sweep``): the plan lists every run, those already
stored ok (skipped on resume) and the resolved argv of each; the sweep takes its lock (a second
sweep of the same name on the same database is refused), marks runs a dead sweep left
'running' as 'abandoned' (they run again), takes its untimed warm-up runs, then runs the plan
in order with the cool-down between runs. Each run is claimed (a 'running' row), runs under
its guard in a process group of its own (``command_meter``), and is finished 'ok' or 'failed'
(with its exit code and the end of its stderr); its stdout and stderr are kept in
``DB.runs/<run_id>.stdout`` and ``.stderr``, new files never opened through a link (a
``DB.runs`` folder or an output file that is a symbolic link is refused), each bounded to its
last 16 MiB with a first line saying how much was dropped (``command_output``). A stop signal
(Ctrl-C, SIGTERM) goes to the whole group; the run is stored failed and the sweep stops.
SIGKILL of the sweep kills the guard's group (parent-death signal), so nothing outlives it.
"""

from __future__ import annotations

import shlex
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.errors import DataError, Interrupted
from wattlab.experiment.db.record import RunOutcome
from wattlab.experiment.runs.command_meter import MeteredCommand
from wattlab.experiment.runs.command_output import KEEP_OUTPUT_BYTES, KeptOutput
from wattlab.experiment.specs.command import CommandPoint, CommandSweepSpec, PlannedCommand
from wattlab.experiment.sweep.driver import PlanEntry, PlannedPoint, SweepPlan, build_plan, drive
from wattlab.monitor.carbon import CarbonSettings

if TYPE_CHECKING:
    from wattlab.experiment.db.store import Store


@dataclass
class CommandOptions:
    """How a command sweep meters and stores its runs (the `wattlab sweep` options)."""

    db_path: str
    carbon: CarbonSettings | None = None
    interval_s: float = 0.1
    powercap_root: str | None = None
    cpu_tdp_w: float | None = None
    ram_measure: str = "system"
    cpu_load: str = "machine"  # "process": this process's tree, which holds each run's command
    grace_s: float = 10.0  # after a forwarded stop signal, before the group is killed
    keep_output_bytes: int = KEEP_OUTPUT_BYTES  # of each run's stdout and stderr: the tail


def _expected_s(point: CommandPoint, history: Any) -> float | None:
    """The median wall time of earlier ok runs of the same command (None if there are none)."""
    if history is None or len(history) == 0:
        return None
    same = history[(history["status"] == "ok") & (history["config_hash"] == point.config_hash)]
    walls = same["wall_s"].dropna()
    return float(statistics.median(walls)) if len(walls) else None


class CommandRules:
    """A command sweep's part of planning: the program must exist here; every point runs,
    and its plan line shows the resolved argv."""

    def __init__(self, spec: CommandSweepSpec) -> None:
        self.spec = spec

    def check(self, *, open_files: bool) -> None:
        self.spec.check_program()

    def spec_dict(self) -> dict[str, Any]:
        return self.spec.as_dict()

    def expand(self, order_seed: int | None) -> list[PlannedCommand]:
        return self.spec.expand(order_seed=order_seed)

    def history(self, store: Store) -> Any:
        return store.runs(sweep=self.spec.name)

    def skip_reason(self, point: PlannedPoint) -> str:
        return ""

    def run_reason(self, point: PlannedPoint) -> str:
        return shlex.join(point.config.argv)

    def expected_s(self, point: PlannedPoint, history: Any) -> float | None:
        return _expected_s(point.config, history)


def make_command_plan(spec: CommandSweepSpec, store: Any, *, register: bool = True) -> SweepPlan:
    """The whole command sweep in run order (what runs, what is done): ``plan.make_plan``."""
    return build_plan(spec, store, CommandRules(spec), register=register)


def _monitor(opts: CommandOptions) -> Any:
    from wattlab.monitor import EnergyMonitor

    return EnergyMonitor(
        interval_s=opts.interval_s,
        carbon=opts.carbon,
        sync=None,  # the command's GPU work is not ours to wait for
        discover_kwargs={
            "powercap_root": Path(opts.powercap_root) if opts.powercap_root else None,
            "cpu_tdp_w": opts.cpu_tdp_w,
            "ram_measure": opts.ram_measure,
            "cpu_load": opts.cpu_load,
        },
    )


def _read_idle() -> dict[str, Any] | None:
    from wattlab.meters.idle import read_before_run

    return read_before_run() or None


def _runs_folder(db_path: str) -> Path:
    """Make ``DB.runs``, where runs keep their output; refuse it when it is a symbolic link."""
    from wattlab.experiment.runs.command_record import output_paths
    from wattlab.jsonio import refuse_link_folder

    folder = output_paths(db_path, 0)[0].parent
    refuse_link_folder(folder, error=DataError)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as error:
        raise DataError(
            f"cannot create the folder {folder} for the runs' output: {error.strerror or error}."
        ) from None
    return folder


def run_point(
    point: CommandPoint,
    repetition: int,
    sweep: str,
    opts: CommandOptions,
    identity: tuple[int, int] | None = None,
) -> RunOutcome:
    """Claim, run, meter and store one run of the sweep. Raises Interrupted after storing the
    run as failed when a stop signal arrived while it ran. ``identity``: the database file the
    sweep opened (``store.file_identity``); WorkStopped, one sentence, when the file at the
    path is another one, or is removed or replaced while the command runs."""
    from wattlab.experiment.db.store import pinned

    _runs_folder(opts.db_path)  # before the claim: a refused folder leaves no 'running' row
    with pinned(Path(opts.db_path).expanduser()) as pin:  # no inode reuse while it runs
        return _run_pinned(point, repetition, sweep, opts, identity or pin)


def _run_pinned(
    point: CommandPoint,
    repetition: int,
    sweep: str,
    opts: CommandOptions,
    identity: tuple[int, int] | None,
) -> RunOutcome:
    from wattlab.experiment.db.pending import store_finished
    from wattlab.experiment.db.store import AlreadyStoredError, check_identity, open_store
    from wattlab.experiment.runs import command_record as record
    from wattlab.experiment.runs.command_meter import CommandNotStarted, meter_command
    from wattlab.jsonio import open_new_file

    check_identity(Path(opts.db_path).expanduser(), identity)
    with open_store(opts.db_path, create=False) as store:  # the sweep made it
        store.identity = identity
        store.require_sweep(sweep)
        run_id = store.claim_run(record.claim_row(point, sweep, repetition, _read_idle()))
    stdout_path, stderr_path = record.output_paths(opts.db_path, run_id)
    monitor = _monitor(opts)
    monitor.start()
    try:
        # a file left by an earlier database's run of the same id is replaced, a link refused
        with (
            open_new_file(stdout_path, replace_stale=True, error=DataError, read_back=True) as out,
            open_new_file(stderr_path, replace_stale=True, error=DataError, read_back=True) as err,
        ):
            result: MeteredCommand | None = None
            kept_out = KeptOutput(out, opts.keep_output_bytes)  # bounded: the tail is kept
            kept_err = KeptOutput(err, opts.keep_output_bytes)
            try:
                result = meter_command(
                    point.argv,
                    monitor,
                    stdout=kept_out.write_fd,
                    stderr=kept_err.write_fd,
                    cwd=point.cwd,
                    env=point.env,
                    grace_s=opts.grace_s,
                )
            except CommandNotStarted as error:  # stored failed, never left 'running'
                row = record.not_started_row(point, error, stdout_path, stderr_path)
            finally:
                kept_out.close()
                kept_err.close()
        windows: list[dict[str, Any]] = []
        trace: list[tuple[float, str, float]] = []
        if result is not None:
            row = record.finished_row(point, result, monitor, stdout_path, stderr_path)
            if row["status"] == "ok":
                windows, trace = record.windows_and_trace(result, monitor)
    finally:
        monitor.stop()
    check_identity(Path(opts.db_path).expanduser(), identity)  # not removed nor replaced
    with open_store(opts.db_path, create=False) as store:
        store.identity = identity  # and still checked before the write itself
        store.require_sweep(sweep)
        try:
            store_finished(store, run_id, row, windows, trace)
        except AlreadyStoredError as error:  # another process stored this run meanwhile
            row = record.refused_row(row, str(error))
            store.finish_run(run_id, row)
    outcome = RunOutcome(run_id, row["status"], row.get("error"), exit_code=row.get("exit_code"))
    if result is not None and result.interrupted_by is not None:
        raise Interrupted(result.interrupted_by)
    return outcome


class CommandKind:
    """A user's command as a run kind: each run claimed, metered like `wattlab monitor` and
    stored (``run_point``); warm-up runs are untimed and their output thrown away."""

    def __init__(self, opts: CommandOptions) -> None:
        self.opts = opts

    def __enter__(self) -> CommandKind:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def prepare(self, todo: list[PlanEntry]) -> None:
        _runs_folder(self.opts.db_path)  # a folder that is a link is refused before any run

    def warm_up(self, entry: PlanEntry) -> None:
        from wattlab.experiment.runs.command_meter import meter_command

        point: CommandPoint = entry.config
        monitor = _monitor(self.opts)
        monitor.start()
        try:
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                result = meter_command(
                    point.argv, monitor, stdout=out, stderr=err, cwd=point.cwd, env=point.env
                )
        finally:
            monitor.stop()
        if result.interrupted_by is not None:
            raise Interrupted(result.interrupted_by)

    def run(self, entry: PlanEntry, sweep: str, identity: tuple[int, int] | None) -> RunOutcome:
        return run_point(entry.config, entry.repetition, sweep, self.opts, identity)


def run_command_plan(
    plan: SweepPlan,
    opts: CommandOptions,
    *,
    on_start: Callable[[PlanEntry], None] | None = None,
    on_finish: Callable[[PlanEntry, Any], None] | None = None,
    stop_at: float | None = None,
) -> list[tuple[PlanEntry, RunOutcome]]:
    """Run a command sweep's plan with the one sweep loop (``driver.drive``)."""
    return drive(
        plan, CommandKind(opts), opts.db_path, on_start=on_start, on_finish=on_finish,
        stop_at=stop_at,
    )  # fmt: skip
