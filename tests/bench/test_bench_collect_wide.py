"""bench/collect_reference.py --grid wide: the priority order, the run sizes, the spec."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _collect():
    spec = importlib.util.spec_from_file_location(
        "collect_reference", ROOT / "bench" / "collect_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_points_come_tier_by_tier_capped_and_without_known_ones() -> None:
    collect = _collect()
    caps = {"a": 2048, "b": 1024}
    known = {("a", "amp-bf16", 32)}
    points = collect.wide_points(("a", "b"), known, caps)
    first_tier = [p for p in points if p[1] == "amp-bf16" and p[2] in (32, 1024, 2048)][:3]
    assert points[:3] == first_tier == [("a", "amp-bf16", 2048), ("b", "amp-bf16", 32),
                                        ("b", "amp-bf16", 1024)]  # fmt: skip
    assert ("a", "amp-bf16", 32) not in points  # measured already
    assert all(b <= caps[m] for m, _, b in points)
    assert len(points) == len(set(points))  # b's 2048 points all became 1024: kept once each
    every = {(p, b) for tier in collect.WIDE_TIERS for p, b in tier}
    assert len(every) == 4 * 6  # every precision at every batch size of the log grid
    assert len([p for p in points if p[0] == "a"]) == len(every) - 1


def test_run_settings_aim_at_the_target_with_16_epochs_where_the_steps_allow() -> None:
    collect = _collect()
    fast = collect.wide_run_settings(0.01, 256)  # 500 steps
    assert fast["budget_samples"] == 16 * fast["train_samples"]
    steps = fast["budget_samples"] // 256
    assert 500 <= steps < 516 and fast["test_samples"] == 256
    slow = collect.wide_run_settings(1.5, 768)  # 3 steps would do: at least 8, one per epoch
    assert slow == {"budget_samples": 8 * 768, "train_samples": 768, "test_samples": 768}


def test_guessed_step_follows_measured_steps() -> None:
    collect = _collect()
    measured = {("m", "fp32"): [(128, 0.02 + 128e-4), (512, 0.02 + 512e-4)]}
    assert collect.guessed_step_s("m", "fp32", 2048, measured) == pytest.approx(0.02 + 2048e-4)


@pytest.mark.slow  # builds every model of the grid to count its profile
def test_written_caps_are_the_computed_ones_and_the_spec_is_a_valid_sweep(tmp_path) -> None:
    collect = _collect()
    for model in collect.WIDE_MODELS:
        assert collect.wide_batch_cap(model) == collect.WIDE_BATCH_CAP.get(model, 2048), model
    from wattlab.estimate.reference import load_reference_csv
    from wattlab.experiment.specs.trainer import load_spec

    shipped, _ = load_reference_csv(collect.SHIPPED_CSV)
    points = collect.wide_points()[:40]
    args = argparse.Namespace(device="cuda", set=None, budget_samples=None, pass_no=1,
                              repetitions=1, cooldown_s=1.0)  # fmt: skip
    spec = collect.wide_spec(args, points, collect.measured_step_s(shipped))
    path = tmp_path / "wide.yaml"
    path.write_text(collect.yaml.safe_dump(spec, sort_keys=False))
    sweep = load_spec(str(path))
    planned = sweep.expand()
    assert [(p.config.model, p.config.precision, p.config.batch_size) for p in planned] == points
    for run in planned:
        assert run.config.epoch_eval_samples == 0
        assert run.config.test_samples == run.config.batch_size
        assert run.config.budget_samples % run.config.train_samples == 0


def test_no_marks_collects_runs_shaped_as_a_plain_wattlab_run(tmp_path) -> None:
    """Issue 38: runs without STEP's live marks, to measure the marks' cost apart."""
    collect = _collect()
    from wattlab.estimate.reference import load_reference_csv
    from wattlab.experiment.specs.trainer import load_spec

    shipped, _ = load_reference_csv(collect.SHIPPED_CSV)
    points = collect.wide_points()[:4]
    for no_marks, fraction in ((False, 0.2), (True, None)):
        args = argparse.Namespace(device="cuda", set=None, budget_samples=None, pass_no=3,
                                  repetitions=1, cooldown_s=1.0, no_marks=no_marks)  # fmt: skip
        spec = collect.wide_spec(args, points, collect.measured_step_s(shipped))
        path = tmp_path / f"wide-{no_marks}.yaml"
        path.write_text(collect.yaml.safe_dump(spec, sort_keys=False))
        for run in load_spec(str(path)).expand():
            assert run.config.project_after_fraction == fraction
