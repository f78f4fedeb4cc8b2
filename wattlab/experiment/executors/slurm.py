"""`wattlab sweep --executor slurm`: every planned run is one task of a SLURM job array.

The array is submitted through ``submitit`` (the ``slurm`` extra). A task runs its
configuration exactly as a local sweep would (``runner.run`` under torchrun, warm-up runs
first), but into a private SQLite file on the node; then it writes the run to its own result
file in the sweep folder (``result_files.export_result``, atomic). The submitting process never
lets a task near the shared database: it watches the array with ``squeue``, merges each result
file as its task finishes (``result_files.merge_results``: once, however often it is called)
and stores a failed row, naming the SLURM state, for a task that ended without one (cancelled,
timed out, node lost). ``sacct``'s ConsumedEnergy for the task, when the cluster accounts
energy, is stored beside the run (``scheduler_jobs.consumed_energy_j``).

Running the same sweep again skips what is stored, merges result files that arrived while
nobody was watching, waits for tasks an earlier submission left running, and resubmits the
rest. Ctrl-C / SIGTERM cancels the array (nothing outlives the sweep) and keeps what finished.

Folder layout (``--slurm-folder``, default ``wattlab-slurm/`` next to the database; it must
be on a filesystem every node sees): ``<folder>/<sweep>/results/*.json`` (result files, moved
to ``results/merged/`` once stored), ``<folder>/<sweep>/submitit/`` (sbatch scripts, logs),
``<folder>/<sweep>/jobs.json`` (which task runs which run).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.errors import ConfigError, Interrupted, WattlabError
from wattlab.experiment.executors.result_files import (
    export_result,
    merge_result,
    merge_results,
    new_result_id,
    read_result,
)
from wattlab.extras import require
from wattlab.jsonio import dump_json
from wattlab.launch_args import check_plain_text, check_slurm_name
from wattlab.processes import STOP_SIGNALS

if TYPE_CHECKING:
    from wattlab.experiment.db.store import Store
    from wattlab.experiment.sweep.plan import PlanEntry, SweepPlan

# What run_plan_on_slurm hands back per task: its plan entry and its runner.RunOutcome.
OnFinish = Callable[["PlanEntry", Any], None]

# squeue states of a task that may still write its result
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)
SQUEUE_TIMEOUT_S = 30.0
_OPTION_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*")


@dataclass
class SlurmOptions:
    """How to submit: the usual sbatch settings, and how to watch the array."""

    folder: Path
    partition: str | None = None
    gpus_per_task: int | None = None  # default: the largest GPU count among the runs (0: none)
    cpus_per_task: int | None = None
    time_limit_min: int = 60
    account: str | None = None
    sbatch_flags: list[str] = field(default_factory=list)  # e.g. ["--qos=high", "--exclusive"]
    array_parallelism: int | None = None  # tasks running at once (None: SLURM's limit)
    poll_s: float = 5.0
    lost_grace_s: float = 15.0  # how long a result file may lag behind its task's end

    def validate(self) -> None:
        """Raise ConfigError (one sentence) on a value SLURM would refuse."""
        for name, value in (
            ("--gpus-per-task", self.gpus_per_task),
            ("--cpus-per-task", self.cpus_per_task),
        ):
            if value is not None and value < (0 if name == "--gpus-per-task" else 1):
                raise ConfigError(f"{name} must be a positive whole number, got {value}.")
        if self.time_limit_min < 1:
            raise ConfigError(f"--time-limit must be at least 1 minute, got {self.time_limit_min}.")
        if self.array_parallelism is not None and self.array_parallelism < 1:
            raise ConfigError(
                f"--array-parallelism must be at least 1, got {self.array_parallelism}."
            )
        if self.poll_s <= 0:
            raise ConfigError(
                f"--slurm-poll must be a positive number of seconds, got {self.poll_s}."
            )
        # every value below ends up on an #SBATCH line: one line each, names SLURM accepts
        if self.partition is not None:
            check_slurm_name("--partition", self.partition)
        if self.account is not None:
            check_slurm_name("--account", self.account)
        check_plain_text("--slurm-folder", str(self.folder))
        parse_sbatch_flags(self.sbatch_flags)


def parse_sbatch_flags(flags: list[str]) -> dict[str, Any]:
    """``["--qos=high", "--exclusive", "--mem 8G"]`` as submitit's additional_parameters.

    Raises ConfigError for a flag that does not start with ``--``.
    """
    params: dict[str, Any] = {}
    for raw in flags:
        check_plain_text("--sbatch-flag", raw)
        for flag in _split_flags(raw):
            if not flag.startswith("--") or len(flag) < 3:
                raise ConfigError(
                    f"--sbatch-flag {raw!r} is not a long sbatch option; give e.g. "
                    "--sbatch-flag=--qos=high or --sbatch-flag=--exclusive."
                )
            key, sep, value = flag[2:].partition("=")
            if not _OPTION_RE.fullmatch(key):
                raise ConfigError(
                    f"--sbatch-flag {raw!r}: {key!r} is not an sbatch option name (letters, "
                    "digits and '-')."
                )
            params[key.replace("-", "_")] = value if sep else True
    return params


def _split_flags(raw: str) -> list[str]:
    """'--mem 8G --qos=x' -> ['--mem=8G', '--qos=x']."""
    words = shlex.split(raw)
    out: list[str] = []
    for word in words:
        if word.startswith("--") or not out:
            out.append(word)
        elif "=" not in out[-1]:
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def submitit_parameters(slurm: SlurmOptions, sweep: str, gpus: int) -> dict[str, Any]:
    """The SlurmExecutor.update_parameters keywords for one sweep's array."""
    slurm.validate()  # nothing unchecked reaches the #SBATCH lines
    params: dict[str, Any] = {
        "job_name": check_slurm_name("the sweep name", f"wattlab-{sweep}"),
        "time": int(slurm.time_limit_min),
        "signal_delay_s": 60,
    }
    if slurm.partition:
        params["partition"] = slurm.partition
    if slurm.account:
        params["account"] = slurm.account
    if slurm.cpus_per_task is not None:
        params["cpus_per_task"] = int(slurm.cpus_per_task)
    gpus_per_task = slurm.gpus_per_task if slurm.gpus_per_task is not None else gpus
    if gpus_per_task:
        params["gpus_per_task"] = int(gpus_per_task)
    if slurm.array_parallelism is not None:
        params["array_parallelism"] = int(slurm.array_parallelism)
    extra = parse_sbatch_flags(slurm.sbatch_flags)
    if extra:
        params["additional_parameters"] = {k.replace("_", "-"): v for k, v in extra.items()}
    return params


