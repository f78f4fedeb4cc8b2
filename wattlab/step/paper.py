"""STEP as published: the stable point from FLUSS segmentation of the power trace, and the
projection from a window of ``w`` epochs starting at epoch ``s``.

Published definition (del Rey et al., arXiv 2307.05520) and the authors' replication package
(GAISSA-UPC/dl-training-energy-estimation, ``src/features/analysis.py``):

- ``find_stabilizing_point``: the matrix profile of the GPU power trace (``stumpy.stump`` with
  subsequence length m = 10 samples), then FLUSS (``stumpy.fluss`` with L = 10, two regimes,
  ``excl_factor=3``). The regime change is the stable point; the stabilising epoch is the first
  epoch that ends after it (the epoch in which power settles).
- ``build_energy_estimation(mean_power_draw, 10)`` with ``window size == 5`` (``src/models/
  regression/evaluate.py``): the projection starts at the fixed epoch s = 10 and measures a
  window of w = 5 epochs:
  ``E_total = E_before_s + E_window x (epochs from s to the end) / w`` (epoch-energy method),
  ``E_total = (window mean GPU power + window mean RAM power) x total duration`` (power-based).

Here ``stable_epoch`` is s: an int (the replication's evaluation fixes 10, the default) or
``None`` to take s from FLUSS. FLUSS runs whenever a power trace is given, and the epoch it finds
is reported beside a fixed s (with a note when the window starts before it).

The matrix profile is computed here with NumPy (z-normalised Euclidean distance, exclusion zone
m/4, as ``stumpy.stump``): ``stumpy.stump`` compiles with numba for ~45 s on first use in every
new process on a small machine. The arc-curve segmentation is FLUSS as in ``stumpy.fluss``; with
``engine="stumpy"`` (needs the ``stumpy`` extra) it is ``stumpy.fluss`` itself, whose idealised
arc curve is a fitted beta density; the NumPy engine uses the closed-form parabola of the FLUSS
paper (Gharghabi et al., ICDM 2017), 2 i (n - i) / n. Units: J, s, W; epochs are 1-based.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from wattlab.errors import ConfigError, DataError
from wattlab.extras import require
from wattlab.step.result import Floats

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

PAPER_STABLE_EPOCH = 10  # s: build_energy_estimation(mean_power_draw, 10)
PAPER_WINDOW_EPOCHS = 5  # w: energy_estimation.query("`window size` == 5")
FLUSS_M = 10  # matrix-profile subsequence length, samples (m = 10 in analysis.py)
FLUSS_L = 10  # FLUSS's L (L = m)
FLUSS_EXCL_FACTOR = 3  # stumpy.fluss(..., n_regimes=2, excl_factor=3)
ENGINES = ("numpy", "stumpy")


@dataclass(frozen=True)
class PaperStepResult:
    """The published STEP's projection of a budget. Units: J, s, W.

    ``status`` is "projected" or "cannot apply" (then ``error`` says why in one sentence).
    ``stable_epoch``: s, the first epoch of the window; ``stable_epoch_source``: "fixed" or
    "FLUSS"; ``fluss_epoch``: what FLUSS found (None without a trace). ``power_energy_j``: the
    power-based twin, window mean power x total duration (the measured one when given, else the
    projected one; ``power_basis`` says which). ``energy_low_j``/``energy_high_j``: wattlab's
    addition (the paper has no interval), the projection with the window's lowest and highest
    epoch energy.
    """

    status: str
    total_epochs: float
    window: int
    stable_epoch: int | None = None
    stable_epoch_source: str | None = None
    fluss_epoch: int | None = None
    fluss_time_s: float | None = None
    energy_j: float | None = None
    energy_low_j: float | None = None
    energy_high_j: float | None = None
    duration_s: float | None = None
    power_energy_j: float | None = None
    power_basis: str | None = None
    mean_power_w: float | None = None
    energy_before_j: float | None = None
    notes: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "projected"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class _Seen(TypedDict, total=False):
    """What the rule found before it could (or could not) project."""

    fluss_epoch: int | None
    fluss_time_s: float | None
    stable_epoch: int | None
    stable_epoch_source: str | None


def _cannot(total: float, window: int, reason: str, **seen: Unpack[_Seen]) -> PaperStepResult:
    return PaperStepResult(
        status="cannot apply", total_epochs=total, window=window, error=reason + ".", **seen
    )


def matrix_profile_index(values: Floats, m: int) -> np.ndarray:
    """Each length-``m`` subsequence's nearest neighbour (z-normalised Euclidean distance),
    outside an exclusion zone of ceil(m / 4) around itself, as ``stumpy.stump(T, m)[:, 1]``.
    Constant subsequences are at distance 0 from each other and sqrt(m) from the rest."""
    series = np.asarray(values, dtype=float)
    if series.ndim != 1 or not np.isfinite(series).all():
        raise DataError("the power trace must be a one-dimensional series of finite numbers.")
    if not (isinstance(m, (int, np.integer)) and m >= 3):
        raise ConfigError(f"the FLUSS subsequence length m must be a whole number >= 3, got {m!r}.")
    k = series.size - m + 1
    if k < 2 * m:
        raise DataError(
            f"the power trace has {series.size} samples; FLUSS with m={m} needs at least "
            f"{3 * m - 1}."
        )
    windows = np.lib.stride_tricks.sliding_window_view(series, m)
    mean = windows.mean(axis=1, keepdims=True)
    std = windows.std(axis=1, keepdims=True)
    constant = std[:, 0] <= 1e-12 * np.maximum(1.0, np.abs(mean[:, 0]))
    z = np.where(
        constant[:, None], 0.0, (windows - mean) / np.where(constant, 1.0, std[:, 0])[:, None]
    )
    exclusion = math.ceil(m / 4)
    index = np.empty(k, dtype=np.int64)
    positions = np.arange(k)
    for start in range(0, k, 512):
        stop = min(start + 512, k)
        corr = z[start:stop] @ z.T / m
        dist = 2.0 * m * (1.0 - np.clip(corr, -1.0, 1.0))
        rows_constant = constant[start:stop]
        dist[rows_constant[:, None] & constant[None, :]] = 0.0
        dist[rows_constant[:, None] ^ constant[None, :]] = float(m)
        near = np.abs(positions[start:stop, None] - positions[None, :]) <= exclusion
        dist[near] = np.inf
        index[start:stop] = np.argmin(dist, axis=1)
    return index


def _arc_curve(index: np.ndarray) -> np.ndarray:
    k = index.size
    i = np.arange(k)
    marks = np.bincount(np.minimum(i, index), minlength=k)
    marks -= np.bincount(np.maximum(i, index), minlength=k)
    return np.cumsum(marks).astype(float)


def fluss_regime_change(
    power_w: Floats,
    *,
    m: int = FLUSS_M,
    L: int = FLUSS_L,
    excl_factor: int = FLUSS_EXCL_FACTOR,
    engine: str = "numpy",
) -> int:
    """The sample index where FLUSS puts the one regime change of ``power_w`` (two regimes)."""
    if engine not in ENGINES:
        raise ConfigError(f"the FLUSS engine must be one of {', '.join(ENGINES)}, got {engine!r}.")
    index = matrix_profile_index(power_w, m)
    k = index.size
    if k <= 2 * L * excl_factor:
        raise DataError(
            f"the power trace has {len(power_w)} samples; FLUSS with L={L} and "
            f"excl_factor={excl_factor} needs more than {2 * L * excl_factor + m - 1}."
        )
    if engine == "stumpy":
        stumpy = require("stumpy", "step", "the stumpy engine")
        _, locations = stumpy.fluss(index, L, n_regimes=2, excl_factor=excl_factor)
        return int(locations[0])
    positions = np.arange(k)
    ideal = 2.0 * positions * (k - positions) / k
    ideal[ideal == 0.0] = 1e-10
    cac = np.minimum(_arc_curve(index) / ideal, 1.0)
    cac[: L * excl_factor] = 1.0
    cac[-L * excl_factor :] = 1.0
    return int(np.argmin(cac))


def fluss_stable_epoch(
    trace_t_s: Floats,
    trace_power_w: Floats,
    epoch_end_s: Floats,
    *,
    m: int = FLUSS_M,
    L: int = FLUSS_L,
    excl_factor: int = FLUSS_EXCL_FACTOR,
    engine: str = "numpy",
) -> tuple[int, float]:
    """The stabilising epoch (1-based: the first epoch that ends after FLUSS's regime change)
    and the change's time (s, on the trace's clock). ``epoch_end_s``: each epoch's end, epoch 1
    first, on the same clock as ``trace_t_s``."""
    t = np.asarray(trace_t_s, dtype=float)
    power = np.asarray(trace_power_w, dtype=float)
    if t.shape != power.shape:
        raise DataError(
            f"the trace has {t.size} times and {power.size} power readings; they must pair up."
        )
    order = np.argsort(t, kind="stable")
    t, power = t[order], power[order]
    where = fluss_regime_change(power, m=m, L=L, excl_factor=excl_factor, engine=engine)
    change_s = float(t[where])
    ends = np.asarray(epoch_end_s, dtype=float)
    after = np.flatnonzero(ends > change_s)
    if after.size == 0:
        raise DataError(
            f"FLUSS puts the power trace's regime change at {change_s:.1f} s, after the last "
            "measured epoch ends."
        )
    return int(after[0]) + 1, change_s


def _check_settings(stable_epoch: int | None, window: int) -> None:
    if not (isinstance(window, (int, np.integer)) and window >= 1):
        raise ConfigError(
            f"the STEP window w must be a whole number of epochs >= 1, got {window!r}."
        )
    if stable_epoch is not None and not (
        isinstance(stable_epoch, (int, np.integer)) and stable_epoch >= 1
    ):
        raise ConfigError(
            f"the STEP start s must be a whole epoch number >= 1 or 'fluss', got {stable_epoch!r}."
        )


def step_paper_project(
    epoch_energies_j: Floats,
    epoch_durations_s: Floats,
    total_epochs: float,
    *,
    stable_epoch: int | None = PAPER_STABLE_EPOCH,
    window: int = PAPER_WINDOW_EPOCHS,
    trace_t_s: Floats | None = None,
    trace_power_w: Floats | None = None,
    epoch_end_s: Floats | None = None,
    total_duration_s: float | None = None,
    engine: str = "numpy",
) -> PaperStepResult:
    """Project a budget's energy with the published STEP from its measured epochs.

    ``epoch_energies_j``/``epoch_durations_s``: the epochs measured so far, epoch 1 first, of
    the energy being predicted (e.g. GPU + RAM for the paper's target). Only epochs up to the
    window's end (s + w - 1) are used, so the projection is what STEP knew at that point.
    ``stable_epoch``: s, or None to take it from FLUSS on ``trace_power_w`` (with
    ``trace_t_s`` and ``epoch_end_s`` on one clock). ``total_duration_s``: the budget's measured
    duration, for the power-based twin. Bad settings raise ConfigError; a run the method cannot
    handle (too few epochs, no trace for FLUSS) gets status "cannot apply" with the reason.
    """
    _check_settings(stable_epoch, window)
    try:
        total = float(total_epochs)
    except (TypeError, ValueError):
        total = math.nan
    if not (total > 0 and math.isfinite(total)):
        raise ConfigError(f"total epochs must be a positive number, got {total_epochs!r}.")
    energies = np.asarray(list(epoch_energies_j), dtype=float)
    durations = np.asarray(list(epoch_durations_s), dtype=float)
    if energies.shape != durations.shape or energies.ndim != 1:
        raise DataError(
            f"STEP needs one energy and one duration per epoch, got {energies.size} energies "
            f"and {durations.size} durations."
        )
    if energies.size and not (
        np.isfinite(energies).all()
        and np.isfinite(durations).all()
        and (durations > 0).all()
        and (energies >= 0).all()
    ):
        raise DataError("every epoch needs a finite energy >= 0 J and a duration > 0 s.")

    fluss_epoch = fluss_time = None
    fluss_note = "no power trace, so FLUSS did not run"
    if trace_power_w is not None and len(trace_power_w):
        if trace_t_s is None or epoch_end_s is None:
            raise DataError("FLUSS needs the trace's times and the epochs' end times too.")
        try:
            fluss_epoch, fluss_time = fluss_stable_epoch(
                trace_t_s, trace_power_w, epoch_end_s, engine=engine
            )
            fluss_note = f"FLUSS stable point {fluss_time:.1f} s, in epoch {fluss_epoch}"
        except DataError as error:
            fluss_note = f"FLUSS found no stable point: {str(error).rstrip('.')}"
    seen: _Seen = {"fluss_epoch": fluss_epoch, "fluss_time_s": fluss_time}
    if stable_epoch is None:
        if fluss_epoch is None:
            return _cannot(total, window, f"s comes from FLUSS and {fluss_note}", **seen)
        start, source = fluss_epoch, "FLUSS"
    else:
        start, source = int(stable_epoch), "fixed"
    last = start + window - 1
    seen["stable_epoch"], seen["stable_epoch_source"] = start, source
    if last >= math.ceil(total - 1e-9):
        return _cannot(
            total,
            window,
            f"the window of epochs {start}-{last} reaches the budget's end ({total:g} epochs), "
            "so nothing is left to project",
            **seen,
        )
    if energies.size < last:
        return _cannot(
            total,
            window,
            f"the run has {energies.size} measured epochs and the window ends at epoch {last}",
            **seen,
        )
    before_e = float(energies[: start - 1].sum())
    before_d = float(durations[: start - 1].sum())
    window_e = energies[start - 1 : last]
    window_d = durations[start - 1 : last]
    stable_epochs = total - (start - 1)  # epochs from s to the end, as n_epochs in the package
    energy_j = before_e + float(window_e.sum()) * stable_epochs / window
    duration_s = before_d + float(window_d.sum()) * stable_epochs / window
    mean_power_w = float(window_e.sum() / window_d.sum())
    if total_duration_s is not None and total_duration_s > 0:
        power_energy_j, basis = mean_power_w * float(total_duration_s), "measured duration"
    else:
        power_energy_j, basis = mean_power_w * duration_s, "projected duration"
    notes = f"s={start} ({source}), w={window}; {fluss_note}"
    if source == "fixed" and fluss_epoch is not None and fluss_epoch > start:
        notes += f"; the window starts before the FLUSS stable epoch {fluss_epoch}"
    return PaperStepResult(
        status="projected",
        total_epochs=total,
        window=window,
        energy_j=energy_j,
        energy_low_j=before_e + float(window_e.min()) * stable_epochs,
        energy_high_j=before_e + float(window_e.max()) * stable_epochs,
        duration_s=duration_s,
        power_energy_j=power_energy_j,
        power_basis=basis,
        mean_power_w=mean_power_w,
        energy_before_j=before_e,
        notes=notes,
        **seen,
    )


__all__ = [
    "PAPER_STABLE_EPOCH",
    "PAPER_WINDOW_EPOCHS",
    "PaperStepResult",
    "fluss_regime_change",
    "fluss_stable_epoch",
    "matrix_profile_index",
    "step_paper_project",
]
