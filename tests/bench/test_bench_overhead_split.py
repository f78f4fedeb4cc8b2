"""bench/overhead_split.py: the sweep overhead of first runs of a configuration and of repeats,
recomputed from the shipped raw output (the README's figures come from it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    path = ROOT / "bench" / "overhead_split.py"
    spec = importlib.util.spec_from_file_location("overhead_split", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_first_runs_and_repeats_are_split_by_configuration() -> None:
    sweep = {"engine": "new", "runs": [
        {"position": 1, "config_hash": "a", "overhead_s": 20.0},
        {"position": 2, "config_hash": "b", "overhead_s": 4.0},
        {"position": 3, "config_hash": "a", "overhead_s": 1.0},
        {"position": 4, "config_hash": "b", "overhead_s": 0.5},
    ]}  # fmt: skip
    out = _bench().split(sweep)
    assert out["first_of_configuration"]["median_s"] == pytest.approx(12.0)
    assert out["repeats"]["mean_s"] == pytest.approx(0.75)
    assert out["all"]["mean_s"] == pytest.approx(25.5 / 4) and out["all"]["runs"] == 4


def test_the_readme_figures_come_from_the_shipped_raw_output() -> None:
    data = json.loads((ROOT / "docs/measured/h200-sweep-overhead-2026-12-03.json").read_text())
    out = _bench().split(data["sweeps"][0])
    shipped = json.loads(
        (ROOT / "docs/measured/h200-sweep-overhead-2026-12-03-split.json").read_text()
    )
    assert shipped["sweeps"][0] == json.loads(json.dumps(out))
    assert round(out["all"]["median_s"], 1) == 1.9 and round(out["all"]["mean_s"], 1) == 5.1
    assert round(out["first_of_configuration"]["median_s"], 1) == 7.1
    assert (round(out["repeats"]["min_s"], 1), round(out["repeats"]["max_s"], 1)) == (0.7, 1.1)
