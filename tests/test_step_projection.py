"""STEP on synthetic traces with a known warm-up and a known total."""

from __future__ import annotations

import numpy as np
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.step_projection import StepProjector, detect_stable_epoch, step_project

# A 10-epoch run: one warm-up epoch (1400 J in 12.5 s), then 1000 J in 10 s per epoch.
WARM_E = [1400.0] + [1000.0] * 9
WARM_D = [12.5] + [10.0] * 9
WARM_TOTAL_J = sum(WARM_E)  # 10400 J
WARM_TOTAL_S = sum(WARM_D)  # 102.5 s


def test_detects_the_first_epoch_after_warm_up() -> None:
    assert detect_stable_epoch(WARM_E, WARM_D) == 2
    assert detect_stable_epoch([1500, 1200] + [1000] * 4, [15, 12] + [10] * 4) == 3
    assert detect_stable_epoch([1000] * 3, [10] * 3) == 1  # no warm-up at all


def test_rule_uses_tolerance_on_both_energy_and_power() -> None:
    assert detect_stable_epoch([1000, 1040], [10, 10]) == 1  # 4 % apart: within 5 %
    assert detect_stable_epoch([1000, 1060], [10, 10]) is None  # 6 % apart
    assert detect_stable_epoch([1000, 1060], [10, 10], tolerance=0.1) == 1
    # equal energies but the second epoch runs 20 % longer: power drops 17 %, not stable
    assert detect_stable_epoch([1000, 1000], [10, 12]) is None


def test_longer_window_needs_more_consecutive_stable_epochs() -> None:
    energies = [1400, 1000, 1000, 1200, 1000, 1000, 1000]
    durations = [10.0] * 7
    assert detect_stable_epoch(energies, durations, window=2) == 2
    assert detect_stable_epoch(energies, durations, window=3) == 5


def test_projection_recovers_the_known_total_from_three_epochs() -> None:
    projection = step_project(WARM_E[:3], WARM_D[:3], total_epochs=10)
    assert projection.ok and projection.status == "projected"
    assert projection.stable_epoch == 2 and projection.window_epochs == 2
    assert projection.energy_j == pytest.approx(WARM_TOTAL_J)
    assert projection.duration_s == pytest.approx(WARM_TOTAL_S)
    assert projection.energy_before_j == pytest.approx(1400.0)
    assert projection.mean_power_w == pytest.approx(100.0)
    assert projection.uncertainty_j == pytest.approx(0.0)  # identical window epochs
    assert projection.energy_low_j == projection.energy_high_j == pytest.approx(WARM_TOTAL_J)
    assert "10.4 kJ" in projection.describe()
    assert projection.relative_error(WARM_TOTAL_J) == pytest.approx(0.0)
    assert projection.relative_error(WARM_TOTAL_J * 2) == pytest.approx(-0.5)


def test_energy_before_and_fractional_budgets_are_counted() -> None:
    projection = step_project(WARM_E[:3], WARM_D[:3], total_epochs=9.5, energy_before_j=250.0)
    assert projection.energy_j == pytest.approx(250.0 + 1400.0 + 1000.0 * 8.5)


def test_power_twin_uses_the_measured_duration_when_given() -> None:
    # the last epochs ran 10 % longer at the same power: the energy projection misses it,
    # the power-based twin with the measured duration does not
    durations = [12.5] + [10.0] * 4 + [11.0] * 5
    measured_total_s = sum(durations)
    projection = step_project(WARM_E[:3], durations[:3], 10, total_duration_s=measured_total_s)
    assert projection.power_basis == "measured duration"
    assert projection.power_energy_j == pytest.approx(1400.0 + 100.0 * (measured_total_s - 12.5))
    without = step_project(WARM_E[:3], durations[:3], 10)
    assert without.power_basis == "projected duration"
    assert without.power_energy_j == pytest.approx(without.energy_j)


