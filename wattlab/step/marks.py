"""STEP inside the first epoch: project a budget from step-level marks once the rate is steady.

The training loop reports every few optimizer steps how many budget samples are done; at
that moment the worker reads the clock and the meters' cumulative energy. A mark is
(samples done, seconds since the budget began, joules since the budget began).

Steadiness test (``steady_start``): marks s..n are steady when, split into two halves by
samples, each half's least-squares slopes of time and energy against samples (s per sample,
J per sample) agree within ``tolerance`` of the whole window's slopes, the window holds at
least ``min_marks`` marks and spans at least ``min_window_s`` seconds. The earliest steady s
is used (so start-up marks, where the host runs ahead of the queue or clocks ramp, are left
out). Slopes, not end points: an energy counter that updates every ~0.1 s and host clocks
that run a little ahead of the device add noise to single marks, which a fit averages out.
Energy is fitted on the "fresh" marks only, those whose reading changed since the previous
mark: a counter read long after its last update lags by up to one update period, one read
right after an update by at most one mark spacing (the worker places ~200 marks per budget).

Projection (``project_from_marks``): along the window's fitted lines, at the budget's total
samples: E_total = a_E + eps x S_total and T_total = a_T + tau x S_total (the intercepts
carry what was spent before the window). The band swaps in the two halves' energy slopes
for the samples still to come.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from wattlab.errors import ConfigError, DataError
from wattlab.monitor.carbon import fmt_energy
from wattlab.step.result import NOT_STABLE, STABLE, Floats, Projected

if TYPE_CHECKING:
    from wattlab.step.calibration import StepCalibration

MARK_TOLERANCE = 0.05
MIN_MARKS = 6
MIN_WINDOW_S = 0.5


def _energy(energy_j: float | None) -> str:
    """An energy for people (a projection sets every number it shows)."""
    return "?" if energy_j is None else fmt_energy(energy_j)


@dataclass(frozen=True)
class RateProjection(Projected):
    """STEP's projection of a budget from step-level marks. Units: J, s, W, samples.

    ``status`` is "projected" or "not stable"; when not stable every projected number is None
    and ``error`` says why in one sentence."""

    status: str
    samples_seen: int
    total_samples: int
    tolerance: float
    steady_from_samples: int | None = None
    marks_used: int = 0
    energy_j: float | None = None
    energy_low_j: float | None = None
    energy_high_j: float | None = None
    duration_s: float | None = None
    energy_per_sample_j: float | None = None
    time_per_sample_s: float | None = None
    mean_power_w: float | None = None
    error: str | None = None
    interval_low_j: float | None = None  # calibrated (wattlab.step.calibration), when given
    interval_high_j: float | None = None
    interval_basis: str | None = None

    @property
    def fraction_seen(self) -> float:
        return self.samples_seen / self.total_samples if self.total_samples else 0.0

    def with_interval(self, calibration: StepCalibration | None) -> RateProjection:
        """This projection with ``calibration``'s interval for its fraction seen (or the reason
        there is none in ``interval_basis``); unchanged when it projected nothing."""
        if not self.ok or calibration is None or self.energy_j is None:
            return self
        bounds = calibration.interval(self.energy_j, self.fraction_seen)
        low, high = bounds if bounds is not None else (None, None)
        return replace(
            self,
            interval_low_j=low,
            interval_high_j=high,
            interval_basis=calibration.basis(self.fraction_seen),
        )

    def describe(self) -> str:
        """One line for people."""
        if not self.ok:
            return f"STEP: {self.error}"
        if self.interval_low_j is not None and self.interval_high_j is not None:
            spread = (
                f"{fmt_energy(self.interval_low_j)} to {fmt_energy(self.interval_high_j)}: "
                f"{self.interval_basis}"
            )
        else:
            spread = f"band {_energy(self.energy_low_j)} to {_energy(self.energy_high_j)}"
            if self.interval_basis:
                spread += f"; {self.interval_basis}"
        return (
            f"STEP: projected {_energy(self.energy_j)} ({spread}) and "
            f"{self.duration_s:.1f} s for {self.total_samples} samples, after "
            f"{self.fraction_seen:.0%} of the budget, from a steady rate since sample "
            f"{self.steady_from_samples} at {self.mean_power_w:.0f} W"
        )


def _marks(
    samples: Floats, times_s: Floats, energies_j: Floats
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = np.asarray(list(samples), dtype=float)
    t = np.asarray(list(times_s), dtype=float)
    e = np.asarray(list(energies_j), dtype=float)
    if not (s.shape == t.shape == e.shape) or s.ndim != 1:
        raise DataError(
            f"STEP needs one time and one energy per mark, got {s.size} sample counts, "
            f"{t.size} times and {e.size} energies."
        )
    if not (np.isfinite(s).all() and np.isfinite(t).all() and np.isfinite(e).all()):
        raise DataError("every mark's samples, time and energy must be finite numbers.")
    if s.size > 1 and (np.any(np.diff(s) <= 0) or np.any(np.diff(t) < 0)):
        raise DataError("marks must come in order: samples rising, time not falling.")
    return s, t, e


def _slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares (slope, intercept) of y against x."""
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def _check_mark_settings(tolerance: float, min_marks: int, min_window_s: float) -> None:
    if not (isinstance(tolerance, numbers.Real) and 0 < tolerance < 1):
        raise ConfigError(f"the STEP tolerance must be a fraction in (0, 1), got {tolerance!r}.")
    if not (isinstance(min_marks, numbers.Integral) and min_marks >= 4):
        raise ConfigError(f"min_marks must be a whole number >= 4, got {min_marks!r}.")
    if not (isinstance(min_window_s, numbers.Real) and min_window_s >= 0):
        raise ConfigError(f"min_window_s must be >= 0 seconds, got {min_window_s!r}.")


