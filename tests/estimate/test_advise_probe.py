"""`advise --probe`: the probe's sweep spec, its re-ranking on measured rows, the optional value
of --probe, and (slow) a real probe on the CPU, where PRE stands in as a known law that is wrong
on purpose, so the measured ranking has to come from the measurements."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wattlab.cli.app import optional_values
from wattlab.estimate.advise.advisor import Advice
from wattlab.estimate.advise.probe import (
    ProbeReport,
    Trainee,
    _advice_with,
    probe_spec,
    sweep_name,
)
from wattlab.estimate.advise.probe_rows import Choice
from wattlab.estimate.advise.ranking import Limit, Option, Setting, rank
from wattlab.experiment.specs.trainer import SweepSpec

CURRENT = Setting("fp32", 64, 1)


def _option(setting: Setting, energy_j: float, duration_s: float, source: str) -> Option:
    return Option(setting, energy_j, duration_s, energy_j * 0.95, energy_j * 1.05,
                  duration_s, duration_s, source=source)  # fmt: skip


def test_probe_alone_takes_sixty_seconds_and_a_value_is_kept() -> None:
    assert optional_values(["advise", "--model", "m", "--probe"]) == [
        "advise", "--model", "m", "--probe", "60"]  # fmt: skip
    assert optional_values(["advise", "--probe", "--model", "m"])[:3] == ["advise", "--probe", "60"]
    assert optional_values(["advise", "--probe", "90"]) == ["advise", "--probe", "90"]
    assert optional_values(["run", "--probe"]) == ["run", "--probe"]  # only advise has it


def test_the_probe_spec_is_a_valid_sweep_with_the_current_configuration_first() -> None:
    candidates = [CURRENT, Setting("amp-bf16", 64, 1), Setting("tf32", 128, 1),
                  Setting("amp-bf16", 64, 1, cuda_graphs=True)]  # fmt: skip
    trainee = Trainee(model="resnet18")
    name = sweep_name(trainee)
    assert name.startswith("probe-resnet18-")
    orders = set()
    for seed in range(8):
        spec = SweepSpec(**probe_spec(name, trainee, candidates, "cuda", 3.0, seed=seed))
        configs = [p.config for p in spec.expand()]
        assert len(configs) == 2 * len(candidates)  # two passes
        first = configs[0]
        assert (first.precision, first.batch_size, first.cuda_graphs) == ("fp32", 64, False)
        assert all(c.budget_s == 3.0 and c.warmup_steps >= 3 for c in configs)
        assert all(c.epoch_eval_samples == 0 for c in configs)
        orders.add(tuple((c.precision, c.batch_size, c.cuda_graphs) for c in configs[1:4]))
    assert len(orders) > 1  # the others in a random order


def _advice(rows: list[Option]) -> Advice:
    ranked = rank(rows, CURRENT, Limit())
    return Advice(ranked, "predicted", Limit(), ("precision",), CURRENT, "resnet18", 1e6,
                  "NVIDIA H200")  # fmt: skip


def _report(device: str = "cuda", name: str = "NVIDIA H200") -> ProbeReport:
    return ProbeReport("probe-x", "p.db", device, name, 60.0, 58.0, 9e3, 5e-4, "measured", 2,
                       4, 1, 0)  # fmt: skip


def test_the_advice_comes_from_the_measured_rows_and_the_rest_stays_predicted() -> None:
    bf16, tf32 = Setting("amp-bf16", 64, 1), Setting("tf32", 64, 1)
    predicted = [_option(CURRENT, 100e3, 600, "predicted"), _option(bf16, 50e3, 500, "predicted"),
                 _option(tf32, 70e3, 550, "predicted")]  # fmt: skip
    # measured: bf16 is slower and costs more than PRE thought; fp32 is the best
    measured = {CURRENT: _option(CURRENT, 90e3, 500, "measured (probe, 2 runs)"),
                bf16: _option(bf16, 120e3, 800, "measured (probe, 2 runs)")}  # fmt: skip
    out = _advice_with(_advice(predicted), measured, Choice([], [], []), _report(), [])
    assert [r.setting for r in out.rows] == [CURRENT, bf16, tf32]
    assert [r.rank for r in out.rows] == [1, 2, 3]
    assert out.rows[0].is_current and out.rows[0].source.startswith("measured")
    assert out.rows[1].saving == pytest.approx(1 - 120 / 90)  # against the measured current
    assert out.rows[2].source == "predicted"
    assert out.rows[2].saving == pytest.approx(1 - 70 / 100)  # against PRE's current
    assert out.sentence.startswith(
        "Keep the current configuration: none of the 1 change(s) measured used at least 2% less"
    )
    assert any("rows 3-3 are PRE's predictions" in n for n in out.notes)
    assert out.probe is not None and out.to_dict()["probe"]["sweep"] == "probe-x"


def test_a_probe_elsewhere_says_which_device_it_measured() -> None:
    predicted = [_option(CURRENT, 100e3, 600, "predicted")]
    measured = {CURRENT: _option(CURRENT, 90e3, 500, "estimated (probe, 1 run)")}
    out = _advice_with(_advice(predicted), measured, Choice([], [], []), _report("cpu", "CPU"), [])
    assert any("measured this machine's CPU, not NVIDIA H200" in n for n in out.notes)
    assert out.sentence.startswith("No measured advice: the probe had time to measure only")
    assert "(probed: estimated for 1 candidate(s))" in out.sentence


def test_a_measured_change_that_saves_leads_and_says_so() -> None:
    bf16 = Setting("amp-bf16", 64, 1)
    predicted = [_option(CURRENT, 100e3, 600, "predicted"), _option(bf16, 90e3, 500, "predicted")]
    measured = {CURRENT: _option(CURRENT, 100e3, 600, "measured (probe, 2 runs)"),
                bf16: _option(bf16, 60e3, 400, "measured (probe, 2 runs)")}  # fmt: skip
    out = _advice_with(_advice(predicted), measured, Choice([], [], []), _report(), [])
    assert out.rows[0].setting == bf16 and out.rows[0].saving == pytest.approx(0.4)
    assert out.sentence.startswith("Change precision fp32 -> amp-bf16: 40% less energy")
    assert out.sentence.endswith("(probed: measured for 2 candidate(s)).")


def test_without_a_measured_current_configuration_the_ranking_stays_pre_s() -> None:
    predicted = [_option(CURRENT, 100e3, 600, "predicted"),
                 _option(Setting("amp-bf16", 64, 1), 50e3, 500, "predicted")]  # fmt: skip
    advice = _advice(predicted)
    out = _advice_with(advice, {}, Choice([], [], []), _report(), [])
    assert out.rows == advice.rows
    assert any("could not measure the current configuration" in n for n in out.notes)


def test_power_limits_are_not_probed_where_they_are_forbidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wattlab.estimate.advise import probe as probe_module
    from wattlab.experiment.sweep.plan import MachineFacts

    monkeypatch.setenv("WATTLAB_FORBID_POWER_LIMITS", "1")
    monkeypatch.setattr(
        MachineFacts, "detect",
        classmethod(lambda cls: MachineFacts(1, False, "forbidden on this machine")),
    )  # fmt: skip
    assert "forbidden" in probe_module._power_limit_why_not("cuda")
    assert probe_module._power_limit_why_not("cpu") == "power limits need a CUDA GPU"
    capped = _option(Setting("fp32", 64, 1, power_limit_w=300.0), 1, 1, "predicted")
    assert probe_module._runnable(capped, "cuda", power_ok=False) == "power limit"
    fp16 = _option(Setting("amp-fp16", 64, 1), 1, 1, "predicted")
    assert "CUDA" in probe_module._runnable(fp16, "cpu", power_ok=False)


@pytest.mark.slow
def test_a_cpu_probe_measures_stores_and_costs_itself(tmp_path: Path) -> None:
    """The whole probe on this machine's CPU through the CLI: the candidates run as a stored
    probe sweep, the measured rows lead and say estimated (the CPU energy is modelled), the
    probe's own cost is given, amp-fp16 is listed as not runnable here."""
    env = {**os.environ, "WATTLAB_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "advise", "--model", "resnet18", "--gpu-name",
         "H200", "--epochs", "1", "--batch-size", "16", "--train-size", "1024", "--allow",
         "precision", "--probe", "25", "--db", "p.db", "--json", "a.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "probe: fp32, batch 16" in done.stderr  # a line per probe run, the current first
    result = json.loads((tmp_path / "a.json").read_text())
    probe = result["probe"]
    assert probe["device"] == "cpu" and probe["runs"] >= 1 and probe["duration_s"] > 0
    assert probe["energy_j"] > 0 and probe["provenance"] == "estimated"
    assert any("amp-fp16" in f and "CUDA" in f for f in probe["failed"])
    rows = result["rows"]
    assert rows[0]["source"].startswith("estimated") and "probe" in rows[0]["source"]
    measured = [r for r in rows if r["source"].startswith("estimated")]
    assert len(measured) == probe["measured"] >= 1
    assert all(r["source"] == "predicted" for r in rows[len(measured) :])
    con = sqlite3.connect(tmp_path / "p.db")
    stored = con.execute(
        "SELECT status, budget_window, samples, energy_total_j FROM runs WHERE sweep = ?",
        (probe["sweep"],),
    ).fetchall()
    con.close()
    assert len([r for r in stored if r[0] == "ok"]) == probe["runs"]
    assert all(r[2] > 0 and r[3] > 0 for r in stored if r[0] == "ok")


@pytest.mark.slow
def test_a_probe_from_a_stored_run_trains_its_model_and_stores_beside_it(tmp_path: Path) -> None:
    """``advise --db DB --run ID --probe``: the model comes from the stored run, the probe's
    sweep is stored in the same database, and PRE's correction by the run is still said."""
    from wattlab.experiment.db.store import open_store

    db = tmp_path / "runs.db"
    with open_store(db) as store:
        run_id = store.insert_run(
            {"status": "ok", "config_hash": "adv", "config_json": {"model": "resnet18"},
             "label": "resnet18 1xGPU fp32 bs16", "model": "resnet18", "device": "cuda",
             "gpus": 1, "precision": "fp32", "batch_size": 16, "epochs": 1, "samples": 1024,
             "train_size": 1024, "image_size": 32, "stem": "cifar", "duration_s": 2.0,
             "energy_total_j": 900.0, "energy_gpu_j": 800.0, "gpu_name": "NVIDIA H200",
             "gpu_tdp_w": 700.0, "power_limit_w": 700.0},
            [{"name": "budget", "start_s": 0.0, "duration_s": 2.0, "energy_total_j": 800.0}],
            [(0.5, "gpu:0", 400.0), (1.5, "gpu:0", 400.0)],
        )  # fmt: skip
    env = {**os.environ, "WATTLAB_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "advise", "--db", str(db), "--run", str(run_id),
         "--allow", "precision", "--probe", "--json", "a.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "a.json").read_text())
    assert result["probe"]["seconds_given"] == 60.0  # --probe alone
    assert any(f"PRE corrected by run {run_id}" in n for n in result["notes"])
    con = sqlite3.connect(db)
    models = con.execute(
        "SELECT DISTINCT model FROM runs WHERE sweep = ?", (result["probe"]["sweep"],)
    ).fetchall()
    con.close()
    assert models == [("resnet18",)]
