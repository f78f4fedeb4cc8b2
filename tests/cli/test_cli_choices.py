"""The CLI's fixed choices: each enum spells what the library accepts, and a value outside it
is one usage error naming the flag and every choice."""

from __future__ import annotations

import pytest
import typer

from wattlab.cli import choices
from wattlab.cli.choices import choice_callback, values


def test_each_choice_is_the_librarys_own_list() -> None:
    from wattlab.estimate import specs
    from wattlab.estimate.evaluate import PROTOCOLS, STEP_METHODS, TARGETS
    from wattlab.experiment.db.export import FORMATS
    from wattlab.experiment.executors import EXECUTORS
    from wattlab.meters.modelled import CPU_LOADS, RAM_MEASURES
    from wattlab.train import config

    assert set(values(choices.Target)) == set(TARGETS)
    assert values(choices.Protocol) == (*PROTOCOLS, "all")
    assert set(values(choices.StepMethod)) == set(STEP_METHODS)
    assert values(choices.Executor) == EXECUTORS
    assert values(choices.ExportFormat) == FORMATS
    assert values(choices.RamMeasure) == RAM_MEASURES
    assert values(choices.CpuLoad) == CPU_LOADS
    assert values(choices.Dataset) == config.DATASETS
    assert values(choices.Stem) == config.STEMS
    assert values(choices.Precision) == config.PRECISIONS
    assert tuple(specs._RATE_COLUMN) == config.PRECISIONS  # a GPU's rate for every precision
    from wattlab.analysis.statement import TRAINING_TYPES

    assert values(choices.TrainingType) == TRAINING_TYPES
    from wattlab.analysis.eu_gpai import STATEMENT_FORMATS

    assert values(choices.StatementFormat) == STATEMENT_FORMATS


def test_a_choice_checks_its_spelling_and_returns_the_plain_string() -> None:
    check = choice_callback("--precision", choices.Precision)
    assert check("amp-bf16") == "amp-bf16"
    assert type(check("amp-bf16")) is str  # no typer version's enum handling is involved
    assert check(choices.Precision.fp32) == "fp32"  # a member given in code passes too


@pytest.mark.parametrize(
    ("flag", "choice", "said"),
    [
        ("--target", choices.Target, "--target must be one of total, gpu, paper, got 'cpu'."),
        (
            "--protocol",
            choices.Protocol,
            "--protocol must be one of loco, lomo, lopo, lofo, lobo, logo or all, got 'cpu'.",
        ),
    ],
)
def test_a_value_outside_a_choice_names_the_flag_and_every_choice(flag, choice, said) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        choice_callback(flag, choice)("cpu")
    assert str(refused.value) == said


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["export", "--format", "xlsx"], "--format must be one of csv, parquet, json, got 'xlsx'"),
        (["run", "--dataset", "imagenet"], "--dataset must be one of synthetic, cifar10"),
        (["estimate", "--stem", "vit"], "--stem must be one of cifar, imagenet, got 'vit'"),
        (["estimate", "evaluate", "--step-method", "x"], "--step-method must be one of wattlab"),
    ],
)
def test_a_bad_choice_is_a_usage_error_exit_2(argv, said, monkeypatch, capsys, tmp_path) -> None:
    import sys

    from wattlab.cli.app import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["wattlab", *argv])
    with pytest.raises(SystemExit) as stop:
        main()
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert len(err.strip().splitlines()) == 1 and said in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
