"""A warm worker per sweep: one process runs the sweep's single-process runs one after another.

Starting a process per run costs the interpreter, torch's import, the CUDA context, the data
and cuDNN's autotuning every time (docs/results-h200.md has what that cost). The warm worker pays
it once per sweep and keeps the CUDA context, the generated data and cuDNN's kernel choices; each
run still gets its own model, optimiser, seed, monitor and windows (``execute`` builds them all
afresh), so runs stay independent. Multi-GPU runs keep the torchrun-per-run path.

Protocol: the sweep writes one JSON line per run on the worker's stdin (``config``,
``options``) and reads one JSON line per run from the worker's result pipe (the worker's
original stdout; anything else it prints goes to stderr). The worker dies with the sweep
(``lifetime.die_with_parent``); SIGINT/SIGTERM are forwarded and store the run in flight as
failed; a worker that dies mid-run has its run finished as failed by the sweep.

A forwarded stop must stop the worker even where a library swallows it: torch's C start-up
imports numpy and drops any exception raised meanwhile, a KeyboardInterrupt included, after
which the worker would train on while the sweep waits. So the worker starts with the stop
signals blocked and unblocks them once its imports are done (a signal that came meanwhile is
raised then), and the sweep kills the worker's process group when it has not answered
``lifetime.STOP_GRACE_S`` seconds after a forwarded signal.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wattlab.errors import Interrupted
from wattlab.experiment.options import RunContext, WorkerOptions
from wattlab.experiment.runs.lifetime import STOP_GRACE_S
from wattlab.monitor import utc_now_iso
from wattlab.processes import STOP_SIGNALS, TERMINATE_SIGNALS
from wattlab.python_argv import module_argv
from wattlab.train.config import RunConfig

if TYPE_CHECKING:
    from wattlab.experiment.db.record import RunOutcome
    from wattlab.experiment.db.store import Store

CLOSE_TIMEOUT_S = 30.0


class WarmWorker:
    """The sweep's side: start the worker on first use, send runs, collect outcomes."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.runs = 0

    def _start(self) -> subprocess.Popen[str]:
        from wattlab.experiment.runs.lifetime import ENV_PARENT_PID

        env = dict(os.environ)
        env[ENV_PARENT_PID] = str(os.getpid())
        self.runs = 0
        self.proc = subprocess.Popen(
            module_argv("wattlab.experiment.runs.warm"),  # never the current folder's wattlab
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # our terminal's Ctrl-C reaches it through us only
            preexec_fn=_preexec_worker,
        )
        return self.proc

    def run(self, cfg: RunConfig, opts: WorkerOptions, ctx: RunContext, store: Store) -> RunOutcome:
        """Run one claimed run (``ctx.run_id``) in the worker; return its outcome. ``store``:
        the run's open store (the runner's), where a run the worker could not store is
        finished as failed and the stored row is read back."""
        from wattlab.experiment.db.record import RunOutcome
        from wattlab.experiment.runs.runner import (
            _stored_row,
            finish_as_failed,
            store_unstored_failure,
        )

        if ctx.launched_at_unix is None:  # the runner sets it when the run was asked for
            ctx = replace(ctx, launched_at_unix=time.time())
        proc = self.proc
        if proc is None or proc.poll() is not None:
            proc = self._start()  # the first run's launch phase includes the worker's start
        ctx = replace(ctx, launcher="warm-worker", worker_run_index=self.runs)
        opts = replace(opts, progress=False)
        started_at = utc_now_iso()
        received: list[int] = []
        killed: list[bool] = []
        timers: list[threading.Timer] = []

        def forward(signum: int, _frame: object) -> None:
            received.append(signum)
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                pass
            if not timers:  # a worker that does not answer in time is killed, group and all
                timer = threading.Timer(STOP_GRACE_S, _kill_group, (proc, killed))
                timer.daemon = True
                timers.append(timer)
                timer.start()

        previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
        try:
            line = ""
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(
                    json.dumps(
                        {
                            "config": cfg.model_dump(),
                            "options": opts.to_json(),
                            "context": ctx.to_json(),
                        }
                    )
                    + "\n"
                )
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            for timer in timers:
                timer.cancel()
        self.runs += 1
        if line:
            result = json.loads(line)
            outcome = store_unstored_failure(store, cfg, opts, ctx, started_at, result)
        else:
            code = proc.wait()
            self.proc = None
            if received and killed:
                message = (
                    f"interrupted by signal {received[0]}; the worker had not stopped "
                    f"{STOP_GRACE_S:.0f} s later and was killed before the run was stored"
                )
            elif received:
                message = f"interrupted by signal {received[0]} before the run was stored"
            elif code < 0:
                message = f"the warm worker was killed by signal {-code}"
            else:
                message = f"the warm worker exited with code {code} before storing the run"
            run_id = finish_as_failed(store, cfg, opts, ctx, started_at, message)
            outcome = RunOutcome(run_id, "failed", message, _stored_row(store, run_id))
        if received:
            self.close()
            raise Interrupted(received[0])
        if outcome.status != "ok":
            self.close()  # after a failure (an out-of-memory error, ...) the next run starts clean
        return outcome

    def close(self) -> None:
        """Ask the worker to finish (end of its input), then make sure it is gone."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> WarmWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _preexec_worker() -> None:
    """``Popen(preexec_fn=...)``: the worker starts with the stop signals blocked (``serve``
    unblocks them after its imports) and dies with us."""
    from wattlab.experiment.runs.lifetime import preexec_pdeathsig

    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    preexec_pdeathsig()


def _kill_group(proc: subprocess.Popen[str], killed: list[bool]) -> None:
    """The worker did not answer a forwarded stop in time: SIGKILL its process group."""
    killed.append(True)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _import_for_runs() -> None:
    """What ``execute`` imports on its first run, imported while the stop signals are still
    blocked (see the module doc). A failing import is left for the run, which stores it."""
    import importlib

    for module in (
        "wattlab.experiment.db.store",
        "wattlab.experiment.runs.codecarbon_window",
        "wattlab.experiment.runs.live_step",
        "wattlab.experiment.runs.progress",
        "wattlab.experiment.runs.windows",
        "wattlab.meters.discover",
        "wattlab.train.distributed",
        "wattlab.train.loop",
        "torchvision.models",
    ):
        try:
            importlib.import_module(module)
        except Exception:
            pass


def serve() -> int:
    """The worker's side: run each job from stdin with ``execute``; reply on the result pipe."""
    from wattlab.experiment.runs.lifetime import die_with_parent

    die_with_parent()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else is printed (libraries, warnings) goes to stderr

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    for terminate in TERMINATE_SIGNALS:  # SIGTERM and SIGHUP
        signal.signal(terminate, stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    in_flight: list[RunContext] = []  # the job read and not answered yet
    try:
        from wattlab.experiment.runs.worker import execute

        _import_for_runs()
        # a stop signal that came during the imports is raised here (the sweep, finding no
        # answer, stores the run as failed, naming the signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))
        for line in sys.stdin:
            if not line.strip():
                continue
            job = json.loads(line)
            ctx = RunContext.from_json(job.get("context", {}))
            in_flight[:] = [ctx]
            cfg = RunConfig(**job["config"])
            opts = WorkerOptions.from_json(job["options"])
            try:
                result = execute(cfg, opts, ctx)
            except (Interrupted, KeyboardInterrupt):
                raise
            except BaseException as error:  # execute failed to finish: the sweep stores it
                _reply(replies, ctx.run_id, "failed", f"{type(error).__name__}: {error}", False)
                return 1
            in_flight.clear()
            _reply(replies, result.run_id, result.status, result.error, result.stored)
            del result
            gc.collect()  # the run's model and optimiser go before the next run starts
    except (Interrupted, KeyboardInterrupt) as error:
        signum = error.signum if isinstance(error, Interrupted) else int(signal.SIGINT)
        if in_flight:  # execute stored the run as failed (the sweep checks the row)
            _reply(replies, in_flight[0].run_id, "failed", f"interrupted by signal {signum}")
        return 128 + signum
    return 0


def _reply(
    out: Any, run_id: int | None, status: str, error: str | None, stored: bool = True
) -> None:
    out.write(
        json.dumps({"run_id": run_id, "status": status, "error": error, "stored": stored}) + "\n"
    )
    out.flush()


if __name__ == "__main__":
    sys.exit(serve())
