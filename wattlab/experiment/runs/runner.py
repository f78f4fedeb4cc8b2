"""`wattlab run`: check everything, set power limits (always restored), launch, store.

The checks (``checks.preflight``) run before anything is changed or written: the database is
wattlab's, the dataset is readable, the batch fits the training set, CodeCarbon is importable
when asked for, the GPUs exist; then the power limit is checked as it is set. The run is
claimed (a 'running' row) and runs in this process, in a sweep's warm worker, or under
torchrun (one process per GPU). A run whose processes die without finishing their claim is
stored as failed by the runner. Every child dies with its parent (``lifetime``): a killed
`wattlab run` or `sweep` leaves nothing running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.errors import Interrupted
from wattlab.experiment.db.record import RunOutcome, claim_row, failed_row
from wattlab.experiment.options import RunContext, WorkerOptions
from wattlab.experiment.runs.checks import preflight
from wattlab.experiment.runs.worker import NOT_STORED, execute
from wattlab.monitor import utc_now_iso
from wattlab.processes import STOP_SIGNALS, TERMINATE_SIGNALS
from wattlab.train.config import RunConfig

if TYPE_CHECKING:
    from wattlab.experiment.db.store import Store

__all__ = ["RunOutcome", "run"]


def _power_session(cfg: RunConfig, pynvml_module: Any = None) -> Any:
    """A context manager holding the requested power limit, or a no-op one."""
    from contextlib import nullcontext

    if not cfg.has_power_limit:
        return nullcontext()
    from wattlab.power_limits import PowerLimitSession

    return PowerLimitSession(
        pynvml_module,
        list(range(cfg.gpus)),
        limit_w=cfg.power_limit_w,
        fraction=cfg.power_limit_fraction,
    )


def restore_pending_limits(pynvml_module: Any = None, *, force: bool = False) -> list[Any]:
    """Put back limits a killed run left behind on this host (its journal, and a legacy
    shared one it wrote), if there is one. ``force``: even when the journal's pid is alive
    (``wattlab power restore --force``, for a pid now held by another program)."""
    from wattlab.power_limits import journals_here, restore_from_journal

    restored: list[Any] = []
    for path in journals_here():
        restored += restore_from_journal(pynvml_module, path, force=force)  # None: real NVML
    return restored


def read_idle(cfg: RunConfig) -> dict[str, Any] | None:
    """Each GPU's power and temperature now, before the run (none on the CPU), and the host's
    load average (``meters.idle.read_before_run``); None when nothing could be read."""
    from wattlab.meters.idle import read_before_run, read_host_load

    if cfg.device != "cuda":
        host = read_host_load()
        return None if host is None else {"host": host}
    return read_before_run(list(range(cfg.gpus))) or None


def abandon_dead_lone_runs(db_path: str | Path) -> list[int]:
    """Mark lone runs that a dead process on this host left 'running' as 'abandoned'."""
    from wattlab.experiment.db.store import open_store

    with open_store(db_path) as store:  # opening it marks every dead claim of this host
        lone = [run_id for run_id, sweep in store.abandoned_at_open if sweep is None]
        return lone + _abandon_dead_lone_runs(store)


def _abandon_dead_lone_runs(store: Store) -> list[int]:
    from wattlab.processes import same_process_alive

    host = socket.gethostname()
    dead = [
        run_id
        for run_id, pid, started in store.running_lone_claims(host)
        if pid and not same_process_alive(pid, started)
    ]
    return store.abandon_running(None, hostname=host, dead_ids=dead) if dead else []


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While in this block, SIGTERM raises Interrupted(15) in the main thread (as SIGINT raises
    KeyboardInterrupt), so the run in flight is stored as failed and limits are restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in TERMINATE_SIGNALS}  # SIGHUP as SIGTERM
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _claim(store: Store, cfg: RunConfig, opts: WorkerOptions, ctx: RunContext) -> RunContext:
    """The context of the claimed run: its 'running' row's id."""
    return replace(ctx, run_id=store.claim_run(claim_row(cfg, opts, ctx, utc_now_iso())))


def _stored_row(store: Store, run_id: int | None) -> dict[str, Any] | None:
    return None if run_id is None else store.run_record(run_id)


