"""Sweep specs: validation messages that name the YAML path, presets, order, hashing."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.db.store import open_store
from wattlab.experiment.specs.base import PRESETS, draw_order_seed, parse_yaml, preset_text
from wattlab.experiment.specs.trainer import SweepSpec, load_spec

GOOD = """\
name: mini
base: {model: resnet18, epochs: 1, batch_size: 256, device: cuda}
grid: {gpus: [1, 2], precision: [fp32, amp-bf16], power_limit_w: [300, 250, 200]}
repetitions: 3
order: random
order_seed: null
warmup_runs: 1
cooldown_s: 60
codecarbon: true
baseline: {gpus: 1, precision: fp32, power_limit_w: 300}
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def spec_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_spec(str(write(tmp_path, text)))
    message = str(info.value)
    assert "\n" not in message and message.endswith((".", "?")), message
    return message


def replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def test_good_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(str(write(tmp_path, GOOD)))
    assert spec.name == "mini"
    assert spec.grid["power_limit_w"] == [300.0, 250.0, 200.0]
    assert spec.n_runs == 36
    assert spec.codecarbon is True
    assert spec.baseline_filter() == {"gpus": 1, "precision": "fp32", "power_limit_w": 300.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            replace("[300, 250, 200]", "[300, abc, 200]"),
            "grid.power_limit_w[1]: expected a number, got 'abc'.",
        ),
        (replace("grid:", "gird:"), "unknown key 'gird' at top level; did you mean 'grid'?"),
        (GOOD + "colour: blue\n", "unknown key 'colour' at top level; allowed: name,"),
        # a well-formed unknown name (resnet9000) is refused by the pre-flight, with torchvision
        (
            replace("model: resnet18", "model: resnet 9000"),
            "model must be a torchvision model name such as resnet50 (got 'resnet 9000')",
        ),
        (replace("model: resnet18", "modle: resnet18"), "unknown key 'modle' in base; did you"),
        (replace("gpus: [1, 2]", "gpu: [1, 2]"), "unknown key 'gpu' in grid; did you mean 'gpus'"),
        (replace("gpus: [1, 2]", "gpus: [1, 2.5]"), "grid.gpus[1]: expected a whole number"),
        (replace("gpus: [1, 2]", "gpus: 2"), "grid.gpus: expected a list"),
        (replace("epochs: 1", "epochs: '1'"), "base.epochs: expected a whole number, got '1'"),
        (replace("precision: [fp32, amp-bf16]", "precision: []"), "grid.precision: the list is"),
        (replace("gpus: [1, 2]", "gpus: [1, 1]"), "grid.gpus[1]: 1 appears twice"),
        (
            "name: x\nbase: {epochs: 1}\ngrid: {}\n",
            "grid: no axes; give at least one",
        ),
        (
            "name: x\nbase: {epochs: 1, device: cpu}\n",
            "missing key 'grid' at top level.",
        ),
        (replace("name: mini", "name: my sweep"), "name: expected letters, digits"),
        (replace("repetitions: 3", "repetitions: 0"), "repetitions: expected a value >= 1, got 0."),
        (replace("repetitions: 3", "repetitions: three"), "repetitions: expected a whole number"),
        (
            replace("order: random", "order: shuffled"),
            "order: expected 'random', 'sequential' or 'abba'",
        ),
        (replace("cooldown_s: 60", "cooldown_s: -5"), "cooldown_s: expected a value >= 0"),
        (replace("codecarbon: true", "codecarbon: maybe"), "codecarbon: expected true or false"),
        (
            replace("baseline: {gpus: 1,", "baseline: {batch_size: 256, gpus: 1,"),
            "baseline.batch_size: 'batch_size' is not a grid axis; axes: gpus, precision,",
        ),
        (
            replace("power_limit_w: 300}", "power_limit_w: 150}"),
            "baseline.power_limit_w: 150.0 is not among grid.power_limit_w values",
        ),
        (
            replace("gpus: 1, precision: fp32, ", "gpus: 1, "),
            "baseline: give a value for grid axis 'precision'",
        ),
        (
            replace("batch_size: 256", "batch_size: 255"),
            "grid point (gpus=2, precision=fp32, power_limit_w=300): batch_size 255 must divide",
        ),
        (
            replace("device: cuda}", "device: cuda, sweep: other}"),
            "base.sweep: not allowed here; it is set to the sweep's name.",
        ),
        (
            replace("device: cuda}", "device: cuda, codecarbon: false}"),
            "base.codecarbon: not allowed here; set codecarbon at the top level",
        ),
        (
            replace("gpus: [1, 2],", "gpus: [1, 2], data_dir: [a, b],"),
            "grid.data_dir: data_dir does not change what is measured",
        ),
        (
            replace("device: cuda}", "device: cuda, gpus: 1}"),
            "grid.gpus: gpus is set in both base and grid",
        ),
        (
            replace("device: cuda}", "device: cuda, dataset: cifar10}"),
            "sweep 'mini' trains on cifar10, so it needs --data-dir DIR",
        ),
        (
            replace("device: cuda}", "device: cpu}"),
            "grid point (gpus=1, precision=fp32, power_limit_w=300): power limits apply to",
        ),
        (GOOD.replace("name: mini\n", ""), "missing key 'name' at top level."),
        (GOOD + "grid: {gpus: [1]}\n", "duplicate key 'grid' at line 11"),
        ("name: x\ngrid: {gpus: [1, 2]\nrepetitions: 2\n", "YAML syntax error at line"),
        ("- name: x\n- grid: {}\n", "a sweep spec must be a mapping of keys"),
        ("", "got an empty file."),
    ],
)
def test_bad_specs_name_the_path(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in spec_error(tmp_path, text)


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    message = spec_error(tmp_path, "name: x\nbase: {epochs: 1\ngrid: [\n")
    assert "spec.yaml: YAML syntax error at line 3" in message


def test_unknown_path_or_preset_lists_presets(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="presets: paper-12, quickstart, h200-1gpu, demo-gpu, demo-cpu"
    ):
        load_spec("paper-13")
    with pytest.raises(ConfigError, match="neither a sweep spec YAML file nor a preset"):
        load_spec(str(tmp_path))  # a folder
    with pytest.raises(ConfigError, match="unknown preset"):
        preset_text("nope")


def test_presets_load_and_expand(tmp_path: Path) -> None:
    expected_runs = {
        "paper-12": 72,
        "quickstart": 8,
        "h200-1gpu": 72,
        "demo-gpu": 8,
        "demo-cpu": 6,
    }
    for name in PRESETS:
        spec = load_spec(name, data_dir=str(tmp_path))
        assert spec.name == name
        plan = spec.expand(order_seed=7)
        assert len(plan) == expected_runs[name] == spec.n_runs
        assert [p.index for p in plan] == list(range(len(plan)))
        assert all(p.config.sweep == name and p.config.codecarbon for p in plan)
        assert all(p.label == p.config.label() for p in plan)
        assert all(p.config_hash == p.config.config_hash() for p in plan)
        assert spec.baseline_config_hash() in {p.config_hash for p in plan}
    quick = load_spec("quickstart")
    assert {p.config.device for p in quick.expand(order_seed=1)} == {"cpu"}
    assert quick.warmup_runs == 0 and quick.cooldown_s == 0
    h200 = load_spec("h200-1gpu")
    fractions = h200.grid["power_limit_fraction"]
    assert min(fractions) * 700 >= 200  # the H200's minimum limit
    paper = load_spec("paper-12", data_dir=str(tmp_path))
    assert paper.baseline_filter() == {"gpus": 1, "precision": "fp32", "power_limit_w": 300.0}
    assert {p.config.data_dir for p in paper.expand(order_seed=1)} == {str(tmp_path)}


def test_paper_preset_without_data_dir_asks_for_it() -> None:
    with pytest.raises(ConfigError, match="--data-dir"):
        load_spec("paper-12")


def test_random_order_is_reproducible_and_blocked(tmp_path: Path) -> None:
    spec = load_spec(str(write(tmp_path, GOOD)))
    first = [(p.config_hash, p.repetition) for p in spec.expand(order_seed=42)]
    again = [(p.config_hash, p.repetition) for p in spec.expand(order_seed=42)]
    other = [(p.config_hash, p.repetition) for p in spec.expand(order_seed=43)]
    assert first == again
    assert first != other
    assert sorted(first) == sorted(other)  # the same runs, another order
    assert Counter(first) == Counter({key: 1 for key in first})
    # Each repetition is one pass over all 12 grid points.
    for rep in range(3):
        block = first[12 * rep : 12 * (rep + 1)]
        assert {r for _, r in block} == {rep}
        assert len({h for h, _ in block}) == 12
    # The spec's own seed is used when none is passed.
    seeded = SweepSpec.from_dict({**spec.as_dict(), "order_seed": 42})
    assert [(p.config_hash, p.repetition) for p in seeded.expand()] == first
    with pytest.raises(ValueError, match="seed"):
        spec.expand()
    assert 0 <= draw_order_seed() < 2**31


def test_sequential_order_is_grid_order_per_repetition(tmp_path: Path) -> None:
    spec = load_spec(str(write(tmp_path, replace("order: random", "order: sequential"))))
    plan = spec.expand()
    points = spec.points()
    assert points[0] == {"gpus": 1, "precision": "fp32", "power_limit_w": 300.0}
    assert points[1] == {"gpus": 1, "precision": "fp32", "power_limit_w": 250.0}
    expected = [spec.run_config(p).config_hash() for p in points] * 3
    assert [p.config_hash for p in plan] == expected
    assert [p.repetition for p in plan] == [0] * 12 + [1] * 12 + [2] * 12


def test_spec_hash_is_stable_over_formatting(tmp_path: Path) -> None:
    block_style = """\
    # the same sweep, written differently
    codecarbon: true
    name: mini
    description: ignored by the hash
    grid:
      gpus:
        - 1
        - 2
      precision: [fp32, amp-bf16]
      power_limit_w: [300.0, 250.0, 200.0]   # floats this time
    base:
      device: cuda
      batch_size: 256
      epochs: 1
      model: resnet18
      data_dir: /somewhere/else
    baseline: {power_limit_w: 300, precision: fp32, gpus: 1}
    """
    a = load_spec(str(write(tmp_path, GOOD, "a.yaml")))
    b = load_spec(str(write(tmp_path, block_style, "b.yaml")))
    assert a.spec_hash() == b.spec_hash()
    c = load_spec(str(write(tmp_path, replace("repetitions: 3", "repetitions: 2"), "c.yaml")))
    d = load_spec(str(write(tmp_path, replace("[300, 250, 200]", "[300, 250, 210]"), "d.yaml")))
    assert len({a.spec_hash(), c.spec_hash(), d.spec_hash()}) == 3


def test_overrides(tmp_path: Path) -> None:
    spec = load_spec(str(write(tmp_path, GOOD)))
    moved = spec.with_overrides(data_dir="/data", batch_size=512, device=None)
    assert moved.base["batch_size"] == 512
    assert {p.config.data_dir for p in moved.expand(order_seed=1)} == {"/data"}
    assert moved.spec_hash() != spec.spec_hash()  # batch size changes what is measured
    assert spec.with_overrides(data_dir="/x").spec_hash() == spec.spec_hash()
    assert spec.with_overrides(codecarbon=False).codecarbon is False
    with pytest.raises(ConfigError, match="precision is a grid axis of sweep 'mini'"):
        spec.with_overrides(precision="fp32")
    with pytest.raises(ConfigError, match="unknown key 'batchsize' in the overrides"):
        spec.with_overrides(batchsize=1)
    with pytest.raises(ConfigError, match="base.device: expected 'cuda' or 'cpu'"):
        spec.with_overrides(device="tpu")


def test_default_baseline_is_the_first_value_of_each_axis() -> None:
    spec = SweepSpec.from_dict(
        {"name": "b", "base": {"epochs": 1, "device": "cpu"}, "grid": {"batch_size": [128, 64]}}
    )
    assert spec.baseline_filter() == {"batch_size": 128}
    assert spec.repetitions == 3 and spec.order == "random"


def test_parse_yaml_duplicate_nested_key() -> None:
    with pytest.raises(ConfigError, match="x.yaml: duplicate key 'gpus' at line 3"):
        parse_yaml("grid:\n  gpus: [1]\n  gpus: [2]\n", "x.yaml")
    assert parse_yaml("grid:\n  gpus: [1]\n", "x.yaml") == {"grid": {"gpus": [1]}}


def test_resume_reproduces_the_recorded_order(tmp_path: Path) -> None:
    spec = load_spec("quickstart")  # order: random, order_seed: null
    db = tmp_path / "r.db"
    with open_store(db) as store:
        seed = store.register_sweep(spec.name, spec.as_dict(), spec.spec_hash(), spec.order_seed)
        first = [(p.config_hash, p.repetition) for p in spec.expand(order_seed=seed)]
    again_spec = load_spec("quickstart")
    with open_store(db) as store:
        seed2 = store.register_sweep(
            again_spec.name, again_spec.as_dict(), again_spec.spec_hash(), again_spec.order_seed
        )
    assert seed2 == seed
    assert [(p.config_hash, p.repetition) for p in again_spec.expand(order_seed=seed2)] == first
    changed = again_spec.with_overrides(train_samples=2048)
    with open_store(db) as store, pytest.raises(ConfigError, match="different spec"):
        store.register_sweep(changed.name, changed.as_dict(), changed.spec_hash(), None)


ADJUST = """
adjust:
  - when: {precision: fp32}
    set: {epochs: 2}
  - when: {precision: [fp32], power_limit_w: 200}
    set: {epochs: 3, lr: 0.1}
"""


def test_adjust_sets_what_some_grid_points_need(tmp_path: Path) -> None:
    spec = load_spec(str(write(tmp_path, GOOD + ADJUST)))
    by_point = {
        (p["precision"], p["power_limit_w"]): spec.run_config(p)
        for p in spec.points()
        if p["gpus"] == 1
    }
    assert by_point[("amp-bf16", 300.0)].epochs == 1  # no rule: the base
    assert by_point[("fp32", 300.0)].epochs == 2  # the first rule
    assert by_point[("fp32", 200.0)].epochs == 3 and by_point[("fp32", 200.0)].lr == 0.1
    assert by_point[("fp32", 300.0)].lr == by_point[("amp-bf16", 300.0)].lr  # later rules win
    # the rules are part of what the sweep measures; an empty list is no rule at all
    plain = load_spec(str(write(tmp_path, GOOD)))
    assert spec.spec_hash() != plain.spec_hash()
    empty = load_spec(str(write(tmp_path, GOOD + "adjust: []\n", "empty.yaml")))
    assert empty.spec_hash() == plain.spec_hash()
    assert SweepSpec.from_dict(spec.as_dict()).spec_hash() == spec.spec_hash()  # round trip


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("[{when: {model: resnet18}, set: {epochs: 2}}]", "adjust[0].when.model: 'model' is not"),
        ("[{when: {precision: tf32}, set: {epochs: 2}}]", "'tf32' is not among grid.precision"),
        ("[{when: {precision: fp32}, set: {gpus: 2}}]", "adjust[0].set.gpus: 'gpus' is a grid"),
        ("[{when: {precision: fp32}}]", "adjust[0]: expected a mapping with the keys when and set"),
        ("[{when: {}, set: {epochs: 2}}]", "adjust[0].when: expected a non-empty mapping."),
        ("[{when: {precision: fp32}, set: {epochs: two}}]", "adjust[0].set.epochs: expected a"),
        ("[{when: {precision: fp32}, set: {epoch: 2}}]", "unknown key 'epoch' in adjust[0].set"),
        ("[{when: {precision: fp32}, set: {epochs: 0}}]", "epochs"),
    ],
)
def test_bad_adjust_rules_name_the_path(tmp_path: Path, rules: str, expected: str) -> None:
    assert expected in spec_error(tmp_path, GOOD + f"adjust: {rules}\n")


