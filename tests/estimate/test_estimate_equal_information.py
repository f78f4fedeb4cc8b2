"""The estimation table names its inputs: oracle inputs per method, the share of the budget each
method read, how much of the target is modelled, and STEP's rules compared at equal information
(the published rule and the step-level rule reading the same share of every run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlab.errors import ConfigError
from wattlab.estimate import equal_information as equal
from wattlab.estimate.evaluate import (
    EVALUATED_METHODS,
    METHOD_INPUTS,
    evaluate_methods,
    evaluation_markdown,
    oracle_inputs,
)
from wattlab.estimate.reference import default_reference_path, load_reference_csv

SYNTHETIC_GPU_SHARE = 0.8  # tests/estimate/test_estimate_evaluate.py's synthetic runs


@pytest.fixture(scope="module")
def reference() -> tuple[pd.DataFrame, pd.DataFrame]:
    """24 of the shipped H200 reference runs (16 epochs each, with step-level marks)."""
    runs, windows = load_reference_csv(default_reference_path())
    runs = runs[runs["status"] == "ok"].sort_values("id").iloc[::7].head(24)
    return runs, windows[windows["run_id"].isin(runs["id"])]


def test_every_method_says_what_it_reads_and_which_inputs_are_oracles() -> None:
    assert set(METHOD_INPUTS) == set(EVALUATED_METHODS)
    assert oracle_inputs("ml-co2-impact") == ["the run's measured duration"]
    assert oracle_inputs("green-algorithms") == [
        "the run's measured duration",
        "the run's measured GPU utilisation",
    ]
    for method in ("flops", "step", "step-marks", "step-paper", "pre"):
        assert oracle_inputs(method) == [], method
    # the power-based twins multiply by the run's measured duration
    assert oracle_inputs("step-power") == oracle_inputs("step-paper-power") != []


def test_the_table_marks_oracles_budget_read_and_the_modelled_share() -> None:
    from tests.estimate.test_estimate_evaluate import synthetic

    runs, windows = synthetic()
    result = evaluate_methods(runs, windows, only=("ml-co2-impact", "green-algorithms", "step"))
    assert result.methods == ("ml-co2-impact", "green-algorithms", "step")
    share = result.settings["target_modelled_share"]
    assert share["median_percent"] == pytest.approx((1 - SYNTHETIC_GPU_SHARE) * 100)
    text = evaluation_markdown(result)
    assert "| oracle inputs | budget read |" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if "|" in line}
    assert rows["ML CO2 Impact"].endswith("| the run's measured duration | 0 % |")
    assert "measured GPU utilisation" in rows["Green Algorithms"]
    # wattlab's STEP rule is stable at epochs 2-3 of 6 and projects after epoch 3: 50 % read
    assert rows["STEP"].endswith("| none | 50 % |")
    step = result.predictions[result.predictions["method"] == "step"]
    assert np.allclose(step["read_fraction"], 3 / 6)
    assert "a median 20.0 % (max 20.0 %) of it is CPU and RAM energy" in text
    gpu = evaluate_methods(runs, windows, target="gpu", only=("step",))
    assert gpu.settings["target_modelled_share"] is None
    with pytest.raises(ConfigError, match="only must name methods"):
        evaluate_methods(runs, windows, only=("step-paper",))  # not a method of "wattlab"


def test_published_settings_share_the_budget() -> None:
    assert equal.published_settings(0.875, 16) == (14, 10, 5)  # the published s = 10, w = 5
    assert equal.published_settings(0.5, 16) == (8, 4, 5)
    assert equal.published_settings(0.2, 16) == (3, 2, 2)  # epoch 1 never in the window
    assert equal.published_settings(0.01, 16) == (2, 2, 1)
    for bad in (0.0, 1.0):
        with pytest.raises(ConfigError, match="share must be in"):
            equal.published_settings(bad, 16)
    with pytest.raises(ConfigError, match="leaves no epoch to project"):
        equal.published_settings(0.5, 2)
    assert equal.parse_fractions("0.2, 0.5") == (0.2, 0.5) and equal.parse_fractions("none") == ()
    for bad_text in ("", "0.2,x", "1.5"):
        with pytest.raises(ConfigError, match="--equal-information"):
            equal.parse_fractions(bad_text)


@pytest.mark.slow
def test_equal_information_reads_the_same_share_for_both_rules(reference) -> None:
    runs, windows = reference
    rows = equal.compare(runs, windows, fractions=(0.2, 0.875))
    assert [r["epochs_read"] for r in rows] == [3, 14] and {r["epochs"] for r in rows} == {16}
    for row in rows:
        assert row["runs"] == len(runs)
        assert row["published"]["median_read_percent"] == pytest.approx(row["fraction"] * 100)
        assert row["step_level"]["median_read_percent"] == pytest.approx(
            row["fraction"] * 100, abs=2
        )
    # at 14 of 16 epochs the published rule is the published rule itself
    full = evaluate_methods(runs, windows, step_method="both", only=("step-paper",))
    assert rows[1]["published"]["mape_percent"] == pytest.approx(
        full.metrics["step-paper"]["mape_percent"]
    )
    # reading less makes the published rule worse, as it does the step-level one
    assert rows[0]["published"]["mape_percent"] > rows[1]["published"]["mape_percent"]
    assert rows[0]["step_level"]["mape_percent"] > rows[1]["step_level"]["mape_percent"]
    # the step-level marks project the total only: for the GPU target it is not scored
    gpu = equal.compare(runs, windows, target="gpu", fractions=(0.5,))
    assert gpu[0]["step_level"]["n"] == 0 and gpu[0]["published"]["n"] == len(runs)
    full.equal_information = rows
    text = evaluation_markdown(full)
    assert "## STEP rules at equal information" in text
    assert "| 87.5% | 14 of 16 | s = 10, w = 5 | 24 |" in text
    assert full.to_dict()["equal_information"][0]["epochs_read"] == 3


def test_cli_rejects_a_bad_share(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "estimate", "evaluate", "--data",
         str(default_reference_path()), "--step-method", "both", "--equal-information", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 2 and "--equal-information" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_runs_of_part_epochs_are_left_out_not_a_failure(reference) -> None:
    runs, windows = reference
    everything, all_windows = load_reference_csv(default_reference_path())
    part = everything[(everything["epochs"] % 1 != 0) & (everything["epochs"] >= 3)].head(2)
    assert len(part) == 2  # the families grid has runs of 3.5 and 4.5 epochs
    mixed = pd.concat([runs, part], ignore_index=True)
    mixed_windows = pd.concat([windows, all_windows[all_windows["run_id"].isin(part["id"])]])
    rows = equal.compare(mixed, mixed_windows, fractions=(0.5,))
    assert {r["epochs"] for r in rows} == {16} and rows[0]["runs"] == len(runs)
