"""Each repetition of a sweep trains with its own seed, recorded in its run row, while the
repetitions of one configuration keep one config hash (the analysis groups by it); a spec that
gives ``seed:`` pins it for every repetition, and the pin is stored."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from wattlab.experiment.specs.trainer import SweepSpec, repetition_config
from wattlab.train.config import RunConfig

BASE: dict[str, Any] = {"model": "resnet18", "epochs": 1, "device": "cpu"}
# the hashes wattlab gave these two configurations before repetitions had their own seeds (with
# the task, recipe and per-epoch evaluation of then): unpinned sweeps keep them, so a sweep
# stored then still resumes
LEGACY = {"synthetic_version": 1, "recipe": 1, "epoch_eval_samples": 0}
OLD_HASHES = {"fp32": "bb4159c99b10f61f", "amp-bf16": "0966f2cbbfafe611"}


def plan(**spec: object) -> list:
    data = {"name": "seeds", "order": "sequential", "base": dict(BASE),
            "grid": {"precision": ["fp32", "amp-bf16"]}, "repetitions": 3, **spec}  # fmt: skip
    return SweepSpec.from_dict(data).expand()


def by_hash(entries: list) -> dict[str, list]:
    groups: dict[str, list] = defaultdict(list)
    for entry in entries:
        groups[entry.config_hash].append(entry)
    return groups


def test_repetitions_get_their_own_seeds_and_keep_one_hash() -> None:
    groups = by_hash(plan(base={**BASE, **LEGACY}))
    assert len(groups) == 2  # two configurations, three repetitions each
    for entries in groups.values():
        assert [e.repetition for e in entries] == [0, 1, 2]
        assert [e.config.run_seed for e in entries] == [0, 1, 2]
        assert {e.config.config_hash() for e in entries} == {entries[0].config_hash}
        assert not any(e.config.seed_pinned for e in entries)
        # the row's config_json (RunConfig.model_dump) records the seed the run trained with
        assert [e.config.model_dump()["repetition_seed"] for e in entries] == [0, 1, 2]
    assert {e[0].config.precision: h for h, e in groups.items()} == OLD_HASHES


def test_a_seed_in_the_spec_is_pinned_for_every_repetition() -> None:
    base = {**BASE, "seed": 7}
    groups = by_hash(plan(base=base))
    for entries in groups.values():
        assert [e.config.run_seed for e in entries] == [7, 7, 7]
        assert all(e.config.seed_pinned and e.config.model_dump()["seed_pinned"] for e in entries)
    # pinned is another configuration than "seed 7, one per repetition"
    unpinned = RunConfig(**{**BASE, "seed": 7, "precision": "fp32"})
    assert repetition_config(unpinned, 2).run_seed == 9
    assert unpinned.config_hash() not in groups
    # a seed axis pins each point's seed
    axis = by_hash(plan(grid={"precision": ["fp32"], "seed": [1, 2]}))
    assert sorted(sorted(e.config.run_seed for e in g) for g in axis.values()) == [
        [1, 1, 1],
        [2, 2, 2],
    ]


def test_a_run_outside_a_sweep_trains_with_its_seed() -> None:
    assert RunConfig(**BASE).run_seed == 0 and RunConfig(**BASE, seed=5).run_seed == 5
    config = RunConfig(**BASE, seed=5)
    again = repetition_config(config, 3)
    assert again.run_seed == 8 and again.config_hash() == config.config_hash()
    with pytest.raises(ValueError):
        RunConfig(**BASE, seeds=3)  # type: ignore[call-arg]


TINY = """
name: {name}
base: {{model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 128,
       test_samples: 64, epochs: 1, batch_size: 64, warmup_steps: 1{seed}}}
grid: {{precision: [fp32]}}
repetitions: 2
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


@pytest.mark.slow
def test_a_cpu_sweep_records_and_trains_with_each_repetitions_seed(tmp_path) -> None:
    import json
    import sqlite3
    import subprocess
    import sys

    for name, seed in (("free", ""), ("pinned", ", seed: 5")):
        (tmp_path / f"{name}.yaml").write_text(TINY.format(name=name, seed=seed))
        done = subprocess.run(
            [sys.executable, "-m", "wattlab.cli", "sweep", f"{name}.yaml", "--db", "s.db"],
            cwd=tmp_path, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    rows = sqlite3.connect(tmp_path / "s.db").execute(
        "SELECT sweep, config_hash, repetition, config_json, train_loss FROM runs "
        "WHERE status = 'ok' ORDER BY sweep, repetition"
    )
    runs: dict[str, list] = defaultdict(list)
    for sweep, config_hash, _, config_json, loss in rows:
        config = json.loads(config_json)
        runs[sweep].append((config_hash, config["repetition_seed"], config["seed_pinned"], loss))
    (h0, s0, p0, loss0), (h1, s1, p1, loss1) = runs["free"]
    assert h0 == h1 and (s0, s1) == (0, 1) and not (p0 or p1)
    assert loss0 != loss1  # another seed, another training
    (h0, s0, p0, loss0), (h1, s1, p1, loss1) = runs["pinned"]
    assert h0 == h1 and (s0, s1) == (5, 5) and p0 and p1
    assert loss0 == pytest.approx(loss1, rel=1e-6)  # the same seed on the CPU: the same losses
