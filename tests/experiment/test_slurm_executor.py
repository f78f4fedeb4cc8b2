"""`wattlab sweep --executor slurm` against a real SLURM (scripts/slurm-localhost.sh).

The end-to-end tests need a running cluster. Without one they skip, saying why, except where
the environment says a cluster is expected (WATTLAB_SLURM_EXPECTED=1, set by .ci/run): there
they skip only when scripts/slurm-localhost.sh wrote its reason file, and fail otherwise.
The parsing and validation tests below them run everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.executors.slurm import (
    SlurmOptions,
    job_identity,
    parse_sacct,
    parse_sbatch_flags,
    parse_squeue,
    submitit_parameters,
)

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
REASON_FILE = Path(
    os.environ.get("WATTLAB_SLURM_REASON_FILE", "/tmp/wattlab-slurm/unavailable.txt")
)

TWO_RUNS = """
name: two
base: {model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 128,
       test_samples: 64, epochs: 1, warmup_steps: 1, precision: fp32}
grid: {batch_size: [32, 64]}
repetitions: 1
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


# --- without a cluster ------------------------------------------------------------------------
def test_sbatch_flags_become_submitit_parameters():
    assert parse_sbatch_flags(["--qos=high", "--exclusive", "--mem 8G"]) == {
        "qos": "high",
        "exclusive": True,
        "mem": "8G",
    }
    slurm = SlurmOptions(
        folder=Path("f"),
        partition="gpu",
        cpus_per_task=8,
        time_limit_min=30,
        account="proj",
        sbatch_flags=["--qos=high", "--mail-type=END"],
        array_parallelism=3,
    )
    params = submitit_parameters(slurm, "s", gpus=4)
    assert params["partition"] == "gpu" and params["account"] == "proj"
    assert params["cpus_per_task"] == 8 and params["time"] == 30
    assert params["gpus_per_task"] == 4  # the runs' GPU count when not given
    assert params["array_parallelism"] == 3
    assert params["additional_parameters"] == {"qos": "high", "mail-type": "END"}
    assert "gpus_per_task" not in submitit_parameters(SlurmOptions(folder=Path("f")), "s", 0)


@pytest.mark.parametrize(
    "bad, word",
    [
        (dict(sbatch_flags=["qos=high"]), "sbatch-flag"),
        (dict(time_limit_min=0), "time-limit"),
        (dict(array_parallelism=0), "array-parallelism"),
        (dict(cpus_per_task=0), "cpus-per-task"),
        (dict(poll_s=0), "slurm-poll"),
    ],
)
def test_bad_slurm_options_are_refused_in_one_sentence(bad, word):
    with pytest.raises(ConfigError, match=word):
        SlurmOptions(folder=Path("f"), **bad).validate()


def test_squeue_and_sacct_output_are_parsed():
    states = parse_squeue("12_0|RUNNING\n12_1|PENDING\n\n13|cancelled\n")
    assert states == {"12_0": "RUNNING", "12_1": "PENDING", "13": "CANCELLED"}
    text = "12_0|COMPLETED|5400|61|node-a\n12_1|CANCELLED by 0|0|3|node-b\n"
    assert parse_sacct(text, "12_0") == {
        "state": "COMPLETED",
        "consumed_energy_j": 5400.0,
        "elapsed_s": 61.0,
        "nodes": "node-a",
    }
    # SLURM prints 0 when it accounts no energy: that is no measurement
    assert parse_sacct(text, "12_1")["consumed_energy_j"] is None
    assert parse_sacct(text, "12_1")["state"] == "CANCELLED"
    assert parse_sacct(text, "99") is None


def test_job_identity_names_array_tasks():
    env = {"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_ID": "44"}
    assert job_identity({**env, "SLURM_JOB_NODELIST": "n1"})["job_id"] == "40_3"
    assert job_identity({"SLURM_JOB_ID": "44"})["job_id"] == "44"


