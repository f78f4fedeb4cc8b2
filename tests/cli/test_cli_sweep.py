"""`wattlab sweep` and `wattlab report` end to end on the CPU: plan, run, resume, report."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.in_process import wattlab_in_process

WATTLAB = [sys.executable, "-m", "wattlab.cli"]

TINY_SPEC = """
name: tiny
base: {model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 256,
       test_samples: 128, epochs: 1, batch_size: 64, warmup_steps: 1}
grid: {precision: [fp32]}
repetitions: 3
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


def wattlab(*args: str, cwd: Path, timeout: float = 600):
    return subprocess.run(
        [*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


PRESET = Path(__file__).resolve().parents[2] / "wattlab/experiment/specs/presets/quickstart.yaml"
# The quickstart preset as shipped (its grid, repetitions, order, CodeCarbon) at half of its
# images (one step at batch 128) and one warm-up step instead of two: bf16 autocast on a CPU
# without native bf16 is ~10x slower than fp32 (a bf16 step at batch 128 is ~5 s of CPU here), and
# the shipped sizes took ~100 s of this suite's time for nothing these tests check (issue 39).
# `wattlab sweep quickstart` itself is planned in tests/cli/test_cli_smoke.py.
SPEC = "quickstart.yaml"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("quickstart")
    text = PRESET.read_text()
    smaller = (("train_samples", 256, 128), ("test_samples", 128, 64), ("warmup_steps", 2, 1))
    for key, shipped, small in smaller:
        assert f"  {key}: {shipped}\n" in text  # the preset's sizes, as this copy expects
        text = text.replace(f"  {key}: {shipped}\n", f"  {key}: {small}\n")
    (cwd / SPEC).write_text(text)
    # 8 CPU runs, four of them bf16 autocast; the limit only catches a hang
    done = wattlab("sweep", SPEC, "--db", "q.db", "--json", "sweep.json", cwd=cwd, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd


@pytest.mark.slow
def test_quickstart_runs_every_planned_run_once(quickstart):
    plan = json.loads((quickstart / "sweep.json").read_text())
    assert len(plan["runs"]) == 8 and all(r["action"] == "run" for r in plan["runs"])
    assert all(r["status"] == "ok" for r in plan["results"])
    con = sqlite3.connect(quickstart / "q.db")
    rows = con.execute(
        "SELECT config_hash, repetition, COUNT(*) FROM runs WHERE status='ok' "
        "GROUP BY config_hash, repetition"
    ).fetchall()
    assert len(rows) == 8 and all(n == 1 for *_, n in rows)
    assert len({h for h, _, _ in rows}) == 4  # 2x2 grid
    # CodeCarbon ran beside every run (the preset turns it on), offline
    cc = con.execute("SELECT COUNT(*) FROM runs WHERE codecarbon_energy_j > 0").fetchone()[0]
    assert cc == 8


@pytest.mark.slow
def test_rerun_resumes_and_runs_nothing(quickstart):
    # a dry run starts no process of its own: in this process (tests/in_process.py), where a
    # fresh interpreter paid ~4.5 s of CPU importing torch to check the model
    done = wattlab_in_process("sweep", SPEC, "--db", "q.db", "--dry-run", "--json", "-",
                              cwd=quickstart)  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert {r["action"] for r in plan["runs"]} == {"done"}
    assert plan["expected_s"] == 0


@pytest.mark.slow
def test_report_renders_every_figure(quickstart):
    done = wattlab_in_process("report", "--db", "q.db", "--sweep", "quickstart", "--out", "rep",
                              "--json", "summary.json", cwd=quickstart)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = quickstart / "rep"
    html = (rep / "report.html").read_text()
    for fig in ("energy_vs_time", "energy_components", "co2e", "power_traces",
                "codecarbon_parity"):  # fmt: skip
        assert (rep / f"{fig}.png").exists() and (rep / f"{fig}.svg").exists()
    assert html.count("data:image/png;base64,") >= 5
    assert "http://" not in html and "https://" not in html.replace("https://www.w3.org", "")
    summary = json.loads((quickstart / "summary.json").read_text())
    assert len(summary["configurations"]) == 4
    for conf in summary["configurations"]:
        assert {"time_s", "energy_j", "time_change", "energy_change"} <= set(conf)
    assert isinstance(summary["pareto"], list) and isinstance(summary["operating_region"], list)


@pytest.mark.slow
def test_dry_run_lists_skips_with_reasons_and_stores_nothing(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        TINY_SPEC.replace("grid: {precision: [fp32]}", "grid: {device: [cpu, cuda]}")
        .replace("name: tiny", "name: mixed")
        .replace("device: cpu, ", "")
    )
    env_done = subprocess.run(
        [*WATTLAB, "sweep", str(spec), "--db", "d.db", "--dry-run", "--json", "-"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert env_done.returncode == 0, env_done.stderr
    plan = json.loads(env_done.stdout)
    actions = [(r["label"].split()[1], r["action"], r["reason"]) for r in plan["runs"]]
    assert ("1xCPU", "run", "") in actions
    assert any(a == "skip" and "no CUDA GPU" in why for _, a, why in actions)
    assert not (tmp_path / "d.db").exists()  # a dry run creates no database at all


@pytest.mark.slow
def test_killed_sweep_resumes_with_every_run_exactly_once(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY_SPEC)
    db = tmp_path / "k.db"
    child = subprocess.Popen(
        [*WATTLAB, "sweep", str(spec), "--db", str(db)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 300
    ok = 0
    while time.time() < deadline and ok < 1:
        time.sleep(0.5)
        if db.exists():
            try:
                con = sqlite3.connect(db, timeout=5)
                ok = con.execute("SELECT COUNT(*) FROM runs WHERE status='ok'").fetchone()[0]
                con.close()
            except sqlite3.OperationalError:
                ok = 0
    os.killpg(child.pid, signal.SIGKILL)  # the sweep and the run in flight, at once
    child.wait()
    assert ok >= 1, "the sweep stored no run within 300 s"
    done = wattlab("sweep", str(spec), "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    con = sqlite3.connect(db)
    reps = con.execute(
        "SELECT repetition, COUNT(*) FROM runs WHERE status='ok' GROUP BY repetition"
    ).fetchall()
    assert sorted(reps) == [(0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TINY_SPEC.replace("grid:", "gird:"), "gird"),
        (TINY_SPEC.replace("[fp32]", "[]"), "grid"),
        (TINY_SPEC + "baseline: {precision: fp16}\n", "baseline"),
        (
            TINY_SPEC.replace("grid: {precision: [fp32]}", "grid: {power_limit_w: [250, abc]}"),
            "power_limit_w",
        ),  # fmt: skip
    ],
)
def test_bad_spec_is_one_sentence_exit_2(tmp_path, text, message):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    done = wattlab("sweep", str(spec), "--db", "b.db", cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert (
        not (tmp_path / "b.db").exists()
        or sqlite3.connect(tmp_path / "b.db").execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        == 0
    )


@pytest.mark.slow
def test_sigterm_stops_the_sweep_and_stores_the_run_in_flight_as_failed(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY_SPEC.replace("repetitions: 3", "repetitions: 4"))
    db = tmp_path / "t.db"
    child = subprocess.Popen(
        [*WATTLAB, "sweep", str(spec), "--db", str(db)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    rows = 0
    while time.time() < deadline and rows < 1:
        time.sleep(0.3)
        if db.exists():
            try:
                rows = (
                    sqlite3.connect(db, timeout=5)
                    .execute("SELECT COUNT(*) FROM runs")
                    .fetchone()[0]
                )
            except sqlite3.OperationalError:
                rows = 0
    time.sleep(2.0)  # the next run is starting up now
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode in (143, -signal.SIGTERM), err
    con = sqlite3.connect(db)
    statuses = [s for (s,) in con.execute("SELECT status FROM runs ORDER BY id")]
    assert len(statuses) < 4  # it stopped instead of going on with the sweep
    if child.returncode == 143:  # the signal came while a run was in flight
        assert "stopped by signal 15" in err
        if statuses[-1] == "failed":  # cut short (else it had just finished and was kept)
            error = con.execute("SELECT error FROM runs ORDER BY id DESC LIMIT 1").fetchone()[0]
            assert "signal" in error


@pytest.mark.slow
def test_each_repetition_trained_with_its_own_recorded_seed(quickstart):
    con = sqlite3.connect(quickstart / "q.db")
    rows = con.execute(
        "SELECT config_hash, repetition, config_json FROM runs WHERE status='ok'"
    ).fetchall()
    seeds: dict[str, dict[int, int]] = {}
    for config_hash, repetition, config_json in rows:
        config = json.loads(config_json)
        assert config["seed_pinned"] is False
        seeds.setdefault(config_hash, {})[repetition] = config["repetition_seed"]
    assert len(seeds) == 4  # two repetitions of each configuration share its hash ...
    for by_repetition in seeds.values():
        assert by_repetition == {0: 0, 1: 1}  # ... and trained with seeds of their own