def run_context(
    cfg: RunConfig, session: Any, base: RunContext, requested_unix: float, launched: bool
) -> RunContext:
    """The run's context once its power limit is set: the limit asked for, the GPUs' idle
    readings and (a run launched in another process) when the launch was asked for."""
    changes = getattr(session, "changes", None) or []
    requested_w = base.power_limit_requested_w
    if changes:
        requested_w = changes[0].limit_w
    elif cfg.power_limit_w is not None:
        requested_w = cfg.power_limit_w
    return replace(
        base,
        power_limit_requested_w=requested_w,
        idle=base.idle if base.idle is not None else read_idle(cfg),
        launched_at_unix=(base.launched_at_unix or requested_unix)
        if launched
        else base.launched_at_unix,
    )


def run(
    cfg: RunConfig,
    opts: WorkerOptions,
    *,
    subprocess_launch: bool | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    pynvml_module: Any = None,
    warm: Any = None,
    context: RunContext | None = None,
) -> RunOutcome:
    """Run one configuration end to end and store it. Raises WattlabError on bad input.

    ``warm``: a sweep's WarmWorker; single-process runs go to it instead of a new process.
    The database is opened once, after the checks (on the first node only; the other nodes'
    workers write nothing), and serves the whole run.
    """
    from wattlab.experiment.db.store import open_store

    requested_unix = time.time()  # the launch phase of a subprocess run starts here
    preflight(cfg, opts.db_path)
    if cfg.device == "cuda":
        restore_pending_limits(pynvml_module)
    # a sweep's run never creates the database: the sweep made it (it may have vanished)
    store = open_store(opts.db_path, create=opts.sweep is None) if node_rank == 0 else None
    if store is not None and opts.db_identity is not None:
        store.identity = opts.db_identity  # the sweep's database: no write into another file
        try:
            store.check_same_file()
        except BaseException:
            store.close()
            raise
    try:
        return _run(
            store,
            cfg,
            opts,
            context or RunContext(),
            requested_unix,
            subprocess_launch=subprocess_launch,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
            pynvml_module=pynvml_module,
            warm=warm,
        )
    finally:
        if store is not None:
            store.close()


def _run(
    store: Store | None,
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext,
    requested_unix: float,
    *,
    subprocess_launch: bool | None,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
    pynvml_module: Any,
    warm: Any,
) -> RunOutcome:
    from wattlab import stop_signals

    stop_signals.raise_if_swallowed()  # a Ctrl-C a library ate while we imported torch
    if store is not None and opts.sweep is None:
        _abandon_dead_lone_runs(store)
    if subprocess_launch is None:
        subprocess_launch = cfg.world_size > 1 or nnodes > 1
    with _power_session(cfg, pynvml_module) as session:
        launched = subprocess_launch or warm is not None
        ctx = run_context(cfg, session, ctx, requested_unix, launched)
        if warm is not None and cfg.world_size == 1 and nnodes == 1:
            assert store is not None
            ctx = _claim(store, cfg, opts, replace(ctx, launcher="warm-worker"))
            with _failed_if_stopped(store, cfg, opts, ctx):
                outcome: RunOutcome = warm.run(cfg, opts, ctx, store)
            return outcome
        if not subprocess_launch:
            assert store is not None
            ctx = _claim(store, cfg, opts, ctx)
            with sigterm_as_interrupt():
                return execute(cfg, opts, ctx, store=store)
        ctx = replace(ctx, launcher="torchrun")
        if store is None:
            return _launch(
                store, cfg, opts, ctx, nnodes=nnodes, node_rank=node_rank,
                rdzv_endpoint=rdzv_endpoint,
            )  # fmt: skip
        ctx = _claim(store, cfg, opts, ctx)
        with _failed_if_stopped(store, cfg, opts, ctx):
            return _launch(
                store, cfg, opts, ctx, nnodes=nnodes, node_rank=node_rank,
                rdzv_endpoint=rdzv_endpoint,
            )  # fmt: skip


@contextlib.contextmanager
def _failed_if_stopped(
    store: Store, cfg: RunConfig, opts: WorkerOptions, ctx: RunContext
) -> Iterator[None]:
    """A stop signal that reaches this process after the claim, before the launcher forwards
    signals (or anywhere it does not catch them), still finishes the claim as failed, naming
    the signal: a claim is never left 'running' by a live process that stops."""
    started_at = utc_now_iso()
    try:
        yield
    except (KeyboardInterrupt, Interrupted) as stop:
        signum = stop.signum if isinstance(stop, Interrupted) else int(signal.SIGINT)
        with contextlib.suppress(Exception):  # never hide the stop behind a store error
            record = store.run_record(ctx.run_id) if ctx.run_id is not None else None
            if record is not None and record.get("status") == "running":
                message = f"interrupted by signal {signum}"
                finish_as_failed(store, cfg, opts, ctx, started_at, message)
        raise


