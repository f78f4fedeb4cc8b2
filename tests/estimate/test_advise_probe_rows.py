"""The probe's arithmetic: which candidates it measures, and the rows it makes of its runs."""

from __future__ import annotations

import pytest

from wattlab.estimate.advise.probe_rows import (
    Measured,
    choose_candidates,
    measured_rows,
    merged,
)
from wattlab.estimate.advise.ranking import Option, Setting


def _option(precision: str, energy: float, low: float, high: float, time: float = 10.0):
    return Option(Setting(precision, 256, 1), energy, time, low, high, time * 0.9, time * 1.1)


PREDICTED = [
    _option("fp32", 1000, 900, 1100, 20.0),
    _option("tf32", 600, 500, 700),
    _option("amp-bf16", 400, 300, 520),
    _option("amp-fp16", 420, 320, 540),
]
CURRENT = Setting("fp32", 256, 1)


def test_prune_what_pre_is_sure_loses_but_keep_the_current_configuration() -> None:
    # tf32 (500-700) overlaps the best's 300-520; fp32 (900-1100) does not, but is current
    choice = choose_candidates(PREDICTED, CURRENT, graphs=False, seconds=600, window_s=3)
    measured = [c.setting.precision for c in choice.measure]
    assert measured[0] == "fp32"  # the current one first: every saving is against it
    assert sorted(measured) == ["amp-bf16", "amp-fp16", "fp32", "tf32"]
    # starting from bf16, fp32 is left out: PRE is sure it loses
    start = Setting("amp-bf16", 256, 1)
    choice = choose_candidates(PREDICTED, start, graphs=False, seconds=600, window_s=3)
    assert [c.setting.precision for c in choice.pruned] == ["fp32"]
    assert (
        "PRE is sure it loses: at least 0.9 kJ against at most 0.52 kJ" in choice.pruned[0].reason
    )


def test_graphs_twins_for_the_precisions_that_support_them() -> None:
    choice = choose_candidates(PREDICTED, CURRENT, graphs=True, seconds=600, window_s=3)
    twins = [c for c in choice.measure if c.setting.cuda_graphs]
    assert sorted(c.setting.precision for c in twins) == ["amp-bf16", "fp32", "tf32"]
    assert all(c.predicted is None for c in twins)


def test_the_budget_takes_candidates_in_pre_s_order() -> None:
    # 8 s of warm-up + 3 s of window each: 25 s hold two candidates
    choice = choose_candidates(PREDICTED, CURRENT, graphs=False, seconds=25, window_s=3)
    assert [c.setting.precision for c in choice.measure] == ["fp32", "amp-bf16"]
    assert [c.setting.precision for c in choice.unmeasured] == ["amp-fp16", "tf32"]
    assert all("time ran out" in c.reason for c in choice.unmeasured)


def test_measured_rows_are_medians_per_image_with_an_interval_from_the_runs() -> None:
    bf16 = Setting("amp-bf16", 256, 1)
    runs = [
        Measured(bf16, samples=1000, energy_j=100.0, duration_s=2.0, uncertainty_j=1.0),
        Measured(bf16, samples=2000, energy_j=220.0, duration_s=4.4, uncertainty_j=1.0),
        Measured(CURRENT, samples=500, energy_j=150.0, duration_s=5.0, uncertainty_j=0.5),
    ]
    rows = measured_rows(runs, samples=10_000)
    two = rows[bf16]
    assert two.energy_j == pytest.approx(0.105 * 10_000)  # median of 0.100 and 0.110 J/image
    assert two.energy_low_j == pytest.approx((0.100 - 0.001) * 10_000)
    assert two.energy_high_j == pytest.approx((0.110 + 0.0005) * 10_000)
    assert two.duration_s == pytest.approx(0.0021 * 10_000)
    assert two.source == "measured (probe, 2 runs)"
    one = rows[CURRENT]
    assert one.source == "measured (probe, 1 run)"
    assert one.energy_high_j - one.energy_low_j == pytest.approx(2 * 0.001 * 10_000)
    assert "counter's resolution" in one.notes
    cpu = measured_rows(runs[:1], 1000, estimated_note="CPU energy is modelled")[bf16]
    assert cpu.source.startswith("estimated") and "modelled" in cpu.notes


def test_merged_rows_replace_predictions_and_add_graphs() -> None:
    graphs = Setting("amp-bf16", 256, 1, cuda_graphs=True)
    rows = measured_rows(
        [Measured(graphs, 1000, 50.0, 1.0), Measured(CURRENT, 1000, 150.0, 3.0)], 1000
    )
    out = merged(PREDICTED, rows)
    by = {o.setting: o for o in out}
    assert by[CURRENT].source.startswith("measured") and by[graphs].source.startswith("measured")
    assert by[Setting("tf32", 256, 1)].source == "predicted"
    assert len(out) == len(PREDICTED) + 1
    assert graphs.changes_from(CURRENT) == "precision fp32 -> amp-bf16; CUDA graphs on"
    assert graphs.describe() == "amp-bf16, batch 256, CUDA graphs, 1 GPU"
