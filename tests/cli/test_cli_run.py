"""`wattlab run`, `devices`, `monitor`, `export` end to end on the CPU, and their bad input."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.in_process import wattlab_in_process
from wattlab.wording import provenances_named

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
TINY = [
    "--device", "cpu", "--model", "mobilenet_v3_small", "--stem", "imagenet",
    "--train-samples", "256", "--test-samples", "128", "--batch-size", "64",
    "--warmup-steps", "1", "--no-progress",
]  # fmt: skip


def wattlab(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env
    )


@pytest.fixture(scope="module")
def run_db(tmp_path_factory):
    """One real tiny run with CodeCarbon and STEP, shared by the assertions below."""
    cwd = tmp_path_factory.mktemp("run")
    done = wattlab(
        "run", *TINY, "--epochs", "3", "--codecarbon", "--project-after-epochs", "2",
        "--ram-measure", "process", "--cpu-load", "process", "--db", "r.db", "--json", "run.json",
        cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd


@pytest.mark.slow
def test_run_stores_one_complete_row(run_db):
    con = sqlite3.connect(run_db / "r.db")
    con.row_factory = sqlite3.Row
    rows = con.execute("SELECT * FROM runs").fetchall()
    assert len(rows) == 1
    run = rows[0]
    assert run["status"] == "ok" and run["samples"] == 3 * (256 // 64) * 64
    assert run["train_size"] == 256 and run["test_size"] == 128
    assert run["model_gflops_per_sample"] > 0 and run["params"] > 0
    assert run["energy_total_j"] > 0 and run["duration_s"] > 0
    total = run["energy_gpu_j"] + run["energy_cpu_j"] + run["energy_dram_j"]
    assert total + run["energy_other_j"] == pytest.approx(run["energy_total_j"])
    kwh = run["energy_total_j"] / 3.6e6
    assert run["co2e_kg"] == pytest.approx(kwh * 0.20)
    assert run["co2e_low_kg"] == pytest.approx(kwh * 0.10)
    assert run["co2e_high_kg"] == pytest.approx(kwh * 0.30)
    assert 0 <= run["accuracy"] <= 1
    windows = con.execute("SELECT name, epoch, samples, energy_total_j FROM windows").fetchall()
    names = sorted({w["name"] for w in windows})
    assert names == ["budget", "codecarbon", "epoch", "epoch_eval", "eval", "run", "warmup"]
    # CodeCarbon, offline, is compared on exactly the window it measured
    cc_window = next(w for w in windows if w["name"] == "codecarbon")
    assert run["codecarbon_energy_j"] > 0
    assert run["codecarbon_rel_error"] == pytest.approx(
        (run["codecarbon_energy_j"] - cc_window["energy_total_j"]) / cc_window["energy_total_j"]
    )
    epochs = [w for w in windows if w["name"] == "epoch"]
    assert sorted(w["epoch"] for w in epochs) == [1, 2, 3]
    assert sum(w["samples"] for w in epochs) == run["samples"]
    budget = next(w for w in windows if w["name"] == "budget")
    assert budget["energy_total_j"] == pytest.approx(run["energy_total_j"])
    assert sum(w["energy_total_j"] for w in epochs) <= budget["energy_total_j"] * 1.001
    assert con.execute("SELECT COUNT(*) FROM trace").fetchone()[0] > 0
    # where memory energy is estimated, the row says which memory the estimate counted
    components = json.loads(run["components_json"])
    for name, info in components.items():
        if name.startswith("ram:estimated"):
            assert info["ram_measure"] == "process"
        if name.startswith("cpu:estimated"):  # and whose load the CPU estimate counted
            assert info["utilisation"] == "process-tree"


@pytest.mark.slow
def test_run_json_output(run_db):
    data = json.loads((run_db / "run.json").read_text())
    assert data["status"] == "ok" and data["samples"] == 768
    named = provenances_named(data["provenance"])  # by share: one word only when it is all
    assert named != ["unknown"] and 0.0 <= data["energy_measured_share"] <= 1.0
    assert (named == ["estimated"]) == (data["energy_measured_share"] == 0.0)


@pytest.mark.slow
def test_export_round_trips(run_db, tmp_path):
    done = wattlab("export", "--db", "r.db", "--format", "csv", "--out", str(tmp_path), cwd=run_db)
    assert done.returncode == 0, done.stderr
    import pandas as pd

    runs = pd.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 1 and runs.loc[0, "status"] == "ok"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--model", "resnet9000", "--epochs", "1"],
            "resnet9000",
            marks=pytest.mark.extra("train"),
        ),
        (["--precision", "fp8", "--epochs", "1"], "precision"),
        (["--budget-samples", "0"], "--budget-samples"),
        pytest.param(
            ["--epochs", "1", "--dataset", "cifar10", "--data-dir", "nope"],
            "nope",
            marks=pytest.mark.slow,  # gets as far as the dataset: imports torch
        ),
        (["--epochs", "1", "--power-limit", "250"], "power limits apply to GPUs"),
        pytest.param(  # issue 48: 64 threads on 2 cores were accepted silently
            ["--epochs", "1", "--cpu-threads", "4096"],
            "--cpu-threads 4096 asks for more threads than the",
            marks=pytest.mark.extra("train"),
        ),
        (["--epochs", "1", "--interval", "-1"], "interval"),
        (["--epochs", "3", "--project-after-epochs", "0"], "--project-after-epochs must be"),
        (["--epochs", "3", "--project-after-fraction", "1.5"], "--project-after-fraction must"),
        (["--epochs", "3", "--project-after", "1.5"], "--project-after must be a whole number"),
        (
            ["--epochs", "3", "--project-after-epochs", "2", "--project-after-fraction", "0.2"],
            "not both",
        ),
        (["--epochs", "3", "--project-after", "2", "--project-after-epochs", "2"], "only one"),
    ],
)
def test_bad_input_is_one_sentence_exit_2_nothing_written(tmp_path, args, message):
    base = [a for a in TINY if a not in ("--model", "mobilenet_v3_small")]
    # in this process (tests/in_process.py): refused before training, and a fresh interpreter
    # paid ~4.5 s of CPU importing torch to look the model or the dataset up
    done = wattlab_in_process("run", *base, *args, "--db", "x.db", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()  # nothing written, not even an empty database


def test_the_old_project_after_prints_one_deprecation_line_and_maps_to_the_new_flag(tmp_path):
    # a fraction means --project-after-fraction, which needs one process: refused before training
    base = [a for a in TINY if a not in ("--model", "mobilenet_v3_small")]
    done = wattlab(
        "run", *base, "--epochs", "3", "--nproc", "2", "--project-after", "0.2", "--db", "x.db",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    warning, error = done.stderr.strip().splitlines()
    assert warning == (
        "wattlab: warning: --project-after is deprecated; use --project-after-fraction 0.2 "
        "(the same projection)."
    )
    assert "project_after_fraction (step-level STEP) needs a single process" in error
    assert not (tmp_path / "x.db").exists()


@pytest.mark.slow
def test_gpus_without_a_gpu(tmp_path):
    done = wattlab("run", "--device", "cuda", "--epochs", "1", "--db", "x.db", cwd=tmp_path,
                   env={"CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert done.returncode == 2
    assert "no CUDA GPU" in done.stderr and "Traceback" not in done.stderr


def test_foreign_database_refused(tmp_path):
    con = sqlite3.connect(tmp_path / "other.db")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    before = (tmp_path / "other.db").read_bytes()
    done = wattlab("run", *TINY, "--epochs", "1", "--db", "other.db", cwd=tmp_path)
    assert done.returncode == 2 and "not a wattlab database" in done.stderr
    assert (tmp_path / "other.db").read_bytes() == before


@pytest.mark.parametrize("measure", ["system", "process"])
def test_devices_says_which_memory_the_ram_estimate_counts(tmp_path, measure):
    env = {"CUDA_VISIBLE_DEVICES": "", "WATTLAB_POWERCAP_ROOT": str(tmp_path)}  # no RAPL
    done = wattlab("devices", "--ram-measure", measure, "--json", "-", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    ram = next(r for r in json.loads(done.stdout)["meters"] if r["component"] == "ram:estimated")
    expected = "resident memory (RSS)" if measure == "process" else "the whole system"
    assert expected in ram["description"]


@pytest.mark.parametrize("load", ["machine", "process"])
def test_devices_says_whose_load_the_cpu_estimate_counts(tmp_path, load):
    env = {"CUDA_VISIBLE_DEVICES": "", "WATTLAB_POWERCAP_ROOT": str(tmp_path)}  # no RAPL
    done = wattlab("devices", "--cpu-load", load, "--json", "-", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    cpu = next(r for r in json.loads(done.stdout)["meters"] if r["component"] == "cpu:estimated")
    if load == "process":
        assert "the measured process tree's CPU time" in cpu["description"]
        assert "other processes' load is not counted" in cpu["description"]
    else:
        assert "every process's load counts as the run's" in cpu["description"]


@pytest.mark.slow
def test_monitor_and_a_command_sweep_with_a_process_cpu_load_say_so(tmp_path):
    """`--cpu-load process` end to end: `monitor` describes the estimate in its JSON, and a
    command sweep's stored run names the load in its components."""
    env = {"CUDA_VISIBLE_DEVICES": "", "WATTLAB_POWERCAP_ROOT": str(tmp_path)}  # no RAPL
    burn = "import time\nwhile time.process_time() < 0.2:\n    pass\n"
    done = wattlab("monitor", "--cpu-load", "process", "--json", "-", "--", sys.executable,
                   "-c", burn, cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    how = json.loads(done.stdout)["meters"]["cpu:estimated"]["how"]
    assert "the measured process tree's CPU time" in how
    spec = tmp_path / "burn.yaml"
    spec.write_text(
        f"name: burn\ncommand: [{json.dumps(sys.executable)}, -c, {json.dumps(burn)}]\n"
        'label: burn\nenv: {N: "{n}"}\ngrid: {n: [1]}\nrepetitions: 1\nwarmup_runs: 0\n'
        "cooldown_s: 0\n"
    )
    done = wattlab("sweep", str(spec), "--cpu-load", "process", "--db", "s.db", cwd=tmp_path,
                   env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "s.db") as con:
        (components,) = con.execute("SELECT components_json FROM runs").fetchone()
    cpu = json.loads(components)["cpu:estimated"]
    assert cpu["utilisation"] == "process-tree"


@pytest.mark.parametrize("command", ["devices", "monitor", "sweep"])
def test_a_bad_cpu_load_is_one_sentence_exit_2(tmp_path, command):
    tail = ["--", "true"] if command == "monitor" else []
    first = ["demo"] if command == "sweep" else []
    done = wattlab(command, *first, "--cpu-load", "everyone", *tail, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--cpu-load must be one of machine, process" in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def test_a_bad_ram_measure_is_one_sentence_exit_2(tmp_path):
    done = wattlab("run", *TINY, "--epochs", "1", "--ram-measure", "rss", "--db", "x.db",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "--ram-measure must be one of system, process" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x.db").exists()


def test_devices_lists_meters_and_problems(tmp_path):
    done = wattlab("devices", "--json", "-", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["meters"]
    assert any(r["component"].startswith("cpu") for r in rows)
    missing = [r for r in rows if r.get("status") == "missing"]
    assert all(r["reason"] and r["fix"] and r["fallback"] for r in missing)


def test_monitor_runs_command_and_reports(tmp_path):
    code = "import time; t=time.time()\nwhile time.time()-t<0.6: pass\nraise SystemExit(3)"
    done = wattlab(
        "monitor", "--interval", "0.05", "--json", "m.json", "--csv-trace", "t.csv",
        "--", sys.executable, "-c", code, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 3  # the command's own exit code
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["exit_code"] == 3 and data["command"][0] == sys.executable
    assert data["duration_s"] >= 0.6
    assert data["energy_j"]["total"] > 0
    assert set(data["co2e_kg"]) >= {"value", "low", "high"}
    assert data["co2e_kg"]["low"] <= data["co2e_kg"]["value"] <= data["co2e_kg"]["high"]
    assert (tmp_path / "t.csv").read_text().startswith("t_s,component,power_w")
    assert "energy" in done.stdout
    # every meter says how it got its number; a RAM estimate says which memory it counted
    assert set(data["meters"]) == set(data["energy_j"]) - {"total"}
    ram = data["meters"].get("ram:estimated")
    assert ram is None or "the whole system's used memory" in ram["how"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--"], 2, "give the command"),
        (["--interval", "-1", "--", "true"], 2, "interval"),
        (["--powercap-root", "/does/not/exist", "--", "true"], 2, "does not exist"),
        (["--", "definitely-not-a-command-xyz"], 127, "command not found"),
        (["--json", "/no/such/dir/m.json", "--", "true"], 2, "does not exist"),
    ],
)
def test_monitor_bad_input(tmp_path, args, code, message):
    done = wattlab("monitor", *args, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def _write_tiny_cifar(folder: Path, per_batch: int = 64) -> None:
    import pickle

    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
            b"batch_label": name.encode(),
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)


@pytest.mark.slow
def test_run_reads_the_official_cifar_layout(tmp_path):
    _write_tiny_cifar(tmp_path / "data" / "cifar-10-batches-py")
    base = [a for a in TINY if a not in ("--train-samples", "256", "--test-samples", "128")]
    done = wattlab("run", *base, "--dataset", "cifar10", "--data-dir", "data", "--epochs", "1",
                   "--db", "c.db", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout)
    assert row["dataset"] == "cifar10" and row["samples"] == (5 * 64 // 64) * 64
    (tmp_path / "data" / "cifar-10-batches-py" / "data_batch_4").unlink()
    done = wattlab("run", *base, "--dataset", "cifar10", "--data-dir", "data", "--epochs", "1",
                   "--db", "c.db", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "data_batch_4" in done.stderr


@pytest.mark.slow
def test_two_gloo_processes_do_the_same_budget_and_meter_the_host_once(tmp_path):
    rows = {}
    for nproc in (1, 2):
        done = wattlab("run", *TINY, "--epochs", "1", "--nproc", str(nproc), "--db", "d.db",
                       "--json", "-", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        rows[nproc] = json.loads(done.stdout)
    assert rows[1]["samples"] == rows[2]["samples"] == 256
    assert rows[2]["world_size"] == 2
    comps = rows[2]["components_json"]  # one shape, whether one process ran or two
    assert sorted(c.split(":")[0] for c in comps) == sorted(
        c.split(":")[0] for c in rows[1]["components_json"]
    )  # the second process added no second CPU/RAM meter
    con = sqlite3.connect(tmp_path / "d.db")
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2  # one row per run


def test_monitor_forwards_sigterm_to_the_command(tmp_path):
    import signal
    import time

    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (open('got-term', 'w').close(), sys.exit(7)))\n"
        "open('ready', 'w').close()\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [*WATTLAB, "monitor", "--json", "m.json", "--", sys.executable, "-c", code],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 60
    while not (tmp_path / "ready").exists() and time.time() < deadline:
        time.sleep(0.1)
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=60)
    assert (tmp_path / "got-term").exists()  # the command itself got the signal
    assert child.returncode == 7  # and its exit code is ours
    assert json.loads((tmp_path / "m.json").read_text())["exit_code"] == 7


def test_power_restore_without_a_journal_changes_nothing(tmp_path):
    done = wattlab("power", "restore", cwd=tmp_path, env={"WATTLAB_STATE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "nothing to restore" in done.stdout
