"""Every classifier's accuracy is held against chance, not only the built-in image tasks': a
Hugging Face model's classes come from its stored config (id2label, num_labels)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from wattlab.analysis.chance import classes_of_run
from wattlab.analysis.report import analyze_runs


def _hf_runs(accuracy: float, test_size: int) -> pd.DataFrame:
    config = {"framework": "transformers", "model_config": {"id2label": {"0": "no", "1": "yes"}}}
    rows = []
    for i, energy in enumerate((900.0, 950.0, 1000.0), start=1):
        rows.append(
            {
                "id": i, "status": "ok", "config_hash": "hf", "repetition": 0,
                "label": "bert 1xGPU fp32 bs8", "config_json": json.dumps(config),
                "model": "bert", "dataset": None, "device": "cuda", "gpus": 1,
                "duration_s": 10.0, "energy_total_j": energy, "samples": 800,
                "accuracy": accuracy, "test_size": test_size, "provenance": "measured",
                "co2e_kg": energy / 3.6e6 * 0.2,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def test_the_classes_come_from_the_dataset_or_the_stored_config() -> None:
    assert classes_of_run("cifar10", None) == 10
    assert classes_of_run(None, {"model_config": {"id2label": {"0": "a", "1": "b"}}}) == 2
    assert classes_of_run(None, json.dumps({"model_config": {"num_labels": 3}})) == 3
    assert classes_of_run(None, {"num_classes": 5}) == 5
    assert classes_of_run(None, {"lr": 0.1}) is None
    assert classes_of_run(None, "not json") is None


@pytest.mark.parametrize(
    ("accuracy", "test_size", "at_chance"), [(0.578, 200, True), (0.9, 200, False)]
)
def test_a_text_classifier_at_chance_is_called_so(accuracy, test_size, at_chance) -> None:
    _, summary = analyze_runs(_hf_runs(accuracy, test_size))
    verdict = summary["accuracy_vs_chance"]
    assert verdict["judged"] is True and verdict["classes"] == 2
    assert verdict["none_beyond"] is at_chance
    if at_chance:
        sentence = verdict["sentence"]
        assert "No configuration learned beyond chance (best accuracy 57.8 %" in sentence
        assert "on 200 test samples; chance is 50.0 %" in sentence and "image" not in sentence


def test_a_text_models_report_speaks_of_samples(tmp_path) -> None:
    from wattlab.analysis.report import write_report

    runs = _hf_runs(0.578, 200)
    runs.loc[runs["id"] == 3, "samples"] = 400  # different counts: the per-sample wording
    paths = write_report(runs, None, None, tmp_path)
    md = paths.markdown.read_text()
    assert "sample" in md and "image" not in md.replace(".png", "").replace(".svg", "").lower()
    assert paths.summary["sample_noun"] == "sample"
    assert "image" not in paths.summary["finding"]["sentence"]


def test_an_image_report_keeps_its_images() -> None:
    runs = _hf_runs(0.9, 200).assign(dataset="synthetic", config_json="{}")
    _, summary = analyze_runs(runs)
    assert summary["sample_noun"] == "image"