def _fresh(e: np.ndarray) -> np.ndarray:
    """Marks whose energy reading changed since the previous mark (the first always counts)."""
    return np.concatenate([[True], np.diff(e) != 0]) if e.size else np.zeros(0, dtype=bool)


def _energy_slope(s: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    fresh = _fresh(e)
    if fresh.sum() >= 2:
        s, e = s[fresh], e[fresh]
    return _slope(s, e)


def _halves_agree(
    s: np.ndarray, t: np.ndarray, e: np.ndarray, tolerance: float
) -> tuple[bool, tuple[float, float], tuple[float, float]]:
    """Whether both halves' time and energy slopes agree; (tau1, tau2), (eps1, eps2)."""
    mid = len(s) // 2
    first, second = slice(0, mid + 1), slice(mid, len(s))
    tau, _ = _slope(s, t)
    eps, _ = _energy_slope(s, e)
    tau1, tau2 = _slope(s[first], t[first])[0], _slope(s[second], t[second])[0]
    eps1, eps2 = _energy_slope(s[first], e[first])[0], _energy_slope(s[second], e[second])[0]
    ok = (
        tau > 0
        and eps > 0
        and abs(tau1 - tau2) <= tolerance * tau
        and abs(eps1 - eps2) <= tolerance * eps
    )
    return ok, (tau1, tau2), (eps1, eps2)


def steady_start(
    samples: Floats,
    times_s: Floats,
    energies_j: Floats,
    *,
    tolerance: float = MARK_TOLERANCE,
    min_marks: int = MIN_MARKS,
    min_window_s: float = MIN_WINDOW_S,
) -> int | None:
    """Index of the first mark from which the rate is steady (see the rule above), or None."""
    _check_mark_settings(tolerance, min_marks, min_window_s)
    s, t, e = _marks(samples, times_s, energies_j)
    n = s.size
    stride = max(1, (n - min_marks + 1) // 30)  # at most ~30 candidate starts: cheap per mark
    for start in range(0, n - min_marks + 1, stride):
        if t[-1] - t[start] < min_window_s:
            break
        if _halves_agree(s[start:], t[start:], e[start:], tolerance)[0]:
            return start
    return None


def _unsteady(seen: int, total_samples: int, tolerance: float, why: str) -> RateProjection:
    """A "not stable" RateProjection: nothing projected, ``why`` in one sentence."""
    return RateProjection(
        status=NOT_STABLE,
        samples_seen=seen,
        total_samples=int(total_samples),
        tolerance=tolerance,
        error=why,
    )


def project_from_marks(
    samples: Floats,
    times_s: Floats,
    energies_j: Floats,
    total_samples: int,
    *,
    tolerance: float = MARK_TOLERANCE,
    min_marks: int = MIN_MARKS,
    min_window_s: float = MIN_WINDOW_S,
) -> RateProjection:
    """Project the budget's energy and time from marks (samples done, s and J since the budget
    began); status "not stable" with a reason when no steady window is found yet."""
    _check_mark_settings(tolerance, min_marks, min_window_s)
    s, t, e = _marks(samples, times_s, energies_j)
    if not (isinstance(total_samples, numbers.Integral) and total_samples > 0):
        raise ConfigError(f"total samples must be a positive whole number, got {total_samples!r}.")
    seen = int(s[-1]) if s.size else 0
    if seen > total_samples:
        raise DataError(f"marks report {seen} samples for a budget of {total_samples}.")
    start = steady_start(
        s, t, e, tolerance=tolerance, min_marks=min_marks, min_window_s=min_window_s
    )
    if start is None:
        span = float(t[-1] - t[0]) if s.size else 0.0
        return _unsteady(
            seen,
            total_samples,
            tolerance,
            f"not steady yet: after {s.size} marks over {span:.2f} s, no window of at least "
            f"{min_marks} marks and {min_window_s:g} s had halves whose time and energy per "
            f"sample agreed within {tolerance:.0%}.",
        )
    ws, wt, we = s[start:], t[start:], e[start:]
    tau, a_t = _slope(ws, wt)
    eps, a_e = _energy_slope(ws, we)
    _, _, (eps1, eps2) = _halves_agree(ws, wt, we, tolerance)
    remaining = total_samples - ws[-1]
    energy_j = a_e + eps * total_samples
    return RateProjection(
        status=STABLE,
        samples_seen=seen,
        total_samples=int(total_samples),
        tolerance=tolerance,
        steady_from_samples=int(ws[0]),
        marks_used=int(ws.size),
        energy_j=energy_j,
        energy_low_j=energy_j + (min(eps1, eps2, eps) - eps) * remaining,
        energy_high_j=energy_j + (max(eps1, eps2, eps) - eps) * remaining,
        duration_s=a_t + tau * total_samples,
        energy_per_sample_j=eps,
        time_per_sample_s=tau,
        mean_power_w=eps / tau,
    )


class MarkProjector:
    """STEP during a run from step-level marks: feed marks; once ``fraction`` of the budget's
    samples is done, project if the rate is steady, else try again at every later mark.
    ``add_mark`` returns a RateProjection exactly once (a "not stable" one at the last mark
    when the rate never settled) and None otherwise."""

    def __init__(
        self,
        fraction: float,
        *,
        tolerance: float = MARK_TOLERANCE,
        min_marks: int = MIN_MARKS,
        min_window_s: float = MIN_WINDOW_S,
    ) -> None:
        if not (isinstance(fraction, numbers.Real) and 0 < fraction < 1):
            raise ConfigError(f"the STEP fraction must be in (0, 1), got {fraction!r}.")
        _check_mark_settings(tolerance, min_marks, min_window_s)
        self.fraction: float = float(fraction)
        self.tolerance: float = tolerance
        self.min_marks: int = min_marks
        self.min_window_s: float = min_window_s
        self.samples: list[float] = []
        self.times_s: list[float] = []
        self.energies_j: list[float] = []
        self.projection: RateProjection | None = None
        self.attempts: int = 0
        self._next_attempt: int = 0

    def add_mark(
        self, samples_done: int, total_samples: int, time_s: float, energy_j: float
    ) -> RateProjection | None:
        """Record one mark (samples, s and J since the budget began)."""
        if self.samples and samples_done <= self.samples[-1]:
            return None  # a repeated mark (e.g. at an epoch boundary): nothing new
        self.samples.append(float(samples_done))
        self.times_s.append(float(time_s))
        self.energies_j.append(float(energy_j))
        if self.projection is not None or samples_done < self.fraction * total_samples:
            return None
        last = samples_done >= total_samples
        if not last and len(self.samples) < self._next_attempt:
            return None  # retry when 10 % more marks have come in (keeps each step cheap)
        self._next_attempt = len(self.samples) + max(1, len(self.samples) // 10)
        self.attempts += 1
        result = project_from_marks(
            self.samples,
            self.times_s,
            self.energies_j,
            int(total_samples),
            tolerance=self.tolerance,
            min_marks=self.min_marks,
            min_window_s=self.min_window_s,
        )
        if result.ok or last:
            self.projection = result
            return result
        return None


def replay_marks(
    samples: Floats,
    times_s: Floats,
    energies_j: Floats,
    total_samples: int,
    fraction: float,
    *,
    tolerance: float = MARK_TOLERANCE,
    min_marks: int = MIN_MARKS,
    min_window_s: float = MIN_WINDOW_S,
) -> RateProjection:
    """What ``MarkProjector(fraction)`` would have projected during the run, from its stored
    marks (``runs.step_marks_json``): the same marks fed in the same order. A run whose marks
    end before its projection is made returns a "not stable" projection saying so."""
    s, t, e = _marks(samples, times_s, energies_j)
    projector = MarkProjector(
        fraction, tolerance=tolerance, min_marks=min_marks, min_window_s=min_window_s
    )
    for done, time_s, energy_j in zip(s, t, e, strict=True):
        result = projector.add_mark(int(done), int(total_samples), float(time_s), float(energy_j))
        if result is not None:
            return result
    seen = int(s[-1]) if s.size else 0
    return _unsteady(
        seen,
        total_samples,
        tolerance,
        f"the stored marks end at {seen} of {int(total_samples)} samples, before a steady "
        "window was found.",
    )