def finish_as_failed(
    store: Store,
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext,
    started_at: str,
    message: str,
) -> int:
    """Store the failure of a run whose processes died: finish its claim (or add a row)."""
    from wattlab.errors import DataError

    row = failed_row(cfg, opts, ctx, started_at, message)
    if ctx.run_id is None:
        return store.insert_run(row)
    try:
        store.finish_run(ctx.run_id, row)
    except DataError:  # the worker finished it after all
        pass
    return ctx.run_id


def store_unstored_failure(
    store: Store,
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext,
    started_at: str,
    result: dict[str, Any],
) -> RunOutcome:
    """The outcome a worker reported (``run_id``, ``status``, ``error``, ``stored``). A failure
    the worker could not store (it could not import what storing needs, say) is stored here,
    with the worker's own error, so that its row never stays ``running`` without one; when
    that fails too, the outcome says it was not stored."""
    run_id, status, error = result.get("run_id"), str(result["status"]), result.get("error")
    stored = bool(result.get("stored", True))
    if status != "ok" and not stored:
        message = str(error or "the run failed and the worker gave no error")
        # true once it is stored here: the worker could not store it
        message = message.replace(NOT_STORED, " (the worker could not store this failure: ")
        try:
            run_id = finish_as_failed(
                store, cfg, opts, replace(ctx, run_id=run_id), started_at, message
            )
            error, stored = message, True
        except Exception as store_error:
            error = f"{message} (and the failure could not be stored: {store_error})"
    return RunOutcome(run_id, status, error, _stored_row(store, run_id), stored)


def _launch(
    store: Store | None,
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext,
    *,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
) -> RunOutcome:
    from wattlab.experiment.runs.lifetime import ENV_PARENT_PID, preexec_pdeathsig, wait_stopping
    from wattlab.train.distributed import loopback_env, torchrun_command

    started_at = utc_now_iso()
    with tempfile.TemporaryDirectory(prefix="wattlab-run-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        opts_path = Path(tmp) / "options.json"
        ctx_path = Path(tmp) / "context.json"
        result_path = Path(tmp) / "result.json"
        cfg_path.write_text(json.dumps(cfg.model_dump()))
        command = torchrun_command(
            "wattlab.experiment.runs.worker",
            [
                "--config-json",
                str(cfg_path),
                "--options-json",
                str(opts_path),
                "--context-json",
                str(ctx_path),
            ],
            nproc_per_node=cfg.world_size,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
        )
        env = dict(os.environ)
        if nnodes == 1 and rdzv_endpoint is None:  # one machine: listen on the loopback only
            env = loopback_env(env)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // cfg.world_size)))
        env[ENV_PARENT_PID] = str(os.getpid())  # the workers watch us too, not only torchrun
        ctx = replace(
            ctx,
            launched_at_unix=ctx.launched_at_unix or time.time(),
            launcher="torchrun",
            result_file=str(result_path),
        )
        opts_path.write_text(json.dumps(opts.to_json()))
        ctx_path.write_text(json.dumps(ctx.to_json()))
        child = subprocess.Popen(
            command, env=env, start_new_session=True, preexec_fn=preexec_pdeathsig
        )

        received: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            received.append(signum)
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

        previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
        try:
            code = wait_stopping(child, received)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if result_path.exists():
            result = json.loads(result_path.read_text())
            if store is not None:
                outcome = store_unstored_failure(store, cfg, opts, ctx, started_at, result)
            else:
                outcome = RunOutcome(result.get("run_id"), result["status"], result.get("error"),
                                     None, bool(result.get("stored", True)))  # fmt: skip
        elif node_rank != 0:
            outcome = RunOutcome(None, "ok" if code == 0 else "failed")
        else:
            assert store is not None  # the first node's runner holds the run's store
            message = f"the training processes exited with code {code} before storing the run"
            if received:
                message = f"interrupted by signal {received[0]} before the run was stored"
            elif code < 0:
                message = f"the training processes were killed by signal {-code}"
            run_id = finish_as_failed(store, cfg, opts, ctx, started_at, message)
            outcome = RunOutcome(run_id, "failed", message, _stored_row(store, run_id))
        if received:  # the user (or a scheduler) asked us to stop: no further runs
            raise Interrupted(received[0])
        return outcome
