"""`advise --probe`: the default length and when no probe pays off, the ranking of measured and
predicted rows with the probe's cost, --probe's value, the one-process trainer (switching
candidates in place), and (slow) a real probe on the CPU through the CLI that leaves no file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer

from wattlab.cli.advise_cmd import probe_seconds
from wattlab.cli.app import optional_values
from wattlab.errors import WattlabError
from wattlab.estimate.advise.advisor import Advice
from wattlab.estimate.advise.probe import (
    DEFAULT_PROBE_S,
    MAX_OVERRUN,
    MIN_PROBE_S,
    ProbeReport,
    Trainee,
    _advice_with,
    _runnable,
    default_seconds,
    probe,
    same_device,
)
from wattlab.estimate.advise.probe_rows import Choice
from wattlab.estimate.advise.ranking import Limit, Option, Setting, rank

CURRENT = Setting("fp32", 64, 1)
BF16, TF32 = Setting("amp-bf16", 64, 1), Setting("tf32", 64, 1)
MEASURED = "measured (probe, 3 windows: 96.0 % measured by GPU counters, 4.0 % estimated (CPU))"
ROOT = Path(__file__).resolve().parents[2]


def _option(setting: Setting, energy_j: float, duration_s: float, source: str) -> Option:
    return Option(setting, energy_j, duration_s, energy_j * 0.95, energy_j * 1.05,
                  duration_s, duration_s, source=source)  # fmt: skip


def _advice(rows: list[Option]) -> Advice:
    ranked = rank(rows, CURRENT, Limit())
    return Advice(ranked, "predicted", Limit(), ("precision",), CURRENT, "resnet18", 1e6,
                  "NVIDIA H200")  # fmt: skip


def _report(device: str = "cuda", name: str = "NVIDIA H200") -> ProbeReport:
    return ProbeReport(
        device=device, device_name=name, seconds_given=30.0, duration_s=29.0, energy_j=9e3,
        co2e_kg=5e-4, provenance="95.0 % measured by GPU counters, 5.0 % estimated (CPU, RAM)",
        setup_s=1.5, candidate_setup_s={"fp32, batch 64, 1 GPU": 4.0}, windows_s=20.0,
        windows=6, rounds=3, window_s=1.5, measured=2, pruned=0, unmeasured=1,
    )  # fmt: skip


def test_probe_alone_takes_the_default_and_a_value_is_kept() -> None:
    assert optional_values(["advise", "--model", "m", "--probe"]) == [
        "advise", "--model", "m", "--probe", "auto"]  # fmt: skip
    assert optional_values(["advise", "--probe", "--model", "m"])[:3] == [
        "advise", "--probe", "auto"]  # fmt: skip
    assert optional_values(["advise", "--probe", "90"]) == ["advise", "--probe", "90"]
    assert optional_values(["run", "--probe"]) == ["run", "--probe"]  # only advise has it


def test_probe_seconds_are_auto_or_a_bounded_number() -> None:
    assert probe_seconds("auto") == "auto" and probe_seconds(None) is None
    assert float(probe_seconds("45") or 0) == 45.0
    with pytest.raises(WattlabError, match="--probe"):
        probe_seconds("2")  # under the bound
    with pytest.raises(typer.BadParameter, match="number of seconds or 'auto'"):
        probe_seconds("soon")


def test_the_default_is_the_smaller_of_30_s_and_5_per_cent_of_the_training() -> None:
    long = _advice([_option(CURRENT, 500e3, 3600, "predicted"), _option(BF16, 200e3, 2000, "p")])
    assert default_seconds(long) == (DEFAULT_PROBE_S, "")
    mid = _advice([_option(CURRENT, 100e3, 400, "predicted"), _option(BF16, 40e3, 200, "p")])
    assert default_seconds(mid) == (pytest.approx(20.0), "")
    short = _advice([_option(CURRENT, 100e3, 60, "predicted"), _option(BF16, 40e3, 30, "p")])
    seconds, why = default_seconds(short)
    assert seconds < MIN_PROBE_S
    assert why.startswith("No probe: the training is predicted to take 60 s")
    # nothing to win: the best change saves at most 3 kJ by PRE's intervals (bf16 at least
    # 96.9 kJ), and 30 s of a 600 s training at 100 kJ cost about 5 kJ
    flat = _advice([_option(CURRENT, 100e3, 600, "predicted"), _option(BF16, 102e3, 600, "p")])
    seconds, why = default_seconds(flat)
    assert "more than the" in why and "could save at most" in why


def test_a_measured_change_that_saves_leads_and_the_cost_is_stated() -> None:
    predicted = [_option(CURRENT, 100e3, 600, "predicted"), _option(BF16, 90e3, 500, "predicted"),
                 _option(TF32, 95e3, 550, "predicted")]  # fmt: skip
    measured = {CURRENT: _option(CURRENT, 100e3, 600, MEASURED),
                BF16: _option(BF16, 60e3, 400, MEASURED)}  # fmt: skip
    out = _advice_with(_advice(predicted), measured, Choice([], [], []), _report(), [])
    assert out.rows[0].setting == BF16 and out.rows[0].saving == pytest.approx(0.4)
    assert out.sentence.startswith("Change precision fp32 -> amp-bf16: 40% less energy")
    assert "probed: 2 candidate(s) measured, the current configuration measured" in out.sentence
    assert "the probe took 29.0 s and 9 kJ (95.0 % measured by GPU counters" in out.sentence
    # the cost's share of the advised training: 9 kJ of bf16's 60 kJ, 29 s of its 400 s
    assert out.probe.training_energy_share == pytest.approx(9 / 60)
    assert out.probe.training_time_share == pytest.approx(29 / 400)
    assert "15.0% of the advised training's energy" in out.sentence
    tf32 = next(r for r in out.rows if r.setting == TF32)
    assert tf32.source.startswith("predicted (PRE x")  # scaled by the probe, still predicted
    assert any("not measured are PRE's predictions" in n for n in out.notes)
    assert out.to_dict()["probe"]["windows"] == 6


def test_a_probe_for_another_gpu_says_it_cannot_measure_it_and_gives_pre_s_advice() -> None:
    """Issue 48: a CPU probe for an H200's advice scaled every H200 row by a CPU measurement."""
    advice = _advice([_option(CURRENT, 100e3, 600, "predicted"), _option(BF16, 50e3, 500, "p")])
    out = probe(advice, Trainee(model="resnet18"), seconds=10.0, device="cpu")
    assert out.rows == advice.rows and out.sentence == advice.sentence and out.probe is None
    assert out.notes[-1] == (
        "No probe: the probe measures the device it runs on, this machine's CPU, and cannot "
        "measure NVIDIA H200 here; the advice is PRE's for NVIDIA H200."
    )
    assert same_device("NVIDIA H200", "H200") and not same_device("NVIDIA H100 80GB HBM3", "H200")