def test_the_old_project_after_is_renamed_and_keeps_the_spec_hash() -> None:
    """``project_after`` (epochs when >= 1, a fraction when < 1) is a deprecated spelling: the
    spec holds the explicit setting, and the hash is the one the old spelling had, so a sweep
    registered before the rename resumes."""
    grid = {"precision": ["fp32"]}
    for old, new in (
        ({"project_after": 2}, {"project_after_epochs": 2}),
        ({"project_after": 0.2}, {"project_after_fraction": 0.2}),
    ):
        with pytest.warns(FutureWarning, match="base.project_after is deprecated"):
            legacy = SweepSpec.from_dict({"name": "s", "base": {"epochs": 3, **old}, "grid": grid})
        explicit = SweepSpec.from_dict({"name": "s", "base": {"epochs": 3, **new}, "grid": grid})
        assert legacy.base == explicit.base == {"epochs": 3, **new}
        assert legacy.spec_hash() == explicit.spec_hash()
        (key,) = new
        assert getattr(explicit.run_config({"precision": "fp32"}), key) == new[key]
    rule = [{"when": {"precision": "fp32"}, "set": {"project_after": 3}}]
    with pytest.warns(FutureWarning, match=r"adjust\[0\].set.project_after"):
        adjusted = SweepSpec.from_dict({"name": "s", "base": {"epochs": 4}, "grid": grid,
                                        "adjust": rule})  # fmt: skip
    assert adjusted.adjust[0]["set"] == {"project_after_epochs": 3}
    for base, match in (
        ({"project_after": 1.5}, "base.project_after: expected a whole number of epochs"),
        ({"project_after": 2, "project_after_epochs": 2}, "give only one of them"),
        ({"project_after_fraction": 1.5}, "project_after_fraction"),
    ):
        with pytest.raises(ConfigError, match=match):
            SweepSpec.from_dict({"name": "s", "base": {"epochs": 3, **base}, "grid": grid})


