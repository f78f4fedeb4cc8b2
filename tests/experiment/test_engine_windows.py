"""Windows hold only what they name; every phase of a run's wall time is recorded."""

from __future__ import annotations

import pytest

from wattlab.experiment.db.store import open_store
from wattlab.experiment.runs.runner import run
from wattlab.experiment.runs.worker import WorkerOptions
from wattlab.train.config import make_run_config

PHASES = ("launch", "setup", "data", "warmup", "budget", "eval", "teardown")


def tiny(**overrides):
    values = dict(
        model="mobilenet_v3_small", stem="imagenet", device="cpu", train_samples=256,
        test_samples=64, epochs=3, batch_size=64, warmup_steps=2,
    )  # fmt: skip
    values.update(overrides)
    return make_run_config(**values)


@pytest.mark.slow
@pytest.mark.parametrize("codecarbon", [False, True])
def test_budget_window_is_its_epochs_and_phases_are_recorded(tmp_path, codecarbon):
    db = tmp_path / "w.db"
    outcome = run(tiny(codecarbon=codecarbon), WorkerOptions(db_path=str(db), progress=False))
    assert outcome.status == "ok", outcome.error
    with open_store(db) as store:
        windows = store.windows([outcome.run_id])
        row = store.runs().iloc[0]
    budget = windows[windows["name"] == "budget"]["duration_s"].sum()
    epochs = windows[windows["name"] == "epoch"]["duration_s"]
    assert len(epochs) == 3
    # the budget holds the epochs and, after each, the evaluation on the fixed subset
    evals = windows[windows["name"] == "epoch_eval"].sort_values("epoch")
    assert list(evals["epoch"]) == [1, 2, 3] and list(evals["samples"]) == [64, 64, 64]
    assert evals["accuracy"].between(0, 1).all() and evals["energy_total_j"].notna().all()
    assert windows[windows["name"] == "epoch"]["accuracy"].isna().all()
    inside = epochs.sum() + evals["duration_s"].sum()
    assert budget <= inside * 1.02 + 0.05, (budget, epochs.tolist())
    assert (row["synthetic_version"], row["recipe"]) == (2, 2)
    for phase in PHASES:
        assert row[f"phase_{phase}_s"] >= 0, phase
    assert abs(row["phase_budget_s"] - row["duration_s"]) <= 0.05 + 0.02 * row["duration_s"]
    assert row["launcher"] == "in-process" and row["status"] == "ok"
    names = set(windows["name"])
    if codecarbon:
        cc = windows[windows["name"] == "codecarbon"].iloc[0]
        # CodeCarbon's window wraps the budget window and nothing else of the run
        assert budget <= cc["duration_s"] <= budget + 0.05
        assert row["codecarbon_energy_j"] > 0
        expected = (row["codecarbon_energy_j"] - cc["energy_total_j"]) / cc["energy_total_j"]
        assert row["codecarbon_rel_error"] == pytest.approx(expected)
    else:
        assert "codecarbon" not in names


@pytest.mark.extra("train")
def test_warmup_stops_once_step_times_are_steady():
    from wattlab.train.loop import steady

    assert not steady([5.0, 0.1])  # too few steps to tell
    assert not steady([5.0, 0.1, 0.1])  # the slow first step is still among the last three
    assert steady([5.0, 2.0, 0.10, 0.11, 0.105])
    assert not steady([0.1, 0.2, 0.1])  # a 100 % spread is not steady


def test_cooldown_waits_for_the_temperature_or_the_longest_pause():
    from wattlab.experiment.sweep.plan import cool_down

    now = [0.0]

    def sleep(s):
        now[0] += s

    temps = iter([70.0, 60.0, 44.0, 30.0])
    waited = cool_down(30, 45, hottest_c=lambda: next(temps), sleep=sleep, clock=lambda: now[0])
    assert waited == 2.0  # two polls above 45 C, then 44 C ends the pause
    now[0] = 0.0
    waited = cool_down(5, 45, hottest_c=lambda: 80.0, sleep=sleep, clock=lambda: now[0])
    assert waited == 5.0  # never cool enough: the whole pause, no more
    now[0] = 0.0
    assert cool_down(5, 45, hottest_c=lambda: None, sleep=sleep, clock=lambda: now[0]) == 5.0
    now[0] = 0.0
    assert cool_down(7, None, sleep=sleep, clock=lambda: now[0]) == 7.0
    assert cool_down(0, 45, sleep=sleep, clock=lambda: now[0]) == 0.0