def test_a_candidate_that_cannot_run_is_never_advised() -> None:
    fp16 = Setting("amp-fp16", 64, 1)
    predicted = [_option(CURRENT, 100e3, 600, "predicted"), _option(fp16, 30e3, 300, "predicted"),
                 _option(BF16, 90e3, 550, "predicted")]  # fmt: skip
    measured = {CURRENT: _option(CURRENT, 100e3, 600, MEASURED)}
    out = _advice_with(_advice(predicted), measured, Choice([], [], []), _report(), [], {fp16})
    assert fp16 not in [o.setting for o in out.rows]
    assert "amp-fp16" not in out.sentence
    assert any("could not run here are left out of the ranking" in n for n in out.notes)


def test_only_one_gpu_configurations_without_a_power_limit_are_probed() -> None:
    capped = _option(Setting("fp32", 64, 1, power_limit_w=300.0), 1, 1, "predicted")
    assert _runnable(capped, "cuda") == "power limit"
    assert _runnable(_option(Setting("fp32", 64, 2), 1, 1, "predicted"), "cuda") == "gpus"
    assert "CUDA" in _runnable(_option(Setting("amp-fp16", 64, 1), 1, 1, "predicted"), "cpu")
    assert _runnable(_option(CURRENT, 1, 1, "predicted"), "cpu") == ""


class _Hooks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def begin(self, name: str, epoch: int | None = None) -> None:
        self.calls.append(("begin", name, 0))

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
        self.calls.append(("end", name, samples))