def test_cli_refuses_an_unknown_executor(tmp_path):
    done = subprocess.run(
        [*WATTLAB, "sweep", "quickstart", "--db", "x.db", "--executor", "cloud"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "cloud" in done.stderr and "local, slurm" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "x.db").exists()


# --- with a cluster ---------------------------------------------------------------------------
def _cluster_up() -> bool:
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return False
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(
        s.strip() in ("idle", "mix", "alloc") for s in out.stdout.split()
    )


@pytest.fixture(scope="module")
def slurm_cluster():
    if _cluster_up():
        return
    if REASON_FILE.exists():
        pytest.skip(f"no SLURM cluster: {REASON_FILE.read_text().strip()}")
    if os.environ.get("WATTLAB_SLURM_EXPECTED") == "1":
        pytest.fail(
            "a SLURM cluster was expected (WATTLAB_SLURM_EXPECTED=1) but is not up, and "
            f"scripts/slurm-localhost.sh wrote no reason file at {REASON_FILE}"
        )
    pytest.skip("no SLURM cluster here (sinfo missing or no idle node); scripts/slurm-localhost.sh")


def wattlab(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


SLURM_ARGS = ("--executor", "slurm", "--cpus-per-task", "1", "--slurm-poll", "1")


def _rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT config_hash, repetition, config_json, label, status, error, hostname "
            "FROM runs ORDER BY config_hash, repetition, id"
        ).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_slurm_sweep_stores_the_same_runs_as_a_local_one(slurm_cluster, tmp_path):
    (tmp_path / "two.yaml").write_text(TWO_RUNS)
    done = wattlab("sweep", "two.yaml", "--db", "slurm.db", *SLURM_ARGS, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SLURM task(s)" in done.stderr
    local = wattlab("sweep", "two.yaml", "--db", "local.db", cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]

    slurm_rows, local_rows = _rows(tmp_path / "slurm.db"), _rows(tmp_path / "local.db")
    assert len(slurm_rows) == len(local_rows) == 2
    assert all(r[4] == "ok" for r in slurm_rows + local_rows)
    # same configurations, repetitions and labels, row for row
    assert [r[:4] for r in slurm_rows] == [r[:4] for r in local_rows]

    # every task went through its own result file, merged once, with its SLURM job beside it
    folder = tmp_path / "wattlab-slurm" / "two" / "results"
    assert not list(folder.glob("*.json"))
    merged = sorted((folder / "merged").glob("*.json"))
    assert len(merged) == 2
    con = sqlite3.connect(tmp_path / "slurm.db")
    jobs = con.execute("SELECT scheduler, job_id, result_id FROM scheduler_jobs").fetchall()
    con.close()
    assert len(jobs) == 2 and all(s == "slurm" and "_" in j for s, j, _ in jobs)
    assert {json.loads(p.read_text())["result_id"] for p in merged} == {r for *_, r in jobs}

    # merging the same files again, and running the sweep again, stores nothing twice
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.executors.result_files import merge_result, read_result

    with open_store(tmp_path / "slurm.db") as store:
        again = [merge_result(store, read_result(p), p).action for p in merged]
    assert again == ["duplicate", "duplicate"]
    rerun = wattlab("sweep", "two.yaml", "--db", "slurm.db", *SLURM_ARGS, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "nothing to submit" in rerun.stderr
    assert len(_rows(tmp_path / "slurm.db")) == 2


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_scancel_then_resubmit_stores_every_run_once(slurm_cluster, tmp_path):
    (tmp_path / "two.yaml").write_text(TWO_RUNS)
    jobs_json = tmp_path / "wattlab-slurm" / "two" / "jobs.json"
    sweep = subprocess.Popen(
        [*WATTLAB, "sweep", "two.yaml", "--db", "s.db", *SLURM_ARGS],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tasks = _wait_for(
            lambda: jobs_json.exists() and json.loads(jobs_json.read_text())["tasks"],
            180,
            "the job array to be submitted",
        )
        array = tasks[0]["job_id"].split("_")[0]
        subprocess.run(["scancel", array], check=True)
        _, err = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 1, err[-3000:]  # runs failed: cancelled
    first = _rows(tmp_path / "s.db")
    cancelled = [r for r in first if r[4] == "failed"]
    assert cancelled and all("CANCELLED" in r[5] and array in r[5] for r in cancelled)

    again = wattlab("sweep", "two.yaml", "--db", "s.db", *SLURM_ARGS, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = _rows(tmp_path / "s.db")
    ok = [(r[0], r[1]) for r in rows if r[4] == "ok"]
    assert len(ok) == 2 and len(set(ok)) == 2  # every run exactly once
    assert len(rows) == len(ok) + len(cancelled)  # and the cancelled attempts, as failed
