"""The registry of estimation methods (``wattlab.estimate.methods``): one tuple that every table,
label, input list and CLI choice reads, so a new method is one module and one line."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import pytest

from wattlab.estimate import methods
from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.estimate.methods.base import (
    EstimationMethod,
    HeldOut,
    PlannedRun,
    StoredRuns,
    value_of,
)

TOY_W = 123.0  # the toy method's constant power per GPU


def test_the_registry_is_one_consistent_list() -> None:
    from wattlab.estimate import evaluate

    names = methods.names()
    assert len(set(names)) == len(names)
    assert names == evaluate.EVALUATED_METHODS
    assert set(evaluate.METHOD_INPUTS) == set(names)
    for method in methods.METHODS:
        assert method.label and method.inputs, method.name
        assert method.step_rule is None or method.step_rule in methods.STEP_RULES, method.name
    # every STEP rule selects at least one method, and "both" all of them
    selected = methods.step_methods()
    assert list(selected) == [*(r.name for r in methods.STEP_RULES), "both"]
    assert all(selected[r.name] for r in methods.STEP_RULES)
    assert set(selected["both"]) == {m.name for m in methods.METHODS if m.step_rule}
    # the labels people read come from the registry, for estimates too
    assert Estimate(method="step-paper").label == "STEP (published rule)"
    assert Estimate(method="unregistered").label == "unregistered"
    # only the published rule reads the power trace (FLUSS): the CLI loads traces for it alone
    assert [m for m in methods.step_rule_choices() if methods.reads_trace(m)] == ["paper", "both"]


def test_the_registry_and_the_cli_choices_load_nothing_heavy() -> None:
    code = (
        "import sys, wattlab.estimate.methods, wattlab.cli.choices; "
        "print(sorted(m for m in ('pandas', 'numpy', 'scipy', 'sklearn', 'torch', 'matplotlib') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# A new method: one module-like object, one line in the registry


def _toy_evaluate(stored: StoredRuns, held_out: HeldOut | None) -> dict[Hashable, Estimate]:
    out: dict[Hashable, Estimate] = {}
    for index, run in stored.each():
        duration_s = value_of(run, "duration_s")
        if run[stored.id_column] == 1:
            out[index] = cannot_apply("toy-power", "the toy leaves run 1 out")
            continue
        gpus = int(value_of(run, "gpus") or 1)
        out[index] = made("toy-power", TOY_W * gpus * duration_s, duration_s, "toy")
    return out


def _toy_predict(planned: PlannedRun) -> Estimate:
    if planned.duration_s is None:
        return cannot_apply("toy-power", "the toy needs --duration-s")
    return made("toy-power", TOY_W * planned.gpus * planned.duration_s, planned.duration_s, "toy")


def _toy_how(settings: Mapping[str, Any]) -> str:
    return f"the toy assumes {TOY_W:g} W per GPU for the measured duration"


toy = types.ModuleType("toy_power")  # what wattlab/estimate/methods/toy_power.py would hold
toy.METHOD = EstimationMethod(  # type: ignore[attr-defined]
    name="toy-power",
    label="Toy constant power",
    inputs=("oracle: the run's measured duration",),
    evaluate=_toy_evaluate,
    how=_toy_how,
    predict=_toy_predict,
)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one line: the toy's METHOD appended to the registry's tuple."""
    monkeypatch.setattr(methods, "METHODS", (*methods.METHODS, toy.METHOD))


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    from wattlab.cli.app import main

    monkeypatch.setattr(sys, "argv", ["wattlab", *argv])
    try:
        main()
    except SystemExit as stop:
        assert stop.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_a_registered_method_is_scored_by_estimate_evaluate(
    registered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from tests.estimate.test_estimate_evaluate import synthetic
    from wattlab.estimate.evaluate import evaluate_methods
    from wattlab.estimate.reference import write_reference_csv

    runs, windows = synthetic()
    data = write_reference_csv(runs, windows, tmp_path / "runs.csv", ["synthetic"])
    out = _cli(
        ["estimate", "evaluate", "--data", str(data), "--protocol", "loco",
         "--json", str(tmp_path / "x.json")],
        monkeypatch,
        capsys,
    )  # fmt: skip
    report = json.loads((tmp_path / "x.json").read_text())
    toy_json = report["methods"]["toy-power"]
    assert toy_json["label"] == "Toy constant power"
    assert toy_json["oracle_inputs"] == ["the run's measured duration"]
    assert toy_json["covers"] == "total"
    assert toy_json["excluded_runs"] == [{"run_id": 1, "reason": "the toy leaves run 1 out."}]
    expected = {int(r.id): TOY_W * r.gpus * r.duration_s for r in runs.itertuples() if r.id != 1}
    predicted = {p["run_id"]: p["predicted_j"] for p in toy_json["predictions"]}
    assert predicted == pytest.approx(expected)
    table = report["protocols"]["loco"]
    assert "toy-power" in table["common_methods"]
    assert table["methods"]["toy-power"]["own"]["n"] == len(expected)
    assert report["settings"]["methods"][-1] == "toy-power"
    # the Markdown table has its row, its label in the exclusions and its clause in "How"
    rows = [line for line in out.splitlines() if line.startswith("| Toy constant power |")]
    assert len(rows) == 2  # the loco table and the "Left out" table
    assert f"the toy assumes {TOY_W:g} W per GPU" in out
    # and the library sees it without the CLI
    result = evaluate_methods(runs, windows, only=("toy-power", "step"))
    assert result.methods == ("step", "toy-power")


def test_a_registered_method_that_predicts_is_listed_by_wattlab_estimate(
    registered, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from wattlab.estimate import predict
    from wattlab.estimate.features import ModelCost

    # a counted model without torchvision: the FLOPs of a made-up model
    monkeypatch.setattr(
        predict, "model_cost", lambda model, **_: ModelCost(forward_flops_per_sample=1e9, params=1)
    )
    argv = ["estimate", "--model", "m", "--epochs", "3", "--gpus", "2", "--gpu-name", "B200",
            "--gpu-tdp", "1000", "--duration-s", "600"]  # fmt: skip
    shown = json.loads(_cli([*argv, "--json", "-"], monkeypatch, capsys))["methods"]
    assert list(shown) == ["ml-co2-impact", "green-algorithms", "flops", "step", "pre", "toy-power"]
    assert shown["toy-power"]["energy_j"] == pytest.approx(TOY_W * 2 * 600)
    assert shown["toy-power"]["label"] == "Toy constant power"
    table = _cli(argv, monkeypatch, capsys)
    assert any(line.startswith("Toy constant power") for line in table.splitlines())
