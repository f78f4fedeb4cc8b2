"""The CLI's fixed choices as ``str`` enums, and the parse-time check that refuses any other.

A value outside a choice is a usage error: one sentence, ``--flag must be one of a, b, got
'x'.``, and exit code 2. The values are written out here (importing the library's tuples would
load pandas or torch on every command), except ``--step-method``'s, read from the registry of
estimation methods, which loads neither; ``tests/cli/test_cli_choices.py`` holds each enum
against the library's own list.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import cast

import typer


class Target(str, enum.Enum):
    """``estimate evaluate --target``: the energy every method predicts and is scored on."""

    total = "total"
    gpu = "gpu"
    paper = "paper"


class HoldOut(str, enum.Enum):
    """``advise evaluate --hold-out``: what each fold holds out."""

    model = "model"
    gpu = "gpu"


class Protocol(str, enum.Enum):
    """``estimate evaluate --protocol``: PRE's held-out group, or every protocol."""

    loco = "loco"
    lomo = "lomo"
    lopo = "lopo"
    lofo = "lofo"
    lobo = "lobo"
    logo = "logo"
    all = "all"


def _step_method() -> type[enum.Enum]:
    """``estimate evaluate --step-method``: which STEP rule is scored, as the registry of
    estimation methods lists them (``wattlab.estimate.methods.STEP_RULES``, then ``both``)."""
    from wattlab.estimate.methods import step_rule_choices

    members = [(value, value) for value in step_rule_choices()]
    # the functional API builds a class; typeshed types its call as an instance
    return cast(type[enum.Enum], enum.Enum("StepMethod", members, type=str))


StepMethod = _step_method()


def step_method_help() -> str:
    """``--step-method``'s help: each STEP rule and what it is, from the registry."""
    from wattlab.estimate.methods import ALL_STEP_RULES, STEP_RULES

    rules = [f"{rule.name} ({rule.help})" for rule in STEP_RULES]
    return f"STEP rule: {' | '.join(rules)} | {ALL_STEP_RULES} (all)."


class Executor(str, enum.Enum):
    """``sweep --executor``: where the runs execute."""

    local = "local"
    slurm = "slurm"


class ExportFormat(str, enum.Enum):
    """``export --format``: the table files' format."""

    csv = "csv"
    parquet = "parquet"
    json = "json"


class RamMeasure(str, enum.Enum):
    """``--ram-measure``: which memory the RAM estimate counts."""

    system = "system"
    process = "process"


class CpuLoad(str, enum.Enum):
    """``--cpu-load``: whose load the CPU estimate counts."""

    machine = "machine"
    process = "process"


class Dataset(str, enum.Enum):
    """``run --dataset``: the training data."""

    synthetic = "synthetic"
    cifar10 = "cifar10"


class Stem(str, enum.Enum):
    """``--stem``: the ResNets' first layers."""

    cifar = "cifar"
    imagenet = "imagenet"


class Precision(str, enum.Enum):
    """``--precision``: the numeric precision of training."""

    fp32 = "fp32"
    tf32 = "tf32"
    amp_bf16 = "amp-bf16"
    amp_fp16 = "amp-fp16"


class TrainingType(str, enum.Enum):
    """``report --statement --training-type``: the model card's training_type."""

    pre_training = "pre-training"
    fine_tuning = "fine-tuning"


class StatementFormat(str, enum.Enum):
    """``report --statement --format``: the paragraph and model card, or the EU GPAI form."""

    statement = "statement"
    eu_gpai = "eu-gpai"


def values(choice: type[enum.Enum]) -> tuple[str, ...]:
    """The command-line spellings of ``choice``, in order."""
    return tuple(str(member.value) for member in choice)


def _phrase(choice: type[enum.Enum]) -> str:
    spelled = values(choice)
    if spelled[-1] == "all":  # "loco, lomo, lopo, lofo or all": the last one is not a peer
        return f"{', '.join(spelled[:-1])} or all"
    return ", ".join(spelled)


def choice_callback(flag: str, choice: type[enum.Enum]) -> Callable[[object], str]:
    """A typer ``callback``: the value's spelling when ``choice`` has it, else a usage error
    naming ``flag`` and every allowed spelling.

    Options are declared as plain ``str`` with a plain-string default and this callback: click
    calls a callback for the default too, so no typer version's handling of enum types or of
    ``parser=`` decides what a command receives (typer 0.13-0.24 passed ``None`` for an enum
    default with a parser)."""

    def check(value: object) -> str:
        if isinstance(value, enum.Enum):
            value = value.value
        for member in choice:
            if value == member.value:
                return str(member.value)
        raise typer.BadParameter(f"{flag} must be one of {_phrase(choice)}, got {value!r}.")

    return check


def optional_choice_callback(flag: str, choice: type[enum.Enum]) -> Callable[[object], str | None]:
    """:func:`choice_callback` for an option whose default is None (not given)."""
    check = choice_callback(flag, choice)

    def check_given(value: object) -> str | None:
        return None if value is None else check(value)

    return check_given
