"""Result files: how a run done elsewhere (a SLURM task) travels to the results database.

A task never writes the shared SQLite file (SQLite's WAL does not work on a network
filesystem). It stores its run in a private database on the node, then ``export_result``
writes the run, its windows and its power trace to ONE JSON file in the sweep folder,
atomically (temporary file + rename), under a fresh ``result_id``. The sweep that submitted
the task calls ``merge_results``, which stores each file's run with ``Store.insert_run`` in one
transaction together with a ``scheduler_jobs`` row holding the ``result_id``; that column is
unique, so merging the same file twice (two sweeps, a crash between merge and clean-up) stores
nothing the second time. Merged files move to ``merged/`` beside the folder's other files.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattlab.errors import DataError
from wattlab.experiment.db.errors import AlreadyStoredError
from wattlab.experiment.db.store import Store, open_store
from wattlab.jsonio import dump_json
from wattlab.monitor import utc_now_iso

FORMAT = "wattlab-result/1"
MERGED_DIR = "merged"


def new_result_id() -> str:
    """A fresh id for one result file (random, so retries of a task never share one)."""
    return uuid.uuid4().hex


def _plain(value: Any) -> Any:
    """A JSON-friendly Python value from a pandas cell (NaN -> None, numpy -> Python)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def export_result(
    db_path: str | Path, path: str | Path, job: dict[str, Any], result_id: str | None = None
) -> dict[str, Any]:
    """Write the single run stored in the private database ``db_path`` to the result file
    ``path`` (atomically), with ``job`` (scheduler, job_id, nodes, ...). Returns the file's data.

    Raises DataError when the database holds no run or more than one.
    """
    with open_store(db_path, create=False) as store:
        runs = store.runs()
        if len(runs) != 1:
            raise DataError(f"{db_path} holds {len(runs)} runs; a task's database holds one.")
        run = {k: _plain(v) for k, v in runs.iloc[0].items() if k != "id"}
        if run.get("status") not in ("ok", "failed"):  # a claim its process never finished
            run["error"] = run.get("error") or f"the run did not finish (status {run['status']})"
            run["status"] = "failed"
        run_id = int(runs.iloc[0]["id"])
        windows = [
            {k: _plain(v) for k, v in w.items() if k != "run_id"}
            for w in store.windows([run_id], as_stored=True).to_dict("records")
        ]
        trace = [
            [_plain(t["t_s"]), t["component"], _plain(t["power_w"])]
            for t in store.trace([run_id]).to_dict("records")
        ]
    data = {
        "format": FORMAT,
        "result_id": result_id or new_result_id(),
        "written_at": utc_now_iso(),
        "job": dict(job),
        "run": run,
        "windows": windows,
        "trace": trace,
    }
    dump_json(data, path)
    return data


def read_result(path: str | Path) -> dict[str, Any]:
    """The data of one result file. Raises DataError when it is not a wattlab result file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"cannot read the result file {path}: {error}.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"{path} is not a wattlab result file (format {FORMAT!r} expected).")
    return data


@dataclass
class MergedResult:
    """What merging one result file did: ``stored`` (new run_id), or ``duplicate`` (nothing)."""

    path: Path
    result_id: str
    action: str  # 'stored' | 'duplicate'
    run_id: int | None
    status: str  # the run's status: 'ok' | 'failed'
    config_hash: str
    repetition: int
    error: str | None = None


@dataclass
class MergeSummary:
    merged: list[MergedResult] = field(default_factory=list)

    @property
    def stored(self) -> list[MergedResult]:
        return [m for m in self.merged if m.action == "stored"]

    @property
    def duplicates(self) -> list[MergedResult]:
        return [m for m in self.merged if m.action == "duplicate"]


def job_row(data: dict[str, Any]) -> dict[str, Any]:
    """The ``scheduler_jobs`` row of a result file (run_id is assigned by the store)."""
    job = data.get("job") or {}
    return {
        "scheduler": str(job.get("scheduler") or "unknown"),
        "job_id": job.get("job_id"),
        "result_id": str(data["result_id"]),
        "state": job.get("state"),
        "nodes": job.get("nodes"),
        "consumed_energy_j": job.get("consumed_energy_j"),
        "elapsed_s": job.get("elapsed_s"),
        "recorded_at": utc_now_iso(),
    }


def merge_result(store: Store, data: dict[str, Any], path: Path | None = None) -> MergedResult:
    """Store one result file's run (and its job) in one transaction, at most once."""
    run = data["run"]
    trace = [(float(t), str(c), p) for t, c, p in data.get("trace", [])]
    base = dict(
        path=path or Path("-"),
        result_id=str(data["result_id"]),
        status=str(run.get("status")),
        config_hash=str(run.get("config_hash")),
        repetition=int(run.get("repetition") or 0),
        error=run.get("error"),
    )
    try:
        run_id = store.insert_run(run, data.get("windows", []), trace, job=job_row(data))
    except AlreadyStoredError:
        return MergedResult(action="duplicate", run_id=None, **base)
    return MergedResult(action="stored", run_id=run_id, **base)


def merge_results(store: Store, folder: str | Path, *, move: bool = True) -> MergeSummary:
    """Merge every result file in ``folder`` (not its subfolders) into ``store``.

    Safe to call again at any time, also from two processes: a run is stored at most once.
    With ``move``, merged files go to ``folder/merged/`` so the next call skips them.
    """
    folder = Path(folder)
    summary = MergeSummary()
    if not folder.is_dir():
        return summary
    done_dir = folder / MERGED_DIR
    for path in sorted(folder.glob("*.json")):
        try:
            data = read_result(path)
        except DataError:
            continue  # a foreign file; result files appear whole (atomic rename) or not at all
        merged = merge_result(store, data, path)
        summary.merged.append(merged)
        if move:
            done_dir.mkdir(exist_ok=True)
            try:
                os.replace(path, done_dir / path.name)
            except FileNotFoundError:  # another merger moved it first
                pass
    return summary
