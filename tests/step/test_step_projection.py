"""STEP on synthetic traces with a known warm-up and a known total."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.step.epochs import StepProjector, detect_stable_epoch, step_project
from wattlab.step.marks import MarkProjector, project_from_marks, replay_marks, steady_start
from wattlab.step.schedule import check_after_epochs, check_after_fraction, from_legacy

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


# -- STEP inside the first epoch: step-level marks -----------------------------------------


def marks_of_a_run(
    total: int = 100_000,
    every: int = 512,
    tau: float = 5e-5,
    power_w: float = 600.0,
    start_up_s: float = 0.3,
    counter_period_s: float = 0.1,
    drift: float = 0.0,
    seed: int = 0,
) -> tuple[list[int], list[float], list[float], float]:
    """Marks of a synthetic budget: the first samples run slower (start-up), then a steady
    rate; energy read from a counter that updates every ``counter_period_s``, so a mark sees
    the energy of the last update; the host clock jitters. Returns the true total too."""
    rng = np.random.default_rng(seed)
    samples = list(range(0, total + 1, every))
    if samples[-1] != total:
        samples.append(total)
    times, energies = [], []

    def time_at(s: float) -> float:
        slow = min(s, 5000) * tau * 2  # the first 5000 samples at half speed
        steady = max(s - 5000, 0) * tau * (1 + drift * max(s - 5000, 0) / total)
        return start_up_s * (s > 0) + slow + steady

    def energy_at(t: float) -> float:
        return power_w * t

    for s in samples:
        t = time_at(s)
        counted = math.floor(t / counter_period_s) * counter_period_s
        times.append(t + rng.normal(0, 2e-4))
        energies.append(energy_at(counted))
    true_t = time_at(total)
    return samples, times, energies, energy_at(true_t)


def test_marks_project_within_a_percent_after_a_fifth_of_the_budget() -> None:
    samples, times, energies, truth_j = marks_of_a_run()
    cut = next(i for i, s in enumerate(samples) if s >= 0.2 * samples[-1]) + 1
    projection = project_from_marks(samples[:cut], times[:cut], energies[:cut], samples[-1])
    assert projection.ok, projection.error
    assert projection.energy_j == pytest.approx(truth_j, rel=0.01)
    assert projection.steady_from_samples >= 2048  # the start-up marks were left out
    assert projection.energy_low_j <= projection.energy_j <= projection.energy_high_j
    assert projection.mean_power_w == pytest.approx(600.0, rel=0.03)
    assert "after 20% of the budget" in projection.describe()


def test_a_drifting_rate_is_not_steady() -> None:
    samples, times, energies, _ = marks_of_a_run(drift=3.0)
    cut = len(samples) // 3
    assert steady_start(samples[:cut], times[:cut], energies[:cut]) is None
    projection = project_from_marks(samples[:cut], times[:cut], energies[:cut], samples[-1])
    assert not projection.ok and projection.energy_j is None
    assert "not steady yet" in projection.error
    # a looser tolerance accepts it
    loose = steady_start(samples[:cut], times[:cut], energies[:cut], tolerance=0.5)
    assert loose is not None


def test_too_short_a_window_is_not_steady_yet() -> None:
    samples, times, energies, _ = marks_of_a_run()
    assert steady_start(samples[:8], times[:8], energies[:8], min_window_s=10.0) is None


def test_mark_projector_waits_for_the_fraction_then_projects_once() -> None:
    samples, times, energies, truth_j = marks_of_a_run()
    total = samples[-1]
    projector = MarkProjector(0.2)
    results = []
    for s, t, e in zip(samples, times, energies, strict=True):
        result = projector.add_mark(s, total, t, e)
        projector.add_mark(s, total, t, e)  # a repeated mark changes nothing
        if result is not None:
            results.append((s, result))
    assert len(results) == 1
    made_at, projection = results[0]
    assert made_at >= 0.2 * total and projection.ok
    assert projection.relative_error(truth_j) == pytest.approx(0.0, abs=0.01)


def test_replaying_stored_marks_gives_what_the_live_projector_gave() -> None:
    samples, times, energies, truth_j = marks_of_a_run()
    total = samples[-1]
    for fraction in (0.1, 0.2, 0.5):
        live = MarkProjector(fraction)
        made = [
            live.add_mark(s, total, t, e) for s, t, e in zip(samples, times, energies, strict=True)
        ]
        live_result = next(r for r in made if r is not None)
        replayed = replay_marks(samples, times, energies, total, fraction)
        assert replayed == live_result  # the same marks in the same order: the same answer
        assert replayed.samples_seen >= fraction * total
    assert replay_marks(samples, times, energies, total, 0.2).relative_error(truth_j) == (
        pytest.approx(0.0, abs=0.01)
    )
    # marks that stop before the fraction: said, never guessed
    cut = len(samples) // 10
    short = replay_marks(samples[:cut], times[:cut], energies[:cut], total, 0.5)
    assert not short.ok and "stored marks end at" in short.error


def test_mark_projector_retries_later_and_gives_up_at_the_end() -> None:
    # steady only after half the budget: the projection comes late, not never
    samples, times, energies, _ = marks_of_a_run(start_up_s=0.0)
    times = [
        t * (2.0 if s < samples[-1] // 2 else 1.0) for s, t in zip(samples, times, strict=True)
    ]
    times = list(np.maximum.accumulate(times))
    projector = MarkProjector(0.1)
    made = [
        s
        for s, t, e in zip(samples, times, energies, strict=True)
        if projector.add_mark(s, samples[-1], t, e) is not None
    ]
    assert len(made) == 1 and projector.attempts > 1
    never = MarkProjector(0.5, tolerance=0.01)
    drift = marks_of_a_run(drift=5.0)
    outcome = [
        never.add_mark(s, drift[0][-1], t, e)
        for s, t, e in zip(drift[0], drift[1], drift[2], strict=True)
    ]
    last = [o for o in outcome if o is not None]
    assert len(last) == 1 and not last[0].ok and outcome[-1] is last[0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2, ("project_after_epochs", 2)),
        ("3", ("project_after_epochs", 3)),
        (4.0, ("project_after_epochs", 4)),
        (0.1, ("project_after_fraction", 0.1)),
    ],
)
def test_the_old_project_after_maps_to_epochs_or_a_fraction(value, expected) -> None:
    key, number = from_legacy(value)
    assert (key, number) == expected and type(number) is type(expected[1])


@pytest.mark.parametrize("bad", [0, -1, 1.5, "x", 0.0, None, float("inf"), float("nan")])
def test_the_old_project_after_rejects_other_values(bad) -> None:
    with pytest.raises(ConfigError, match="project-after"):
        from_legacy(bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, float("inf")])
def test_project_after_epochs_is_a_whole_number_from_one(bad) -> None:
    assert check_after_epochs(3) == 3 and check_after_epochs(3.0) == 3
    with pytest.raises(ConfigError, match="--project-after-epochs must be a whole number"):
        check_after_epochs(bad)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, "0.2", float("nan")])
def test_project_after_fraction_is_inside_zero_and_one(bad) -> None:
    assert check_after_fraction(0.25) == 0.25
    with pytest.raises(ConfigError, match=r"--project-after-fraction must be a fraction"):
        check_after_fraction(bad)


def test_marks_must_be_ordered_and_settings_checked() -> None:
    with pytest.raises(DataError, match="in order"):
        project_from_marks([0, 10, 5], [0, 1, 2], [0, 1, 2], 100)
    with pytest.raises(ConfigError, match="tolerance"):
        steady_start([0, 1], [0, 1], [0, 1], tolerance=2)
    with pytest.raises(ConfigError, match="fraction"):
        MarkProjector(1.5)
    with pytest.raises(DataError, match="budget of 10"):
        project_from_marks(list(range(0, 21, 2)), list(range(11)), list(range(11)), 10)


# -- the loop's mark hook and the worker's live marks ---------------------------------------


@pytest.mark.extra("train")
def test_the_loop_marks_samples_without_changing_training() -> None:
    from torch import nn

    from wattlab.train.config import make_run_config
    from wattlab.train.distributed import DistContext
    from wattlab.train.loop import run_training

    def tiny() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(4, 10))  # fmt: skip

    cfg = make_run_config(
        device="cpu", train_samples=256, test_samples=32, batch_size=16, warmup_steps=0,
        epochs=2, seed=1,
    )  # fmt: skip
    marks: list[tuple[int, int]] = []
    import torch

    torch.manual_seed(0)
    marked = run_training(
        cfg, DistContext(), model=tiny(), on_mark=lambda s, t: marks.append((s, t))
    )
    torch.manual_seed(0)
    plain = run_training(cfg, DistContext(), model=tiny())
    assert marks[0] == (0, 512) and marks[-1] == (512, 512)  # start and the last step
    assert [s for s, _ in marks] == list(range(0, 513, 16))  # 32 steps: every step marked
    assert marked.train_loss == plain.train_loss  # the hook changes nothing in training


def test_project_after_epochs_or_fraction_in_the_run_config() -> None:
    from wattlab.train.config import make_run_config

    base = {"device": "cpu", "epochs": 2}
    by_fraction = make_run_config(**base, project_after_fraction=0.1)
    assert (by_fraction.project_after_fraction, by_fraction.project_after_epochs) == (0.1, None)
    by_epochs = make_run_config(**base, project_after_epochs=3)
    assert (by_epochs.project_after_epochs, by_epochs.project_after_fraction) == (3, None)
    assert "project_after" not in by_epochs.model_dump()
    bad_settings = (
        ({"project_after_epochs": 0}, "whole number of epochs >= 1"),
        ({"project_after_epochs": 1.5}, "project_after_epochs"),
        ({"project_after_fraction": 1.0}, r"in \(0, 1\)"),
        ({"project_after_fraction": 0.2, "nproc": 2}, "single process"),
        ({"project_after_epochs": 2, "project_after_fraction": 0.2}, "not both"),
    )
    for extra, match in bad_settings:
        with pytest.raises(ConfigError, match=match):
            make_run_config(**base, **extra)
    # neither setting changes what is measured: the hash is that of a run without STEP
    assert (
        by_epochs.config_hash()
        == by_fraction.config_hash()
        == make_run_config(**base).config_hash()
    )


def test_the_old_project_after_still_works_with_a_deprecation_warning() -> None:
    from wattlab.train.config import make_run_config

    base = {"device": "cpu", "epochs": 2}
    with pytest.warns(
        FutureWarning, match="project_after is deprecated; use project_after_fraction"
    ):
        assert make_run_config(**base, project_after=0.1).project_after_fraction == 0.1
    with pytest.warns(FutureWarning, match="use project_after_epochs: 3"):
        assert make_run_config(**base, project_after=3).project_after_epochs == 3
    with pytest.raises(ConfigError, match="whole number of epochs"):
        make_run_config(**base, project_after=1.5)  # neither meaning: no new spelling to offer
    with pytest.raises(ConfigError, match="single process"), pytest.warns(FutureWarning):
        make_run_config(**base, nproc=2, project_after=0.2)
    with pytest.raises(ConfigError, match="give only one"):
        make_run_config(**base, project_after=2, project_after_epochs=3)


def test_live_marks_read_the_meters_and_project_once(monkeypatch) -> None:
    from types import SimpleNamespace

    from wattlab.experiment.runs.live_step import LiveMarks

    clock = {"j": 0.0}

    class Meter:
        def __init__(self, share: float, in_total: bool = True) -> None:
            self.share = share
            self.info = SimpleNamespace(details={"in_total": in_total})

        def energy_j(self) -> float:
            return clock["j"] * self.share

    monitor = SimpleNamespace(meters=[Meter(0.9), Meter(0.1), Meter(5.0, in_total=False)])
    notes: list[str] = []
    live = LiveMarks(0.2, monitor, notes.append)
    samples, times, energies, truth_j = marks_of_a_run(counter_period_s=1e-6)
    import wattlab.experiment.runs.live_step as live_step

    for s, t, e in zip(samples, times, energies, strict=True):
        clock["j"] = e + 123.0  # meters count from before the budget
        monkeypatch.setattr(live_step.time, "perf_counter", lambda t=t: 1000.0 + t)
        live.mark(s, samples[-1])
    assert live.projection is not None and live.projection.ok
    assert live.projection.energy_j == pytest.approx(truth_j, rel=0.02)
    assert len(notes) == 1 and notes[0].startswith("STEP: projected")
    # the live projection carries the shipped calibration's interval, which holds the truth
    import re

    p = live.projection
    assert p.interval_low_j < p.energy_j < p.interval_high_j
    assert p.interval_low_j <= truth_j <= p.interval_high_j
    assert re.search(
        r"90% interval from the errors of \d+ reference runs projected after", notes[0]
    )


def test_live_marks_without_a_calibration_keep_the_band_and_say_why(monkeypatch) -> None:
    from types import SimpleNamespace

    import wattlab.experiment.runs.live_step as live_step
    import wattlab.step.calibration as calibration
    from wattlab.errors import DataError

    def unreadable(path=None):
        raise DataError("cannot read the STEP calibration x.csv: No such file or directory.")

    monkeypatch.setattr(calibration, "load_step_calibration", unreadable)
    clock = {"j": 0.0}
    meter = SimpleNamespace(info=SimpleNamespace(details={}), energy_j=lambda: clock["j"])
    notes: list[str] = []
    live = live_step.LiveMarks(0.2, SimpleNamespace(meters=[meter]), notes.append)
    samples, times, energies, _ = marks_of_a_run(counter_period_s=1e-6)
    for s, t, e in zip(samples, times, energies, strict=True):
        clock["j"] = e
        monkeypatch.setattr(live_step.time, "perf_counter", lambda t=t: t)
        live.mark(s, samples[-1])
    assert live.projection.ok and live.projection.interval_low_j is None
    assert notes[0].startswith("STEP: no calibrated interval (cannot read the STEP calibration")
    assert "(band " in notes[1]