# --- inside a task ---------------------------------------------------------------------------
def job_identity(env: dict[str, str] | None = None) -> dict[str, Any]:
    """This task's SLURM job id (``ARRAY_TASK`` form for arrays), node list and host."""
    env = dict(os.environ) if env is None else env
    array_id, task_id = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    job_id = f"{array_id}_{task_id}" if array_id and task_id else env.get("SLURM_JOB_ID")
    return {
        "scheduler": "slurm",
        "job_id": job_id,
        "nodes": env.get("SLURM_JOB_NODELIST") or socket.gethostname(),
        "hostname": socket.gethostname(),
    }


def run_task(task: dict[str, Any]) -> str:
    """Run one planned run in this SLURM task and write its result file; return its path.

    The run (ok, or failed with its error) goes to a private database in a temporary folder
    on the node, then to ``task['result_path']``. A run that cannot even start (a bad dataset
    path on this node, no GPU) is written as a failed run, so the sweep sees why.
    """
    from wattlab.experiment.db.record import failed_row
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.options import RunContext, WorkerOptions
    from wattlab.experiment.runs.runner import run as run_one
    from wattlab.monitor import utc_now_iso
    from wattlab.train.config import RunConfig

    cfg = RunConfig(**task["config"])
    job = job_identity()
    with tempfile.TemporaryDirectory(prefix="wattlab-task-") as tmp:
        db_path = str(Path(tmp) / "run.db")
        opts = WorkerOptions.from_json(
            {
                **task["options"],
                "db_path": db_path,
                "progress": False,
                "sweep": task["sweep"],
                "repetition": int(task["repetition"]),
            }
        )
        started_at = utc_now_iso()
        with open_store(db_path):  # the task's private database, made here as a sweep makes its
            pass  # own: a sweep's run never creates one (a vanished database stops a sweep)
        try:
            for i in range(int(task.get("warmup_runs", 0))):
                warm = replace(opts, db_path=str(Path(tmp) / f"warmup-{i}.db"), sweep=None)
                run_one(cfg, warm)
            # one process runs here (the task is its own process already), several under torchrun
            run_one(cfg, opts)
        except Interrupted:
            raise  # scancel / time limit: no result; the sweep records the SLURM state
        except Exception as error:  # before anything was stored (preflight): store it failed
            with open_store(db_path) as store:
                if store.runs().empty:
                    message = f"{type(error).__name__}: {error}"
                    store.insert_run(failed_row(cfg, opts, RunContext(), started_at, message))
        export_result(db_path, task["result_path"], job, result_id=task["result_id"])
    return str(task["result_path"])


