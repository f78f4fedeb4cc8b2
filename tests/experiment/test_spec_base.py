"""The spec base both sweep shapes extend, and the spec hashes it must not change: a sweep
stored before the base existed resumes as the same sweep (its hash is looked up in the
database), so the hashes below were computed with the code before ``specs/base.py``."""

from __future__ import annotations

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.specs.base import SpecBase
from wattlab.experiment.specs.command import CommandSweepSpec
from wattlab.experiment.specs.load import load_sweep_spec
from wattlab.experiment.specs.trainer import SweepSpec, load_spec

TRAINER = {
    "name": "pinned-trainer",
    "description": "left out of the hash",
    "base": {
        "model": "resnet18",
        "stem": "cifar",
        "dataset": "synthetic",
        "budget_samples": 8192,
        "batch_size": 64,
        "data_dir": "/left/out",
        "project_after_fraction": 0.5,
    },
    "grid": {"precision": ["fp32", "amp-bf16"], "power_limit_w": [300, 250]},
    "repetitions": 2,
    "order": "random",
    "order_seed": 7,
    "warmup_runs": 0,
    "cooldown_s": 30,
    "cooldown_until_c": 45,
    "codecarbon": True,
    "baseline": {"precision": "fp32", "power_limit_w": 300},
    "adjust": [{"when": {"precision": "fp32"}, "set": {"budget_samples": 4096}}],
    "only": [
        {"precision": "fp32", "power_limit_w": 300},
        {"precision": "amp-bf16", "power_limit_w": 250},
    ],
}
PLAIN = {
    "name": "plain",
    "base": {"model": "resnet18", "dataset": "synthetic", "epochs": 1},
    "grid": {"batch_size": [32, 64]},
}
COMMAND = {
    "name": "pinned-command",
    "description": "left out",
    "command": ["python", "train.py", "--bs", "{batch_size}", "--p", "{precision}"],
    "label": "net",
    "cwd": ".",
    "env": {"OMP_NUM_THREADS": "{threads}"},
    "grid": {"batch_size": [64, 128], "precision": ["fp32", "bf16"], "threads": [1, 2.5, True]},
    "repetitions": 2,
    "order": "sequential",
    "order_seed": 3,
    "warmup_runs": 0,
    "cooldown_s": 5.0,
    "cooldown_until_c": 50.0,
    "baseline": {"batch_size": 64, "precision": "fp32", "threads": 1},
}
COMMAND_DEFAULTS = {"name": "cmd-defaults", "command": ["./run.sh", "{n}"], "grid": {"n": [1, 2]}}


@pytest.mark.parametrize(
    ("spec", "pinned"),
    [
        (lambda: SweepSpec.from_dict(TRAINER), "79dc408cd0ace0c9"),
        (lambda: SweepSpec.from_dict(PLAIN), "c9bacd55114f7eca"),
        (lambda: load_spec("paper-12", data_dir="/d"), "8aadd05a78eafd7e"),
        (lambda: load_spec("quickstart", data_dir="/d"), "e4bfae5e6da28d0b"),  # 256/128 (#39)
        (lambda: load_spec("demo-cpu", data_dir="/d"), "0e770d2eb199acdf"),  # cpu_threads 1
        (lambda: CommandSweepSpec.from_dict(COMMAND), "2adb735b27872b4b"),
        (lambda: CommandSweepSpec.from_dict(COMMAND_DEFAULTS), "85b0e0374ff4a77e"),
    ],
    ids=[
        "trainer",
        "trainer-defaults",
        "paper-12",
        "quickstart",
        "demo-cpu",
        "command",
        "command-defaults",
    ],
)
def test_spec_hashes_are_those_computed_before_the_base(spec, pinned) -> None:
    assert spec().spec_hash() == pinned


def test_both_shapes_extend_the_base_and_keep_their_own_defaults() -> None:
    trainer, command = SweepSpec.from_dict(PLAIN), CommandSweepSpec.from_dict(COMMAND_DEFAULTS)
    assert isinstance(trainer, SpecBase) and isinstance(command, SpecBase)
    shared = set(SpecBase.model_fields)
    assert shared < set(SweepSpec.model_fields) and shared < set(CommandSweepSpec.model_fields)
    assert (trainer.cooldown_s, command.cooldown_s) == (60.0, 10.0)
    assert (trainer.repetitions, trainer.warmup_runs) == (command.repetitions, 1) == (3, 1)


@pytest.mark.parametrize("data", [PLAIN, COMMAND_DEFAULTS])
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("name", "two words", "name: expected letters, digits"),
        ("name", "trailing\n", "name: expected letters, digits"),
        ("repetitions", 0, "repetitions"),
        ("cooldown_s", 7200.0, "cooldown_s"),
        ("order", "shuffled", "order: expected 'random', 'sequential' or 'abba'"),
    ],
)
def test_the_shared_checks_say_the_same_for_both_shapes(data, key, value, message) -> None:
    shape = CommandSweepSpec if "command" in data else SweepSpec
    with pytest.raises(ConfigError, match=message):
        shape.from_dict({**data, key: value})


def test_the_same_seed_gives_both_shapes_the_same_order() -> None:
    """One shuffled pass per repetition, drawn from the seed: a resumed sweep finds its order
    again (seed 11 over three values, as ``random.Random(11)`` shuffles them)."""
    values = [32, 64, 128]
    trainer = SweepSpec.from_dict({**PLAIN, "grid": {"batch_size": values}, "order_seed": 11})
    command = CommandSweepSpec.from_dict(
        {**COMMAND_DEFAULTS, "grid": {"n": values}, "order_seed": 11}
    )
    by_trainer = [(r.config.batch_size, r.repetition) for r in trainer.expand()]
    by_command = [(r.config.axes["n"], r.repetition) for r in command.expand()]
    passes = [[32, 128, 64], [128, 32, 64], [128, 64, 32]]
    assert by_trainer == by_command == [(v, rep) for rep, p in enumerate(passes) for v in p]
    sequential = SweepSpec.from_dict({**PLAIN, "order": "sequential", "repetitions": 2})
    assert [(r.config.batch_size, r.repetition) for r in sequential.expand()] == [
        (32, 0),
        (64, 0),
        (32, 1),
        (64, 1),
    ]
    with pytest.raises(ValueError, match="needs a seed"):
        SweepSpec.from_dict(PLAIN).expand()


def test_abba_runs_every_other_pass_backwards_for_both_shapes() -> None:
    """``order: abba`` (A B, B A, A B, ...): a linear drift falls on both sides alike, with no
    seed needed (the order is the grid's, reversed on odd repetitions)."""
    trainer = SweepSpec.from_dict(
        {**PLAIN, "grid": {"batch_size": [64, 32]}, "order": "abba", "repetitions": 4}
    )
    command = CommandSweepSpec.from_dict(
        {**COMMAND_DEFAULTS, "grid": {"n": [64, 32]}, "order": "abba", "repetitions": 4}
    )
    abba = [(64, 0), (32, 0), (32, 1), (64, 1), (64, 2), (32, 2), (32, 3), (64, 3)]
    assert [(r.config.batch_size, r.repetition) for r in trainer.expand()] == abba
    assert [(r.config.axes["n"], r.repetition) for r in command.expand()] == abba


def test_the_loader_picks_the_shape(tmp_path) -> None:
    path = tmp_path / "cmd.yaml"
    path.write_text("name: c\ncommand: [./run.sh, '{n}']\ngrid: {n: [1, 2]}\n")
    assert isinstance(load_sweep_spec(path), CommandSweepSpec)
    assert isinstance(load_sweep_spec("quickstart", data_dir="/d"), SweepSpec)