def test_noisy_trace_projects_close_with_an_honest_band() -> None:
    rng = np.random.default_rng(7)
    epochs = 30
    durations = np.r_[14.0, rng.normal(10.0, 0.05, epochs - 1)]
    power = np.r_[130.0, rng.normal(100.0, 0.8, epochs - 1)]
    energies = durations * power
    projection = step_project(energies[:4], durations[:4], epochs)
    assert projection.ok and projection.stable_epoch == 2
    truth = float(energies.sum())
    assert abs(projection.relative_error(truth)) < 0.02
    assert projection.uncertainty_j > 0
    assert projection.energy_low_j < projection.energy_j < projection.energy_high_j


def test_a_trace_that_never_stabilises_says_so() -> None:
    # power creeps up 8 % per epoch (e.g. a GPU heating up), never settling
    energies = [1000.0 * 1.08**i for i in range(6)]
    durations = [10.0] * 6
    assert detect_stable_epoch(energies, durations) is None
    projection = step_project(energies, durations, total_epochs=20)
    assert not projection.ok and projection.status == "not stable"
    assert projection.energy_j is None and projection.power_energy_j is None
    assert "not stable" in projection.error and "5%" in projection.error
    assert projection.relative_error(12345.0) is None
    assert projection.describe().startswith("STEP: not stable")


def test_live_projector_projects_once_as_soon_as_the_window_is_stable() -> None:
    projector = StepProjector(total_epochs=10)
    returned = [projector.add_epoch(e, d) for e, d in zip(WARM_E, WARM_D, strict=True)]
    made = [(i + 1, r) for i, r in enumerate(returned) if r is not None]
    assert [epoch for epoch, _ in made] == [3]  # epochs 2 and 3 are the stable window
    assert made[0][1].energy_j == pytest.approx(WARM_TOTAL_J)
    assert projector.final_error(WARM_TOTAL_J) == pytest.approx(0.0)


def test_live_projector_after_k_epochs_uses_every_stable_epoch_seen() -> None:
    energies = [1400.0, 1000.0, 1010.0, 990.0, 1000.0, 1000.0]
    durations = [12.0] + [10.0] * 5
    projector = StepProjector(total_epochs=6, project_after=4)
    returned = [projector.add_epoch(e, d) for e, d in zip(energies, durations, strict=True)]
    assert [r is not None for r in returned] == [False, False, False, True, False, False]
    projection = returned[3]
    assert projection.stable_epoch == 2 and projection.window_epochs == 3
    assert projection.energy_j == pytest.approx(1400.0 + 1000.0 * 5)  # mean of 1010, 990, 1000


def test_live_projector_reports_not_stable_instead_of_guessing() -> None:
    energies = [1000.0 * 1.08**i for i in range(5)]
    after_k = StepProjector(total_epochs=5, project_after=3)
    results = [after_k.add_epoch(e, 10.0) for e in energies]
    assert results[2] is not None and results[2].status == "not stable"
    assert after_k.final_error(5000.0) is None

    until_end = StepProjector(total_epochs=5)
    results = [until_end.add_epoch(e, 10.0) for e in energies]
    assert results[:4] == [None] * 4
    assert results[4].status == "not stable"  # the last epoch says so
    assert until_end.result().status == "not stable"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: step_project([1, 1], [1, 1], total_epochs=-3), ConfigError),
        (lambda: step_project([1, 1], [1, 1], total_epochs=10, window=1), ConfigError),
        (lambda: step_project([1, 1], [1, 1], total_epochs=10, tolerance=0), ConfigError),
        (lambda: step_project([1, 1, 1], [1, 1], total_epochs=10), DataError),
        (lambda: step_project([1, -1], [1, 1], total_epochs=10), DataError),
        (lambda: step_project([1] * 5, [1] * 5, total_epochs=3), DataError),
        (lambda: StepProjector(total_epochs=10, project_after=1), ConfigError),
        (lambda: StepProjector(total_epochs=3, project_after=5), ConfigError),
        (lambda: StepProjector(total_epochs=0), ConfigError),
        (lambda: StepProjector(total_epochs=5).add_epoch(100.0, 0.0), DataError),
    ],
)
def test_bad_input_is_a_one_sentence_error(call, error) -> None:
    with pytest.raises(error) as info:
        call()
    assert str(info.value).endswith(".") and "\n" not in str(info.value)
