"""STEP, Stable Training Epoch Projection: project a run's total energy from a few epochs.

After the first epochs (warm-up: caches, cuDNN autotuning, clocks ramping), training settles
into epochs of nearly equal power and energy. STEP finds the first such *stable* epoch ``s``,
measures a window of ``w`` stable epochs, and projects

    E_total = E_before + E_window_mean x (total_epochs - (s - 1))

where E_before is everything measured before epoch s (plus ``energy_before_j``). Duration is
projected the same way. The power-based twin multiplies the window's mean power by the
remaining duration: with a known total duration (the measured one, as the paper does) it is a
different estimate; without one it equals the energy projection.

Stability rule (``detect_stable_epoch``): epoch s is the first stable epoch when, for each of
the ``window - 1`` epochs j after it, both the epoch's mean power (energy / duration) and its
energy lie within ``tolerance`` (relative) of the running median of epochs s..j-1. With the
default window=2 and tolerance=0.05: the first epoch whose successor differs from it by at
most 5 % in both power and energy. A trace that never meets the rule gets status "not stable"
and an ``error`` sentence; STEP never guesses.

Uncertainty: ``energy_low_j``/``energy_high_j`` is the band obtained by projecting with the
window's smallest and largest epoch energy; ``uncertainty_j`` is one standard error of the
window mean scaled to the projected epochs, n x std(window, ddof=1) / sqrt(w).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from wattlab.errors import ConfigError, DataError
from wattlab.monitor.carbon import fmt_energy

if TYPE_CHECKING:
    from wattlab.step_calibration import StepCalibration

STABLE = "projected"
NOT_STABLE = "not stable"


class _Projected:
    """What both projections share: their error against a measured total, and a plain dict.
    (Subclasses are dataclasses with ``ok`` and ``energy_j``.)"""

    ok: bool
    energy_j: float | None

    def relative_error(self, measured_total_j: float) -> float | None:
        """(projected - measured) / measured; None when nothing was projected."""
        if not self.ok or self.energy_j is None:
            return None
        if not measured_total_j > 0:
            raise DataError(
                f"the measured total must be a positive energy in J, got {measured_total_j!r}."
            )
        return (self.energy_j - measured_total_j) / measured_total_j

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class StepProjection(_Projected):
    """STEP's projection of a whole budget. Units: J, s, W.

    ``status`` is "projected" or "not stable"; when not stable every projected number is None
    and ``error`` says why in one sentence. Epoch numbers are 1-based.
    """

    status: str
    epochs_seen: int
    total_epochs: float
    window: int
    tolerance: float
    stable_epoch: int | None = None
    window_epochs: int = 0  # stable epochs the projection used
    energy_j: float | None = None
    energy_low_j: float | None = None
    energy_high_j: float | None = None
    uncertainty_j: float | None = None
    duration_s: float | None = None
    power_energy_j: float | None = None  # power-based twin
    power_basis: str | None = None  # "measured duration" | "projected duration"
    mean_power_w: float | None = None  # over the stable window
    energy_before_j: float | None = None  # measured before the stable epoch (incl. given)
    duration_before_s: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == STABLE

    def describe(self) -> str:
        """One line for people, e.g. for the run loop to print."""
        if not self.ok:
            return f"STEP: {self.error}"
        last = (self.stable_epoch or 0) + self.window_epochs - 1
        return (
            f"STEP: projected {self.energy_j / 1e3:.1f} kJ (band {self.energy_low_j / 1e3:.1f}-"
            f"{self.energy_high_j / 1e3:.1f} kJ, +-{self.uncertainty_j / 1e3:.1f} kJ) and "
            f"{self.duration_s:.0f} s for {self.total_epochs:g} epochs, from stable epochs "
            f"{self.stable_epoch}-{last} at {self.mean_power_w:.0f} W"
        )


def _check_settings(window: int, tolerance: float) -> None:
    if not (isinstance(window, numbers.Integral) and window >= 2):
        raise ConfigError(f"the STEP window must be a whole number of epochs >= 2, got {window!r}.")
    if not (isinstance(tolerance, numbers.Real) and 0 < tolerance < 1):
        raise ConfigError(f"the STEP tolerance must be a fraction in (0, 1), got {tolerance!r}.")


def _check_total(total_epochs: float) -> float:
    try:
        total = float(total_epochs)
    except (TypeError, ValueError):
        total = math.nan
    if not (total > 0 and math.isfinite(total)):
        raise ConfigError(f"total epochs must be a positive number, got {total_epochs!r}.")
    return total


def _trace(
    epoch_energies_j: Sequence[float], epoch_durations_s: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    energies = np.asarray(list(epoch_energies_j), dtype=float)
    durations = np.asarray(list(epoch_durations_s), dtype=float)
    if energies.shape != durations.shape or energies.ndim != 1:
        raise DataError(
            f"STEP needs one energy and one duration per epoch, got {energies.size} energies "
            f"and {durations.size} durations."
        )
    bad = ~(np.isfinite(energies) & np.isfinite(durations) & (energies > 0) & (durations > 0))
    if bad.any():
        epoch = int(np.argmax(bad)) + 1
        raise DataError(
            f"epoch {epoch} has energy {energies[epoch - 1]!r} J and duration "
            f"{durations[epoch - 1]!r} s; both must be positive numbers."
        )
    return energies, durations


def _within(value: float, reference: float, tolerance: float) -> bool:
    return abs(value - reference) <= tolerance * abs(reference)


def _stable_length(
    energies: np.ndarray, powers: np.ndarray, start: int, stop: int, tolerance: float
) -> int:
    """How many consecutive epochs from ``start`` (0-based, < stop) obey the rule."""
    length = 1
    for j in range(start + 1, stop):
        median_e = float(np.median(energies[start:j]))
        median_p = float(np.median(powers[start:j]))
        if not (
            _within(energies[j], median_e, tolerance) and _within(powers[j], median_p, tolerance)
        ):
            break
        length += 1
    return length


def detect_stable_epoch(
    epoch_energies_j: Sequence[float],
    epoch_durations_s: Sequence[float],
    tolerance: float = 0.05,
    window: int = 2,
) -> int | None:
    """The first stable epoch (1-based), or None when no ``window`` consecutive epochs are
    stable. Rule: see the module docstring. Units: J and s per epoch."""
    _check_settings(window, tolerance)
    energies, durations = _trace(epoch_energies_j, epoch_durations_s)
    powers = energies / durations
    n = energies.size
    for start in range(n - window + 1):
        if _stable_length(energies, powers, start, start + window, tolerance) >= window:
            return start + 1
    return None


def _not_stable(
    n: int, total: float, window: int, tolerance: float, reason: str | None = None
) -> StepProjection:
    if reason is None:
        if n < window:
            reason = f"not stable yet: STEP needs at least {window} epochs and has {n}"
        else:
            reason = (
                f"not stable: per-epoch power and energy never stayed within {tolerance:.0%} of "
                f"their running median for {window} consecutive epochs in the {n} epochs given, "
                "so STEP makes no projection"
            )
    return StepProjection(
        status=NOT_STABLE,
        epochs_seen=n,
        total_epochs=total,
        window=window,
        tolerance=tolerance,
        error=reason + ".",
    )


def step_project(
    epoch_energies_j: Sequence[float],
    epoch_durations_s: Sequence[float],
    total_epochs: float,
    *,
    window: int = 2,
    tolerance: float = 0.05,
    energy_before_j: float = 0.0,
    duration_before_s: float = 0.0,
    total_duration_s: float | None = None,
    extend_window: bool = False,
) -> StepProjection:
    """Project the budget's total energy and duration from the epochs measured so far.

    ``total_epochs`` may be fractional (a sample budget that ends mid-epoch). ``energy_before_j``
    / ``duration_before_s``: what was measured before epoch 1 and belongs to the total.
    ``total_duration_s``: the budget's known duration, for the power-based twin.
    ``extend_window``: use every consecutive stable epoch after ``s`` (not just ``window``).
    Returns status "not stable" (with ``error``) when no stable window is found.
    """
    _check_settings(window, tolerance)
    total = _check_total(total_epochs)
    energies, durations = _trace(epoch_energies_j, epoch_durations_s)
    n = energies.size
    if n > math.ceil(total - 1e-9):
        raise DataError(f"got {n} measured epochs for a budget of {total:g} epochs.")
    if energy_before_j < 0 or duration_before_s < 0:
        raise DataError("the energy and duration measured before epoch 1 must be >= 0.")
    stable = detect_stable_epoch(energies, durations, tolerance, window)
    if stable is None:
        return _not_stable(n, total, window, tolerance)
    powers = energies / durations
    start = stable - 1
    used = _stable_length(energies, powers, start, n, tolerance) if extend_window else window
    window_e = energies[start : start + used]
    window_d = durations[start : start + used]
    before_e = energy_before_j + float(energies[:start].sum())
    before_d = duration_before_s + float(durations[:start].sum())
    projected_epochs = total - start  # the stable epochs, measured and still to come
    energy_j = before_e + float(window_e.mean()) * projected_epochs
    duration_s = before_d + float(window_d.mean()) * projected_epochs
    mean_power_w = float(window_e.sum() / window_d.sum())
    if total_duration_s is not None:
        if not total_duration_s > before_d:
            raise DataError(
                f"the total duration {total_duration_s!r} s must exceed the {before_d:.0f} s "
                "measured before the stable epoch."
            )
        power_energy_j = before_e + mean_power_w * (total_duration_s - before_d)
        basis = "measured duration"
    else:
        power_energy_j = before_e + mean_power_w * (duration_s - before_d)
        basis = "projected duration"
    return StepProjection(
        status=STABLE,
        epochs_seen=n,
        total_epochs=total,
        window=window,
        tolerance=tolerance,
        stable_epoch=stable,
        window_epochs=int(used),
        energy_j=energy_j,
        energy_low_j=before_e + float(window_e.min()) * projected_epochs,
        energy_high_j=before_e + float(window_e.max()) * projected_epochs,
        uncertainty_j=projected_epochs * float(window_e.std(ddof=1)) / math.sqrt(used),
        duration_s=duration_s,
        power_energy_j=power_energy_j,
        power_basis=basis,
        mean_power_w=mean_power_w,
        energy_before_j=before_e,
        duration_before_s=before_d,
    )


class StepProjector:
    """STEP during a run: feed each finished epoch, get the projection once.

    With ``project_after=K`` the projection comes after epoch K, from every stable epoch seen
    by then (status "not stable" if there is no stable window among the first K epochs).
    Without it, the projection comes as soon as ``window`` stable epochs are seen; if the run
    ends without one, the last epoch returns a "not stable" result. Either way ``add_epoch``
    returns a StepProjection exactly once and None otherwise.
    """

    def __init__(
        self,
        total_epochs: float,
        project_after: int | None = None,
        window: int = 2,
        tolerance: float = 0.05,
        energy_before_j: float = 0.0,
    ) -> None:
        _check_settings(window, tolerance)
        self.total_epochs = _check_total(total_epochs)
        if project_after is not None:
            if not (isinstance(project_after, numbers.Integral) and project_after >= window):
                raise ConfigError(
                    f"project_after must be a whole number of epochs >= the STEP window of "
                    f"{window}, got {project_after!r}."
                )
            if project_after > math.ceil(self.total_epochs - 1e-9):
                raise ConfigError(
                    f"project_after={project_after} is beyond the run's "
                    f"{self.total_epochs:g} epochs."
                )
        self.project_after = project_after
        self.window = window
        self.tolerance = tolerance
        self.energy_before_j = energy_before_j
        self.energies_j: list[float] = []
        self.durations_s: list[float] = []
        self._projection: StepProjection | None = None

    @property
    def projection(self) -> StepProjection | None:
        """The projection returned by ``add_epoch``, once there is one."""
        return self._projection

    def add_epoch(self, energy_j: float, duration_s: float) -> StepProjection | None:
        """Record one finished epoch (J, s); returns the projection the one time it is made."""
        self.energies_j.append(float(energy_j))
        self.durations_s.append(float(duration_s))
        _trace(self.energies_j, self.durations_s)  # validates the new epoch
        if self._projection is not None:
            return None
        n = len(self.energies_j)
        last_epoch = n >= math.ceil(self.total_epochs - 1e-9)
        if self.project_after is not None:
            if n < self.project_after:
                return None
            result = self._project(extend=True)
        else:
            result = self._project(extend=False)
            if not result.ok and not last_epoch:
                return None
        self._projection = result
        return result

    def _project(self, *, extend: bool) -> StepProjection:
        return step_project(
            self.energies_j,
            self.durations_s,
            self.total_epochs,
            window=self.window,
            tolerance=self.tolerance,
            energy_before_j=self.energy_before_j,
            extend_window=extend,
        )

    def result(self) -> StepProjection:
        """The projection if one was made, else a "not stable" result for the epochs seen."""
        if self._projection is not None:
            return self._projection
        n = len(self.energies_j)
        if n == 0:
            return _not_stable(0, self.total_epochs, self.window, self.tolerance)
        return self._project(extend=self.project_after is not None)

    def final_error(self, measured_total_j: float) -> float | None:
        """Relative error of the projection against the measured total: (projected - measured)
        / measured. None when no projection was made (not stable)."""
        if self._projection is None:
            return None
        return self._projection.relative_error(measured_total_j)


# ---------------------------------------------------------------------------------------------
# STEP inside the first epoch: project from step-level marks once the rate is steady
#
# The training loop reports every few optimizer steps how many budget samples are done; at
# that moment the worker reads the clock and the meters' cumulative energy. A mark is
# (samples done, seconds since the budget began, joules since the budget began).
#
# Steadiness test (``steady_start``): marks s..n are steady when, split into two halves by
# samples, each half's least-squares slopes of time and energy against samples (s per sample,
# J per sample) agree within ``tolerance`` of the whole window's slopes, the window holds at
# least ``min_marks`` marks and spans at least ``min_window_s`` seconds. The earliest steady s
# is used (so start-up marks, where the host runs ahead of the queue or clocks ramp, are left
# out). Slopes, not end points: an energy counter that updates every ~0.1 s and host clocks
# that run a little ahead of the device add noise to single marks, which a fit averages out.
# Energy is fitted on the "fresh" marks only, those whose reading changed since the previous
# mark: a counter read long after its last update lags by up to one update period, one read
# right after an update by at most one mark spacing (the worker places ~200 marks per budget).
#
# Projection (``project_from_marks``): along the window's fitted lines, at the budget's total
# samples: E_total = a_E + eps x S_total and T_total = a_T + tau x S_total (the intercepts
# carry what was spent before the window). The band swaps in the two halves' energy slopes
# for the samples still to come.

MARK_TOLERANCE = 0.05
MIN_MARKS = 6
MIN_WINDOW_S = 0.5


@dataclass(frozen=True)
class RateProjection(_Projected):
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
    interval_low_j: float | None = None  # calibrated (wattlab.step_calibration), when given
    interval_high_j: float | None = None
    interval_basis: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == STABLE

    @property
    def fraction_seen(self) -> float:
        return self.samples_seen / self.total_samples if self.total_samples else 0.0

    def with_interval(self, calibration: StepCalibration | None) -> RateProjection:
        """This projection with ``calibration``'s interval for its fraction seen (or the reason
        there is none in ``interval_basis``); unchanged when it projected nothing."""
        if not self.ok or calibration is None:
            return self
        bounds = calibration.interval(float(self.energy_j), self.fraction_seen)
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
            spread = f"band {fmt_energy(self.energy_low_j)} to {fmt_energy(self.energy_high_j)}"
            if self.interval_basis:
                spread += f"; {self.interval_basis}"
        return (
            f"STEP: projected {fmt_energy(self.energy_j)} ({spread}) and "
            f"{self.duration_s:.1f} s for {self.total_samples} samples, after "
            f"{self.fraction_seen:.0%} of the budget, from a steady rate since sample "
            f"{self.steady_from_samples} at {self.mean_power_w:.0f} W"
        )


def _marks(
    samples: Sequence[float], times_s: Sequence[float], energies_j: Sequence[float]
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
    samples: Sequence[float],
    times_s: Sequence[float],
    energies_j: Sequence[float],
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
    samples: Sequence[float],
    times_s: Sequence[float],
    energies_j: Sequence[float],
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


def parse_project_after(value: float | int | str | None) -> tuple[str, float] | None:
    """``--project-after``: a whole number K >= 1 means "after K epochs"; a fraction in (0, 1)
    means "after that share of the budget's samples". Returns ("epochs", K) or
    ("fraction", f), None for None; ConfigError otherwise."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if 0 < number < 1:
        return "fraction", number
    if number >= 1 and number == int(number):
        return "epochs", float(int(number))
    raise ConfigError(
        f"--project-after must be a whole number of epochs (>= 1) or a fraction of the budget "
        f"in (0, 1), got {value!r}."
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
        self.fraction = float(fraction)
        self.tolerance = tolerance
        self.min_marks = min_marks
        self.min_window_s = min_window_s
        self.samples: list[float] = []
        self.times_s: list[float] = []
        self.energies_j: list[float] = []
        self.projection: RateProjection | None = None
        self.attempts = 0
        self._next_attempt = 0

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
    samples: Sequence[float],
    times_s: Sequence[float],
    energies_j: Sequence[float],
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