ONLY = """\
only:
  - {gpus: 2, precision: amp-bf16, power_limit_w: 200}
  - {gpus: 1, precision: fp32, power_limit_w: 300}
"""


def test_only_runs_the_listed_grid_points_in_their_order(tmp_path: Path) -> None:
    spec = load_spec(str(write(tmp_path, replace("order: random", "order: sequential") + ONLY)))
    points = spec.points()
    assert points == [
        {"gpus": 2, "precision": "amp-bf16", "power_limit_w": 200.0},
        {"gpus": 1, "precision": "fp32", "power_limit_w": 300.0},
    ]
    assert spec.n_runs == 2 * 3
    planned = spec.expand()
    assert [(p.config.gpus, p.config.precision) for p in planned[:2]] == [
        (2, "amp-bf16"),
        (1, "fp32"),
    ]
    # a list of points is part of what the sweep measures; without one the hash is the old one
    plain = load_spec(str(write(tmp_path, replace("order: random", "order: sequential"), "p.yaml")))
    assert spec.spec_hash() != plain.spec_hash()
    assert "only" not in json.dumps(plain.as_dict()) or plain.as_dict()["only"] is None
    assert SweepSpec.from_dict(spec.as_dict()).spec_hash() == spec.spec_hash()


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ("[]", "only: the list is empty"),
        ("[{gpus: 1, precision: fp32}]", "only[0]: expected a mapping with a value for every"),
        ("[{gpus: 3, precision: fp32, power_limit_w: 300}]", "only[0].gpus: 3 is not among"),
        (
            "[{gpus: 1, precision: fp32, power_limit_w: 300}, "
            "{gpus: 1, precision: fp32, power_limit_w: 300.0}]",
            "only[1]: the same grid point as only[0].",
        ),
    ],
)
def test_bad_only_points_name_the_path(tmp_path: Path, points: str, expected: str) -> None:
    assert expected in spec_error(tmp_path, GOOD + f"only: {points}\n")
