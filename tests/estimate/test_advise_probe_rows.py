"""The probe's arithmetic: which candidates it sets up and in what order, the rows it makes of
its interleaved windows, and how measured rows and PRE's predictions are ranked together."""

from __future__ import annotations

import pytest

from wattlab.estimate.advise.probe_rows import (
    MIN_PREDICTED_SAVING,
    Measured,
    choose_candidates,
    combined,
    measured_rows,
    scale_of,
)
from wattlab.estimate.advise.ranking import Limit, Option, Setting
from wattlab.wording import EnergyParts


def _option(precision: str, energy: float, low: float, high: float, time: float = 10.0):
    return Option(Setting(precision, 256, 1), energy, time, low, high, time * 0.9, time * 1.1)


PREDICTED = [
    _option("fp32", 1000, 900, 1100, 20.0),
    _option("tf32", 600, 500, 700),
    _option("amp-bf16", 400, 300, 520),
    _option("amp-fp16", 420, 320, 540),
]
CURRENT = Setting("fp32", 256, 1)
BF16, FP16, TF32 = (Setting(p, 256, 1) for p in ("amp-bf16", "amp-fp16", "tf32"))
COUNTER = EnergyParts({("gpu", "measured"): 97.0, ("cpu", "estimated"): 3.0})
MODELLED = EnergyParts({("cpu", "estimated"): 80.0, ("ram", "estimated"): 20.0})


def test_prune_what_pre_is_sure_loses_but_keep_the_current_configuration() -> None:
    # tf32 (500-700) overlaps the best's 300-520; fp32 (900-1100) does not, but is current
    choice = choose_candidates(PREDICTED, CURRENT, graphs=False)
    assert {c.setting.precision for c in choice.measure} == {"fp32", "tf32", "amp-bf16", "amp-fp16"}
    start = Setting("amp-bf16", 256, 1)
    choice = choose_candidates(PREDICTED, start, graphs=False)
    assert [c.setting.precision for c in choice.pruned] == ["fp32"]
    assert "sure it loses" in choice.pruned[0].reason
    assert choice.unmeasured == []


def test_candidates_are_set_up_in_pre_s_order_with_the_current_one_in_its_place() -> None:
    # the candidates PRE puts first decide the advice; fp32's autotuning can take half a minute
    choice = choose_candidates(PREDICTED, CURRENT, graphs=False)
    assert [c.setting.precision for c in choice.measure] == ["amp-bf16", "amp-fp16", "tf32", "fp32"]


def test_graphs_twins_for_the_precisions_that_support_them() -> None:
    choice = choose_candidates(PREDICTED, CURRENT, graphs=True)
    twins = [c for c in choice.measure if c.setting.cuda_graphs]
    assert sorted(c.setting.precision for c in twins) == ["amp-bf16", "fp32", "tf32"]
    assert all(c.predicted is None for c in twins)
    order = [c.setting for c in choice.measure]
    assert order.index(Setting("amp-bf16", 256, 1, cuda_graphs=True)) == order.index(BF16) + 1


def test_measured_rows_are_medians_per_image_with_an_interval_and_provenance_by_share() -> None:
    windows = [
        Measured(BF16, samples=1000, energy_j=100.0, duration_s=2.0, uncertainty_j=1.0,
                 parts=COUNTER),
        Measured(BF16, samples=2000, energy_j=220.0, duration_s=4.4, uncertainty_j=1.0,
                 parts=COUNTER),
        Measured(BF16, samples=1000, energy_j=104.0, duration_s=2.1, uncertainty_j=1.0,
                 parts=COUNTER),
        Measured(CURRENT, samples=500, energy_j=150.0, duration_s=5.0, uncertainty_j=0.5,
                 parts=MODELLED),
    ]  # fmt: skip
    rows = measured_rows(windows, samples=10_000)
    three = rows[BF16]
    assert three.energy_j == pytest.approx(0.104 * 10_000)  # median of 0.100, 0.110, 0.104
    assert three.energy_low_j == pytest.approx((0.100 - 0.001) * 10_000)
    assert three.energy_high_j == pytest.approx((0.110 + 0.0005) * 10_000)
    assert three.duration_s == pytest.approx(0.0021 * 10_000)
    assert three.source == (
        "measured (probe, 3 windows: 97.0 % measured by GPU counters, 3.0 % estimated (CPU))"
    )
    assert three.extra["windows"] == 3 and "3 interleaved windows" in three.notes
    one = rows[CURRENT]
    assert one.source.startswith("estimated (probe, 1 window: estimated (CPU, RAM))")
    assert one.energy_high_j - one.energy_low_j == pytest.approx(2 * 0.001 * 10_000)
    assert "counter's resolution" in one.notes


