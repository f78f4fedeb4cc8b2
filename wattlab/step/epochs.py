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
from dataclasses import dataclass

import numpy as np

from wattlab.errors import ConfigError, DataError
from wattlab.step.result import NOT_STABLE, STABLE, Floats, Projected


def _kj(energy_j: float | None) -> str:
    """An energy in kJ with one decimal (a projection sets every number it shows)."""
    return "?" if energy_j is None else f"{energy_j / 1e3:.1f}"


@dataclass(frozen=True)
class StepProjection(Projected):
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

    def describe(self) -> str:
        """One line for people, e.g. for the run loop to print."""
        if not self.ok:
            return f"STEP: {self.error}"
        last = (self.stable_epoch or 0) + self.window_epochs - 1
        return (
            f"STEP: projected {_kj(self.energy_j)} kJ (band {_kj(self.energy_low_j)}-"
            f"{_kj(self.energy_high_j)} kJ, +-{_kj(self.uncertainty_j)} kJ) and "
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


def _trace(epoch_energies_j: Floats, epoch_durations_s: Floats) -> tuple[np.ndarray, np.ndarray]:
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
    epoch_energies_j: Floats,
    epoch_durations_s: Floats,
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
    epoch_energies_j: Floats,
    epoch_durations_s: Floats,
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
