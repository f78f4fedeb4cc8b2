"""One training run inside one process (of torchrun's N): meter, train, gather, store.

Each rank meters its own GPU; the host's CPU/DRAM are metered by local rank 0 only, so nothing
is counted twice. Rank 0 gathers every rank's window measurements, combines them, and writes
the run with its windows and power trace to the store in one transaction.

Run by the runner as ``python -m torch.distributed.run ... -m wattlab.experiment.runs.worker``,
by a sweep's warm worker (``wattlab.experiment.runs.warm``), or called in-process (``execute``) for
a single-process run. It returns data (the stored row); printing is the caller's business.

Failure contract: the run is claimed (a 'running' row) before anything is measured; every
failure after that (meters, monitor, CodeCarbon, training) finishes the claim as 'failed' with
the error, and ``execute`` returns it with its id. A result that could not be stored says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.errors import Interrupted
from wattlab.experiment.db.pending import store_finished
from wattlab.experiment.db.record import (
    RunOutcome,
    build_run_row,
    claim_row,
    failed_row,
    phase_columns,
)
from wattlab.experiment.hosts import host_name, spans_several_nodes
from wattlab.experiment.options import RunContext, WorkerOptions
from wattlab.monitor import EnergyMonitor, utc_now_iso
from wattlab.processes import TERMINATE_SIGNALS, job_root_pid
from wattlab.train.config import RunConfig

if TYPE_CHECKING:
    from wattlab.experiment.db.store import Store

__all__ = ["RunContext", "WorkerOptions", "execute", "main"]


def _write_result_file(path: str | None, data: dict[str, Any]) -> None:
    if path:
        from wattlab.jsonio import dump_json

        dump_json(data, path)


NOT_STORED = " (and the failure could not be stored: "  # what a failure not stored says


def _failure_message(error: BaseException) -> str:
    if isinstance(error, Interrupted):
        return str(error)  # "interrupted by signal 15"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted by signal 2 (Ctrl-C)"
    return f"{type(error).__name__}: {error}"


def execute(
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext | None = None,
    *,
    store: Store | None = None,
    dataset: Any = None,
    claim: bool = True,
    leave_group_open: bool = False,
) -> RunOutcome:
    """Run training under the monitor in this process (one rank); rank 0 stores the run.

    Rank 0 claims the run (unless ``ctx.run_id`` names a claimed one) before anything else,
    then builds the meters, the monitor and the CodeCarbon tracker inside the same ``try`` as
    training, so any failure finishes the claim as 'failed'. Returns a RunOutcome (rank 0: the
    stored row; other ranks: no row). A SIGINT/SIGTERM (KeyboardInterrupt, Interrupted) is
    stored as failed and re-raised. ``dataset`` reuses data a warm worker already holds.
    ``store``: the run's open store (the caller's, left open); None: rank 0 opens its own.

    Distributed, every rank meets at a last barrier once rank 0 has stored the run, and then
    leaves the process group, or with ``leave_group_open`` (the torchrun worker's ``main``,
    which ends the process with ``os._exit`` right after, whatever happened) does not: gloo's
    teardown can abort a process whose peer is tearing down at the same moment.
    """
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.runs.codecarbon_window import CodeCarbon
    from wattlab.experiment.runs.live_step import LiveMarks, make_projector, on_epoch
    from wattlab.experiment.runs.progress import RunProgress
    from wattlab.experiment.runs.windows import MonitorWindows, local_payload

    ctx = ctx or RunContext()
    started_unix = time.time()
    t0 = time.perf_counter()
    started_at = utc_now_iso()
    is_main = os.environ.get("RANK", "0") == "0"
    owns_store = store is None
    dist = None
    discovery = None
    monitor = None
    run_id = ctx.run_id
    try:
        if is_main:
            if store is None:
                store = open_store(opts.db_path, create=opts.sweep is None)
                if opts.db_identity is not None:  # the sweep's database: no write elsewhere
                    store.identity = opts.db_identity
                    store.check_same_file()
            if run_id is None and claim:
                run_id = store.claim_run(claim_row(cfg, opts, ctx, started_at))
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
            cpu_load=opts.cpu_load,
            cpu_pid=job_root_pid(),
        )
        monitor = EnergyMonitor(discovery, interval_s=opts.interval_s, carbon=opts.carbon)
        tracker = (
            CodeCarbon(opts.codecarbon_country, opts.interval_s)
            if cfg.codecarbon and dist.is_main
            else None
        )
        windows = MonitorWindows(
            monitor,
            tracker,
            codecarbon_window=cfg.codecarbon,
            host=host_name() if spans_several_nodes() else None,
        )
        progress = RunProgress(cfg, monitor, windows, enabled=opts.progress and dist.is_main)
        projector = make_projector(cfg, monitor, progress.note)
        monitor.start()
        setup_s = time.perf_counter() - t0
        try:
            with progress:
                result = run_training(
                    cfg,
                    dist,
                    windows=windows,
                    on_epoch=lambda stats: on_epoch(stats, windows, projector, progress, dist),
                    dataset=dataset,
                    eval_samples=opts.eval_samples,
                    on_mark=projector.mark if isinstance(projector, LiveMarks) else None,
                )
        finally:
            monitor.stop()
            discovery.close()
            discovery = None
        payload = local_payload(windows, monitor)
        payloads = gather_objects(payload, dist)
        if not dist.is_main:
            barrier(dist)  # rank 0 has stored the run
            return RunOutcome(None, "ok")
        assert store is not None and payloads is not None
        row, window_rows, trace = build_run_row(
            cfg,
            opts,
            ctx,
            payloads,
            result,
            started_at,
            tracker.data if tracker else None,
            projector.projection if projector else None,
        )
        teardown_s = time.perf_counter() - result.eval_end_perf_s
        row.update(phase_columns(ctx, started_unix, setup_s, result, teardown_s))
        if isinstance(projector, LiveMarks):
            row["step_marks_json"] = projector.marks()
        run_id = store_finished(store, run_id, row, window_rows, trace)
        _write_result_file(ctx.result_file, {"run_id": run_id, "status": "ok"})
        _last_barrier(dist)  # the run is stored: a rank lost now cannot fail it
        return RunOutcome(run_id, "ok", row={"id": run_id, **row})
    except BaseException as error:
        message = _failure_message(error)
        if discovery is not None:
            try:
                if monitor is not None:
                    monitor.stop()
                discovery.close()
            except Exception:
                pass
        outcome = RunOutcome(None, "failed", message, stored=False)
        if is_main:
            outcome = _store_failure(store, cfg, opts, ctx, started_at, run_id, message)
            _write_result_file(
                ctx.result_file,
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
        if store is not None and owns_store:
            store.close()
        if dist is not None and dist.distributed and not leave_group_open:
            from wattlab.train.distributed import shutdown_distributed

            shutdown_distributed()


def _store_failure(
    store: Store | None,
    cfg: RunConfig,
    opts: WorkerOptions,
    ctx: RunContext,
    started_at: str,
    run_id: int | None,
    message: str,
) -> RunOutcome:
    """Finish the claim (or insert a row) as failed; say so when nothing could be stored.
    ``store`` is None only when opening it failed: it is tried once more here."""
    from wattlab.experiment.db.store import open_store

    opened = None
    try:
        row = failed_row(cfg, opts, ctx, started_at, message)
        if store is None:
            store = opened = open_store(opts.db_path, create=opts.sweep is None)
        run_id = store_finished(store, run_id, row)
    except Exception as store_error:
        return RunOutcome(
            run_id,
            "failed",
            f"{message}{NOT_STORED}{store_error})",
            stored=False,
        )
    finally:
        if opened is not None:
            opened.close()
    return RunOutcome(run_id, "failed", message, {"id": run_id, **row})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wattlab-worker")
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--options-json", required=True)
    parser.add_argument("--context-json", required=True)
    args = parser.parse_args(argv)
    from wattlab.experiment.runs.lifetime import die_with_parent

    die_with_parent()  # torchrun's agent started us: die with it (and with the runner)
    _terminate_as_interrupt()
    cfg = RunConfig(**json.loads(Path(args.config_json).read_text()))
    opts = WorkerOptions.from_json(json.loads(Path(args.options_json).read_text()))
    ctx = RunContext.from_json(json.loads(Path(args.context_json).read_text()))
    try:
        result = execute(cfg, opts, ctx, leave_group_open=True)
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

    for terminate in TERMINATE_SIGNALS:  # SIGTERM and SIGHUP
        signal.signal(terminate, stop)


if __name__ == "__main__":
    sys.exit(main())
