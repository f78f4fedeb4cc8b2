"""Energy to accuracy (Zeus's definition) on hand-built windows, the accuracy Pareto axis, the
finding naming accuracies, and the report's section."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.analysis.test_analysis_report import make_runs
from wattlab.analysis.energy_to_accuracy import energy_to_accuracy, epoch_curves
from wattlab.analysis.headline import finding
from wattlab.analysis.report import analyze_runs, write_report
from wattlab.analysis.tradeoffs import pareto_front_axes, parse_pareto_axes
from wattlab.errors import ConfigError


def _windows(run_id: int, accuracies: list[float], epoch_j: float = 100.0, eval_j: float = 5.0):
    rows = [{"run_id": run_id, "name": "budget", "epoch": None, "energy_total_j": 1e9,
             "duration_s": 1e9, "accuracy": None}]  # fmt: skip
    for k, acc in enumerate(accuracies, start=1):
        rows.append({"run_id": run_id, "name": "epoch", "epoch": k, "energy_total_j": epoch_j,
                     "duration_s": 10.0, "accuracy": None})  # fmt: skip
        rows.append({"run_id": run_id, "name": "epoch_eval", "epoch": k,
                     "energy_total_j": eval_j, "duration_s": 1.0, "accuracy": acc})  # fmt: skip
    return rows


def _runs(configs: dict[str, list[int]]) -> pd.DataFrame:
    rows = []
    for digest, ids in configs.items():
        for i in ids:
            rows.append({"id": i, "status": "ok", "config_hash": digest, "label": f"cfg {digest}"})
    return pd.DataFrame(rows)


def test_the_first_epoch_at_the_target_with_cumulative_training_and_evaluation_energy():
    windows = pd.DataFrame(_windows(1, [0.2, 0.55, 0.5, 0.8]))
    curve = epoch_curves(windows)
    assert list(curve["epoch"]) == [1, 2, 3, 4]
    assert list(curve["energy_j"]) == [105.0, 210.0, 315.0, 420.0]  # the budget row is not summed
    eta = energy_to_accuracy(_runs({"a": [1]}), windows, target=0.5)
    (cfg,) = eta["configurations"]
    # epoch 2 is the first to reach 0.5 (epoch 3 dips below again: the first one counts)
    assert (cfg["epoch"], cfg["energy_j"], cfg["time_s"]) == (2, 210.0, 22.0)
    assert cfg["reached"] == 1 and cfg["best_accuracy"] == 0.8
    assert eta["target_source"] == "given" and "cfg a" in eta["sentence"]


def test_configurations_are_medians_over_runs_that_reached_and_count_those_that_did_not():
    windows = pd.DataFrame(
        _windows(1, [0.3, 0.7])
        + _windows(2, [0.6, 0.9])
        + _windows(3, [0.1, 0.2])
        + _windows(4, [0.1, 0.75], epoch_j=50.0)  # fmt: skip
    )
    eta = energy_to_accuracy(_runs({"a": [1, 2, 3], "b": [4]}), windows, target=0.6)
    by = {c["config_hash"]: c for c in eta["configurations"]}
    assert (by["a"]["runs"], by["a"]["reached"]) == (3, 2)
    assert by["a"]["energy_j"] == pytest.approx((210.0 + 105.0) / 2)
    assert by["b"]["energy_j"] == 110.0  # 2 x (50 + 5)
    assert "cfg b used the least energy" in eta["sentence"]
    none = energy_to_accuracy(_runs({"a": [1, 2, 3]}), windows, target=0.95)
    assert all(c["energy_j"] is None for c in none["configurations"])
    assert "No configuration reached" in none["sentence"]


def test_default_target_and_runs_without_per_epoch_accuracy():
    windows = pd.DataFrame(_windows(1, [0.4, 0.8]))
    eta = energy_to_accuracy(_runs({"a": [1]}), windows)
    assert eta["target_accuracy"] == pytest.approx(0.72) and "90 %" in eta["target_source"]
    old = windows.drop(columns=["accuracy"])  # a database from before schema version 7
    missing = energy_to_accuracy(_runs({"a": [1]}), old, target=0.5)
    assert missing["measured"] is False and missing["configurations"] == []


def test_a_three_axis_front_keeps_the_accurate_and_the_cheap():
    summary = pd.DataFrame(
        {"duration_s": [10.0, 10.0, 20.0, 20.0], "energy_total_j": [100.0, 100.0, 200.0, 250.0],
         "accuracy": [0.6, 0.5, 0.9, 0.8]},
        index=["cheap", "cheap-worse", "accurate", "dominated"],
    )  # fmt: skip
    assert pareto_front_axes(summary) == ["cheap", "cheap-worse"]  # energy and time only
    assert pareto_front_axes(summary, ("energy", "time", "accuracy")) == ["cheap", "accurate"]
    assert parse_pareto_axes("energy, time ,accuracy") == ("energy", "time", "accuracy")
    for bad in ("energy", "energy,speed", "energy,energy"):
        with pytest.raises(ConfigError, match="--pareto-axes"):
            parse_pareto_axes(bad)


def test_the_finding_names_both_accuracies_when_asked():
    runs = make_runs()
    summary, data = analyze_runs(runs, sweep="study")
    assert "accuracy" not in data["finding"]["sentence"]
    named = finding(summary, with_accuracy=True)
    assert "; accuracy 0.9" in named["sentence"] and len(named["accuracy"]) == 2
    _, data3 = analyze_runs(runs, sweep="study", pareto_axes=("energy", "time", "accuracy"))
    assert data3["pareto_axes"] == ["energy", "time", "accuracy"]
    assert "accuracy 0.9" in data3["finding"]["sentence"]


@pytest.mark.slow
def test_the_report_has_an_energy_to_accuracy_section_and_json_field(tmp_path):
    runs = make_runs()
    ok_ids = list(runs.loc[runs["status"] == "ok", "id"])
    rows = []
    for k, run_id in enumerate(ok_ids):
        rows += _windows(int(run_id), [0.3, 0.6 + 0.05 * (k % 2), 0.9])
    paths = write_report(runs, pd.DataFrame(rows), None, tmp_path, sweep="study",
                         target_accuracy=0.6)  # fmt: skip
    page = paths.markdown.read_text()
    assert "## Energy to accuracy" in page and "To reach accuracy 0.600" in page
    import json

    data = json.loads(paths.summary_json.read_text())
    eta = data["energy_to_accuracy"]
    assert eta["target_accuracy"] == 0.6 and eta["measured"] is True
    assert {c["reached"] for c in eta["configurations"]} == {2}