# --- watching the array from the submitting process -----------------------------------------
def _run_tool(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """A SLURM client command's result, or None when it is missing or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def parse_squeue(text: str) -> dict[str, str]:
    """``squeue -h -r -o '%i|%T'`` output as {job_id: STATE}."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        job_id, sep, state = line.strip().partition("|")
        if sep and job_id:
            states[job_id] = state.strip().upper()
    return states


def squeue_states(job_ids: list[str]) -> dict[str, str] | None:
    """The states SLURM still reports for these (array) jobs; None when squeue cannot answer
    (missing, slurmctld busy): the caller then treats every task as still running.

    Jobs SLURM has forgotten are absent. ``--states=all`` keeps recently finished tasks
    visible with their final state (COMPLETED, CANCELLED, TIMEOUT, ...).
    """
    bases = sorted({j.split("_", 1)[0] for j in job_ids})
    found: dict[str, str] = {}
    for base in bases:  # one query per array: squeue refuses a list holding a forgotten id
        done = _run_tool(["squeue", "-h", "-r", "--states=all", "-j", base, "-o", "%i|%T"])
        if done is None:
            return None
        if done.returncode != 0:
            if "invalid job id" in (done.stderr or "").lower():
                continue  # forgotten: finished long ago
            return None
        found.update(parse_squeue(done.stdout))
    return found


def parse_sacct(text: str, job_id: str) -> dict[str, Any] | None:
    """The allocation line of ``sacct -n -P -X -o JobID,State,ConsumedEnergyRaw,ElapsedRaw,
    NodeList`` for ``job_id``: state, consumed_energy_j (None when not accounted), elapsed_s."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or parts[0] != job_id:
            continue
        state = parts[1].split()[0] if parts[1] else None  # "CANCELLED by 0" -> CANCELLED
        energy = _number(parts[2])
        return {
            "state": state,
            # 0 is what SLURM reports when no energy plugin is configured: not a measurement
            "consumed_energy_j": energy if energy else None,
            "elapsed_s": _number(parts[3]),
            "nodes": parts[4] or None,
        }
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value


def sacct_accounting(job_id: str) -> dict[str, Any] | None:
    """SLURM's own accounting of a finished task, or None where sacct is not configured."""
    done = _run_tool(
        [
            "sacct",
            "-n",
            "-P",
            "-X",
            "-j",
            job_id,
            "-o",
            "JobID,State,ConsumedEnergyRaw,ElapsedRaw,NodeList",
        ]
    )
    if done is None or done.returncode != 0:
        return None  # not configured ("Slurm accounting storage is disabled")
    return parse_sacct(done.stdout, job_id)


@dataclass
class TaskRecord:
    """One submitted run: its plan entry's key, its task and its result file."""

    order: int
    config_hash: str
    repetition: int
    job_id: str
    result_path: str
    result_id: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.config_hash, self.repetition)


