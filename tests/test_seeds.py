"""Each repetition of a sweep trains with its own seed, recorded in its run row, while the
repetitions of one configuration keep one config hash (the analysis groups by it); a spec that
gives ``seed:`` pins it for every repetition, and the pin is stored."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from wattlab.experiment.spec import SweepSpec, repetition_config
from wattlab.train.config import RunConfig

BASE: dict[str, Any] = {"model": "resnet18", "epochs": 1, "device": "cpu"}
# the hashes wattlab gave these two configurations before repetitions had their own seeds:
# unpinned sweeps keep them, so a sweep stored then still resumes
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
    groups = by_hash(plan())
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
