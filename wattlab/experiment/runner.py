"""`wattlab run`: check everything, set power limits (always restored), launch, store.

The checks run before anything is changed or written: the database is wattlab's, the dataset
is readable, the GPUs exist, the power limit is allowed. Then a single process runs in this
process; several (or any run of a sweep) run under torchrun, one process per GPU. A run whose
processes die without storing anything is stored as failed by the runner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError, Interrupted
from wattlab.experiment.worker import WorkerOptions, execute, failed_row
from wattlab.monitor import utc_now_iso
from wattlab.train.config import RunConfig


@dataclass
class RunOutcome:
    run_id: int | None
    status: str  # 'ok' | 'failed'
    error: str | None = None


def check_devices(cfg: RunConfig) -> None:
    """Refuse a configuration this machine cannot run, in one sentence."""
    if cfg.device != "cuda":
        return
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "--device cuda needs PyTorch: pip install 'wattlab[train]'; or use --device cpu."
        ) from None
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if available == 0:
        raise ConfigError("no CUDA GPU is visible here; use --device cpu (or check the driver).")
    if cfg.gpus > available:
        raise ConfigError(
            f"--gpus {cfg.gpus} asks for more GPUs than the {available} visible here."
        )


def check_dataset(cfg: RunConfig) -> None:
    """A CIFAR-10 folder must hold every batch file, and its batches must parse."""
    if cfg.dataset != "cifar10":
        return
    from wattlab.errors import DataError
    from wattlab.train.data import (
        CIFAR_TEST_FILE,
        CIFAR_TRAIN_FILES,
        find_cifar10_dir,
        load_cifar10,
    )

    folder = find_cifar10_dir(cfg.data_dir or "")
    missing = [f for f in (*CIFAR_TRAIN_FILES, CIFAR_TEST_FILE) if not (folder / f).is_file()]
    if missing:
        raise DataError(
            f"CIFAR-10 folder {str(folder)!r} lacks {', '.join(missing)}; expected the "
            "cifar-10-batches-py files data_batch_1..5 and test_batch."
        )
    load_cifar10(folder, train_samples=1, test_samples=1)  # parses data_batch_1 and test_batch


def preflight(cfg: RunConfig, db_path: str | Path) -> None:
    """Every check that can fail on user input, before anything is set or written."""
    from wattlab.experiment.store import check_writable_database

    check_writable_database(db_path)  # wattlab's, intact, writable (or its folder is)
    check_dataset(cfg)
    check_devices(cfg)


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


def restore_pending_limits(pynvml_module: Any = None) -> list[Any]:
    """Put back limits a killed run left behind (the journal), if there is a journal."""
    from wattlab.power_limits import default_journal_path, restore_from_journal

    if not default_journal_path().exists():
        return []
    return restore_from_journal(pynvml_module, default_journal_path())  # None: real NVML


def run(
    cfg: RunConfig,
    opts: WorkerOptions,
    *,
    subprocess_launch: bool | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    pynvml_module: Any = None,
) -> RunOutcome:
    """Run one configuration end to end and store it. Raises WattlabError on bad input."""
    preflight(cfg, opts.db_path)
    if cfg.device == "cuda":
        restore_pending_limits(pynvml_module)
    if subprocess_launch is None:
        subprocess_launch = cfg.world_size > 1 or nnodes > 1
    with _power_session(cfg, pynvml_module) as session:
        changes = getattr(session, "changes", None) or []
        if changes:
            opts.power_limit_requested_w = changes[0].limit_w
        elif cfg.power_limit_w is not None:
            opts.power_limit_requested_w = cfg.power_limit_w
        if not subprocess_launch:
            try:
                run_id = execute(cfg, opts)
            except Exception as error:  # stored as failed by execute
                return RunOutcome(None, "failed", f"{type(error).__name__}: {error}")
            return RunOutcome(run_id, "ok")
        return _launch(cfg, opts, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint)


def _launch(
    cfg: RunConfig,
    opts: WorkerOptions,
    *,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
) -> RunOutcome:
    from wattlab.experiment.store import open_store
    from wattlab.train.distributed import torchrun_command

    started_at = utc_now_iso()
    with tempfile.TemporaryDirectory(prefix="wattlab-run-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        opts_path = Path(tmp) / "options.json"
        result_path = Path(tmp) / "result.json"
        cfg_path.write_text(json.dumps(cfg.model_dump()))
        opts.result_file = str(result_path)
        opts_path.write_text(json.dumps(opts.to_json()))
        command = torchrun_command(
            "wattlab.experiment.worker",
            ["--config-json", str(cfg_path), "--options-json", str(opts_path)],
            nproc_per_node=cfg.world_size,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
        )
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // cfg.world_size)))
        child = subprocess.Popen(command, env=env, start_new_session=True)

        received: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            received.append(signum)
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if result_path.exists():
            result = json.loads(result_path.read_text())
            outcome = RunOutcome(result.get("run_id"), result["status"], result.get("error"))
        elif node_rank != 0:
            outcome = RunOutcome(None, "ok" if code == 0 else "failed")
        else:
            message = f"the training processes exited with code {code} before storing the run"
            if received:
                message = f"interrupted by signal {received[0]} before the run was stored"
            elif code < 0:
                message = f"the training processes were killed by signal {-code}"
            store = open_store(opts.db_path)
            try:
                run_id = store.insert_run(failed_row(cfg, opts, started_at, message))
            finally:
                store.close()
            outcome = RunOutcome(run_id, "failed", message)
        if received:  # the user (or a scheduler) asked us to stop: no further runs
            raise Interrupted(received[0])
        return outcome