def _load_jobs(path: Path) -> list[TaskRecord]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [TaskRecord(**t) for t in data.get("tasks", [])]
    except (OSError, ValueError, TypeError):
        return []


def _save_jobs(path: Path, tasks: list[TaskRecord]) -> None:
    dump_json({"tasks": [t.__dict__ for t in tasks]}, path)


def _submitit() -> Any:
    return require("submitit", "slurm", "--executor slurm")


def check_slurm_here() -> None:
    """Refuse to submit where there is no SLURM client (sbatch and squeue on PATH)."""
    missing = [tool for tool in ("sbatch", "squeue") if shutil.which(tool) is None]
    if missing:
        raise ConfigError(
            f"--executor slurm needs the SLURM commands {', '.join(missing)} on PATH; "
            "run on a login node, or try scripts/slurm-localhost.sh."
        )


class SlurmSweep:
    """Submit a plan's runs as a job array, watch it, merge results; see the module docstring."""

    def __init__(self, plan: SweepPlan, opts: Any, slurm: SlurmOptions) -> None:
        self.plan = plan
        self.opts = opts
        self.slurm = slurm
        from wattlab.jsonio import bounded_part

        self.folder = Path(slurm.folder).expanduser().resolve() / bounded_part(plan.name)
        self.results_dir = self.folder / "results"
        self.jobs_path = self.folder / "jobs.json"
        self._stop: list[int] = []

    # -- the whole thing -----------------------------------------------------------------
    def run(
        self,
        *,
        on_submit: Callable[[list[TaskRecord], int], None] | None = None,
        on_finish: OnFinish | None = None,
    ) -> list[tuple[PlanEntry, Any]]:
        """Submit what is not stored, wait, merge; (PlanEntry, RunOutcome) per finished task.

        ``on_submit(tasks, adopted)`` is called once the array is queued (``adopted``: tasks
        of an earlier submission still running and waited for instead of resubmitted).
        """
        from wattlab.experiment.db.store import open_store

        self.slurm.validate()
        check_slurm_here()
        self.results_dir.mkdir(parents=True, exist_ok=True)
        entries = {(e.config_hash, e.repetition): e for e in self.plan.entries}
        with open_store(self.opts.db_path) as store:
            merge_results(store, self.results_dir)  # left by a watcher that stopped
            done = store.completed_keys(self.plan.name)
        todo = [e for e in self.plan.to_run if (e.config_hash, e.repetition) not in done]
        adopted = self._live_earlier_tasks({(e.config_hash, e.repetition) for e in todo})
        adopted_keys = {t.key for t in adopted}
        fresh = self._submit([e for e in todo if (e.config_hash, e.repetition) not in adopted_keys])
        tasks = adopted + fresh
        _save_jobs(self.jobs_path, tasks)
        if on_submit:
            on_submit(tasks, len(adopted))
        return self._watch(tasks, entries, on_finish)

    # -- submission ------------------------------------------------------------------------
    def _task_payload(self, entry: PlanEntry, result_path: Path, result_id: str) -> dict[str, Any]:
        return {
            "config": entry.config.model_dump(mode="json"),
            "options": self.opts.to_json(),
            "sweep": self.plan.name,
            "repetition": entry.repetition,
            "result_path": str(result_path),
            "result_id": result_id,
            "warmup_runs": int(self.plan.warmup_runs),
        }

    def _submit(self, entries: list[PlanEntry]) -> list[TaskRecord]:
        if not entries:
            return []
        submitit = _submitit()
        payloads, records = [], []
        for entry in entries:
            result_id = new_result_id()
            name = f"{entry.order:04d}-{entry.config_hash}-r{entry.repetition}-{result_id[:8]}"
            result_path = self.results_dir / f"{name}.json"
            payloads.append(self._task_payload(entry, result_path, result_id))
            records.append((entry, str(result_path), result_id))
        gpus = max((e.config.gpus for e in entries if e.config.device == "cuda"), default=0)
        executor = submitit.SlurmExecutor(folder=str(self.folder / "submitit" / "%j"))
        executor.update_parameters(**submitit_parameters(self.slurm, self.plan.name, gpus))
        try:
            jobs = executor.map_array(run_task, payloads)
        except Exception as error:  # sbatch refused: bad partition, account, time limit, ...
            message = str(error).strip().splitlines()[-1] if str(error).strip() else error
            raise WattlabError(f"sbatch refused the job array: {message}") from None
        return [
            TaskRecord(
                order=entry.order,
                config_hash=entry.config_hash,
                repetition=entry.repetition,
                job_id=str(job.job_id),
                result_path=path,
                result_id=result_id,
            )
            for (entry, path, result_id), job in zip(records, jobs, strict=True)
        ]

    def _live_earlier_tasks(self, keys: set[tuple[str, int]]) -> list[TaskRecord]:
        """Tasks of an earlier submission of this sweep that SLURM still runs (one per key)."""
        earlier = [t for t in _load_jobs(self.jobs_path) if t.key in keys]
        if not earlier:
            return []
        states = squeue_states([t.job_id for t in earlier]) or {}
        live: dict[tuple[str, int], TaskRecord] = {}
        for t in earlier:
            if states.get(t.job_id) in LIVE_STATES:
                live.setdefault(t.key, t)
        return list(live.values())

    # -- watching --------------------------------------------------------------------------
    def _watch(
        self,
        tasks: list[TaskRecord],
        entries: dict[tuple[str, int], PlanEntry],
        on_finish: OnFinish | None,
    ) -> list[tuple[PlanEntry, Any]]:
        from wattlab.experiment.db.store import open_store

        outcomes: list[tuple[PlanEntry, Any]] = []
        pending = {t.job_id: t for t in tasks}
        gone_since: dict[str, float] = {}
        handlers = self._catch_signals()
        try:
            while pending:
                states = squeue_states(list(pending))
                with open_store(self.opts.db_path) as store:
                    for job_id, task in list(pending.items()):
                        if states is None and not self._stop:
                            break  # squeue did not answer: look again next time
                        state = None if states is None else states.get(job_id)
                        if state in LIVE_STATES:
                            continue
                        outcome = self._finish(store, task, state, gone_since)
                        if outcome is None:
                            continue
                        del pending[job_id]
                        entry = entries[task.key]  # every task is one of the plan's entries
                        outcomes.append((entry, outcome))
                        if on_finish:
                            on_finish(entry, outcome)
                if self._stop:
                    self._cancel(list(pending))
                    self._record_cancelled(pending, entries, outcomes)
                    raise Interrupted(self._stop[0])
                if pending:
                    self._sleep(self.slurm.poll_s)
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
        return outcomes

    def _finish(
        self, store: Store, task: TaskRecord, state: str | None, gone_since: dict[str, float]
    ) -> Any:
        """The outcome of a task SLURM no longer runs, or None to look again later."""
        from wattlab.experiment.db.record import RunOutcome

        path = Path(task.result_path)
        merged = path.parent / "merged" / path.name
        if path.exists() or merged.exists():
            data = read_result(path if path.exists() else merged)
            data["job"] = {**data.get("job", {}), **self._accounting(task.job_id, state)}
            final = data["job"].get("state")
            run = data["run"]
            if run.get("status") == "failed" and final and final != "COMPLETED":
                run["error"] = f"{run.get('error') or 'failed'} [SLURM task {task.job_id}: {final}]"
            result = merge_result(store, data, path)
            if path.exists():
                merged.parent.mkdir(exist_ok=True)
                os.replace(path, merged)
            run_id = result.run_id
            if run_id is None:  # stored before (an earlier watcher, or another task of it)
                run_id = _stored_run_id(store, self.plan.name, task)
            return RunOutcome(run_id, result.status, result.error)
        # no result file: wait a little, results on a network filesystem can lag
        first = gone_since.setdefault(task.job_id, time.monotonic())
        if time.monotonic() - first < self.slurm.lost_grace_s and not self._stop:
            return None
        return self._store_lost(store, task, state)

    def _record_cancelled(
        self,
        pending: dict[str, TaskRecord],
        entries: dict[tuple[str, int], PlanEntry],
        outcomes: list[tuple[PlanEntry, Any]],
    ) -> None:
        """After scancel: merge results that made it, store the rest as failed (cancelled)."""
        from wattlab.experiment.db.store import open_store

        with open_store(self.opts.db_path) as store:
            for task in pending.values():
                outcome = self._finish(store, task, "CANCELLED", {task.job_id: -1e9})
                outcomes.append((entries[task.key], outcome))

    def _accounting(self, job_id: str, state: str | None) -> dict[str, Any]:
        info = sacct_accounting(job_id) or {}
        out = {k: v for k, v in info.items() if v is not None}
        if state and "state" not in out:
            out["state"] = state
        return out

    def _store_lost(self, store: Store, task: TaskRecord, state: str | None) -> Any:
        """A failed row for a task that ended without a result file (cancelled, lost)."""
        from wattlab.experiment.db.errors import AlreadyStoredError
        from wattlab.experiment.db.record import RunOutcome, failed_row
        from wattlab.experiment.options import RunContext
        from wattlab.monitor import utc_now_iso
        from wattlab.train.config import RunConfig

        entry = next(e for e in self.plan.entries if (e.config_hash, e.repetition) == task.key)
        cfg: RunConfig = entry.config
        accounting = self._accounting(task.job_id, state)
        final = accounting.get("state") or state or "gone from the queue"
        message = (
            f"SLURM task {task.job_id} ended ({final}) without a result; "
            "run the sweep again to resubmit it."
        )
        opts = replace(self.opts, sweep=self.plan.name, repetition=task.repetition)
        row = failed_row(cfg, opts, RunContext(), utc_now_iso(), message)
        job = {
            "scheduler": "slurm",
            "job_id": task.job_id,
            "result_id": f"lost:{task.result_id}",
            "state": final,
            "nodes": accounting.get("nodes"),
            "consumed_energy_j": accounting.get("consumed_energy_j"),
            "elapsed_s": accounting.get("elapsed_s"),
            "recorded_at": utc_now_iso(),
        }
        row.pop("hostname", None)
        try:
            run_id = store.insert_run(row, job=job)
        except AlreadyStoredError:
            run_id = None
        return RunOutcome(run_id, "failed", message)

    # -- signals ---------------------------------------------------------------------------
    def _catch_signals(self) -> dict[int, Any]:
        def stop(signum: int, _frame: object) -> None:
            self._stop.append(signum)

        try:
            return {s: signal.signal(s, stop) for s in STOP_SIGNALS}
        except ValueError:  # not the main thread: leave signals alone
            return {}

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop and time.monotonic() < deadline:
            time.sleep(min(0.2, seconds))

    def _cancel(self, job_ids: list[str]) -> None:
        if job_ids and shutil.which("scancel"):
            subprocess.run(["scancel", *job_ids], capture_output=True, check=False)
            print(
                f"wattlab: cancelled {len(job_ids)} SLURM task(s); finished runs are stored.",
                file=sys.stderr,
            )


def _stored_run_id(store: Store, sweep: str, task: TaskRecord) -> int | None:
    runs = store.runs(sweep=sweep, status="ok")
    same = runs[(runs["config_hash"] == task.config_hash) & (runs["repetition"] == task.repetition)]
    return int(same["id"].iloc[0]) if len(same) else None


def run_plan_on_slurm(
    plan: SweepPlan,
    opts: Any,
    slurm: SlurmOptions,
    *,
    on_submit: Callable[[list[TaskRecord], int], None] | None = None,
    on_finish: OnFinish | None = None,
) -> list[tuple[PlanEntry, Any]]:
    """Run a sweep plan's runs as a SLURM job array; (PlanEntry, RunOutcome) per task."""
    return SlurmSweep(plan, opts, slurm).run(on_submit=on_submit, on_finish=on_finish)