@pytest.mark.extra("train")
def test_one_trainer_switches_candidates_in_place_and_windows_count_their_images() -> None:
    import torch

    from wattlab.train.config import RunConfig
    from wattlab.train.data import synthetic_dataset
    from wattlab.train.interleave import InterleavedTrainer, Shape

    cfg = RunConfig(model_factory="tests/fakes/tiny_net.py:tiny_net", device="cpu", epochs=1,
                    batch_size=16, train_samples=256, test_samples=32)  # fmt: skip
    dataset = synthetic_dataset(256, 32, seed=0)
    trainer = InterleavedTrainer(cfg, torch.device("cpu"), dataset=dataset)
    weights = trainer.net[0].weight
    fp32, bf16, big = Shape("fp32", 16), Shape("amp-bf16", 16), Shape("tf32", 32)
    prepared = [trainer.prepare(s) for s in (fp32, bf16, big)]
    assert all(p.step_s > 0 and p.warmup_steps >= 3 and p.setup_s > 0 for p in prepared)
    assert trainer.prepare(bf16) is prepared[1]  # set up once
    hooks = _Hooks()
    before = weights.detach().clone()
    ran = trainer.window(big, 0.0, hooks, "w1")
    assert torch.backends.cuda.matmul.allow_tf32  # tf32's flags, switched in place
    assert ran.steps == 1 and ran.images == 32 and hooks.calls == [("begin", "w1", 0),
                                                                   ("end", "w1", 32)]  # fmt: skip
    ran = trainer.window(fp32, 0.0, hooks, "w2")
    assert not torch.backends.cuda.matmul.allow_tf32 and ran.images == 16
    assert trainer.net[0].weight is weights  # one model for every candidate
    assert not torch.equal(weights.detach(), before)  # and it trains
    with pytest.raises(WattlabError, match="CUDA graphs need a CUDA GPU"):
        trainer.prepare(Shape("fp32", 16, cuda_graphs=True))


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the session's PRE cache (tests/conftest.py)
    return subprocess.run([sys.executable, "-m", "wattlab.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900, env=env)  # fmt: skip


@pytest.mark.slow
@pytest.mark.extra("train")
def test_a_cpu_probe_for_an_h200_says_so_in_one_sentence_and_leaves_no_file(
    tmp_path: Path,
) -> None:
    """Issue 48: on the CPU, `advise --gpu-name H200 --probe` ran 183 s and scaled the H200's
    rows by a CPU measurement. It now measures nothing, and says why beside PRE's advice."""
    factory = str(ROOT / "tests" / "fakes" / "tiny_net.py") + ":tiny_net"
    work = tmp_path / "work"
    work.mkdir()
    done = _run_cli(["advise", "--model-factory", factory, "--gpu-name", "H200", "--epochs",
                     "30", "--batch-size", "32", "--allow", "precision", "--probe", "20",
                     "--json", str(tmp_path / "a.json")], work)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "probe: set up" not in done.stderr
    result: dict[str, Any] = json.loads((tmp_path / "a.json").read_text())
    assert result["probe"] is None
    assert all(not r["source"].startswith(("measured (probe", "estimated (probe"))
               for r in result["rows"])  # fmt: skip
    assert any("cannot measure" in n and "H200 here" in n for n in result["notes"])
    assert sorted(p.name for p in work.iterdir()) == []  # no database, no lock file


def _cpu_advice() -> Advice:
    """An advice for this machine's CPU (the probe's own device), tiny-net sized."""
    rows = [_option(CURRENT, 100.0, 10.0, "predicted"), _option(BF16, 90.0, 9.0, "predicted"),
            _option(TF32, 95.0, 9.5, "predicted")]  # fmt: skip
    return Advice(rank(rows, CURRENT, Limit()), "predicted", Limit(), ("precision",), CURRENT,
                  "tiny_net", 1e4, "CPU")  # fmt: skip


TINY = Trainee(model_factory=str(ROOT / "tests" / "fakes" / "tiny_net.py") + ":tiny_net")


@pytest.mark.slow
@pytest.mark.extra("train")
def test_a_probe_on_its_own_device_keeps_its_seconds_and_states_true_window_lengths() -> None:
    from wattlab.train.data import default_cache_dir, load_dataset

    # the data made once beforehand (the session's cache is new): the probe's seconds are for
    # measuring, and this test for how it keeps them
    load_dataset(TINY.run_config("cpu", [CURRENT]), cache_dir=default_cache_dir())
    out = probe(_cpu_advice(), TINY, seconds=20.0, device="cpu", seed=1)
    report = out.probe
    assert report is not None and report.measured >= 1, out.notes
    assert report.duration_s <= MAX_OVERRUN * 20.0
    lengths = sorted(w["duration_s"] for w in report.window_rows)
    assert report.longest_window_s == lengths[-1]
    assert min(lengths) <= report.window_s <= max(lengths)
    assert f"(median; the longest {report.longest_window_s:.2g} s)" in " ".join(out.notes)


@pytest.mark.extra("train")
def test_a_probe_whose_set_up_cannot_fit_says_so_and_measures_nothing() -> None:
    """Issue 48: a 30 s probe took 115 s, 102.5 s of it set-up. Here the clock runs 1000x
    fast: no candidate's set-up fits within 1.5x the seconds, so none is set up."""
    out = probe(
        _cpu_advice(), TINY, seconds=5.0, device="cpu", clock=lambda: time.monotonic() * 1e3
    )
    assert out.probe is None and out.rows == _cpu_advice().rows
    assert "would have fit within 1.5x the 5 s given" in out.notes[-1]


def test_the_compilers_cache_goes_to_a_temporary_folder_removed_afterwards(monkeypatch) -> None:
    from wattlab.estimate.advise.probe import INDUCTOR_CACHE_ENV, inductor_cache_in_temp

    monkeypatch.delenv(INDUCTOR_CACHE_ENV, raising=False)
    with inductor_cache_in_temp() as folder:
        assert folder is not None and os.environ[INDUCTOR_CACHE_ENV] == folder
        Path(folder, "fxgraph").mkdir()  # what torch's compiler makes there
    assert not Path(folder).exists() and INDUCTOR_CACHE_ENV not in os.environ
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, "/the/users/choice")
    with inductor_cache_in_temp() as folder:
        assert folder is None and os.environ[INDUCTOR_CACHE_ENV] == "/the/users/choice"
    assert os.environ[INDUCTOR_CACHE_ENV] == "/the/users/choice"


@pytest.mark.slow  # the CLI probes for 5 s (torch imported)
def test_advise_probe_leaves_nothing_in_the_temporary_folder(tmp_path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "advise", "--model", "resnet18", "--gpu-name",
         "H200", "--epochs", "1", "--probe", "5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**env, "TMPDIR": str(temp), "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "probe" in done.stdout + done.stderr  # the probe's sentence (it measures no H200 here)
    assert sorted(p.name for p in temp.iterdir()) == []
