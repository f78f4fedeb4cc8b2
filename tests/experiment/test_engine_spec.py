"""Cool-down settings of a sweep spec: finite and bounded, and they keep old spec hashes."""

from __future__ import annotations

import pytest

from wattlab.errors import ConfigError
from wattlab.experiment.specs.trainer import SweepSpec

BASE = {
    "name": "c",
    "base": {"model": "resnet18", "epochs": 1, "device": "cpu"},
    "grid": {"precision": ["fp32"]},
}


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"cooldown_s": float("inf")}, "cooldown_s"),
        ({"cooldown_s": float("nan")}, "cooldown_s"),
        ({"cooldown_s": 1e9}, "cooldown_s"),
        ({"cooldown_s": -1}, "cooldown_s"),
        ({"cooldown_until_c": 500}, "cooldown_until_c"),
        ({"cooldown_until_c": float("nan")}, "cooldown_until_c"),
        ({"cooldown_until_c": 5}, "cooldown_until_c"),
    ],
)
def test_cooldown_values_must_be_finite_and_bounded(extra, where):
    with pytest.raises(ConfigError, match=where):
        SweepSpec.from_dict({**BASE, **extra})


def test_cooldown_until_c_is_kept_and_changes_the_hash_only_when_set():
    plain = SweepSpec.from_dict({**BASE, "cooldown_s": 30})
    cooled = SweepSpec.from_dict({**BASE, "cooldown_s": 30, "cooldown_until_c": 45})
    assert cooled.cooldown_until_c == 45 and plain.cooldown_until_c is None
    assert plain.spec_hash() != cooled.spec_hash()
    assert plain.spec_hash() == SweepSpec.from_dict({**BASE, "cooldown_s": 30.0}).spec_hash()