def _measured(setting: Setting, energy: float, time: float = 10.0) -> Option:
    return Option(setting, energy, time, energy * 0.98, energy * 1.02, time, time,
                  source="measured (probe, 3 windows: measured by GPU counters)")  # fmt: skip


def test_unmeasured_rows_are_pre_scaled_by_the_probe_and_stay_predicted() -> None:
    measured = {CURRENT: _measured(CURRENT, 1200.0, 22.0), BF16: _measured(BF16, 520.0)}
    scale = scale_of(PREDICTED, measured)
    assert scale.count == 2
    assert scale.energy == pytest.approx((1.2 + 1.3) / 2)  # the median of two ratios
    ranked = combined(PREDICTED, measured, CURRENT, Limit())
    by = {o.setting: o for o in ranked}
    assert by[TF32].source.startswith("predicted (PRE x1.25 energy")
    assert by[TF32].energy_j == pytest.approx(600 * 1.25)
    assert by[FP16].energy_j == pytest.approx(420 * 1.25)  # 525: not 5 % below bf16's 520
    assert ranked[0].setting == BF16  # a measured row beats an equally good prediction


def test_a_prediction_leads_only_when_it_beats_the_best_measured_row_by_five_per_cent() -> None:
    measured = {CURRENT: _measured(CURRENT, 1000.0, 20.0), BF16: _measured(BF16, 400.0)}
    cheap = [*PREDICTED[:3], _option("amp-fp16", 300, 250, 350)]  # 300 x 1.0 < 400 x 0.95
    assert combined(cheap, measured, CURRENT, Limit())[0].setting == FP16
    close = [*PREDICTED[:3], _option("amp-fp16", 390, 350, 420)]  # 390 > 380
    ranked = combined(close, measured, CURRENT, Limit())
    assert ranked[0].setting == BF16 and [o.rank for o in ranked] == [1, 2, 3, 4]
    assert MIN_PREDICTED_SAVING == 0.05


def test_against_a_predicted_current_configuration_a_change_needs_five_per_cent() -> None:
    # only bf16 measured, 3 % below the scaled prediction of fp32: not enough to lead
    measured = {BF16: _measured(BF16, 400.0)}
    rows = [_option("fp32", 412, 380, 440), _option("amp-bf16", 400, 380, 420)]
    ranked = combined(rows, measured, CURRENT, Limit())
    assert ranked[0].is_current and ranked[0].source.startswith("predicted")
    rows = [_option("fp32", 500, 450, 550), _option("amp-bf16", 400, 380, 420)]
    assert combined(rows, measured, CURRENT, Limit())[0].setting == BF16


def test_measured_changes_within_two_per_cent_are_a_tie_that_pre_breaks() -> None:
    # fp16 measured 1.3 % below bf16: under the windows' spread; PRE prefers bf16 (400 < 420)
    measured = {CURRENT: _measured(CURRENT, 1000.0, 20.0), BF16: _measured(BF16, 137.0),
                FP16: _measured(FP16, 135.2)}  # fmt: skip
    assert combined(PREDICTED, measured, CURRENT, Limit())[0].setting == BF16
    # 3 % apart is a measured difference: the measurement decides
    measured[FP16] = _measured(FP16, 132.8)
    assert combined(PREDICTED, measured, CURRENT, Limit())[0].setting == FP16
